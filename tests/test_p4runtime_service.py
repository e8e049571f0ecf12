"""The software switch's P4Runtime service, driven by p4runtime-shell (the real client) and raw stubs.

Each test gets a fresh in-process ``UdpSwitch`` with its P4Runtime server on a loopback
port; data-plane stimulus goes through ``pipeline.handle`` (the code path the socket loop
uses), so outcomes are deterministic.
"""

from __future__ import annotations

import ipaddress
import json
import queue
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import numpy as np
import pytest
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from p4runtime_sh import shell as sh
from p4runtime_sh.global_options import Options, global_options
from p4runtime_sh.p4runtime import P4RuntimeClient, P4RuntimeException, P4RuntimeWriteException

from control_plane.p4info import (
    CONFIG_TABLE,
    DROP_SIM_TABLE,
    LPM_TABLE,
    PULL_SOURCE_TABLE,
    REFUSED_COUNTER,
    UPDATE_SOURCE_TABLE,
    PipelineRefused,
    Schema,
    decode_int,
    decode_uint,
    encode_int,
    encode_uint,
    load_p4info,
)
from control_plane.service import P4RuntimeServer
from dataplane.acl import AclRule, SourceAcl, parse_prefix
from dataplane.queue import OlafQueue, QueueConfig
from dataplane.switch import UdpSwitch
from tests.switch_process import running_switch
from tests.vectors.generate import pull, update
from worker_transport.protocol import INT32_MAX, Mode, MsgType, Olaf, Outcome

P4INFO = Path(__file__).resolve().parents[1] / "p4" / "olaf.p4info.txtpb"
Code = grpc.StatusCode


@pytest.fixture
def target() -> Iterator[tuple[UdpSwitch, P4RuntimeServer]]:
    switch = UdpSwitch(OlafQueue(QueueConfig()), "127.0.0.1", 0)
    server = P4RuntimeServer(switch, "127.0.0.1:0").start()
    try:
        yield switch, server
    finally:
        server.stop(0.5)
        switch.close()


@pytest.fixture
def shell(target: tuple[UdpSwitch, P4RuntimeServer]) -> Iterator[tuple[UdpSwitch, P4RuntimeServer]]:
    """p4runtime-shell connected as primary (election 1,0) with the OLAF pipeline pushed."""
    switch, server = target
    global_options.set_option(Options.verbose, False)
    sh.setup(device_id=1, grpc_addr=server.address, election_id=(1, 0),
             config=sh.FwdPipeConfig(str(P4INFO), "/dev/null"), verbose=False)
    try:
        yield switch, server
    finally:
        sh.teardown()


def stub(server: P4RuntimeServer) -> p4runtime_pb2_grpc.P4RuntimeStub:
    return p4runtime_pb2_grpc.P4RuntimeStub(grpc.insecure_channel(server.address))


def write_errors(excinfo: pytest.ExceptionInfo) -> list[tuple[str, str]]:
    """(code name, message) of every failed update in a p4runtime-shell write error."""
    return [(code_pb2.Code.Name(e.canonical_code), e.message) for _, e in excinfo.value.errors]


def details(err: grpc.RpcError) -> list[p4runtime_pb2.Error]:
    status = status_pb2.Status()
    for key, value in err.trailing_metadata():
        if key == "grpc-status-details-bin":
            status.ParseFromString(value)
    out = []
    for any_ in status.details:
        e = p4runtime_pb2.Error()
        assert any_.Unpack(e)
        out.append(e)
    return out


def route_entry(prefix: str, port: int, mac: str = "08:00:00:00:01:11") -> sh.TableEntry:
    te = sh.TableEntry(LPM_TABLE)(action="OlafIngress.ipv4_forward")
    te.match["hdr.ipv4.dstAddr"] = prefix
    te.action["dstAddr"] = mac
    te.action["port"] = str(port)
    return te


def primary_write(server: P4RuntimeServer, *updates: p4runtime_pb2.Update,
                  **fields: object) -> p4runtime_pb2.WriteResponse:
    """A raw Write from the primary that ``shell`` set up (election 1,0)."""
    req = p4runtime_pb2.WriteRequest(device_id=1, updates=list(updates), **fields)
    if "election_id" not in fields:
        req.election_id.high, req.election_id.low = 1, 0
    return stub(server).Write(req)


# -- encoding -------------------------------------------------------------------------------
def test_bytestrings_follow_the_spec_examples() -> None:
    assert encode_uint(99, 16) == b"\x63" and encode_uint(0, 8) == b"\x00"
    assert encode_int(-99, 8) == b"\x9d" and encode_int(-739, 12) == b"\xfd\x1d"
    assert encode_int(0, 16) == b"\x00"
    assert decode_uint(b"\x00\x00\x63", 12) == 99 and decode_int(b"\xff\x9d", 8) == -99
    for bad, width in ((b"\x01\x63", 8), (b"", 8), (b"\x10\x63", 12), (b"\x00\x40\x63", 12)):
        with pytest.raises(ValueError):
            decode_uint(bad, width)
    for bad, width in ((b"\x00\x9d", 8), (b"\x8d\x1d", 12)):
        with pytest.raises(ValueError):
            decode_int(bad, width)


def test_schema_refuses_what_the_switch_cannot_serve() -> None:
    good = load_p4info(P4INFO)
    Schema(good, QueueConfig())
    cases = []
    no_lpm = p4info_pb2.P4Info()
    no_lpm.CopyFrom(good)
    del no_lpm.tables[[t.preamble.name for t in no_lpm.tables].index(LPM_TABLE)]
    cases.append((no_lpm, "table OlafIngress.ipv4_lpm is missing"))
    bytes_counter = p4info_pb2.P4Info()
    bytes_counter.CopyFrom(good)
    bytes_counter.counters[0].spec.unit = p4info_pb2.CounterSpec.BYTES
    cases.append((bytes_counter, "must count PACKETS"))
    extra_table = p4info_pb2.P4Info()
    extra_table.CopyFrom(good)
    extra_table.tables.add().preamble.name = "OlafIngress.acl"
    cases.append((extra_table, "OlafIngress.acl is not one the switch implements"))
    wide = p4info_pb2.P4Info()
    wide.CopyFrom(good)
    for a in wide.actions:
        for p in a.params:
            if p.name == "port":
                p.bitwidth = 16
    cases.append((wide, "action OlafIngress.ipv4_forward has params"))
    for info, words in cases:
        with pytest.raises(PipelineRefused, match=words):
            Schema(info, QueueConfig())
    with pytest.raises(PipelineRefused, match="reg_cluster_count has 16 cells, the switch runs 32"):
        Schema(good, QueueConfig(max_clusters=32))


# -- pipeline -------------------------------------------------------------------------------------
def test_before_a_pipeline_writes_and_reads_fail_precondition(target) -> None:
    _, server = target
    s = stub(server)
    rep = s.GetForwardingPipelineConfig(p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=1))
    assert not rep.HasField("config")
    with pytest.raises(grpc.RpcError) as e:
        list(s.Read(p4runtime_pb2.ReadRequest(device_id=1, entities=[p4runtime_pb2.Entity(
            table_entry=p4runtime_pb2.TableEntry())])))
    assert e.value.code() == Code.FAILED_PRECONDITION
    client = P4RuntimeClient(1, server.address, (0, 1))
    try:
        with pytest.raises(grpc.RpcError) as e:
            client.write(p4runtime_pb2.WriteRequest())
        assert e.value.code() == Code.FAILED_PRECONDITION
    finally:
        client.tear_down()
    assert s.Capabilities(p4runtime_pb2.CapabilitiesRequest()).p4runtime_api_version.startswith("1.")


