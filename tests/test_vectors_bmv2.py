"""p4/olaf.p4 on simple_switch: every vector file, byte for byte and state for state.

When p4c-bm2-ss, simple_switch and simple_switch_CLI are on PATH (tests/conftest.py
puts the bundle unpacked by scripts/setup.sh there), the program is compiled with
warnings as errors, once per distinct vector config (the config baked into
olaf_config's default action with -D), and every file in tests/vectors/ is replayed
through simple_switch in pcap-file mode: the frames out of port 0 must equal the
expected reply frames exactly, and at the end every register and counter, read over
Thrift, must equal the reference queue's state after the same inputs. Without the
tools these tests skip with the reason. The framing, pcap and driver helpers they rely
on are tested here unconditionally. The TNA program's checks are in tests/test_tna.py.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from bmv2_topologies.simple_switch import compile_p4, missing_tools
from tests import p4_replay
from worker_transport.protocol import MAX_VALUES_P4, OLAF_PORT, Olaf

MISSING = missing_tools()
VECTOR_FILES = p4_replay.vector_files()


def _update_payload() -> bytes:
    return bytes(Olaf(msg_type=1, cluster_id=2, worker_id=3, block_id=4, values=list(range(-32, 32))))


# -- helpers, always --------------------------------------------------------------------


def test_request_and_reply_frames_are_valid_ipv4_udp() -> None:
    payload = _update_payload()
    request = Ether(p4_replay.request_frame(payload, 7))
    assert request[UDP].dport == OLAF_PORT and request[UDP].len == 8 + len(payload)
    assert bytes(request[UDP].payload) == payload
    reply_payload = payload[:36]
    reply_bytes = p4_replay.reply_frame(reply_payload, 7)
    reply = Ether(reply_bytes)
    assert (reply.src, reply.dst) == (request.dst, request.src)
    assert (reply[IP].src, reply[IP].dst) == (request[IP].dst, request[IP].src)
    assert (reply[UDP].sport, reply[UDP].dport) == (request[UDP].dport, request[UDP].sport)
    assert reply[IP].id == request[IP].id and reply[IP].ttl == request[IP].ttl
    assert reply[UDP].chksum == 0 and reply[IP].len == 20 + 8 + 36
    # scapy recomputes the checksum when it is deleted: it must come out the same.
    rebuilt = reply[IP].copy()
    del rebuilt.chksum
    assert IP(bytes(rebuilt)).chksum == reply[IP].chksum
    assert p4_replay.udp_payload(reply_bytes) == reply_payload


def test_pcap_round_trip(tmp_path: Path) -> None:
    frames = [p4_replay.request_frame(_update_payload(), i) for i in range(3)] + [b"\x00" * 60]
    p4_replay.write_pcap(tmp_path / "x.pcap", frames)
    assert p4_replay.read_pcap(tmp_path / "x.pcap") == frames
    # A record still being written is not returned half-read.
    data = (tmp_path / "x.pcap").read_bytes()
    (tmp_path / "y.pcap").write_bytes(data[:-10])
    assert p4_replay.read_pcap(tmp_path / "y.pcap") == frames[:-1]
    assert p4_replay.read_pcap(tmp_path / "missing.pcap") == []


FAKE_SWITCH = """#!{python}
# Stands in for simple_switch in pcap-file mode: says its Thrift server is up, echoes
# port 0's input to its output, then runs until it is killed, as the real one does.
import sys, time
sys.path.insert(0, {repo!r})
from tests import p4_replay
from pathlib import Path
print(p4_replay.THRIFT_UP, flush=True)
frames = p4_replay.read_pcap(Path("port0_in.pcap"))
p4_replay.write_pcap(Path("port0_out.pcap"), frames)
p4_replay.write_pcap(Path("port1_out.pcap"), [])
while True:
    time.sleep(1)
"""


def test_simple_switch_driver_with_a_stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pcap-mode driver: input file, working directory, output read back, stop by PID."""
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "simple_switch"
    fake.write_text(FAKE_SWITCH.format(python=sys.executable, repo=str(p4_replay.REPO)))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    frames = [p4_replay.request_frame(_update_payload(), i) for i in range(3)]
    run = p4_replay.run_simple_switch(tmp_path / "olaf.json", tmp_path / "run", frames, 3, timeout=30)
    assert run.port0 == frames and run.port1 == [] and run.state is None


