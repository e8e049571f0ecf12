"""The Mininet testbed (bmv2_topologies, ``olaf testbed``).

Without root or Mininet only the pure parts run (topology files, routes, the MODEL
weight channel, the relay's rewrite); the network tests skip with the reason. As root
with Mininet (CI): a 2-worker star through the software switch with synthetic traffic
(ACK feedback, DATA at the PS), a two-level topology whose updates cross a leaf and the
spine, and ``olaf testbed run star2`` training the DRL job (learning asserted through the
software switch and through bmv2), each followed by a check that no interface, namespace
or process of the run is left. The bmv2 variants need ``simple_switch_grpc`` and ``p4c``.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bmv2_topologies import bmv2, generate
from bmv2_topologies.mininet_api import missing_requirements
from bmv2_topologies.relay import data_as_updates
from bmv2_topologies.topology import TopologyError, load, parse, shipped_names
from olaf.testbed.hosts import ModelAssembler, model_messages
from tests.procfs import alive, processes
from worker_transport.codec import Batch, Verdict, classify, decode, encode_array
from worker_transport.fixedpoint import resolution, to_fixed
from worker_transport.protocol import MsgType

REPO = Path(__file__).resolve().parent.parent
NO_MININET = missing_requirements()
needs_mininet = pytest.mark.skipif(NO_MININET is not None, reason=NO_MININET or "")
BMV2_ON_MININET = pytest.mark.skipif(NO_MININET is not None or bmv2.missing() is not None,
                                     reason=NO_MININET or f"bmv2 path: {bmv2.missing()}")


# -- topology files -----------------------------------------------------------------------
def test_shipped_topologies_are_what_generate_writes(tmp_path: Path) -> None:
    assert {"star2", "star8", "star32", "two_level"} <= set(shipped_names())
    for name, make in generate.SHIPPED.items():
        shipped = json.loads((REPO / "bmv2_topologies" / f"{name}.json").read_text())
        assert shipped == json.loads(json.dumps(make())), f"{name}.json is stale: rerun generate"


@pytest.mark.parametrize(("name", "workers", "switches"),
                         [("star2", 2, 1), ("star8", 8, 1), ("star32", 32, 1), ("two_level", 8, 3)])
def test_shipped_topology_shape(name: str, workers: int, switches: int) -> None:
    t = load(name)
    assert len(t.workers) == workers and len(t.switches) == switches
    assert [w.worker_id for w in t.workers] == list(range(workers))
    # Every host interface has exactly one route on every switch.
    for sw in t.switches:
        prefixes = [r.prefix for r in t.routes(sw)]
        assert len(prefixes) == len(set(prefixes)) == sum(len(h.interfaces) for h in t.hosts.values())


def test_star_routes_go_straight_to_the_host() -> None:
    t = load("star8")
    routes = {r.prefix: r for r in t.routes("s1")}
    assert routes["10.0.3.1/32"].port == 3 and routes["10.0.3.1/32"].mac == "02:00:0a:00:03:01"
    assert routes["10.0.100.1/32"].port == 9
    assert t.links[0].bandwidth_mbps == 100.0


def test_two_level_routes_cross_the_spine() -> None:
    t = load("two_level")
    leaf = {r.prefix: r for r in t.routes("s1")}
    # The PS and the other leaf's workers are behind the uplink (port 6), next hop the spine.
    assert leaf["10.0.100.1/32"].port == 6 and leaf["10.0.100.1/32"].mac == t.port_mac("s3", 4)
    assert leaf["10.0.5.1/32"].port == 6
    spine = {r.prefix: r for r in t.routes("s3")}
    assert spine["10.0.1.1/32"].port == 4 and spine["10.0.5.1/32"].port == 5
    assert spine["10.0.211.1/32"].port == 2  # relay r1's eth1 is plugged into the spine
    assert [r.name for r in t.relays] == ["r1", "r2"]
    assert t.switch_of("r1", 1) == ("s3", 2)


def _minimal() -> dict:
    return {
        "hosts": {"h1": {"ip": "10.0.1.1/24", "mac": "02:00:0a:00:01:01",
                         "olaf": {"role": "worker", "worker_id": 0}},
                  "ps": {"ip": "10.0.100.1/24", "mac": "02:00:0a:00:64:01", "olaf": {"role": "ps"}}},
        "switches": {"s1": {}},
        "links": [["h1", "s1-p1"], ["ps", "s1-p2"]],
    }


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["links"].append(["h1", "s1-p3"]), "used twice"),
    (lambda d: d["links"].__setitem__(0, ["h1", "s1-p1", "5ms"]), "netem"),
    (lambda d: d["links"].__setitem__(0, ["h1", "s1-p1", "0ms", -3]), "bandwidth"),
    (lambda d: d["links"].__setitem__(0, ["h1", "ps"]), "not to each other"),
    (lambda d: d["links"].__setitem__(0, ["h9", "s1-p1"]), "neither a host"),
    (lambda d: d["hosts"]["ps"]["olaf"].__setitem__("role", "worker"), "worker needs"),
    (lambda d: d["hosts"]["h1"]["olaf"].__setitem__("role", "spy"), "not one of"),
    (lambda d: d["hosts"]["h1"].__setitem__("ip", "10.0.1.300/24"), "'ip'"),
    (lambda d: d["hosts"]["h1"].__setitem__("mac", "02:00"), "'mac'"),
    (lambda d: d.pop("links"), "needs the keys"),
    (lambda d: d["links"].pop(0), "not linked"),
])
def test_bad_topologies_are_refused_with_the_reason(change, message: str) -> None:
    data = _minimal()
    parse(data)
    change(data)
    with pytest.raises(TopologyError, match=message):
        parse(data)


def test_unknown_topology_name_lists_the_shipped_ones() -> None:
    with pytest.raises(TopologyError, match="star8"):
        load("no_such_topology")


def test_cli_defaults_match_run_config() -> None:
    from olaf.commands.testbed import LEARNER_DEFAULTS, RUN_DEFAULTS
    from olaf.drl.config import RunConfig
    from olaf.drl.impact import ImpactConfig

    rc, lc = RunConfig(), ImpactConfig()
    for key, value in vars(RUN_DEFAULTS).items():
        assert getattr(rc, key) == value, key
    for key, value in vars(LEARNER_DEFAULTS).items():
        assert getattr(lc, key) == value, key


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "no_such_topology"], "none shipped by that name"),
    (["run", "star2", "--tag", "toolong"], "--tag must be"),
    (["run", "star2", "--switch", "bmv2", "--drop-prob", "0.1"], "options of the software switch"),
    (["run", "star2", "--capacity", "0"], "capacity must be >= 1"),
    (["run", "star2", "--total-steps", "0"], "total_steps must be >= 1"),
    (["run", "star2", "--total-steps", "-5", "--mode", "olaf-always"], "total_steps must be >= 1"),
])
def test_testbed_command_refuses_bad_arguments(argv: list[str], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from olaf.cli import main

    assert main(["testbed", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def _run_args(*flags: str) -> object:
    from olaf.cli import build_parser

    return build_parser().parse_args(["testbed", "run", "star2", *flags])


@pytest.mark.parametrize(("flags", "mode", "always_send", "uses_p_s", "variant"), [
    ([], "olaf", False, True, "olaf"),
    (["--mode", "olaf"], "olaf", False, True, "olaf"),
    (["--mode", "olaf-always"], "olaf", True, False, "olaf-always"),
    (["--mode", "fifo"], "fifo", False, False, "fifo"),
])
def test_testbed_mode_maps_as_olaf_compare(flags: list[str], mode: str, always_send: bool,
                                          uses_p_s: bool, variant: str) -> None:
    from olaf.commands.testbed import run_config

    cfg = run_config(_run_args(*flags), 2)
    assert (cfg.mode, cfg.always_send, cfg.workers_use_p_s, cfg.variant) == (
        mode, always_send, uses_p_s, variant)
    assert cfg.workers == cfg.processes == 2


def test_testbed_total_steps_lands_in_the_run_config() -> None:
    from olaf.commands.testbed import run_config
    from olaf.drl.config import RunConfig

    assert run_config(_run_args(), 8).total_steps == RunConfig().total_steps
    cfg = run_config(_run_args("--total-steps", "3000000", "--duration", "240", "--seed", "2"), 8)
    assert (cfg.total_steps, cfg.duration, cfg.seed) == (3_000_000, 240.0, 2)


def test_worker_hosts_honour_always_send(tmp_path: Path) -> None:
    """The worker host's sender, built from the config the launcher writes: P_s in olaf
    mode, always sending in olaf-always (and fifo) mode."""
    from olaf.commands.testbed import run_config
    from olaf.drl.worker_turn import build_worker
    from olaf.testbed.hosts import config_json, load_config
    from worker_transport.policy import AlwaysSend, OlafPolicy

    for mode, policy in (("olaf", OlafPolicy), ("olaf-always", AlwaysSend), ("fifo", AlwaysSend)):
        path = tmp_path / f"{mode}.json"
        path.write_text(config_json(run_config(_run_args("--mode", mode), 2)))
        worker, sender = build_worker(load_config(str(path)), 0, 0, ("127.0.0.1", 9),
                                      lambda version: None)
        try:
            assert type(sender.policy) is policy, mode
        finally:
            sender.close()
            worker.close()


def test_testbed_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    from olaf.cli import main

    assert main(["testbed", "list"]) == 0
    assert "two_level    8 workers  3 switch(es)  2 relay(s)" in capsys.readouterr().out
    assert main(["testbed", "show", "star2"]) == 0
    assert "10.0.100.1/32      -> port 3 (02:00:0a:00:64:01)" in capsys.readouterr().out


# -- the weight channel and the relay -------------------------------------------------------
def test_model_messages_round_trip_in_any_order_with_loss_of_a_stale_version() -> None:
    rng = np.random.default_rng(1)
    weights = rng.normal(0, 0.3, 1000).astype(np.float32)
    rows = model_messages(weights, 7, 3, values=64, frac_bits=16)
    assert len(rows) == 16
    asm = ModelAssembler(1000, 64, 16)
    older = [bytes(r) for r in model_messages(weights * 0, 6, 2, values=64, frac_bits=16)]
    packets = [bytes(r) for r in rows]
    order = rng.permutation(len(packets))
    # Version 6 lacks a block: it never completes, and version 7 still does.
    assert asm.feed(older[:-1]) is None
    assert asm.feed([packets[i] for i in order[:-1]] + [packets[order[0]]]) is None
    got = asm.feed([packets[order[-1]]])
    assert got is not None
    w, version = got
    assert version == 7
    assert np.max(np.abs(w - weights)) <= resolution(16)
    assert asm.feed(older) is None  # older than what the worker holds
    header = decode(packets[:1], 64).headers[0]
    assert header["msg_type"] == MsgType.MODEL and header["model_version"] == 7 and header["seq"] == 3


def test_model_broadcast_is_paced_block_by_block_to_every_worker() -> None:
    import threading
    import time

    from olaf.testbed.hosts import send_paced

    class Recorder:
        def __init__(self) -> None:
            self.sent: list[tuple[bytes, tuple[str, int], float]] = []

        def sendto(self, row: bytes, addr: tuple[str, int]) -> None:
            self.sent.append((bytes(row), addr, time.monotonic()))

    rows = model_messages(np.arange(256, dtype=np.float32), 3, 0, values=64, frac_bits=16)
    addrs = [("10.0.1.1", 1), ("10.0.2.1", 1)]
    sock = Recorder()
    begin = time.monotonic()
    send_paced(sock, rows, addrs, 0.09, threading.Event())
    # Block 0 to each worker, then block 1, ...: never all of one worker's blocks at once.
    assert [(r, a) for r, a, _ in sock.sent] == [(bytes(r), a) for r in rows for a in addrs]
    # Four blocks over 0.09 s: block i leaves no earlier than i * 0.0225 s after the start.
    for i, (_, _, t) in enumerate(sock.sent):
        assert t - begin >= (i // 2) * 0.0225 - 1e-3
    stopped = Recorder()
    stop = threading.Event()
    stop.set()
    send_paced(stopped, rows, addrs, 10.0, stop)  # a stop ends the broadcast at once
    assert len(stopped.sent) == 2


def test_run_config_crosses_to_the_hosts_intact(tmp_path: Path) -> None:
    from olaf.drl.a2c import A2CConfig
    from olaf.drl.config import RunConfig
    from olaf.testbed.hosts import config_json, load_config

    cfg = RunConfig(workers=3, mode="fifo", pull_rate=700.0, learner=A2CConfig(hidden=16))
    (tmp_path / "c.json").write_text(config_json(cfg))
    assert load_config(str(tmp_path / "c.json")) == cfg


def test_assembler_ignores_foreign_packets() -> None:
    asm = ModelAssembler(64, 64, 16)
    batch = Batch.zeros(1, 64)
    batch.headers["version"], batch.headers["msg_type"], batch.headers["num_values"] = 1, MsgType.DATA, 64
    assert asm.feed([bytes(encode_array(batch)[0])]) is None and asm.foreign == 1


def test_relay_turns_a_data_slot_into_a_mean_update_the_queue_accepts() -> None:
    heads = Batch.zeros(1, 64).headers
    heads["msg_type"], heads["agg_count"], heads["worker_id"], heads["block_id"] = MsgType.DATA, 3, 5, 2
    heads["num_values"], heads["frac_bits"], heads["contributors"] = 64, 16, 0b1011
    heads["gen_time_us"], heads["model_version"], heads["reward"] = 1234, 9, int(to_fixed(150.0, 16))
    heads["outcome"], heads["queue_util"], heads["flags"] = 0, 200, 1
    mean = np.linspace(-1, 1, 64, dtype=np.float32)[None, :]
    rows = data_as_updates(heads, mean, 16)
    out = decode([bytes(rows[0])], 64)
    h = out.headers[0]
    assert h["msg_type"] == MsgType.UPDATE and h["agg_count"] == 1
    assert (h["worker_id"], h["block_id"], h["contributors"]) == (5, 2, 0b1011)
    assert (h["gen_time_us"], h["model_version"], h["reward"]) == (1234, 9, heads["reward"][0])
    assert h["queue_util"] == 0 and h["flags"] == 0
    assert np.array_equal(out.values[0], to_fixed(mean[0], 16))
    verdict = classify(out, values=64, frac_bits=16, max_clusters=16, max_blocks=1024)
    assert verdict.tolist() == [Verdict.OK]


# -- on Mininet -------------------------------------------------------------------------------
def _no_trace(tag: str, pids: list[int]) -> list[str]:
    """Interfaces of ``tag`` and live processes among ``pids``, seen from outside the testbed."""
    left = [n for n in os.listdir("/sys/class/net") if n.startswith(f"olaf{tag}")]
    left += [f"pid {pid}" for pid in pids if alive(pid)]
    return left


@needs_mininet
def test_star2_soft_switch_synthetic_traffic(tmp_path: Path) -> None:
    from bmv2_topologies.experiment import run_synthetic
    from bmv2_topologies.testbed import Testbed

    tb = Testbed(load("star2"), tmp_path, queue={"capacity": 16})
    try:
        tb.start()
        pids = [p.pid for p in tb.processes] + list(tb._shell_pids)
        summary = run_synthetic(tb, duration=2.0, rate=40.0, params=640, pull_rate=500)
        pids += [p.pid for p in tb.processes]
    finally:
        left = tb.close()
    assert left == []
    assert _no_trace(tb.tag, pids) == []
    for name, final in summary["workers"].items():
        # Every block was answered, and the ACKs carried the queue's feedback.
        assert final["sent_blocks"] >= 20 * 10, name  # 40 updates/s for 2 s, fewer when starved
        # On a saturated 2-core machine the Python switch can be descheduled long enough for
        # its AF_PACKET receive buffers to overflow: some blocks go unanswered, never most.
        assert final["acked_blocks"] >= 0.5 * final["sent_blocks"], name
        assert final["acked_blocks"] + final["lost_blocks"] == final["sent_blocks"], name
        assert final["active_clusters"] == 1 and final["queue_util"] is not None, name
        assert sum(final["outcomes"].values()) == final["acked_blocks"], name
    ps = summary["ps"]
    assert ps["data_blocks"] > 0 and ps["bad_data"] == 0
    # Worker updates the queue kept (replacements supersede, merges add one each); the PS
    # gets them all unless a DATA is lost or the PS stops (first) with slots still queued.
    kept = sum(w["outcomes"]["ENQUEUED"] + w["outcomes"]["MERGED"] for w in summary["workers"].values())
    assert 0.5 * kept <= ps["aggregated_updates"] <= kept
    assert set(ps["aom"]["per_worker"]["mean"][:2]) != {None}
    s1 = summary["switches"]["s1"]
    assert s1["settings"]["capacity"] == 16
    # Every answer the PS got was a PULL the switch counted; a PULL may be lost on the way.
    assert ps["data_blocks"] + ps["empty"] <= s1["msg_types"]["PULL"] <= ps["pulls_sent"]


def test_interface_names_must_fit_ifnamsiz(tmp_path: Path) -> None:
    from bmv2_topologies.testbed import Testbed, TestbedError

    data = _minimal()
    data["switches"] = {"spine_switch": {}}
    data["links"] = [["h1", "spine_switch-p1"], ["ps", "spine_switch-p2"]]
    tb = Testbed(parse(data), tmp_path, tag="abc")
    with pytest.raises(TestbedError, match="longer than 15"):
        tb.port_name("spine_switch", 1)
    assert Testbed(load("star32"), tmp_path, tag="abc").port_name("s1", 33) == "olafabcs1p33"


@needs_mininet
def test_a_switch_that_fails_to_start_leaves_nothing_behind(tmp_path: Path) -> None:
    from bmv2_topologies.testbed import Testbed, TestbedError

    # Capacity 0 is refused by olaf switch: the start fails after hosts and links exist.
    tb = Testbed(load("star2"), tmp_path, switch_args={"*": ["--capacity", "0"]})
    with pytest.raises(TestbedError, match="capacity"):
        tb.start()
    assert tb.leftovers() == []
    assert _no_trace(tb.tag, [p.pid for p in tb.processes] + tb._shell_pids) == []


@needs_mininet
def test_two_level_updates_cross_leaf_and_spine(tmp_path: Path) -> None:
    from bmv2_topologies.experiment import run_synthetic
    from bmv2_topologies.testbed import Testbed

    topo = parse(generate.two_level(leaves=2, per_leaf=1, bandwidth=None), "two_level_small")
    tb = Testbed(topo, tmp_path)
    try:
        tb.start()
        summary = run_synthetic(tb, duration=2.0, rate=25.0, params=640, pull_rate=500)
    finally:
        left = tb.close()
    assert left == []
    counters = summary["switches"]
    workers = summary["workers"]
    for w in workers.values():
        assert w["sent_blocks"] >= 20 * 10 and w["acked_blocks"] >= 0.5 * w["sent_blocks"]
    # Leaves queue the workers' updates; relays pull them and the spine queues them again.
    for leaf, worker in (("s1", "worker0"), ("s2", "worker1")):
        assert counters[leaf]["msg_types"]["UPDATE"] >= workers[worker]["acked_blocks"]
        assert counters[leaf]["msg_types"]["PULL"] > 0
    forwarded = sum(r["forwarded"] for r in summary["relays"].values())
    acks = sum(r["acks"] for r in summary["relays"].values())
    assert acks > 0 and acks <= counters["s3"]["msg_types"]["UPDATE"] <= forwarded
    ps = summary["ps"]
    assert ps["data_blocks"] > 0
    assert ps["data_blocks"] + ps["empty"] <= counters["s3"]["msg_types"]["PULL"] <= ps["pulls_sent"]
    # Both workers' contributions arrive at the PS through two queues.
    assert all(m is not None for m in ps["aom"]["per_worker"]["mean"][:2])


def _processes_mentioning(text: str) -> list[str]:
    """Live processes whose command line contains ``text`` (a run's own output path)."""
    return [f"pid {pid}: {_printable(cmdline)}" for pid, cmdline in processes("cmdline")
            if text.encode() in cmdline and alive(pid)]


def _printable(cmdline: bytes) -> str:
    return cmdline.replace(b"\0", b" ").decode(errors="replace")[:200]


# A learning run on bmv2: 60 s at most, stopped at the greedy target (475) before that.
# Measured on the 2-core machine at load 6-8 (two other jobs on both cores): 6 of 6 such
# runs with paced MODEL broadcasts reached a greedy 475 after 9-19 s of training, 30-52 s
# per test with set-up and teardown (bmv2_topologies/README.md, "Learning through bmv2").
BMV2_LEARNING_DURATION = 60
BMV2_GREEDY_FLOOR = 200.0
"""Best greedy evaluation the bmv2 run must reach: the PS's first weights play 9.3 and a
uniformly random CartPole policy about 20; a PS that applied nothing, or a switch that
dropped every update, stays at 9.3."""


@needs_mininet
@pytest.mark.parametrize(("switch", "tag", "duration"),
                         [("soft", "cit", 15),
                          pytest.param("bmv2", "cib", BMV2_LEARNING_DURATION, marks=BMV2_ON_MININET)])
def test_olaf_testbed_run_trains_across_hosts(switch: str, tag: str, duration: int,
                                              tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "olaf.cli", "testbed", "run", "star2", "--switch", switch,
         "--duration", str(duration), "--out", str(out), "--tag", tag],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    # Exit 0 also means the launcher found none of its interfaces, namespaces or processes
    # left after the teardown; seen from outside as well:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _no_trace(tag, []) == []
    assert _processes_mentioning(str(out)) == []
    summary = json.loads((out / "testbed_summary.json").read_text())
    assert summary["workers"] == 2 and summary["testbed"]["switch"] == switch
    assert summary["weights_downlink"] == "MODEL messages through the switch"
    assert summary["data_blocks"] > 0 and summary["blocks_applied"] == summary["data_blocks"]
    assert summary["model_version"] > 10 and summary["episodes"] > 40
    assert summary["wall_time_s"] <= duration + 5, summary["wall_time_s"]
    # Learning: the workers' last 20 episodes are clearly longer than their first 20
    # (random ~ 20). The workers play the weights that reached them as MODEL through the
    # switch, so this also fails when the weights do not get through (on bmv2, before
    # MODEL broadcasts were paced, a worker could hold its first weights for a whole run
    # and play ~22 while the PS's greedy evaluation rose).
    assert summary["final_return"] > 1.5 * summary["initial_return"], summary
    if switch == "bmv2":
        # The PS's weights, evaluated greedily, well above random within the bound.
        assert summary["stopped_by"] in ("target", "duration"), summary["stopped_by"]
        assert summary["best_eval_return"] >= BMV2_GREEDY_FLOOR, (
            summary["best_eval_return"], summary["stopped_by"], summary["wall_time_s"])
        # bmv2's queue registers reach the timeline over its Thrift server.
        assert summary["testbed"]["per_switch"]["s1"]["queue"] is not None
    assert summary["outcomes"]["ENQUEUED"] > 0
    # The ThresholdLoop wrote the reward threshold into the switch's olaf_config over P4Runtime.
    settings = summary["testbed"]["per_switch"]["s1"]["settings"]
    assert 0 < settings["reward_threshold"] < 1000 and settings["mode"] == "OLAF"
    for name in ("return_vs_time.png", "aom.png", "outcomes.png", "episodes.csv", "timeline.csv"):
        assert (out / name).stat().st_size > 0, name
    logs = out / "logs"
    workers = [json.loads(line[6:]) for f in sorted(logs.glob("drl-worker*.log"))
               for line in f.read_text().splitlines() if line.startswith("final ")]
    assert len(workers) == 2
    for w in workers:
        # Every worker started from the PS's first weights (version 0, which it waits for)
        # and loaded later versions as they got through.
        assert w["acked_blocks"] > 0 and w["queue_util"] is not None
        assert w["model_version"] > 0, w


STAR4_BMV2_DURATION = 150
"""star4 through bmv2 under feedback revision 3: four worker hosts offer more than bmv2
takes in on two cores, which revision 2's P_s never saw (star8 never learned, issue 30);
the loss ceiling brings what they send down to what bmv2 answers."""


@needs_mininet
@BMV2_ON_MININET
@pytest.mark.timeout(400)
def test_star4_learns_through_bmv2_with_the_loss_ceiling(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "olaf.cli", "testbed", "run", "star4", "--switch", "bmv2",
         "--duration", str(STAR4_BMV2_DURATION), "--total-steps", "100000000", "--out", str(out),
         "--tag", "ci4"],
        capture_output=True, text=True, timeout=380, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _no_trace("ci4", []) == []
    summary = json.loads((out / "testbed_summary.json").read_text())
    assert summary["workers"] == 4 and summary["feedback"] == 3
    assert summary["best_eval_return"] >= BMV2_GREEDY_FLOOR, (
        summary["best_eval_return"], summary["stopped_by"], summary["wall_time_s"])
    with (out / "timeline.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) > 10
    # The worker hosts report revision 3's loss ceiling and answered share into it.
    ceilings = [float(r["loss_ceiling"]) for r in rows if r["loss_ceiling"]]
    assert ceilings and all(0 < c <= 1 for c in ceilings)
    assert any(r["answered_share"] for r in rows)


@BMV2_ON_MININET
def test_star2_on_bmv2_synthetic_traffic(tmp_path: Path) -> None:
    from bmv2_topologies.experiment import run_synthetic
    from bmv2_topologies.testbed import Testbed

    tb = Testbed(load("star2"), tmp_path, switch="bmv2", queue={"values": 64})
    try:
        tb.start()
        summary = run_synthetic(tb, duration=2.0, rate=25.0, params=640)
    finally:
        left = tb.close()
    assert left == []
    for final in summary["workers"].values():
        assert final["acked_blocks"] >= 0.9 * final["sent_blocks"] and final["active_clusters"] == 1
    assert summary["ps"]["data_blocks"] > 0
    # The queue registers, read over bmv2's Thrift server, agree with each other.
    q = summary["switches"]["s1"]["queue"]
    assert q is not None and q["occupied"] == sum(q["cluster_count"]), summary["switches"]["s1"]
    assert (q["write_ptr"] - q["read_ptr"]) % 64 == q["occupied"] % 64