def test_pipeline_push_round_trips_and_refusal_is_explained(shell) -> None:
    _, server = shell
    s = stub(server)
    Req = p4runtime_pb2.GetForwardingPipelineConfigRequest
    got = s.GetForwardingPipelineConfig(Req(device_id=1)).config
    assert got.p4info == load_p4info(P4INFO)
    assert sh.client.get_p4info() == load_p4info(P4INFO)
    cookie_only = s.GetForwardingPipelineConfig(Req(device_id=1, response_type=Req.COOKIE_ONLY))
    assert not cookie_only.config.p4info.tables

    bad = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=1, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
    bad.election_id.high = 1
    bad.config.p4info.CopyFrom(load_p4info(P4INFO))
    del bad.config.p4info.counters[:]
    with pytest.raises(grpc.RpcError) as e:
        s.SetForwardingPipelineConfig(bad)
    assert e.value.code() == Code.INVALID_ARGUMENT
    assert "counter OlafIngress.outcome_counter is missing" in e.value.details()
    assert s.GetForwardingPipelineConfig(Req(device_id=1)).config.p4info == load_p4info(P4INFO)

    bad.config.p4info.CopyFrom(load_p4info(P4INFO))
    Set = p4runtime_pb2.SetForwardingPipelineConfigRequest
    for action, code in ((Set.COMMIT, Code.INVALID_ARGUMENT), (Set.UNSPECIFIED, Code.INVALID_ARGUMENT)):
        bad.action = action
        with pytest.raises(grpc.RpcError) as e:
            s.SetForwardingPipelineConfig(bad)
        assert e.value.code() == code
    bad.ClearField("config")
    bad.action = p4runtime_pb2.SetForwardingPipelineConfigRequest.COMMIT
    with pytest.raises(grpc.RpcError) as e:
        s.SetForwardingPipelineConfig(bad)
    assert e.value.code() == Code.NOT_FOUND  # nothing saved


def test_commit_clears_forwarding_state_reconcile_keeps_it(shell) -> None:
    switch, server = shell
    route_entry("10.0.1.1/32", 1).insert()
    cfg = sh.TableEntry(CONFIG_TABLE)(is_default=True, action="OlafIngress.set_config")
    cfg.action.set(mode="1", threshold="5", congestion_threshold="7", frac_bits="16", capacity="64",
                   max_clusters="16", max_blocks="1024", cluster_quota="64", feedback="3")
    cfg.modify()
    req = p4runtime_pb2.SetForwardingPipelineConfigRequest(device_id=1)
    req.election_id.high = 1
    req.config.p4info.CopyFrom(load_p4info(P4INFO))
    req.action = p4runtime_pb2.SetForwardingPipelineConfigRequest.RECONCILE_AND_COMMIT
    stub(server).SetForwardingPipelineConfig(req)
    assert len(switch.table.entries()) == 1 and switch.queue.mode == Mode.FIFO
    req.action = p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
    stub(server).SetForwardingPipelineConfig(req)
    assert switch.table.entries() == [] and switch.queue.mode == Mode.OLAF
    assert (switch.queue.threshold, switch.queue.congestion_threshold) == (INT32_MAX, 192)


# -- tables ---------------------------------------------------------------------------------
def test_lpm_insert_modify_delete_read_with_spec_error_codes(shell) -> None:
    switch, _ = shell
    route_entry("10.0.1.1/32", 1).insert()
    route_entry("10.0.0.0/8", 2, "08:00:00:00:02:22").insert()
    assert switch.table.lookup(0x0A000101).port == 1 and switch.table.lookup(0x0A090909).port == 2
    with pytest.raises(P4RuntimeWriteException) as e:
        route_entry("10.0.1.1/32", 3).insert()
    assert write_errors(e) == [("ALREADY_EXISTS", "route 10.0.1.1/32 already exists")]
    route_entry("10.0.1.1/32", 3, "08:00:00:00:03:33").modify()
    assert switch.table.lookup(0x0A000101).port == 3
    read = {(e.match["hdr.ipv4.dstAddr"].lpm.prefix_len, e.action["port"].value) for e in
            sh.TableEntry(LPM_TABLE).read()}
    assert read == {(32, b"\x03"), (8, b"\x02")}
    one = sh.TableEntry(LPM_TABLE)
    one.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
    assert [e.action["dstAddr"].value for e in one.read()] == [bytes.fromhex("080000000222")]
    one.delete()
    with pytest.raises(P4RuntimeWriteException) as e:
        one.delete()
    assert write_errors(e)[0][0] == "NOT_FOUND"
    with pytest.raises(P4RuntimeWriteException) as e:
        route_entry("10.9.9.9/32", 1).modify()
    assert write_errors(e)[0][0] == "NOT_FOUND"
    assert [r[0] for r in switch.table.entries()] == ["10.0.1.1/32"]


def source_entry(table: str, prefix: str, cluster: int | None = None, action: str | None = None
                 ) -> sh.TableEntry:
    te = sh.TableEntry(table)(action=action) if action else sh.TableEntry(table)
    if cluster is not None:
        te.match["hdr.olaf.cluster_id"] = str(cluster)
    if not prefix.endswith("/0"):
        te.match["hdr.ipv4.srcAddr"] = prefix
    return te


def test_source_tables_are_the_switch_acl_with_spec_error_codes() -> None:
    """update_source/pull_source entries and defaults are the switch's SourceAcl: written,
    read back, judged by the next batch, refusals in refused_counter; a pipeline commit
    returns to what the switch started with (--ps-source here), not to open tables."""
    started_with = SourceAcl([], [parse_prefix("10.0.0.100/32")])
    switch = UdpSwitch(OlafQueue(QueueConfig()), "127.0.0.1", 0, acl=started_with)
    server = P4RuntimeServer(switch, "127.0.0.1:0").start()
    global_options.set_option(Options.verbose, False)
    sh.setup(device_id=1, grpc_addr=server.address, election_id=(1, 0),
             config=sh.FwdPipeConfig(str(P4INFO), "/dev/null"), verbose=False)
    try:
        ps = [(e.match["hdr.ipv4.srcAddr"].lpm.prefix_len, e.action.action_name)
              for e in sh.TableEntry(PULL_SOURCE_TABLE).read()]
        assert ps == [(32, "OlafIngress.permit")]
        default = next(iter(sh.TableEntry(PULL_SOURCE_TABLE)(is_default=True).read()))
        assert default.action.action_name == "OlafIngress.deny"

        source_entry(UPDATE_SOURCE_TABLE, "10.1.0.0/16", 3, "OlafIngress.permit").insert()
        source_entry(UPDATE_SOURCE_TABLE, "0.0.0.0/0", 3, "OlafIngress.deny").insert()
        with pytest.raises(P4RuntimeWriteException) as e:
            source_entry(UPDATE_SOURCE_TABLE, "10.1.0.0/16", 3, "OlafIngress.deny").insert()
        assert write_errors(e) == [("ALREADY_EXISTS", "OlafIngress.update_source entry cluster 3, "
                                                      "10.1.0.0/16 already exists")]
        with pytest.raises(P4RuntimeWriteException) as e:
            source_entry(UPDATE_SOURCE_TABLE, "10.1.0.0/16", 4).delete()
        assert write_errors(e)[0][0] == "NOT_FOUND"
        rules, permit = switch.pipeline.acl.tables()["update_source"]
        assert permit and set(rules) == {AclRule(parse_prefix("10.1.0.0/16"), True, 3),
                                         AclRule(parse_prefix("0.0.0.0/0"), False, 3)}

        inside, outside = int(ipaddress.IPv4Address("10.1.2.3")), int(ipaddress.IPv4Address("10.2.0.1"))
        msgs = [update(1, cluster=3), update(2, cluster=3), update(1, cluster=4)]
        _, answered, _ = switch.pipeline.handle(msgs, np.array([inside, outside, outside], np.uint32))
        assert answered.tolist() == [0, 2]  # cluster 4 has no entries: the default, permit
        refused = {c.index: c.packet_count for c in sh.CounterEntry(REFUSED_COUNTER).read()}
        assert refused == {0: 1, 1: 0}

        source_entry(UPDATE_SOURCE_TABLE, "0.0.0.0/0", 3, "OlafIngress.permit").modify()
        _, answered, _ = switch.pipeline.handle([update(2, cluster=3)], np.array([outside], np.uint32))
        assert answered.tolist() == [0]
        source_entry(UPDATE_SOURCE_TABLE, "0.0.0.0/0", 3).delete()
        source_entry(UPDATE_SOURCE_TABLE, "10.1.0.0/16", 3).delete()
        sh.TableEntry(UPDATE_SOURCE_TABLE)(is_default=True, action="OlafIngress.deny").modify()
        _, answered, _ = switch.pipeline.handle([update(1, cluster=4)], np.array([inside], np.uint32))
        assert answered.tolist() == [] and switch.pipeline.acl.refused == [2, 0]
        reset = sh.CounterEntry(REFUSED_COUNTER)
        reset.index, reset.packet_count = 0, 0
        reset.modify()
        assert switch.pipeline.acl.refused == [0, 0]

        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(device_id=1)
        req.election_id.high = 1
        req.config.p4info.CopyFrom(load_p4info(P4INFO))
        req.action = p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        source_entry(PULL_SOURCE_TABLE, "0.0.0.0/0", action="OlafIngress.permit").insert()
        stub(server).SetForwardingPipelineConfig(req)
        ps_only = [AclRule(parse_prefix("10.0.0.100/32"), True)]
        assert switch.pipeline.acl.tables() == {"update_source": ([], True), "pull_source": (ps_only, False)}
    finally:
        sh.teardown()
        server.stop(0.5)
        switch.close()