def test_config_defines_follow_the_vector_config() -> None:
    config = {
        "capacity": 4,
        "values": 64,
        "max_clusters": 16,
        "max_blocks": 1024,
        "frac_bits": 16,
        "mode": "fifo",
        "threshold": 65536,
        "congestion_threshold": 192,
    }
    defines = p4_replay.config_defines(config)
    assert "-DOLAF_DEFAULT_MODE=1" in defines and "-DOLAF_DEFAULT_CAPACITY=4" in defines
    assert "-DOLAF_DEFAULT_THRESHOLD=65536" in defines
    assert "-DOLAF_DEFAULT_CLUSTER_QUOTA=4" in defines  # none in the file: capacity, no limit
    assert "-DOLAF_DEFAULT_CLUSTER_QUOTA=2" in p4_replay.config_defines({**config, "cluster_quota": 2})
    assert "-DOLAF_DEFAULT_FEEDBACK=2" in defines  # none in the file: revision 2, the global occupancy
    assert "-DOLAF_DEFAULT_FEEDBACK=3" in p4_replay.config_defines({**config, "feedback": 3})
    with pytest.raises(ValueError, match="V = 64"):
        p4_replay.config_defines({**config, "values": 32})


def test_vector_files_frame_every_step() -> None:
    """Every vector step frames and every valid MODEL expects no answer (it is forwarded)."""
    if not VECTOR_FILES:
        pytest.skip("no files in tests/vectors/ yet")
    for path in VECTOR_FILES:
        vector = p4_replay.load_vector(path)
        assert vector.config.get("values", 64) == 64, path.name
        p4_replay.config_defines(vector.config)
        for i, (payload, out) in enumerate(vector.steps):
            assert p4_replay.udp_payload(p4_replay.request_frame(payload, i)) == payload
            if p4_replay.is_valid_model(payload):
                assert out is None, f"{path.name} step {i}: a MODEL is forwarded, not answered"
        assert len(p4_replay.expected_frames(vector)) == sum(o is not None for _, o in vector.steps)


def _state_as_registers(queue: object) -> p4_replay.SwitchState:
    """What simple_switch would hold for the reference queue's state (bmv2 cells as the
    unsigned numbers of their bits), built from the queue itself."""
    from dataplane.queue import SLOT_FIELDS

    cfg = queue.config
    regs: dict[str, list[int]] = {
        "OlafIngress.reg_occupied": [queue.occupied],
        "OlafIngress.reg_read_ptr": [queue.read_ptr],
        "OlafIngress.reg_write_ptr": [queue.write_ptr],
        "OlafIngress.reg_active_clusters": [queue.active_clusters],
        "OlafIngress.reg_cluster_count": queue.cluster_count + [0] * (16 - cfg.max_clusters),
        "OlafIngress.reg_index": [0] * 16384,
        "OlafIngress.reg_values": [int(v) & 0xFFFFFFFF for v in queue.values.reshape(-1)],
    }
    for key, slot in enumerate(queue.index):
        if slot >= 0:
            cluster, block = divmod(key, cfg.max_blocks)
            regs["OlafIngress.reg_index"][(cluster << 10) | block] = slot + 1
    for name in SLOT_FIELDS:
        regs[f"OlafIngress.reg_slot_{name}"] = [v & 0xFFFFFFFF for v in queue.slots[name]]
    counters = {
        "OlafIngress.outcome_counter": queue.counters.outcomes + [0] * (8 - len(queue.counters.outcomes)),
        "OlafIngress.msg_type_counter": list(queue.counters.msg_types),
    }
    return p4_replay.SwitchState(regs, counters)


def test_state_comparison_sees_each_kind_of_difference() -> None:
    """The register/counter comparison passes on the reference's own state and names a
    difference in a value, a slot field, the index, a pointer or a counter."""
    path = p4_replay.VECTORS_DIR / "50_random_long.json"  # the one file that ends non-empty
    if not path.exists():
        pytest.skip("50_random_long.json not generated yet")
    from worker_transport.codec import decode

    vector = p4_replay.load_vector(path)
    queue = p4_replay.reference_queue_for(vector.config, 64)
    queue.process(decode([p for p, _ in vector.steps], 64))
    assert queue.occupied > 0 and (queue.values[queue.read_ptr] < 0).any()  # held as unsigned by bmv2
    assert p4_replay.state_differences(_state_as_registers(queue), queue) == []
    slot = queue.read_ptr
    edits = {
        f"slot {slot} values": ("OlafIngress.reg_values", slot * 64 + 5),
        f"slot {slot} reward": ("OlafIngress.reg_slot_reward", slot),
        "index": ("OlafIngress.reg_index", 16383),
        "write_ptr": ("OlafIngress.reg_write_ptr", 0),
    }
    for what, (name, cell) in edits.items():
        state = _state_as_registers(queue)
        state.registers[name][cell] += 1
        assert [d.split(":")[0] for d in p4_replay.state_differences(state, queue)] == [what]
    state = _state_as_registers(queue)
    state.counters["OlafIngress.outcome_counter"][7] = 1
    assert [d.split(":")[0] for d in p4_replay.state_differences(state, queue)] == [
        "outcome_counter beyond the outcomes"
    ]


