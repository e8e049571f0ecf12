"""The bmv2 half of the vector replay: p4/olaf.p4 on simple_switch, byte for byte.

When p4c and simple_switch are on PATH, the program is compiled (once per distinct
vector config, the config baked into olaf_config's default action with -D) and every
file in tests/vectors/ is replayed through simple_switch in pcap-file mode; the frames
out of port 0 must equal the expected reply frames exactly. Without the tools these
tests skip with the reason. The framing and pcap helpers they rely on are tested here
unconditionally.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from tests import p4_replay
from worker_transport.protocol import OLAF_PORT, Olaf

MISSING = p4_replay.missing_tools()
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
# Stands in for simple_switch in pcap-file mode: echoes port 0's input to its output
# after the start-up wait, then runs until it is killed, as the real one does.
import sys, time
sys.path.insert(0, {repo!r})
from tests import p4_replay
from pathlib import Path
time.sleep(1)
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
    port0, port1 = p4_replay.run_simple_switch(
        tmp_path / "olaf.json", tmp_path / "run", frames, 3, timeout=30
    )
    assert port0 == frames and port1 == []


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


# -- the P4 source, interpreted (p4/tools/p4sim.py), always ----------------------------------


@pytest.mark.parametrize("path", VECTOR_FILES or [None], ids=lambda p: p.stem if p else "none")
def test_vectors_on_p4_source(path: Path | None) -> None:
    """p4/olaf.p4's own logic, run by the interpreter, reproduces every vector."""
    if path is None:
        pytest.skip("no files in tests/vectors/ yet")
    vector = p4_replay.load_vector(path)
    got, expected, switch = p4_replay.replay_on_p4sim(vector)
    for i, (g, e) in enumerate(zip(got, expected, strict=False)):
        assert g.hex() == e.hex(), f"{path.name}: reply {i} differs"
    assert len(got) == len(expected)
    # Registers and counters end where the reference queue's state and counters end.
    assert p4_replay.state_differences(switch, p4_replay.reference_queue(vector)) == []


def test_interpreter_catches_a_wrong_rule(tmp_path: Path) -> None:
    """A program that merges at |diff| == threshold fails the threshold-tie vector."""
    tie = p4_replay.VECTORS_DIR / "07_threshold_tie.json"
    if not tie.exists():
        pytest.skip("07_threshold_tie.json not generated yet")
    mutant = tmp_path / "p4"
    shutil.copytree(p4_replay.REPO / "p4", mutant)
    queue = mutant / "include" / "queue.p4"
    text = queue.read_text()
    assert text.count("diff < (bit<32>)meta.cfg_threshold") == 1
    rule = "diff < (bit<32>)meta.cfg_threshold"
    queue.write_text(text.replace(rule, rule.replace("<", "<=", 1)))
    got, expected, _ = p4_replay.replay_on_p4sim(p4_replay.load_vector(tie), mutant / "olaf.p4")
    assert got != expected


def test_value_register_is_unsigned_and_re_signed_once(tmp_path: Path) -> None:
    """bmv2 keeps register cells as unsigned numbers (behavioral-model Register::export_bytes
    masks) and register_read hands that number to the destination, so a register<int<32>>
    read gives -1 as 4294967295 and |+| (sat_cast on the numbers) saturates it to INT32_MAX.
    The interpreter models this: the old program (an int<32> register added to directly)
    fails the saturation vector, the committed one (a bit<32> register and one (int<32>)
    cast) passes it, and dropping that cast is a type error, so the program cannot lose it
    silently."""
    vector_path = p4_replay.VECTORS_DIR / "09_merge_saturation.json"
    if not vector_path.exists():
        pytest.skip("09_merge_saturation.json not generated yet")
    vector = p4_replay.load_vector(vector_path)
    got, expected, switch = p4_replay.replay_on_p4sim(vector)
    assert got == expected
    assert p4_replay.state_differences(switch, p4_replay.reference_queue(vector)) == []

    merge = "(bit<32>)(((int<32>)current) |+| hdr.values[i].value)"
    # The program before the register became bit<32>: int<32> register, local and cells.
    old_form = {
        "include/queue_state.p4": [("register<bit<32>>(OLAF_VALUE_SLOTS) reg_values;",
                                    "register<int<32>>(OLAF_VALUE_SLOTS) reg_values;")],
        "include/queue.p4": [
            ("bit<32> current;", "int<32> current;"),
            (merge, "current |+| hdr.values[i].value"),
            ("reg_values.write(base + i, (bit<32>)hdr.values[i].value);",
             "reg_values.write(base + i, hdr.values[i].value);"),
            ("reg_values.read(cell, base + i);\n                        hdr.values[i].value = (int<32>)cell;",
             "reg_values.read(hdr.values[i].value, base + i);"),
        ],
    }
    mutant = _mutant(tmp_path / "old", old_form)
    got, expected, _ = p4_replay.replay_on_p4sim(vector, mutant / "olaf.p4")
    assert got != expected

    uncast = {"include/queue.p4": [(merge, "(bit<32>)(current |+| hdr.values[i].value)")]}
    mutant = _mutant(tmp_path / "uncast", uncast)
    with pytest.raises(p4_replay.load_p4sim().P4SimError, match=r"\|\+\| between .* p4c would reject it"):
        p4_replay.replay_on_p4sim(vector, mutant / "olaf.p4")