def test_malformed_table_writes_get_the_right_codes_and_change_nothing(shell) -> None:
    switch, server = shell
    schema = Schema(load_p4info(P4INFO), QueueConfig())
    lpm, fwd, cfg = schema.id(LPM_TABLE), schema.id("OlafIngress.ipv4_forward"), schema.id(CONFIG_TABLE)

    def entry(value: bytes = b"\x0a\x00\x01\x01", plen: int = 32, port: bytes = b"\x01",
              action: int = fwd, table: int = lpm) -> p4runtime_pb2.Update:
        te = p4runtime_pb2.TableEntry(table_id=table)
        if plen:
            fm = te.match.add(field_id=1)
            fm.lpm.value, fm.lpm.prefix_len = value, plen
        te.action.action.action_id = action
        if action == fwd:
            te.action.action.params.add(param_id=1, value=b"\x08\x00\x00\x00\x01\x11")
            te.action.action.params.add(param_id=2, value=port)
        return p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT,
                                    entity=p4runtime_pb2.Entity(table_entry=te))

    default_insert = entry()
    default_insert.entity.table_entry.is_default_action = True
    del default_insert.entity.table_entry.match[:]
    config_short = entry(table=cfg, plen=0, action=schema.id("OlafIngress.set_config"))
    config_short.type = p4runtime_pb2.Update.MODIFY
    config_short.entity.table_entry.is_default_action = True
    cases = [
        (entry(value=b"\x0a\x00\x01\x01", plen=24), "INVALID_ARGUMENT", "beyond the /24 prefix"),
        (entry(plen=33), "INVALID_ARGUMENT", "prefix_len must be 1..32"),
        (entry(value=b"\x01\x0a\x00\x01\x01"), "OUT_OF_RANGE", "does not fit bit<32>"),
        (entry(port=b"\x02\x00"), "OUT_OF_RANGE", "port"),
        (entry(port=b""), "OUT_OF_RANGE", "empty bytestring"),
        (entry(table=12345), "NOT_FOUND", "no table with id 12345"),
        (entry(action=schema.id("OlafEgress.set_drop_prob")), "INVALID_ARGUMENT", "not an action of table"),
        (entry(action=schema.id("OlafIngress.drop")), "UNIMPLEMENTED", "drop entries are not supported"),
        (default_insert, "INVALID_ARGUMENT", "can only be modified"),
        (config_short, "INVALID_ARGUMENT", "missing params"),
        (entry(table=cfg, plen=0, action=schema.id("OlafIngress.set_config")), "INVALID_ARGUMENT",
         "has no key"),
        (p4runtime_pb2.Update(type=p4runtime_pb2.Update.UNSPECIFIED, entity=entry().entity),
         "INVALID_ARGUMENT", "INSERT, MODIFY or DELETE"),
        (p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT), "INVALID_ARGUMENT", "no entity"),
        (entry(), "OK", ""),
        (entry(), "ALREADY_EXISTS", "already exists"),
    ]
    with pytest.raises(grpc.RpcError) as e:
        primary_write(server, *(u for u, _, _ in cases))
    assert e.value.code() == Code.UNKNOWN
    assert "Write failure: INVALID_ARGUMENT" in e.value.details()
    errors = details(e.value)
    assert len(errors) == len(cases)
    for err, (_, code, words) in zip(errors, cases, strict=True):
        assert code_pb2.Code.Name(err.canonical_code) == code, err.message
        assert words in err.message
    assert [r[0] for r in switch.table.entries()] == ["10.0.1.1/32"]  # only the good one
    with pytest.raises(grpc.RpcError) as e:
        primary_write(server, entry(value=b"\x0a\x00\x02\x01"),
                      atomicity=p4runtime_pb2.WriteRequest.ROLLBACK_ON_ERROR)
    assert e.value.code() == Code.UNIMPLEMENTED


def test_config_default_action_sets_the_queue_and_refuses_fixed_dimensions(shell) -> None:
    switch, _ = shell
    q = switch.queue
    cfg = sh.TableEntry(CONFIG_TABLE)(is_default=True, action="OlafIngress.set_config")
    cfg.action.set(mode="1", threshold=str(3 << 16), congestion_threshold="10", frac_bits="16",
                   capacity="64", max_clusters="16", max_blocks="1024", cluster_quota="64", feedback="3")
    cfg.modify()
    assert (q.mode, q.threshold, q.congestion_threshold) == (Mode.FIFO, 3 << 16, 10)
    (read,) = sh.TableEntry(CONFIG_TABLE)(is_default=True).read()
    assert read.action["threshold"].value == encode_uint(3 << 16, 32)
    for name, value, words in (("capacity", "128", "capacity is 64 on this switch"),
                               ("mode", "7", "neither OLAF (0) nor FIFO (1)"),
                               ("threshold", str(1 << 31), "never negative")):
        bad = sh.TableEntry(CONFIG_TABLE)(is_default=True, action="OlafIngress.set_config")
        bad.action.set(mode="0", threshold="1", congestion_threshold="10", frac_bits="16", capacity="64",
                       max_clusters="16", max_blocks="1024", cluster_quota="64", feedback="3")
        bad.action[name] = value
        with pytest.raises(P4RuntimeWriteException) as e:
            bad.modify()
        assert write_errors(e)[0][0] == "INVALID_ARGUMENT" and words in write_errors(e)[0][1]
    assert (q.mode, q.threshold, q.congestion_threshold) == (Mode.FIFO, 3 << 16, 10)
    with pytest.raises(P4RuntimeWriteException) as e:
        sh.TableEntry(CONFIG_TABLE)(action="OlafIngress.set_config").insert()
    assert "has no key" in write_errors(e)[0][1]
    sh.TableEntry(CONFIG_TABLE)(is_default=True).modify()  # no action: back to the startup config
    assert (q.mode, q.threshold, q.congestion_threshold) == (Mode.OLAF, INT32_MAX, 192)


def test_config_write_changes_the_next_packets_outcome(shell) -> None:
    switch, _ = shell

    def outcomes(*messages: bytes) -> list[int]:
        responses, _, _ = switch.pipeline.handle(list(messages))
        return [Olaf(r).outcome for r in responses]

    assert outcomes(update(1), update(2)) == [Outcome.ENQUEUED, Outcome.MERGED]
    outcomes(pull())
    cfg = sh.TableEntry(CONFIG_TABLE)(is_default=True, action="OlafIngress.set_config")
    cfg.action.set(mode="1", threshold=str(INT32_MAX), congestion_threshold="192", frac_bits="16",
                   capacity="64", max_clusters="16", max_blocks="1024", cluster_quota="64", feedback="3")
    cfg.modify()
    assert outcomes(update(1), update(2)) == [Outcome.ENQUEUED, Outcome.ENQUEUED]