def _vector_named(name: str) -> p4_replay.Vector:
    """A shared vector file by name, wherever generate.all_vector_files() keeps it."""
    paths = [p for p in VECTOR_FILES if p.name == name]
    if not paths:
        pytest.skip(f"{name} not generated yet")
    return p4_replay.load_vector(paths[0])


def _revision3(name: str) -> p4_replay.Vector:
    """A file that pins revision 2 (no feedback key), re-answered by the reference with
    revision 3; the re-answer must differ somewhere, or the file would prove nothing."""
    vector = _vector_named(name)
    assert "feedback" not in vector.config, name
    again = p4_replay.reanswered(vector, {**vector.config, "feedback": 3})
    assert [o for _, o in again.steps] != [o for _, o in vector.steps], name
    return again


# -- bmv2, when the tools are installed ----------------------------------------------------


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("olaf_bmv2")


@pytest.mark.skipif(MISSING is not None, reason=f"bmv2 replay skipped: {MISSING}")
@pytest.mark.parametrize("path", VECTOR_FILES or [None], ids=lambda p: p.stem if p else "none")
def test_vectors_on_simple_switch(path: Path | None, build_dir: Path) -> None:
    """Every reply frame byte for byte, nothing forwarded, and the final registers and
    counters equal to the reference queue's (SHORT datagrams included: 19_invalid_silent
    gets no answers, so only outcome_counter[DROPPED_INVALID] shows they were seen)."""
    if path is None:
        pytest.skip("no files in tests/vectors/ yet")
    replay = p4_replay.replay_on_bmv2(p4_replay.load_vector(path), build_dir)
    for i, (g, e) in enumerate(zip(replay.got, replay.expected, strict=False)):
        assert g.hex() == e.hex(), f"{path.name}: reply {i} differs"
    assert len(replay.got) == len(replay.expected), f"{path.name}: {len(replay.got)} replies"
    assert replay.port1 == []
    assert p4_replay.state_differences(replay.state, replay.reference) == []


@pytest.mark.skipif(MISSING is not None, reason=f"bmv2 replay skipped: {MISSING}")
def test_configured_program_equals_compiling_the_config(build_dir: Path, tmp_path: Path) -> None:
    """Setting a vector's config in the compiled JSON gives exactly what p4c writes when
    the config is compiled in with -D, so the replay compiles once, not once per config."""
    import json

    vector = p4_replay.load_vector(VECTOR_FILES[0])
    config = {**vector.config, "mode": "fifo", "capacity": 3, "threshold": 65536, "congestion_threshold": 7}
    compiled = p4_replay.compiled_program(build_dir)
    configured = p4_replay.configured_program(compiled, config, tmp_path / "configured.json")
    with_defines = compile_p4(tmp_path / "defines", p4_replay.config_defines(config))
    assert json.loads(configured.read_text()) == json.loads(with_defines.read_text())
    assert json.loads(configured.read_text()) != json.loads(compiled.read_text())


@pytest.mark.skipif(MISSING is not None, reason=f"bmv2 replay skipped: {MISSING}")
def test_unknown_mode_queues_as_fifo_on_simple_switch(build_dir: Path) -> None:
    """olaf_config accepts any bit<8> mode; one that is neither OLAF nor FIFO behaves as
    FIFO (the reference refuses such a mode, so there is no third behaviour to match)."""
    path = p4_replay.VECTORS_DIR / "13_fifo_mode.json"
    if not path.exists():
        pytest.skip("13_fifo_mode.json not generated yet")
    vector = p4_replay.load_vector(path)
    assert vector.config["mode"] == "fifo"
    replay = p4_replay.replay_on_bmv2(vector, build_dir, program_config={**vector.config, "mode": 7})
    assert replay.got == replay.expected
    assert p4_replay.state_differences(replay.state, replay.reference) == []
    # The file tells the modes apart: run as OLAF, it fails.
    olaf = p4_replay.replay_on_bmv2(vector, build_dir, program_config={**vector.config, "mode": "olaf"})
    assert olaf.got != olaf.expected


