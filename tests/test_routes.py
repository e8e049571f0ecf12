"""One ``Route`` and one routes loader (dataplane.forwarding) for the software table, the
P4Runtime controller's topology files and the Mininet topologies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bmv2_topologies.topology import load
from dataplane.forwarding import ForwardingTable, NextHop, Route, parse_routes


def test_parse_routes_reads_the_json_form_with_an_optional_mac() -> None:
    entries = [{"prefix": "10.0.1.1/32", "port": "1", "mac": "08:00:00:00:01:11"},
               {"prefix": "10.0.0.0/8", "port": 2}]
    assert parse_routes(entries) == [Route("10.0.1.1/32", 1, "08:00:00:00:01:11"), Route("10.0.0.0/8", 2)]
    assert parse_routes([]) == []


@pytest.mark.parametrize(("entries", "reason"), [
    ([{"port": 1}], "route 0 .* has no 'prefix'"),
    ([{"prefix": "10.0.0.0/8", "port": 1}, {"prefix": "10.0.1.1/32"}], "route 1 .* has no 'port'"),
    ([{"prefix": "10.0.0.0/8", "port": "one"}], "route 0 .*invalid literal"),
    ([{"prefix": "10.0.0.0/8", "port": 1, "mac": 8}], "route 0 .*mac is a string"),
    (["10.0.0.0/8=1"], "route 0 '10.0.0.0/8=1'"),
    ({"prefix": "10.0.0.0/8", "port": 1}, "must be a list"),
])
def test_parse_routes_names_the_bad_entry(entries: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_routes(entries)


def test_forwarding_file_routes_become_next_hops_with_mac_bytes(tmp_path: Path) -> None:
    path = tmp_path / "fwd.json"
    path.write_text(json.dumps({"routes": [{"prefix": "10.0.1.1/32", "port": 1, "mac": "08:00:00:00:01:11"},
                                           {"prefix": "10.0.0.0/8", "port": 2}]}))
    table = ForwardingTable.from_sources(str(path), ["10.9.0.0/16=3,02-00-00-00-00-09"])
    assert table.lookup(0x0A000101) == NextHop(1, bytes.fromhex("080000000111"))
    assert table.lookup(0x0A090001) == NextHop(3, bytes.fromhex("020000000009"))
    assert table.lookup(0x0A050505) == NextHop(2, None)
    assert table.lookup(0x0B000001) is None


@pytest.mark.parametrize(("text", "reason"), [
    ("not json", "cannot read forwarding table"),
    ('{"routes": [{"port": 1}]}', "cannot read forwarding table .*route 0 .* has no 'prefix'"),
    ('{"routes": {"prefix": "10.0.0.0/8"}}', "cannot read forwarding table .*must be a list"),
    ('["routes"]', "cannot read forwarding table"),
    # Checked where the route is installed, in the table's words:
    ('{"routes": [{"prefix": "10.0.0.0/33", "port": 1}]}', "bad IPv4 prefix"),
    ('{"routes": [{"prefix": "10.0.0.0/8", "port": 512}]}', "out of range"),
    ('{"routes": [{"prefix": "10.0.0.0/8", "port": 1, "mac": "08:00"}]}', "bad MAC address"),
])
def test_a_bad_forwarding_file_is_a_value_error_with_the_reason(tmp_path: Path, text: str,
                                                                 reason: str) -> None:
    path = tmp_path / "fwd.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=reason):
        ForwardingTable.from_sources(str(path), [])


def test_a_missing_forwarding_file_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read forwarding table"):
        ForwardingTable.from_sources(str(tmp_path / "none.json"), [])


def test_topologies_and_the_controller_share_the_route_type() -> None:
    routes = load("star2").routes("s1")
    assert routes and all(type(r) is Route for r in routes)
    controller = pytest.importorskip("control_plane.controller")
    assert controller.Route is Route


def test_controller_topology_files_use_the_routes_loader(tmp_path: Path) -> None:
    controller = pytest.importorskip("control_plane.controller")
    path = tmp_path / "topo.json"
    path.write_text(json.dumps({"switches": {"s1": {"routes": [{"prefix": "10.0.0.0/8", "port": 2}],
                                                    "drop_prob": {"*": 0.5}}}}))
    topo = controller.Topology.load(path)
    assert topo.routes == [Route("10.0.0.0/8", 2)] and topo.drop_prob == {None: 0.5}
    path.write_text('{"routes": [{"prefix": "10.0.0.0/8"}]}')
    with pytest.raises(ValueError, match="bad topology .*route 0 .* has no 'port'"):
        controller.Topology.load(path)