def _config_entry(**params: int) -> sh.TableEntry:
    """olaf_config's default entry with QueueConfig()'s settings, changed by ``params``."""
    values = {"mode": 0, "threshold": INT32_MAX, "congestion_threshold": 192, "frac_bits": 16,
              "capacity": 64, "max_clusters": 16, "max_blocks": 1024, "cluster_quota": 64, "feedback": 3,
              **params}
    te = sh.TableEntry(CONFIG_TABLE)(is_default=True, action="OlafIngress.set_config")
    te.action.set(**{k: str(v) for k, v in values.items()})
    return te


def test_cluster_quota_is_set_read_back_and_refused_out_of_range(shell) -> None:
    """DESIGN.md §3 step 4 over P4Runtime: 1..capacity is applied to the next packets and
    read back; 0 and more than capacity are INVALID_ARGUMENT and change nothing, not even
    the other settings of the same write; no action returns to the startup quota."""
    switch, _ = shell
    q = switch.queue

    def outcomes(*messages: bytes) -> list[str]:
        responses, _, _ = switch.pipeline.handle(list(messages))
        return [Outcome(Olaf(r).outcome).name for r in responses]

    _config_entry(cluster_quota=2).modify()
    assert q.cluster_quota == 2
    (read,) = sh.TableEntry(CONFIG_TABLE)(is_default=True).read()
    assert read.action["cluster_quota"].value == encode_uint(2, 16)
    first = [update(1, block=0), update(1, block=1), update(1, block=2), update(2, block=0, cluster=1)]
    assert outcomes(*first) == ["ENQUEUED", "ENQUEUED", "DROPPED_FULL", "ENQUEUED"]
    before = (q.mode, q.threshold, q.congestion_threshold, q.cluster_quota, q.occupied, list(q.cluster_count))
    for bad in (0, 65, 65535):
        with pytest.raises(P4RuntimeWriteException) as e:
            _config_entry(cluster_quota=bad, mode=1, congestion_threshold=3).modify()
        code, message = write_errors(e)[0]
        assert code == "INVALID_ARGUMENT" and "cluster_quota must be an integer 1..capacity (64)" in message
        assert (q.mode, q.threshold, q.congestion_threshold, q.cluster_quota, q.occupied,
                list(q.cluster_count)) == before
    assert outcomes(update(1, block=2)) == ["DROPPED_FULL"]
    sh.TableEntry(CONFIG_TABLE)(is_default=True).modify()  # no action: the startup config
    assert q.cluster_quota == 64
    assert outcomes(update(1, block=2)) == ["ENQUEUED"]


def test_feedback_revision_is_set_read_back_and_refused_out_of_range(shell) -> None:
    """DESIGN.md §3 Feedback over P4Runtime: 2 or 3 applies to the next ACKs and reads
    back; anything else is INVALID_ARGUMENT and changes nothing of the write; no action
    returns to the startup revision."""
    switch, _ = shell
    q = switch.queue
    assert q.feedback == 3
    (read,) = sh.TableEntry(CONFIG_TABLE)(is_default=True).read()
    assert read.action["feedback"].value == encode_uint(3, 8)

    def util(*messages: bytes) -> list[int]:
        responses, _, _ = switch.pipeline.handle(list(messages))
        return [Olaf(r).queue_util for r in responses]

    # One cluster, capacity 64: its 1 slot and the 63 free are its room under revision 3.
    assert util(update(1, block=0)) == [0]
    _config_entry(feedback=2).modify()
    assert q.feedback == 2 and util(update(1, block=1)) == [255 * 2 // 64]
    (read,) = sh.TableEntry(CONFIG_TABLE)(is_default=True).read()
    assert read.action["feedback"].value == encode_uint(2, 8)
    for bad in (0, 1, 4, 255):
        with pytest.raises(P4RuntimeWriteException) as e:
            _config_entry(feedback=bad, mode=1).modify()
        code, message = write_errors(e)[0]
        assert code == "INVALID_ARGUMENT" and "feedback must be revision 2 or 3" in message
        assert (q.feedback, q.mode) == (2, Mode.OLAF)
    sh.TableEntry(CONFIG_TABLE)(is_default=True).modify()  # no action: the startup config
    assert q.feedback == 3


def test_switch_started_with_a_quota_keeps_it_as_its_startup_config() -> None:
    switch = UdpSwitch(OlafQueue(QueueConfig(capacity=8, cluster_quota=3)), "127.0.0.1", 0)
    server = P4RuntimeServer(switch, "127.0.0.1:0").start()
    global_options.set_option(Options.verbose, False)
    try:
        sh.setup(device_id=1, grpc_addr=server.address, election_id=(1, 0),
                 config=sh.FwdPipeConfig(str(P4INFO), "/dev/null"), verbose=False)
        (read,) = sh.TableEntry(CONFIG_TABLE)(is_default=True).read()
        assert read.action["cluster_quota"].value == encode_uint(3, 16)
        _config_entry(capacity=8, cluster_quota=8).modify()
        assert switch.queue.cluster_quota == 8
        with pytest.raises(P4RuntimeWriteException) as e:
            _config_entry(capacity=8, cluster_quota=9).modify()
        assert "1..capacity (8)" in write_errors(e)[0][1]
        sh.TableEntry(CONFIG_TABLE)(is_default=True).modify()
        assert switch.queue.cluster_quota == 3
    finally:
        sh.teardown()
        server.stop(0.5)
        switch.close()


def test_quota_changed_under_traffic_loses_no_slot(shell) -> None:
    """Item 4 of issue 28: quota writes racing a stream of batches. The switch applies a
    write between batches (under its pipeline lock), so at the end every slot ever
    ENQUEUED was either popped (DATA) or is still queued, occupied is the sum of the
    per-cluster counts, no cluster holds more than the last quota allows beyond what it
    held when the quota fell, and the outcome counters add up to the UPDATEs sent."""
    import random
    import threading

    switch, _ = shell
    q = switch.queue
    rng = random.Random(28)
    stop = threading.Event()
    sent = {"updates": 0, "pulls": 0, "data": 0, "batches": 0}
    failures: list[BaseException] = []

    def traffic() -> None:
        try:
            while not stop.is_set():
                batch = [pull() if rng.random() < 0.3 else
                         update(rng.randrange(8), block=rng.randrange(12), cluster=rng.randrange(4),
                                seq=rng.randrange(1 << 16))
                         for _ in range(rng.randrange(1, 40))]
                responses, _, _ = switch.pipeline.handle(batch)
                for r in responses:
                    sent["data"] += Olaf(r).msg_type == MsgType.DATA
                sent["updates"] += sum(m[0] & 0xF == MsgType.UPDATE for m in batch)
                sent["pulls"] += sum(m[0] & 0xF == MsgType.PULL for m in batch)
                sent["batches"] += 1
                with switch.pipeline.lock:  # between batches: the invariants hold
                    assert q.occupied == sum(q.cluster_count)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failures.append(e)

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        for k in range(60):
            quota = rng.choice([1, 2, 3, 5, 16, 64])
            _config_entry(cluster_quota=quota).modify()
            if k % 10 == 0:
                with pytest.raises(P4RuntimeWriteException):
                    _config_entry(cluster_quota=rng.choice([0, 65])).modify()
                assert q.cluster_quota == quota
    finally:
        stop.set()
        thread.join(30)
    assert not failures, failures
    assert sent["batches"] > 10
    outcomes = q.counters.outcomes
    assert sum(outcomes) == sent["updates"]  # every UPDATE valid, each counted once
    assert q.counters.msg_types[MsgType.UPDATE] == sent["updates"]
    assert q.counters.msg_types[MsgType.PULL] == sent["pulls"]
    assert outcomes[Outcome.ENQUEUED] == sent["data"] + q.occupied  # no slot lost
    assert q.occupied == sum(q.cluster_count) and q.active_clusters == sum(c > 0 for c in q.cluster_count)
    assert outcomes[Outcome.DROPPED_FULL] > 0


def test_drop_sim_entries_are_the_impairment(shell) -> None:
    switch, _ = shell
    te = sh.TableEntry(DROP_SIM_TABLE)(action="OlafEgress.set_drop_prob")
    te.match["standard_metadata.egress_port"] = "0"
    te.action["prob"] = str(1 << 14)
    te.insert()
    assert switch.impairment.drop_prob == {0: 0.25}
    default = sh.TableEntry(DROP_SIM_TABLE)(is_default=True, action="OlafEgress.set_drop_prob")
    default.action["prob"] = str(1 << 15)
    default.modify()
    assert switch.impairment.drop_prob == {0: 0.25, None: 0.5}
    (read,) = sh.TableEntry(DROP_SIM_TABLE).read()
    assert read.action["prob"].value == encode_uint(1 << 14, 16)
    (read_default,) = sh.TableEntry(DROP_SIM_TABLE)(is_default=True).read()
    assert read_default.action["prob"].value == encode_uint(1 << 15, 16)
    te.delete()
    sh.TableEntry(DROP_SIM_TABLE)(is_default=True).modify()
    assert switch.impairment.drop_prob == {}
    (read_default,) = sh.TableEntry(DROP_SIM_TABLE)(is_default=True).read()
    assert read_default.action.action_name == "NoAction"


# -- counters and registers -----------------------------------------------------------------------
def test_counters_count_what_the_data_plane_saw(shell) -> None:
    switch, server = shell
    switch.pipeline.handle([update(1), update(2), update(3, reward=9.0), pull(), pull(), pull(), b"\x00"])
    outcome = {c.index: c.packet_count for c in sh.CounterEntry("OlafIngress.outcome_counter").read()}
    msg = {c.index: c.packet_count for c in sh.CounterEntry("OlafIngress.msg_type_counter").read()}
    assert outcome == {0: 1, 1: 2, 2: 0, 3: 0, 4: 0, 5: 1, 6: 0, 7: 0}  # merged twice, 1 too short
    assert msg == {0: 0, MsgType.UPDATE: 3, 2: 0, MsgType.PULL: 3, 4: 0, 5: 0, 6: 0, 7: 0}
    one = sh.CounterEntry("OlafIngress.msg_type_counter")
    one.index = int(MsgType.PULL)
    assert [c.packet_count for c in one.read()] == [3]
    reset = sh.CounterEntry("OlafIngress.outcome_counter")
    reset.packet_count = 0
    reset.modify()
    assert switch.queue.counters.outcomes == [0] * len(Outcome)
    one.index = 8
    with pytest.raises(P4RuntimeException) as e:
        list(one.read())
    assert e.value.grpc_error.code() == Code.UNKNOWN and "OUT_OF_RANGE" in e.value.grpc_error.details()
    with pytest.raises(grpc.RpcError) as e:
        primary_write(server, p4runtime_pb2.Update(
            type=p4runtime_pb2.Update.INSERT,
            entity=p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry(counter_id=one.id))))
    assert details(e.value)[0].canonical_code == code_pb2.INVALID_ARGUMENT