@pytest.mark.skipif(MISSING is not None, reason=f"bmv2 replay skipped: {MISSING}")
@pytest.mark.parametrize("quota", [0, 5, 65535])
def test_out_of_range_quota_written_around_the_controller_is_no_limit(quota: int, build_dir: Path) -> None:
    """The controller refuses a cluster_quota of 0 or above capacity; a table write that
    bypasses it (simple_switch_CLI, here the compiled default) must not stop the queue:
    olaf_config's quota 0 or > capacity acts as capacity, so 17_congestion_flag (one
    cluster filling all 4 slots) replays exactly as with no quota, registers and
    counters included."""
    path = p4_replay.VECTORS_DIR / "17_congestion_flag.json"
    vector = p4_replay.load_vector(path)
    assert "cluster_quota" not in vector.config and vector.config["capacity"] == 4
    config = {**vector.config, "cluster_quota": quota}
    replay = p4_replay.replay_on_bmv2(vector, build_dir, program_config=config)
    assert replay.got == replay.expected
    assert p4_replay.state_differences(replay.state, replay.reference) == []


@pytest.mark.skipif(MISSING is not None, reason=f"bmv2 replay skipped: {MISSING}")
def test_quota_file_fails_without_its_quota_on_simple_switch(build_dir: Path) -> None:
    """24_cluster_quota_reached tells a quota from none: replayed with the quota at capacity, it fails."""
    vector = _vector_named("24_cluster_quota_reached.json")
    assert vector.config["cluster_quota"] == 2
    config = {**vector.config, "cluster_quota": 4}
    unlimited = p4_replay.replay_on_bmv2(vector, build_dir, program_config=config)
    assert unlimited.got != unlimited.expected


# One cluster filling its queue (CONGESTED on, its own room full), a DROPPED_INVALID ACK
# (global), a FIFO with a quota (room without the held slots), random traffic with a quota.
REVISION3_FILES = ["17_congestion_flag.json", "18_invalid_answered.json",
                   "26_cluster_quota_fifo.json", "51_random_quota.json"]


@pytest.mark.skipif(MISSING is not None, reason=f"bmv2 replay skipped: {MISSING}")
@pytest.mark.parametrize("name", REVISION3_FILES)
def test_revision3_feedback_on_traffic_of_revision2_files(name: str, build_dir: Path) -> None:
    """The setting, not the file, decides the feedback: a revision-2 file's traffic with
    olaf_config's feedback 3 gets the reference's revision-3 answers byte for byte."""
    replay = p4_replay.replay_on_bmv2(_revision3(name), build_dir)
    assert replay.got == replay.expected
    assert p4_replay.state_differences(replay.state, replay.reference) == []


@pytest.mark.skipif(MISSING is not None, reason=f"bmv2 replay skipped: {MISSING}")
@pytest.mark.parametrize("feedback", [0, 2, 7])
def test_feedback_setting_tells_the_revisions_apart(feedback: int, build_dir: Path) -> None:
    """olaf_config accepts any bit<8> feedback; the reference refuses all but 2 and 3, so
    a write around the controller of another value acts as the default, revision 3.
    Revision-3 answers fail with feedback 2, and a revision-2 file fails with 3."""
    vector = _revision3("17_congestion_flag.json")
    config = {**vector.config, "feedback": feedback}
    replay = p4_replay.replay_on_bmv2(vector, build_dir, program_config=config)
    assert (replay.got == replay.expected) == (feedback != 2)
    if feedback == 2:
        original = _vector_named("17_congestion_flag.json")
        config = {**original.config, "feedback": 3}
        revision3 = p4_replay.replay_on_bmv2(original, build_dir, program_config=config)
        assert revision3.got != revision3.expected


