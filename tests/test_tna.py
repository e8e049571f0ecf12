"""p4/tna/olaf_tna.p4: what Tofino's compiler says about it, and what it does.

Fit: when ``p4c-barefoot`` (the bundle unpacked by scripts/setup.sh, put on PATH by
tests/conftest.py) is there, the program is compiled once per session for Tofino 1 and
must come out with ``compilation_succeeded`` in manifest.json and its tables in the 12
MAU stages Tofino 1 has (the open-source compiler reports success for a placement that
needs more, so the stages are read from the generated .bfa); ``p4test`` must pass it
with no warning. Each skips with its reason where the tool is absent.

Behaviour: neither the assembler ``bfas`` nor a Tofino model is available, so the
program's logic is run by the source interpreter tests/p4sim/ (Register /
RegisterAction, Hash, resubmit and recirculation passes) on random V = 32 traffic
and compared frame for frame with the reference queue (dataplane/queue.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import p4_replay, p4sim

TNA_MAIN = p4_replay.P4_TNA_MAIN
TOFINO1_STAGES = 12
TOFINO1_SALUS_PER_STAGE = 4
TNA_STATEFUL_ALUS = 47  # 15 queue-state Registers + V = 32 value Registers
Build = tuple[Path, subprocess.CompletedProcess]


# -- fit: the real compiler ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tofino_build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """p4c-barefoot's output folder for the TNA program, compiled once per session."""
    if shutil.which("p4c-barefoot") is None:
        pytest.skip("p4c-barefoot not on PATH (scripts/setup.sh unpacks ../shared/p4tools/bf-p4c-bundle)")
    out = tmp_path_factory.mktemp("tofino")
    result = subprocess.run(
        # -g: the compiler also writes pipe/logs/resources.json (read by resources()).
        ["p4c-barefoot", "--target", "tofino", "--arch", "tna", "-g", "-o", str(out), str(TNA_MAIN)],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    return out, result


def stages_used(bfa: str) -> dict[str, int]:
    """Stages per gress in the compiler's assembly: 1 + the highest ``stage N <gress>:``."""
    used: dict[str, int] = {}
    for number, gress in re.findall(r"^stage (\d+) (ingress|egress):", bfa, flags=re.M):
        used[gress] = max(used.get(gress, 0), int(number) + 1)
    return used


def stateful_alus_per_stage(bfa: str) -> dict[int, int]:
    """Stateful ALUs (one per Register) in each ingress stage of the assembly."""
    per_stage: dict[int, int] = {}
    stage = None
    for line in bfa.splitlines():
        header = re.match(r"stage (\d+) (ingress|egress):", line)
        if header:
            stage = int(header.group(1)) if header.group(2) == "ingress" else None
        elif stage is not None and line.startswith("  stateful "):
            per_stage[stage] = per_stage.get(stage, 0) + 1
    return per_stage


def phv_containers(bfa: str) -> dict[str, int]:
    """Distinct PHV containers the assembly names, by kind (W/H/B 32/16/8-bit, T* tagalong)."""
    names = set(re.findall(r"\b((?:T?)[WHB])(\d+)\b", bfa))
    kinds: dict[str, int] = {}
    for kind, _ in names:
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def resources(out: Path) -> dict[str, list[int]]:
    """Per ingress stage, from the compiler's pipe/logs/resources.json (written with -g):
    SRAM and TCAM blocks, map RAMs, stateful (meter) ALUs, logical tables, gateways,
    hash distribution units. The README's resource table is this, summed."""
    stages = json.loads((out / "pipe" / "logs" / "resources.json").read_text())["resources"]["mau"]
    kinds = {
        "sram": ("rams", "srams"),
        "tcam": ("tcams", "tcams"),
        "map_ram": ("map_rams", "maprams"),
        "stateful_alu": ("meter_alus", "meters"),
        "logical_table": ("logical_tables", "ids"),
        "gateway": ("gateways", "gateways"),
        "hash_dist": ("hash_distribution_units", "units"),
    }
    table: dict[str, list[int]] = {kind: [] for kind in kinds}
    for stage in sorted(stages["mau_stages"], key=lambda s: s["stage_number"]):
        for kind, (group, items) in kinds.items():
            table[kind].append(len(stage[group].get(items, [])))
    return table


def test_assembly_readers() -> None:
    bfa = (
        "phv ingress:\n  a: W1\n  b: { stage 0: H3(0..8) }\n  c: TW0\n"
        "stage 0 ingress:\n  stateful r1:\n  stateful r2:\nstage 0 egress:\n"
        "stage 1 ingress:\n  stateful r3:\n  x: W1\nstage 3 egress:\n"
    )
    assert stages_used(bfa) == {"ingress": 2, "egress": 4}
    assert stateful_alus_per_stage(bfa) == {0: 2, 1: 1}
    assert phv_containers(bfa) == {"W": 1, "H": 1, "TW": 1}


def test_p4c_barefoot_compiles_the_tna_program(tofino_build: Build) -> None:
    out, result = tofino_build
    assert result.returncode == 0, result.stderr[-4000:]
    # p4c's closing line, e.g. "0 errors, 2 warnings generated." (10 errors must not match).
    assert re.search(r"\b0 errors\b", result.stderr), result.stderr[-4000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["compilation_succeeded"] is True
    assert manifest["target"] == "tofino"


def test_tna_program_fits_tofino1_stages(tofino_build: Build) -> None:
    """Tofino 1 has 12 MAU stages per gress and 4 stateful ALUs per stage; this build of
    the compiler reports success for a placement that needs more, so the assembly is read."""
    out, _ = tofino_build
    bfa = next((out / "pipe").glob("*.bfa")).read_text()
    used = stages_used(bfa)
    assert 0 < used["ingress"] <= TOFINO1_STAGES, used
    assert used.get("egress", 0) <= TOFINO1_STAGES, used
    per_stage = stateful_alus_per_stage(bfa)
    assert sum(per_stage.values()) == TNA_STATEFUL_ALUS, per_stage
    assert max(per_stage.values()) <= TOFINO1_SALUS_PER_STAGE, per_stage
    # The compiler's own resource log agrees with the assembly, stage by stage.
    assert resources(out)["stateful_alu"] == [per_stage.get(i, 0) for i in range(used["ingress"])]


def _p4test() -> subprocess.CompletedProcess:
    if shutil.which("p4test") is None:
        pytest.skip("p4test not on PATH (scripts/setup.sh unpacks ../shared/p4tools/p4tools-bundle)")
    return subprocess.run(
        ["p4test", "--std", "p4-16", "-D__TARGET_TOFINO__=1", str(TNA_MAIN)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_p4test_passes_the_tna_program_without_warnings() -> None:
    result = _p4test()
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr.lower(), result.stderr


# -- behaviour: the interpreter against the reference queue -----------------------------------

TNA_CONFIGS = {
    "olaf_cap4": {"capacity": 4, "mode": "olaf", "threshold": 65536},
    "fifo_cap3": {"capacity": 3, "mode": "fifo", "threshold": 65536},
    "olaf_cap16_default_threshold": {"capacity": 16, "mode": "olaf", "threshold": 2**31 - 1},
    # DESIGN.md section 3 step 4: 3 clusters x 3 blocks, so a quota below 3 binds.
    "olaf_cap4_quota2": {"capacity": 4, "mode": "olaf", "threshold": 65536, "cluster_quota": 2},
    "fifo_cap4_quota1": {"capacity": 4, "mode": "fifo", "threshold": 65536, "cluster_quota": 1},
}


def _tna_config(name: str) -> dict:
    base = {"max_clusters": 16, "max_blocks": 1024, "frac_bits": 16, "congestion_threshold": 192}
    return {**base, **TNA_CONFIGS[name]}


@pytest.mark.parametrize("feedback", [2, 3])
@pytest.mark.parametrize("name", sorted(TNA_CONFIGS))
def test_tna_program_on_random_traffic(name: str, feedback: int) -> None:
    """The two passes (V = 32) answer as the reference queue does, every rule and every
    kind of invalid input included, with either feedback revision (DESIGN.md section 3,
    Feedback)."""
    seed = sorted(TNA_CONFIGS).index(name) + 1
    config = {**_tna_config(name), "feedback": feedback}
    vector = p4_replay.random_scenario(seed, p4_replay.TNA_VALUES, 200, config)
    got, expected, switch = p4_replay.replay_on_tna_p4sim(vector)
    for i, (g, e) in enumerate(zip(got, expected, strict=False)):
        assert g.hex() == e.hex(), f"{name}: reply {i} differs"
    assert len(got) == len(expected)
    assert switch.resubmits > 0 and switch.registers["OlafIngress.reg_lock"] == [0]
    if "cluster_quota" in TNA_CONFIGS[name] and feedback == 2:
        # The traffic reaches the quota: DROPPED_FULL with room in the queue (util < 255).
        assert any(o is not None and o[0] & 0xF == 2 and o[10] == 4 and o[12] < 255 for _, o in vector.steps)
    other = p4_replay.reanswered(vector, {**config, "feedback": 5 - feedback})
    # Revision 3 is revision 2 only for a FIFO without a quota (its room is the free slots).
    differs = [o for _, o in other.steps] != [o for _, o in vector.steps]
    assert differs == (name != "fifo_cap3"), name


# set_config's parameters in order (control_plane.p4info.CONFIG_PARAMS, p4/tna/config.p4).
SET_CONFIG_PARAMS = ("mode", "threshold", "congestion_threshold", "frac_bits", "capacity",
                     "max_clusters", "max_blocks", "cluster_quota", "feedback")


def _set_config(switch: p4sim.Switch, config: dict) -> None:
    """Rewrite olaf_config's default action at run time, as the controller does."""
    defines = dict(d[2:].split("=", 1) for d in p4_replay.config_defines(config, p4_replay.TNA_VALUES))
    args = [int(defines[f"OLAF_DEFAULT_{name.upper()}"]) for name in SET_CONFIG_PARAMS]
    switch.set_default("OlafIngress.olaf_config", "set_config", args)


@pytest.mark.parametrize("mode", ["olaf", "fifo"])
def test_tna_feedback_follows_settings_changed_at_run_time(mode: str) -> None:
    """A quota lowered below what a cluster holds (DESIGN.md section 3: no new room; in
    OLAF mode its own slots remain), then the feedback revision switched, both between
    packets: every answer is the reference queue's under the same changes."""
    from worker_transport.codec import decode, encode

    values = p4_replay.TNA_VALUES
    config = {**_tna_config("olaf_cap4"), "mode": mode, "feedback": 3}
    fill = [p4_replay.olaf_message(values, msg_type=1, cluster_id=0, block_id=b) for b in range(3)]
    merge = p4_replay.olaf_message(values, msg_type=1, cluster_id=0, block_id=0, worker_id=1)
    traffic = [p for p, _ in p4_replay.random_scenario(21, values, 160, config).steps]
    phases = [({}, fill), ({"cluster_quota": 1}, [merge, *traffic[:80]]), ({"feedback": 2}, traffic[80:])]
    switch = p4sim.Switch(TNA_MAIN)
    p4_replay.fill_util_lookups(switch, config["capacity"])
    queue = p4_replay.reference_queue_for(config, values)
    step = 0
    first_acks = []
    for change, payloads in phases:
        config = {**config, **change}
        _set_config(switch, config)
        queue.cluster_quota = config["cluster_quota"] if "cluster_quota" in config else config["capacity"]
        queue.feedback = config["feedback"]
        for payload in payloads:
            responses, _, _ = queue.process(decode([payload], values))
            want = [p4_replay.reply_frame(r, step) for r in encode(responses)]
            got = [f[: 14 + int.from_bytes(f[16:18], "big")]
                   for port, f in switch.process(p4_replay.request_frame(payload, step)) if port == 0]
            assert got == want, f"step {step}"
            if payload is merge:
                first_acks = got
            step += 1
    # The merge after the quota fell to 1 while cluster 0 held 3 of 4 slots: in OLAF mode
    # its room is its own 3 slots (util floor(255 / 4)), in FIFO mode none (255).
    (ack,) = first_acks
    assert p4_replay.udp_payload(ack)[12] == (63 if mode == "olaf" else 255)


@pytest.mark.parametrize("feedback", [2, 3])
@pytest.mark.parametrize("quota", [0, 5, 32767, 32768, 65535])
def test_tna_out_of_range_quota_is_no_limit(quota: int, feedback: int) -> None:
    """A quota the controller refuses (0, above capacity) but a table write puts there
    anyway does not stop the queue: the TNA program takes it as no limit, as v1model does,
    in its decisions and in revision 3's room."""
    config = {**_tna_config("olaf_cap4"), "feedback": feedback}
    vector = p4_replay.random_scenario(11, p4_replay.TNA_VALUES, 120, config)
    got, expected, _ = p4_replay.replay_on_tna_p4sim(vector, {**config, "cluster_quota": quota})
    assert got == expected
    # The same traffic with a real quota differs: the scenario is one the quota changes.
    limited, _, _ = p4_replay.replay_on_tna_p4sim(vector, {**config, "cluster_quota": 1})
    assert limited != expected


def test_tna_lock_serializes_packets_in_flight() -> None:
    """With several packets in flight, those that find the queue locked recirculate, and
    the answers still come out in arrival order with the reference contents."""
    from worker_transport.codec import classify, decode, encode

    config = _tna_config("olaf_cap4")
    values = p4_replay.TNA_VALUES
    payloads = [p for p, _ in p4_replay.random_scenario(7, values, 150, config).steps]
    batch = decode(payloads, values)
    verdicts = classify(batch, values=values, frac_bits=16, max_clusters=16, max_blocks=1024)
    queue_ops = [
        p
        for p, v, t in zip(payloads, verdicts.tolist(), batch.headers["msg_type"].tolist(), strict=True)
        if v == 0 and t in (1, 3)
    ]
    responses, _, _ = p4_replay.reference_queue_for(config, values).process(decode(queue_ops, values))
    expected = encode(responses)
    switch = p4sim.Switch(
        TNA_MAIN, dict(d[2:].split("=", 1) for d in p4_replay.config_defines(config, values))
    )
    p4_replay.fill_util_lookups(switch, config["capacity"])
    frames = [(p4_replay.request_frame(p, i), 0) for i, p in enumerate(queue_ops)]
    out = switch.process_tna_interleaved(frames, window=6)
    assert switch.recirculations > 0
    assert [n for n, _ in out] == list(range(len(queue_ops)))
    for n, (port, frame) in out:
        assert port == 0 and frame == p4_replay.reply_frame(expected[n], n), f"answer to packet {n}"


def test_tna_forwarding_and_loss() -> None:
    """MODEL and other IPv4 traffic follow ipv4_lpm (TTL - 1, MAC rewrite, checksum);
    non-IPv4 is dropped; drop_sim drops by its per-port probability."""
    switch = p4sim.Switch(TNA_MAIN)
    next_hop = bytes.fromhex("00000a000101")
    switch.add_entry("OlafIngress.ipv4_lpm", ((0x0A000000, 8),), "ipv4_forward", [int(next_hop.hex(), 16), 1])
    model = p4_replay.olaf_message(64, msg_type=6, seq=9, data=list(range(64)))
    routed = {
        "eth_src": p4_replay.SWITCH_MAC,
        "eth_dst": next_hop,
        "ip_src": p4_replay.HOST_IP,
        "ip_dst": p4_replay.PS_IP,
        "sport": p4_replay.HOST_PORT,
        "ident": 5,
        "ttl": p4_replay.TTL - 1,
    }
    assert switch.process(p4_replay.request_frame(model, 5)) == [
        (1, p4_replay.frame(model, dport=p4_replay.OLAF_PORT, **routed))
    ]
    plain = p4_replay.frame(
        b"hello",
        eth_src=p4_replay.HOST_MAC,
        eth_dst=p4_replay.SWITCH_MAC,
        ip_src=p4_replay.HOST_IP,
        ip_dst=p4_replay.PS_IP,
        sport=p4_replay.HOST_PORT,
        dport=53,
        ident=5,
    )
    assert switch.process(plain) == [(1, p4_replay.frame(b"hello", dport=53, **routed))]
    not_ipv4 = plain[:12] + b"\x86\xdd" + plain[14:]
    assert switch.process(not_ipv4) == []
    assert switch.counters["OlafIngress.msg_type_counter"][6] == 1
    assert sum(switch.counters["OlafIngress.outcome_counter"]) == 0

    switch.add_entry("OlafEgress.drop_sim", (1,), "set_drop_prob", [65535])
    assert sum(len(switch.process(plain)) for _ in range(50)) <= 1
    lossless = p4sim.Switch(TNA_MAIN)
    lossless.add_entry("OlafIngress.ipv4_lpm", ((0x0A000000, 8),), "ipv4_forward", [1, 1])
    lossless.add_entry("OlafEgress.drop_sim", (1,), "set_drop_prob", [0])
    assert sum(len(lossless.process(plain)) for _ in range(20)) == 20


# A TNA program wrong in one place of revision 3's feedback, and the random-traffic config
# (with feedback 3) on which the interpreter's answers must then differ from the reference's.
TNA_FEEDBACK_MUTANTS = {
    # A FIFO's room counted with the slots the cluster holds (OLAF's rule).
    "fifo_room_counts_held": ("default_action = used_fifo();", "default_action = used_unquota();",
                              "fifo_cap4_quota1"),
    # A DROPPED_INVALID ACK answered with a cluster's room (that of a cluster holding none
    # is the global one without a quota, so the quota config tells them apart).
    "invalid_per_cluster": ("            (_, OP_INVALID, _, _, _, _): used_occupied();\n", "",
                            "fifo_cap4_quota1"),
    # CONGESTED from the cluster's share instead of the global occupancy.
    "congested_per_cluster": ("md.cong_diff = md.util - md.cfg_congestion_threshold;",
                              "md.cong_diff = md.share - md.cfg_congestion_threshold;", "olaf_cap4"),
}


@pytest.mark.parametrize("name", sorted(TNA_FEEDBACK_MUTANTS))
def test_tna_random_traffic_catches_a_wrong_feedback_rule(name: str, tmp_path: Path) -> None:
    original, mutated, config_name = TNA_FEEDBACK_MUTANTS[name]
    root = tmp_path / "p4"
    shutil.copytree(p4_replay.REPO / "p4", root, ignore=shutil.ignore_patterns("build"))
    path = root / "tna" / "feedback.p4"
    text = path.read_text()
    assert text.count(original) == 1, original
    path.write_text(text.replace(original, mutated))
    seed = sorted(TNA_CONFIGS).index(config_name) + 1
    config = {**_tna_config(config_name), "feedback": 3}
    vector = p4_replay.random_scenario(seed, p4_replay.TNA_VALUES, 200, config)
    got, expected, _ = p4_replay.replay_on_tna_p4sim(vector, main=root / "tna" / "olaf_tna.p4")
    assert got != expected


# Each mutation breaks one rule that the TNA declarations or Tofino's compiler enforce; the
# interpreter must refuse the mutant. The originals are lines the program uses, so the
# rules are live checks.
TNA_RULES = {
    # RegisterAction<T, I, U>.execute(in I index), I = bit<16> for the slot registers.
    "register_index_type": (
        "md.slot_agg = agg_read.execute(md.entry);",
        "md.slot_agg = agg_read.execute(md.slot_key);",
        "implicit conversion",
    ),
    # bf-p4c: "The index is too complex for the primitive to be handled".
    "register_index_computed": (
        "md.slot_agg = agg_read.execute(md.entry);",
        "md.slot_agg = agg_read.execute(md.entry - 1);",
        "too complex",
    ),
    # One stateful ALU per Register, reached once per packet per pass.
    "register_twice_per_pass": (
        "        lock_release.execute(0);\n",
        "        lock_release.execute(0);\n        lock_release.execute(0);\n",
        "accessed twice in one pass",
    ),
    # Counter<W, I>.count(in I index), I = bit<8>.
    "counter_index_type": (
        "outcome_counter.count(md.resub.outcome);",
        "outcome_counter.count((bit<16>)md.resub.outcome);",
        "implicit conversion",
    ),
}


def _update_then_pull(main: Path) -> None:
    switch = p4sim.Switch(main)
    p4_replay.fill_util_lookups(switch, 64)
    values = p4_replay.TNA_VALUES
    update = p4_replay.olaf_message(values, data=list(range(values)), msg_type=1, worker_id=1)
    pull = p4_replay.olaf_message(0, msg_type=3)
    frames = [p4_replay.request_frame(p, i) for i, p in enumerate((update, pull))]
    answers = [switch.process(f, ingress_port=0) for f in frames]
    assert [len(a) for a in answers] == [1, 1]


def test_unmutated_tna_program_runs_the_mutation_driver() -> None:
    _update_then_pull(TNA_MAIN)


@pytest.mark.parametrize("rule", sorted(TNA_RULES))
def test_interpreter_refuses_what_tofino_refuses(rule: str, tmp_path: Path) -> None:
    original, mutated, message = TNA_RULES[rule]
    root = tmp_path / "p4"
    shutil.copytree(p4_replay.REPO / "p4", root, ignore=shutil.ignore_patterns("build"))
    # The ingress is cut into fragments (p4/tna/*.p4): the original is in exactly one of them.
    (path,) = [f for f in (root / "tna").glob("*.p4") if original in f.read_text()]
    text = path.read_text()
    assert text.count(original) == 1, original
    path.write_text(text.replace(original, mutated))
    with pytest.raises(p4sim.P4SimError, match=message):
        _update_then_pull(root / "tna" / "olaf_tna.p4")