def read_register(server: P4RuntimeServer, register_id: int, index: int | None = None) -> dict[int, bytes]:
    entity = p4runtime_pb2.Entity(register_entry=p4runtime_pb2.RegisterEntry(register_id=register_id))
    if index is not None:
        entity.register_entry.index.index = index
    out = {}
    for rep in stub(server).Read(p4runtime_pb2.ReadRequest(device_id=1, entities=[entity])):
        for e in rep.entities:
            out[e.register_entry.index.index] = e.register_entry.data.bitstring
    return out


def test_registers_expose_the_queue_state(shell) -> None:
    switch, server = shell
    schema = Schema(load_p4info(P4INFO), QueueConfig())
    reg = {name: schema.id("OlafIngress." + name) for name in (
        "reg_occupied", "reg_read_ptr", "reg_write_ptr", "reg_active_clusters", "reg_cluster_count",
        "reg_slot_worker_id", "reg_slot_reward", "reg_values", "reg_index")}
    switch.pipeline.handle([update(1, block=0), update(2, block=1, cluster=3, reward=-2.0),
                            update(3, block=2, cluster=3), pull()])
    assert read_register(server, reg["reg_occupied"]) == {0: b"\x02"}
    assert read_register(server, reg["reg_read_ptr"]) == {0: b"\x01"}
    assert read_register(server, reg["reg_write_ptr"]) == {0: b"\x03"}
    assert read_register(server, reg["reg_active_clusters"]) == {0: b"\x01"}
    counts = read_register(server, reg["reg_cluster_count"])
    assert len(counts) == 16 and counts[3] == b"\x02" and counts[0] == b"\x00"
    assert read_register(server, reg["reg_slot_worker_id"], 1) == {1: b"\x02"}
    assert read_register(server, reg["reg_slot_reward"], 1) == {1: encode_int(-2 << 16, 32)}
    values = read_register(server, reg["reg_values"])
    assert len(values) == 4096 and decode_int(values[64 + 5], 32) == 2005  # slot 1, value 5 of worker 2
    index = read_register(server, reg["reg_index"])
    assert decode_uint(index[3 << 10 | 1], 16) == 2 and decode_uint(index[3 << 10 | 2], 16) == 3
    assert decode_uint(index[0], 16) == 0  # popped
    with pytest.raises(grpc.RpcError) as e:
        read_register(server, reg["reg_occupied"], 1)
    assert details(e.value)[0].canonical_code == code_pb2.OUT_OF_RANGE
    with pytest.raises(grpc.RpcError) as e:
        read_register(server, 999)
    assert details(e.value)[0].canonical_code == code_pb2.NOT_FOUND
    write = p4runtime_pb2.RegisterEntry(register_id=reg["reg_occupied"])
    write.index.index = 0
    write.data.bitstring = b"\x00"
    with pytest.raises(grpc.RpcError) as e:
        primary_write(server, p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY,
                                                   entity=p4runtime_pb2.Entity(register_entry=write)))
    assert details(e.value)[0].canonical_code == code_pb2.UNIMPLEMENTED
    assert switch.queue.occupied == 2
    everything = stub(server).Read(p4runtime_pb2.ReadRequest(device_id=1, entities=[
        p4runtime_pb2.Entity(register_entry=p4runtime_pb2.RegisterEntry()),
        p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry()),
        p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(is_default_action=True))]))
    kinds = [e.WhichOneof("entity") for rep in everything for e in rep.entities]
    info = load_p4info(P4INFO)
    assert kinds.count("counter_entry") == sum(c.size for c in info.counters)
    assert kinds.count("table_entry") == len(info.tables) == 5
    assert kinds.count("register_entry") == sum(r.size for r in load_p4info(P4INFO).registers)


def test_malformed_reads_and_wrong_device(shell) -> None:
    _, server = shell
    s = stub(server)
    with pytest.raises(grpc.RpcError) as e:
        list(s.Read(p4runtime_pb2.ReadRequest(device_id=1, entities=[
            p4runtime_pb2.Entity(), p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry()),
            p4runtime_pb2.Entity(value_set_entry=p4runtime_pb2.ValueSetEntry())])))
    assert e.value.code() == Code.UNKNOWN
    assert [x.canonical_code for x in details(e.value)] == [code_pb2.INVALID_ARGUMENT, code_pb2.OK,
                                                            code_pb2.UNIMPLEMENTED]
    with pytest.raises(grpc.RpcError) as e:
        list(s.Read(p4runtime_pb2.ReadRequest(device_id=2)))
    assert e.value.code() == Code.NOT_FOUND
    for call in (s.Write, s.SetForwardingPipelineConfig):
        req = (p4runtime_pb2.WriteRequest if call is s.Write else
               p4runtime_pb2.SetForwardingPipelineConfigRequest)(device_id=7)
        with pytest.raises(grpc.RpcError) as e:
            call(req)
        assert e.value.code() == Code.NOT_FOUND
    req = p4runtime_pb2.WriteRequest(device_id=1, role="acl")
    with pytest.raises(grpc.RpcError) as e:
        s.Write(req)
    assert e.value.code() == Code.NOT_FOUND
    assert s.Capabilities(p4runtime_pb2.CapabilitiesRequest()).p4runtime_api_version  # still serving