@pytest.mark.skipif(MISSING is not None, reason=f"bmv2 replay skipped: {MISSING}")
def test_forwarding_and_loss_on_simple_switch(build_dir: Path, tmp_path: Path) -> None:
    """With routes and drop_sim entries written through simple_switch_CLI: MODEL and other
    IPv4 traffic follow ipv4_lpm (TTL - 1, MAC rewrite, IPv4 checksum), non-IPv4 is
    dropped, drop_sim drops by its per-port probability; only the MODEL is counted."""
    hop1, hop2 = bytes.fromhex("00000a000101"), bytes.fromhex("00000a000102")
    me, host = {"eth_src": p4_replay.SWITCH_MAC}, {"eth_src": p4_replay.HOST_MAC}
    commands = [
        "table_add OlafIngress.ipv4_lpm OlafIngress.ipv4_forward 10.0.0.0/8 => 00:00:0a:00:01:01 1",
        "table_add OlafIngress.ipv4_lpm OlafIngress.ipv4_forward 10.1.0.0/16 => 00:00:0a:00:01:02 2",
        "table_add OlafEgress.drop_sim OlafEgress.set_drop_prob 1 => 0",
        "table_add OlafEgress.drop_sim OlafEgress.set_drop_prob 2 => 32768",
    ]
    model = p4_replay.olaf_message(64, msg_type=6, seq=9, data=list(range(64)))

    def plain(ident: int, dst: bytes = p4_replay.PS_IP, ether_type: bytes = b"\x08\x00") -> bytes:
        f = p4_replay.frame(b"hello", **host, eth_dst=p4_replay.SWITCH_MAC, ip_src=p4_replay.HOST_IP,
                            ip_dst=dst, sport=p4_replay.HOST_PORT, dport=53, ident=ident)
        return f[:12] + ether_type + f[14:]

    def routed(payload: bytes, ident: int, dport: int, hop: bytes, dst: bytes = p4_replay.PS_IP) -> bytes:
        return p4_replay.frame(payload, **me, eth_dst=hop, ip_src=p4_replay.HOST_IP, ip_dst=dst,
                               sport=p4_replay.HOST_PORT, dport=dport, ident=ident, ttl=p4_replay.TTL - 1)

    lossy_dst = bytes([10, 1, 0, 5])
    marker = p4_replay.olaf_message(64, msg_type=1, frac_bits=17)  # answered, state untouched
    inputs = [p4_replay.request_frame(model, 1), plain(2), plain(3, ether_type=b"\x86\xdd")]
    inputs = [plain(100 + i, lossy_dst) for i in range(40)] + inputs + [plain(40 + i) for i in range(10)]
    inputs.append(p4_replay.request_frame(marker, 99))
    lossless = [routed(model, 1, p4_replay.OLAF_PORT, hop1), routed(b"hello", 2, 53, hop1)]
    lossless += [routed(b"hello", 40 + i, 53, hop1) for i in range(10)]
    program = p4_replay.compiled_program(build_dir)
    run = p4_replay.run_simple_switch(program, tmp_path, inputs, 1, read_back=True, ports=3,
                                      expect_other={1: len(lossless)}, commands=commands)
    assert run.port1 == lossless
    # Port 2 drops each frame with probability 1/2: 5..35 of 40 pass (all but ~1e-7 of runs).
    lossy = [routed(b"hello", 100 + i, 53, hop2, lossy_dst) for i in range(40)]
    assert 5 <= len(run.outputs[2]) <= 35 and set(run.outputs[2]) <= set(lossy)
    assert [p4_replay.udp_payload(f)[:1] for f in run.port0] == [bytes([0x12])]  # the marker's ACK
    assert run.state is not None
    assert run.state.counters["OlafIngress.msg_type_counter"] == [0, 1, 0, 0, 0, 0, 1, 0]
    assert run.state.counters["OlafIngress.outcome_counter"] == [0, 0, 0, 0, 0, 1, 0, 0]


def _old_signed_value_register(root: Path) -> None:
    """reg_values as it was before it became bit<32>: register<int<32>>, written and added
    to without casts. On bmv2 a read hands over the cell's unsigned number (-1 arrives as
    4294967295), so the saturating add clamps negative sums to INT32_MAX."""
    include = root / "include"
    edits = {
        "queue_state.p4": [(r"register<bit<32>>\(OLAF_VALUE_SLOTS\) reg_values;",
                            "register<int<32>>(OLAF_VALUE_SLOTS) reg_values;")],
        "queue.p4": [(r"bit<32> current;", "int<32> current;"), (r"\n\s*bit<32> cell;", "")],
        "values_store.p4": [(r"\(bit<32>\)(hdr\.values\[\d+\]\.value)", r"\1")],
        "values_merge.p4": [(r"\(bit<32>\)\(\(\(int<32>\)current\) \|\+\| (hdr\.values\[\d+\]\.value)\)",
                             r"current |+| \1")],
        "values_load.p4": [
            (r"reg_values\.read\(cell, (base \+ \d+)\);\n\s*(hdr\.values\[\d+\]\.value) = \(int<32>\)cell;",
             r"reg_values.read(\2, \1);")
        ],
    }
    for name, pairs in edits.items():
        text = (include / name).read_text()
        for pattern, replacement in pairs:
            text, n = re.subn(pattern, replacement, text)
            assert n in (1, MAX_VALUES_P4), (name, pattern, n)
        (include / name).write_text(text)