def test_reward_register_reads_are_only_used_unsigned(tmp_path: Path) -> None:
    """reg_slot_reward stays register<int<32>> because every read of it is deparsed or cast
    to bit<32> before use; a signed comparison on the read (4294967295 for -1 on bmv2)
    orders negative rewards wrongly, and the interpreter, modelling bmv2's cells, shows
    it on the vectors whose merges carry negative rewards."""
    vector_path = p4_replay.VECTORS_DIR / "22_default_threshold_merges.json"
    if not vector_path.exists():
        pytest.skip("22_default_threshold_merges.json not generated yet")
    keyed = "((bit<32>)hdr.olaf.reward ^ 32w0x80000000) > ((bit<32>)reward ^ 32w0x80000000)"
    mutant = _mutant(tmp_path / "p4", {"include/queue.p4": [(keyed, "hdr.olaf.reward > reward")]})
    got, expected, _ = p4_replay.replay_on_p4sim(p4_replay.load_vector(vector_path), mutant / "olaf.p4")
    assert got != expected


def _mutant(root: Path, edits: dict[str, list[tuple[str, str]]]) -> Path:
    """A copy of p4/ with each (old, new) edit applied to its file; each old text must occur once."""
    shutil.copytree(p4_replay.REPO / "p4", root, ignore=shutil.ignore_patterns("build"))
    for name, pairs in edits.items():
        path = root / name
        text = path.read_text()
        for old, new in pairs:
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        path.write_text(text)
    return root


# Each mutation breaks one typing rule of p4c 1.2.5 (or of the v1model/TNA extern
# declarations it compiles against, or Tofino's one-access-per-register rule); the
# interpreter must refuse the mutant. The
# originals of these lines are what the programs use, so the rules are live checks.
P4C_TYPE_RULES = {
    # Implicit bit<16> -> bit<8>: only untyped literals convert implicitly.
    "implicit_narrowing": (
        "include/feedback.p4",
        "active8 = (bit<8>)active_clusters;",
        "active8 = active_clusters;",
        "implicit conversion",
    ),
    # v1model.p4 (V1MODEL_VERSION 20180101): register.read(out T, in bit<32> index).
    "register_index_bit16": (
        "include/queue.p4",
        "reg_slot_cluster_id.read(hdr.olaf.cluster_id, s32);",
        "reg_slot_cluster_id.read(hdr.olaf.cluster_id, slot);",
        "v1model wants bit<32>",
    ),
    # reg_values is register<bit<32>>: its cells go into the int<32> values and back
    # only through a cast, so no read or write can skip the re-signing.
    "value_register_read_uncast": (
        "include/queue.p4",
        "hdr.values[i].value = (int<32>)cell;",
        "hdr.values[i].value = cell;",
        "implicit conversion",
    ),
    "value_register_write_uncast": (
        "include/queue.p4",
        "reg_values.write(base + i, (bit<32>)hdr.values[i].value);",
        "reg_values.write(base + i, hdr.values[i].value);",
        "implicit conversion",
    ),
    # v1model.p4: counter.count(in bit<32> index).
    "counter_index_bit8": (
        "include/queue.p4",
        "outcome_counter.count((bit<32>)outcome);",
        "outcome_counter.count(outcome);",
        "v1model wants bit<32>",
    ),
    # v1model.p4: truncate(in bit<32> length).
    "truncate_bit16": (
        "include/egress.p4",
        "truncate(OLAF_SHORT_FRAME_LEN);",
        "truncate((bit<16>)OLAF_SHORT_FRAME_LEN);",
        "implicit conversion",
    ),
    # v1model.p4: random<T>(out T result, in T lo, in T hi).
    "random_mixed_widths": (
        "include/egress.p4",
        "random(draw, 16w0, 16w0xffff);",
        "random(draw, 8w0, 16w0xffff);",
        "cannot infer one T",
    ),
    # A sized literal that does not fit its width (p4c warns and truncates).
    "literal_overflow": (
        "include/feedback.p4",
        "quotient = quotient | 8w0x80;",
        "quotient = quotient | 8w0x180;",
        "does not fit",
    ),
    # Shift amounts must be unsigned.
    "signed_shift_amount": (
        "include/feedback.p4",
        "if (rem >= (divisor << 7)) {",
        "if (rem >= (divisor << (int<8>)7)) {",
        "signed amount",
    ),
    # bool and bit<1> do not convert implicitly, and ! wants a bool.
    "int_literal_to_bool": (
        "include/queue.p4",
        "bool forward = false;",
        "bool forward = 0;",
        "assigned to a bool",
    ),
    "not_on_bit1": (
        "include/queue.p4",
        "if (meta.is_olaf == 0) {",
        "if (!meta.is_olaf) {",
        "non-bool",
    ),
    # TNA: RegisterAction<T, I, U>.execute(in I index), I = bit<16> for reg_index.
    "tna_register_index_type": (
        "tna/queue.p4",
        "bit<16> entry = index_read.execute(index_key);",
        "bit<16> entry = index_read.execute((bit<32>)index_key);",
        "implicit conversion",
    ),
    # TNA: a Register has one stateful ALU, reached once per packet per pass.
    "tna_register_twice_per_pass": (
        "tna/queue.p4",
        "            lock_release.execute(0);\n",
        "            lock_release.execute(0);\n            lock_release.execute(0);\n",
        "accessed twice in one pass",
    ),
    # TNA: Counter<W, I>.count(in I index), I = bit<8>.
    "tna_counter_index_type": (
        "tna/queue.p4",
        "outcome_counter.count(md.resub.outcome);",
        "outcome_counter.count((bit<16>)md.resub.outcome);",
        "implicit conversion",
    ),
}