# -- arbitration ------------------------------------------------------------------------------------
class Stream:
    """A raw StreamChannel: send MasterArbitrationUpdates, collect what the server says."""

    def __init__(self, server: P4RuntimeServer) -> None:
        self._out: queue.Queue = queue.Queue()
        self.received: queue.Queue = queue.Queue()
        self.channel = grpc.insecure_channel(server.address)
        self.call = p4runtime_pb2_grpc.P4RuntimeStub(self.channel).StreamChannel(iter(self._out.get, None))
        self._thread = threading.Thread(target=self._recv, daemon=True)
        self._thread.start()

    def _recv(self) -> None:
        try:
            for rep in self.call:
                self.received.put(rep)
        except grpc.RpcError as e:
            self.received.put(e)

    def arbitrate(self, election: int | None, device_id: int = 1, role: str = "") -> None:
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = device_id
        if election is not None:
            req.arbitration.election_id.high = election
        if role:
            req.arbitration.role.name = role
        self._out.put(req)

    def next(self) -> p4runtime_pb2.StreamMessageResponse | grpc.RpcError:
        return self.received.get(timeout=5)

    def status(self) -> tuple[str, int | None]:
        rep = self.next()
        assert not isinstance(rep, grpc.RpcError), rep
        arb = rep.arbitration
        election = arb.election_id.high if arb.HasField("election_id") else None
        return code_pb2.Code.Name(arb.status.code), election

    def close(self) -> None:
        self._out.put(None)
        self.call.cancel()
        self.channel.close()


@contextmanager
def streams(server: P4RuntimeServer, n: int) -> Iterator[list[Stream]]:
    opened = [Stream(server) for _ in range(n)]
    try:
        yield opened
    finally:
        for s in opened:
            s.close()


def test_arbitration_primary_backups_and_notifications(shell) -> None:
    _, server = shell  # the shell's client holds election 1 and is primary
    with streams(server, 3) as (a, b, c):
        a.arbitrate(5)
        assert a.status() == ("OK", 5)
        (notice,) = [sh.client.get_stream_packet("arbitration", timeout=5)]
        assert notice.arbitration.status.code == code_pb2.ALREADY_EXISTS  # the shell lost primary
        b.arbitrate(3)
        assert b.status() == ("ALREADY_EXISTS", 5)  # only the newcomer hears of a new backup
        c.arbitrate(None)
        assert c.status() == ("ALREADY_EXISTS", 5)
        with pytest.raises(grpc.RpcError) as e:
            route_entry("10.0.1.1/32", 1).insert()  # the shell is a backup now
        assert e.value.code() == Code.PERMISSION_DENIED
        a.close()  # the primary leaves: everyone hears "no primary"
        assert b.status() == ("NOT_FOUND", 5) and c.status() == ("NOT_FOUND", 5)
        b.arbitrate(4)  # below the highest ever seen: still a backup
        assert b.status() == ("NOT_FOUND", 5)
        b.arbitrate(6)  # above it: primary, and the others hear so
        assert b.status() == ("OK", 6) and c.status() == ("ALREADY_EXISTS", 6)
        b.arbitrate(2)  # the primary downgrades itself: everyone hears there is none
        assert b.status() == ("NOT_FOUND", 6) and c.status() == ("NOT_FOUND", 6)


def test_arbitration_errors_end_the_stream(target) -> None:
    _, server = target
    with streams(server, 5) as (a, dup, wrong_device, role, moving):
        a.arbitrate(9)
        assert a.status() == ("OK", 9)
        dup.arbitrate(9)
        err = dup.next()
        assert isinstance(err, grpc.RpcError) and err.code() == Code.INVALID_ARGUMENT
        wrong_device.arbitrate(1, device_id=2)
        err = wrong_device.next()
        assert isinstance(err, grpc.RpcError) and err.code() == Code.NOT_FOUND
        role.arbitrate(1, role="acl")
        err = role.next()
        assert isinstance(err, grpc.RpcError) and err.code() == Code.UNIMPLEMENTED
        moving.arbitrate(1)
        assert moving.status() == ("ALREADY_EXISTS", 9)
        moving.arbitrate(1, device_id=3)
        err = moving.next()
        assert isinstance(err, grpc.RpcError) and err.code() == Code.FAILED_PRECONDITION
        a.arbitrate(10)  # re-arbitration of the live primary: still primary
        assert a.status() == ("OK", 10)


def test_too_many_controllers_are_refused(target) -> None:
    switch, _ = target
    server = P4RuntimeServer(switch, "127.0.0.1:0", max_streams=2).start()
    try:
        with streams(server, 3) as (a, b, c):
            # One at a time: two arbitrations in flight may reach the server in either order.
            a.arbitrate(1)
            assert a.status() == ("OK", 1)
            b.arbitrate(2)
            assert b.status() == ("OK", 2)
            assert a.status() == ("ALREADY_EXISTS", 2)  # a hears it is a backup now
            c.arbitrate(3)
            err = c.next()
            assert isinstance(err, grpc.RpcError) and err.code() == Code.RESOURCE_EXHAUSTED
            # c never joined: had it become primary (election 3), a and b would have heard.
            with pytest.raises(queue.Empty):
                a.received.get(timeout=0.5)
            assert b.received.empty()
    finally:
        server.stop(0.5)


def test_backup_write_and_pipeline_push_are_rejected(shell) -> None:
    switch, server = shell
    backup = P4RuntimeClient(1, server.address, (0, 7))  # lower than the shell's (1, 0)
    try:
        update_ = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
        update_.entity.table_entry.CopyFrom(route_entry("10.0.1.1/32", 1).msg())
        with pytest.raises(grpc.RpcError) as e:
            backup.write_update(update_)
        assert e.value.code() == Code.PERMISSION_DENIED
        with pytest.raises(P4RuntimeException) as e:
            backup.set_fwd_pipe_config(str(P4INFO), "/dev/null")
        assert e.value.grpc_error.code() == Code.PERMISSION_DENIED
        assert [e.msg().table_id for e in sh.TableEntry(LPM_TABLE).read()] == []  # reads need no primary
    finally:
        backup.tear_down()
    with pytest.raises(grpc.RpcError) as e:
        primary_write(server, election_id=p4runtime_pb2.Uint128())  # not the primary's id
    assert e.value.code() == Code.PERMISSION_DENIED
    assert switch.table.entries() == []


def test_packet_out_is_answered_with_a_stream_error(target) -> None:
    _, server = target
    with streams(server, 1) as (a,):
        a.arbitrate(1)
        assert a.status() == ("OK", 1)
        req = p4runtime_pb2.StreamMessageRequest()
        req.packet.payload = b"\x00" * 20
        a._out.put(req)
        rep = a.next()
        assert rep.error.canonical_code == code_pb2.UNIMPLEMENTED and rep.error.packet_out.packet_out.payload


def test_a_taken_port_is_an_error(target) -> None:
    switch, server = target
    with pytest.raises(OSError, match="cannot listen"):
        P4RuntimeServer(switch, server.address)