def _edit(relative: str, old: str, new: str) -> Callable[[Path], None]:
    """A mutation that replaces ``old`` (which must occur once) in a copy of p4/."""

    def apply(root: Path) -> None:
        path = root / relative
        text = path.read_text()
        assert text.count(old) == 1, old
        path.write_text(text.replace(old, new))

    return apply


# A program that is wrong in one place, and the vector file that must catch it on bmv2
# (with "+rev3": the file's traffic re-answered with revision 3's feedback).
BMV2_MUTANTS = {
    # Merging at |diff| == threshold: DESIGN.md says strictly below.
    "merge_at_threshold": (
        _edit("include/queue.p4", "diff < (bit<32>)meta.cfg_", "diff <= (bit<32>)meta.cfg_"),
        "07_threshold_tie.json",
    ),
    "signed_value_register": (_old_signed_value_register, "09_merge_saturation.json"),
    # A signed compare on the raw reward read: bmv2 hands -1 over as 4294967295.
    "reward_compared_signed": (
        _edit(
            "include/queue.p4",
            "((bit<32>)hdr.olaf.reward ^ 32w0x80000000) > ((bit<32>)reward ^ 32w0x80000000)",
            "hdr.olaf.reward > reward",
        ),
        "22_default_threshold_merges.json",
    ),
    # The quota compared with <= instead of <: a cluster gets one slot more than its quota.
    "quota_off_by_one": (
        _edit("include/queue.p4", "cluster_slots >= meta.cfg_cluster_quota",
              "cluster_slots > meta.cfg_cluster_quota"),
        "24_cluster_quota_reached.json",
    ),
    # Revision 3: a FIFO's room counted with the slots the cluster holds (OLAF's rule).
    "fifo_room_counts_held": (
        _edit("include/queue.p4", "used = meta.cfg_capacity - new_room;",
              "used = meta.cfg_capacity - held - new_room;"),
        "26_cluster_quota_fifo.json+rev3",
    ),
    # Revision 3: the room without the quota.
    "room_ignores_quota": (
        _edit("include/queue.p4", "new_room = meta.cfg_cluster_quota - held;",
              "new_room = meta.cfg_capacity - held;"),
        "24_cluster_quota_reached.json+rev3",
    ),
    # Revision 3: CONGESTED from the cluster's share instead of the global occupancy.
    "congested_per_cluster": (
        _edit("include/feedback.p4", "if (global_util >= congestion_threshold)",
              "if (util >= congestion_threshold)"),
        "17_congestion_flag.json+rev3",
    ),
    # Revision 3: a DROPPED_INVALID ACK answered with its (maybe out-of-range) cluster's room.
    "invalid_per_cluster": (
        _edit("include/queue.p4", "hdr.olaf.msg_type == MSG_ACK && outcome != OUTCOME_DROPPED_INVALID",
              "hdr.olaf.msg_type == MSG_ACK"),
        "18_invalid_answered.json+rev3",
    ),
}


@pytest.mark.skipif(MISSING is not None, reason=f"bmv2 replay skipped: {MISSING}")
@pytest.mark.parametrize("name", sorted(BMV2_MUTANTS))
def test_simple_switch_replay_catches_a_wrong_program(name: str, tmp_path: Path) -> None:
    """The replay can fail: each mutant compiles cleanly and fails its vector file on
    simple_switch (reply frames or final state), where the committed program passes."""
    mutate, vector_name = BMV2_MUTANTS[name]
    file_name, rev3, _ = vector_name.partition("+rev3")
    vector = _revision3(file_name) if rev3 else _vector_named(file_name)
    root = tmp_path / "p4"
    shutil.copytree(p4_replay.REPO / "p4", root, ignore=shutil.ignore_patterns("build", "tools"))
    mutate(root)
    replay = p4_replay.replay_on_bmv2(vector, tmp_path / "build", root / "olaf.p4")
    differences = p4_replay.state_differences(replay.state, replay.reference)
    assert replay.got != replay.expected or differences