def _run_mutant(main: Path) -> None:
    """An UPDATE, a PULL and a lossy egress port through ``main``, interpreted."""
    p4sim = p4_replay.load_p4sim()
    tna = main.parent.name == "tna"
    values = p4_replay.TNA_VALUES if tna else 64
    switch = p4sim.Switch(main)
    if tna:
        for occupied in range(65):
            switch.add_entry("OlafIngress.util_lookup", (occupied,), "set_util", [255 * occupied // 64])
    switch.add_entry("OlafEgress.drop_sim", (0,), "set_drop_prob", [1])
    update = p4_replay.olaf_message(values, data=list(range(values)), msg_type=1, worker_id=1)
    pull = p4_replay.olaf_message(0, msg_type=3)
    for i, payload in enumerate((update, pull)):
        switch.process(p4_replay.request_frame(payload, i), ingress_port=0)


def test_unmutated_programs_pass_the_mutation_driver() -> None:
    _run_mutant(p4_replay.P4_MAIN)
    _run_mutant(p4_replay.P4_TNA_MAIN)


@pytest.mark.parametrize("rule", sorted(P4C_TYPE_RULES))
def test_interpreter_rejects_what_p4c_rejects(rule: str, tmp_path: Path) -> None:
    """A line rewritten to break one p4c typing rule makes the interpreter refuse the program."""
    relative, original, mutated, message = P4C_TYPE_RULES[rule]
    mutant = tmp_path / "p4"
    shutil.copytree(p4_replay.REPO / "p4", mutant, ignore=shutil.ignore_patterns("build"))
    path = mutant / relative
    text = path.read_text()
    assert text.count(original) == 1, f"{relative} no longer contains {original!r}"
    path.write_text(text.replace(original, mutated))
    main = mutant / ("tna/olaf_tna.p4" if relative.startswith("tna/") else "olaf.p4")
    p4sim = p4_replay.load_p4sim()
    with pytest.raises(p4sim.P4SimError, match=message):
        _run_mutant(main)


@pytest.mark.parametrize("target", ["v1model", "tna"])
def test_forwarding_and_loss_on_p4_source(target: str) -> None:
    """MODEL and other IPv4 traffic follow ipv4_lpm (TTL - 1, MAC rewrite, checksum);
    non-IPv4 is dropped; drop_sim drops by its per-port probability."""
    p4sim = p4_replay.load_p4sim()
    main = p4_replay.P4_MAIN if target == "v1model" else p4_replay.P4_TNA_MAIN
    switch = p4sim.Switch(main)
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
    lossless = p4sim.Switch(main)
    lossless.add_entry("OlafIngress.ipv4_lpm", ((0x0A000000, 8),), "ipv4_forward", [1, 1])
    lossless.add_entry("OlafEgress.drop_sim", (1,), "set_drop_prob", [0])
    assert sum(len(lossless.process(plain)) for _ in range(20)) == 20


# -- the TNA program, interpreted, on V = 32 traffic from the reference queue ------------------

TNA_CONFIGS = {
    "olaf_cap4": {"capacity": 4, "mode": "olaf", "threshold": 65536},
    "fifo_cap3": {"capacity": 3, "mode": "fifo", "threshold": 65536},
    "olaf_cap16_default_threshold": {"capacity": 16, "mode": "olaf", "threshold": 2**31 - 1},
}


def _tna_config(name: str) -> dict:
    base = {"max_clusters": 16, "max_blocks": 1024, "frac_bits": 16, "congestion_threshold": 192}
    return {**base, **TNA_CONFIGS[name]}


@pytest.mark.parametrize("name", sorted(TNA_CONFIGS))
def test_tna_program_on_random_traffic(name: str) -> None:
    """p4/tna/olaf_tna.p4 (two passes, V = 32) answers as the reference queue does."""
    seed = sorted(TNA_CONFIGS).index(name) + 1
    vector = p4_replay.random_scenario(seed, p4_replay.TNA_VALUES, 200, _tna_config(name))
    got, expected, switch = p4_replay.replay_on_tna_p4sim(vector)
    for i, (g, e) in enumerate(zip(got, expected, strict=False)):
        assert g.hex() == e.hex(), f"{name}: reply {i} differs"
    assert len(got) == len(expected)
    assert switch.resubmits > 0 and switch.registers["OlafIngress.reg_lock"] == [0]


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
    p4sim = p4_replay.load_p4sim()
    switch = p4sim.Switch(
        p4_replay.P4_TNA_MAIN, dict(d[2:].split("=", 1) for d in p4_replay.config_defines(config, values))
    )
    for occupied in range(config["capacity"] + 1):
        switch.add_entry(
            "OlafIngress.util_lookup", (occupied,), "set_util", [255 * occupied // config["capacity"]]
        )
    frames = [(p4_replay.request_frame(p, i), 0) for i, p in enumerate(queue_ops)]
    out = switch.process_tna_interleaved(frames, window=6)
    assert switch.recirculations > 0
    assert [n for n, _ in out] == list(range(len(queue_ops)))
    for n, (port, frame) in out:
        assert port == 0 and frame == p4_replay.reply_frame(expected[n], n), f"answer to packet {n}"


# -- bmv2, when the tools are installed ----------------------------------------------------


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("olaf_bmv2")


@pytest.mark.skipif(MISSING is not None, reason=f"bmv2 replay skipped: {MISSING}")
def test_p4info_matches_compiler(build_dir: Path) -> None:
    """The committed p4info has the names, ids and sizes p4c emits for the program."""
    from google.protobuf import text_format
    from p4.config.v1 import p4info_pb2

    compiled_path = build_dir / "olaf.p4info.txtpb"
    p4_replay.compile_p4(build_dir / "default", p4info=compiled_path)

    def summary(path: Path) -> dict:
        info = text_format.Parse(path.read_text(), p4info_pb2.P4Info())
        out: dict = {}
        for t in info.tables:
            out[("table", t.preamble.name)] = (
                t.preamble.id,
                t.preamble.alias,
                t.size,
                sorted(a.id for a in t.action_refs),
                [(m.name, m.bitwidth, m.match_type) for m in t.match_fields],
            )
        for a in info.actions:
            out[("action", a.preamble.name)] = (
                a.preamble.id,
                [(p.id, p.name, p.bitwidth) for p in a.params],
            )
        for c in info.counters:
            out[("counter", c.preamble.name)] = (c.preamble.id, c.size, c.spec.unit)
        for r in info.registers:
            out[("register", r.preamble.name)] = (r.preamble.id, r.size, str(r.type_spec))
        return out

    committed = summary(p4_replay.REPO / "p4" / "olaf.p4info.txtpb")
    compiled = summary(compiled_path)
    assert committed == compiled


@pytest.mark.skipif(MISSING is not None, reason=f"bmv2 replay skipped: {MISSING}")
@pytest.mark.parametrize("path", VECTOR_FILES or [None], ids=lambda p: p.stem if p else "none")
def test_vectors_on_simple_switch(path: Path | None, build_dir: Path) -> None:
    if path is None:
        pytest.skip("no files in tests/vectors/ yet")
    vector = p4_replay.load_vector(path)
    got, expected = p4_replay.replay_on_bmv2(vector, build_dir)
    for i, (g, e) in enumerate(zip(got, expected, strict=False)):
        assert g.hex() == e.hex(), f"{path.name}: reply {i} differs"
    assert len(got) == len(expected), f"{path.name}: {len(got)} replies, expected {len(expected)}"