# -- fuzzing ----------------------------------------------------------------------------------------
def test_random_writes_and_reads_get_p4runtime_errors_never_internal(shell) -> None:
    """Arbitrary updates are answered with a spec error code per update; no bug (INTERNAL), no crash."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    switch, server = shell
    s = stub(server)
    schema = Schema(load_p4info(P4INFO), QueueConfig())
    table_ids = st.sampled_from([*schema.tables, 0, 7])
    action_ids = st.sampled_from([*schema.actions, 0, 9])
    small = st.binary(max_size=7)

    @st.composite
    def field_match(draw: st.DrawFn) -> p4runtime_pb2.FieldMatch:
        fm = p4runtime_pb2.FieldMatch(field_id=draw(st.integers(0, 2)))
        kind = draw(st.sampled_from(["exact", "lpm", "ternary"]))
        if kind == "exact":
            fm.exact.value = draw(small)
        elif kind == "lpm":
            fm.lpm.value, fm.lpm.prefix_len = draw(small), draw(st.integers(0, 40))
        else:
            fm.ternary.value, fm.ternary.mask = draw(small), draw(small)
        return fm

    @st.composite
    def entity(draw: st.DrawFn) -> p4runtime_pb2.Entity:
        kind = draw(st.sampled_from(["table", "counter", "register", "none"]))
        e = p4runtime_pb2.Entity()
        if kind == "table":
            te = e.table_entry
            te.table_id = draw(table_ids)
            te.match.extend(draw(st.lists(field_match(), max_size=2)))
            te.priority = draw(st.integers(0, 2))
            te.is_default_action = draw(st.booleans())
            if draw(st.booleans()):
                te.action.action.action_id = draw(action_ids)
                for _ in range(draw(st.integers(0, 8))):
                    te.action.action.params.add(param_id=draw(st.integers(0, 8)), value=draw(small))
        elif kind == "counter":
            e.counter_entry.counter_id = draw(st.sampled_from([*schema.counters, 0, 5]))
            if draw(st.booleans()):
                e.counter_entry.index.index = draw(st.integers(-2, 9))
            e.counter_entry.data.packet_count = draw(st.integers(0, 3))
        elif kind == "register":
            # Not 0: a wildcard register read is 21k cells, covered once above.
            e.register_entry.register_id = draw(st.sampled_from([schema.id("OlafIngress.reg_occupied"), 5]))
            if draw(st.booleans()):
                e.register_entry.index.index = draw(st.integers(-2, 3))
        return e

    allowed = {code_pb2.OK, code_pb2.INVALID_ARGUMENT, code_pb2.NOT_FOUND, code_pb2.ALREADY_EXISTS,
               code_pb2.OUT_OF_RANGE, code_pb2.UNIMPLEMENTED}

    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.integers(0, 3), entity()), min_size=1, max_size=4))
    def check(updates: list[tuple[int, p4runtime_pb2.Entity]]) -> None:
        batch = [p4runtime_pb2.Update(type=t, entity=e) for t, e in updates]
        try:
            primary_write(server, *batch)
        except grpc.RpcError as err:
            assert err.code() == Code.UNKNOWN, err.details()
            codes = [x.canonical_code for x in details(err)]
            assert len(codes) == len(batch) and set(codes) <= allowed, details(err)
        try:
            for _ in s.Read(p4runtime_pb2.ReadRequest(device_id=1, entities=[e for _, e in updates])):
                pass
        except grpc.RpcError as err:
            assert err.code() == Code.UNKNOWN, err.details()
            assert {x.canonical_code for x in details(err)} <= allowed, details(err)

    check()
    responses, _, _ = switch.pipeline.handle([pull()])  # the data path still answers
    assert len(responses) == 1
    assert s.Capabilities(p4runtime_pb2.CapabilitiesRequest()).p4runtime_api_version


def test_stopping_the_server_ends_its_worker_threads() -> None:
    import threading

    def p4rt_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("olaf-p4rt")}

    before = p4rt_threads()
    switch = UdpSwitch(OlafQueue(QueueConfig()), "127.0.0.1", 0)
    server = P4RuntimeServer(switch, "127.0.0.1:0").start()
    try:
        s = stub(server)
        s.Capabilities(p4runtime_pb2.CapabilitiesRequest())  # puts a worker thread to use
        assert p4rt_threads() - before
    finally:
        server.stop(0.5)
        switch.close()
    assert p4rt_threads() - before == set()


# -- hardening (issue 18) ---------------------------------------------------------------------------
def test_idle_streams_do_not_starve_reads_writes_or_arbitration(shell) -> None:
    """100 StreamChannels that never arbitrate: Read, the primary's Write and a new arbitration still work."""
    switch, server = shell
    idle_channel = grpc.insecure_channel(server.address)
    idle_stub = p4runtime_pb2_grpc.P4RuntimeStub(idle_channel)
    never: queue.Queue = queue.Queue()
    idle = [idle_stub.StreamChannel(iter(never.get, None)) for _ in range(100)]
    try:
        # Wait until the server holds all of them: each has its first response pending.
        time.sleep(1.0)
        s = stub(server)
        req = p4runtime_pb2.ReadRequest(device_id=1)
        req.entities.add().counter_entry.counter_id = 0
        counter_cells = sum(c.size for c in load_p4info(P4INFO).counters)
        assert sum(len(r.entities) for r in s.Read(req, timeout=10)) == counter_cells
        update_ = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
        update_.entity.table_entry.CopyFrom(route_entry("10.0.9.9/32", 3).msg())
        req = p4runtime_pb2.WriteRequest(device_id=1, updates=[update_])
        req.election_id.high = 1
        s.Write(req, timeout=10)
        assert [p for p, _ in switch.table.entries()] == ["10.0.9.9/32"]
        with streams(server, 1) as (newcomer,):
            newcomer.arbitrate(7)
            assert newcomer.status() == ("OK", 7)
    finally:
        never.put(None)
        for call in idle:
            call.cancel()
        idle_channel.close()


def test_a_stream_that_never_arbitrates_is_ended(target) -> None:
    switch, _ = target
    server = P4RuntimeServer(switch, "127.0.0.1:0", arbitration_timeout=0.5).start()
    try:
        with streams(server, 2) as (silent, talker):
            talker.arbitrate(1)
            assert talker.status() == ("OK", 1)
            err = silent.received.get(timeout=10)
            assert isinstance(err, grpc.RpcError) and err.code() == Code.DEADLINE_EXCEEDED
            assert "MasterArbitrationUpdate" in err.details()
            with pytest.raises(queue.Empty):  # the arbitrated stream stays open past the timeout
                talker.received.get(timeout=1.0)
    finally:
        server.stop(0.5)


def test_open_streams_are_bounded(target) -> None:
    switch, _ = target
    server = P4RuntimeServer(switch, "127.0.0.1:0", max_open_streams=2).start()
    try:
        with streams(server, 2) as (a, b):
            a.arbitrate(1)
            assert a.status() == ("OK", 1)
            b.arbitrate(None)
            assert b.status() == ("ALREADY_EXISTS", 1)
            with streams(server, 1) as (third,):
                err = third.next()
                assert isinstance(err, grpc.RpcError) and err.code() == Code.RESOURCE_EXHAUSTED
    finally:
        server.stop(0.5)


def test_a_huge_action_parameter_gets_a_short_readable_error(shell) -> None:
    switch, server = shell
    entry = route_entry("10.0.1.1/32", 1).msg()
    entry.action.action.params[0].value = b"\x01" * 1_000_000
    with pytest.raises(grpc.RpcError) as e:
        primary_write(server, p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT,
                                                   entity=p4runtime_pb2.Entity(table_entry=entry)))
    assert e.value.code() == Code.UNKNOWN  # not RESOURCE_EXHAUSTED: the client could read it
    assert len(e.value.details()) < 1000 and "OUT_OF_RANGE" in e.value.details()
    (err,) = details(e.value)
    assert err.canonical_code == code_pb2.OUT_OF_RANGE and len(err.message) <= 300
    assert switch.table.entries() == []


def test_a_large_failing_batch_still_gets_a_readable_error(shell) -> None:
    _, server = shell
    bad = route_entry("10.0.1.1/32", 1).msg()
    bad.action.action.params[0].value = b"\x01" * 100
    insert = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT,
                                  entity=p4runtime_pb2.Entity(table_entry=bad))
    batch = [insert] * 1000
    with pytest.raises(grpc.RpcError) as e:
        primary_write(server, *batch)
    assert e.value.code() == Code.UNKNOWN
    assert "and 999 more of 1000" in e.value.details()


def test_negative_counter_writes_are_refused(shell) -> None:
    switch, server = shell
    switch.pipeline.handle([pull()])
    before = list(switch.queue.counters.msg_types)
    counter = sh.CounterEntry("OlafIngress.msg_type_counter")
    for index in (int(MsgType.PULL), None):
        entry = p4runtime_pb2.CounterEntry(counter_id=counter.id)
        if index is not None:
            entry.index.index = index
        entry.data.packet_count = -5
        with pytest.raises(grpc.RpcError) as e:
            primary_write(server, p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY,
                                                       entity=p4runtime_pb2.Entity(counter_entry=entry)))
        (err,) = details(e.value)
        assert err.canonical_code == code_pb2.INVALID_ARGUMENT and "negative" in err.message
    assert switch.queue.counters.msg_types == before and before[MsgType.PULL] == 1


# -- TLS -------------------------------------------------------------------------------------------
def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    key, cert = d / f"{name}.key", d / f"{name}.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
             "-days", "2", "-subj", f"/CN={name}")
    return cert, key


def _signed(d: Path, name: str, ca: tuple[Path, Path], san: str) -> tuple[Path, Path]:
    key, csr, cert, ext = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.pem", d / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
             "-subj", f"/CN={name}")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-out", str(cert), "-days", "2", "-extfile", str(ext))
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """A CA, a server certificate for 127.0.0.1, a client it signed, and a client signed by another CA."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    d = tmp_path_factory.mktemp("pki")
    ca, rogue_ca = _ca(d, "ca"), _ca(d, "rogue-ca")
    return {"ca": ca, "server": _signed(d, "server", ca, "IP:127.0.0.1,DNS:localhost"),
            "client": _signed(d, "client", ca, "DNS:controller"),
            "rogue": _signed(d, "rogue", rogue_ca, "DNS:controller")}


def test_mutual_tls_admits_only_clients_with_a_certificate_from_the_ca(pki) -> None:
    from control_plane.tls import channel_credentials, server_credentials

    switch = UdpSwitch(OlafQueue(QueueConfig()), "127.0.0.1", 0)
    creds = server_credentials(*pki["server"], client_ca=pki["ca"][0])
    server = P4RuntimeServer(switch, "127.0.0.1:0", credentials=creds).start()

    def capabilities(channel: grpc.Channel) -> str:
        with channel:
            s = p4runtime_pb2_grpc.P4RuntimeStub(channel)
            return s.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=5).p4runtime_api_version

    try:
        good = channel_credentials(pki["ca"][0], *pki["client"])
        assert capabilities(grpc.secure_channel(server.address, good))
        for refused in (channel_credentials(pki["ca"][0]),  # no client certificate
                        channel_credentials(pki["ca"][0], *pki["rogue"])):  # signed by another CA
            with pytest.raises(grpc.RpcError) as e:
                capabilities(grpc.secure_channel(server.address, refused))
            assert e.value.code() == Code.UNAVAILABLE
        with pytest.raises(grpc.RpcError) as e:
            capabilities(grpc.insecure_channel(server.address))  # plaintext
        assert e.value.code() == Code.UNAVAILABLE
        with pytest.raises(grpc.RpcError):  # a client that does not trust the server's CA
            distrustful = channel_credentials(pki["rogue"][0], *pki["client"])
            capabilities(grpc.secure_channel(server.address, distrustful))
    finally:
        server.stop(0.5)
        switch.close()


def test_tls_files_are_checked_with_an_error_naming_the_file(pki, tmp_path: Path) -> None:
    from control_plane.tls import TlsError, channel_credentials, server_credentials

    cert, key = pki["server"]
    with pytest.raises(TlsError, match="nope.pem"):
        server_credentials(tmp_path / "nope.pem", key)
    with pytest.raises(TlsError, match="do not make a pair"):
        server_credentials(cert, pki["client"][1])
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("hello")
    with pytest.raises(TlsError, match="garbage.pem: not a PEM file"):
        server_credentials(cert, key, client_ca=garbage)
    with pytest.raises(TlsError, match="give both"):
        channel_credentials(pki["ca"][0], cert=pki["client"][0])


# -- olaf ctl: TLS and timeouts ---------------------------------------------------------------------
def test_ctl_gives_up_on_a_listener_that_is_not_grpc_within_its_timeout(
        capsys: pytest.CaptureFixture[str]) -> None:
    from olaf.cli import main

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    accepting = threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True)
    accepting.start()
    try:
        started = time.monotonic()
        code = main(["ctl", "--target", f"127.0.0.1:{listener.getsockname()[1]}", "--timeout", "2", "show"])
        elapsed = time.monotonic() - started
    finally:
        for s in held:
            s.close()
        listener.close()
    _, err = capsys.readouterr()
    assert code == 1 and err.count("\n") == 1 and "olaf ctl: error:" in err, err
    assert elapsed < 12, elapsed  # the timeout plus start-up on a loaded machine, not gRPC's own 20 s


def test_ctl_and_switch_speak_mutual_tls(pki, capsys: pytest.CaptureFixture[str]) -> None:
    from olaf.cli import main

    cert, key = pki["server"]
    with running_switch("--listen", "127.0.0.1:0", "--p4runtime", "0", "--tls-cert", str(cert),
                        "--tls-key", str(key), "--tls-client-ca", str(pki["ca"][0])) as sw:
        line = sw.proc.stdout.readline()
        assert line.startswith("p4runtime on 127.0.0.1:"), line
        target = line.split()[-1]
        ca = ["--tls-ca", str(pki["ca"][0])]
        client = [*ca, "--tls-cert", str(pki["client"][0]), "--tls-key", str(pki["client"][1])]
        assert main(["ctl", "--target", target, *client, "push"]) == 0, capsys.readouterr()
        assert main(["ctl", "--target", target, *client, "set", "--mode", "fifo"]) == 0, capsys.readouterr()
        capsys.readouterr()
        assert main(["ctl", "--target", target, *client, "--json", "show"]) == 0
        assert json.loads(capsys.readouterr().out)["settings"]["mode"] == "FIFO"
        # No client certificate, or one from another CA: refused at the handshake.
        rogue = [*ca, "--tls-cert", str(pki["rogue"][0]), "--tls-key", str(pki["rogue"][1])]
        for refused in (ca, rogue, []):
            assert main(["ctl", "--target", target, "--timeout", "2", *refused, "show"]) == 1
            assert capsys.readouterr().err.startswith("olaf ctl: error:")
        # A file that is not there: a usage error, before connecting.
        assert main(["ctl", "--target", target, "--tls-ca", "/nonexistent/ca.pem", "show"]) == 2
        assert "/nonexistent/ca.pem" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "culprit"), [
    (["--target", "nohostport", "show"], "--target"),
    (["--target", "127.0.0.1:1", "--timeout", "-1", "show"], "--timeout"),
    (["--target", "127.0.0.1:1", "--timeout", "nan", "show"], "--timeout"),
    (["--target", "127.0.0.1:1", "--device-id", "-1", "show"], "--device-id"),
    (["--target", "127.0.0.1:1", "set", "--congestion-threshold", "300"], "--congestion-threshold"),
    (["--target", "127.0.0.1:1", "set", "--threshold", "inf"], "--threshold"),
    (["--target", "127.0.0.1:1", "set", "--drop-prob", "99999:0.1"], "--drop-prob"),
    (["--target", "127.0.0.1:1", "routes", "--add", "10.0.0.1/32=99999"], "--add"),
    (["--target", "127.0.0.1:1", "routes", "--add", "10.0.0.0/33=1"], "--add"),
    (["--target", "127.0.0.1:1", "routes", "--delete", "bogus"], "--delete"),
    (["--target", "127.0.0.1:1", "watch", "--count", "-1"], "--count"),
    (["--target", "127.0.0.1:1", "--tls-cert", "/nonexistent/c.pem", "show"], "give both"),
])
def test_ctl_refuses_bad_arguments_before_connecting(argv: list[str], culprit: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from olaf.cli import main

    try:
        code = main(["ctl", *argv])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    (line,) = [x for x in err.splitlines() if x.startswith("olaf ctl") and ": error:" in x]
    assert culprit in line, line
