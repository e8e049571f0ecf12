"""P4Testgen's generated tests replayed through the project's TNA interpreter (issue 52).

P4Testgen (p4c's backends/p4tools, built by toolchain/p4testgen/build.sh) runs its own
symbolic execution of p4/tna/olaf_tna.p4, which makes it an oracle written by other hands.
Its STF test backend (targets/tofino/test_backend/stf.cpp, and bmv2's the same way) writes one
file per test in this form:

    add TABLE [PRIORITY] FIELD:VALUE ... ACTION(PARAM:VALUE,...)
    setdefault TABLE ACTION(PARAM:VALUE,...)
    packet PORT HEX
    expect PORT HEX$          (absent: the packet is dropped; '*' is a nibble not checked)

An exact key's VALUE is hex (formatHexExpr). A ternary or lpm VALUE is '0b' followed by bits,
with '*' for a bit that is not cared about. Lines starting with '#' are the generator's
comments (seed, trace, coverage).
Each file in tests/p4testgen/tna/ is replayed through tests/p4sim in P4Testgen's one-pass model
of Tofino (``ONE_PASS``), and any difference fails. The reference queue (dataplane/queue.py) answers
only in the second pass, which P4Testgen does not model, so its cross-check is exercised on a
hand-written message. The findings, and what the oracle cannot see, are in tests/p4testgen/README.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import p4_replay

GENERATED = Path(__file__).resolve().parent / "p4testgen"
ONE_PASS = {"OLAF_ONE_PASS": "1"}
"""The macro the tests are generated with (tests/p4testgen/tna/COMMAND): P4Testgen's Tofino
target models no resubmission, so the program is read without its Resubmit.emit, and p4sim
replays it with one ingress pass per packet (``model_resubmit=False``)."""
TNA_TESTS = GENERATED / "tna"

_CALL = re.compile(r"^([A-Za-z_][\w.$]*)\((.*)\)$")


@dataclass
class StfTest:
    """One generated test: control-plane state, the packet sent and the packet expected."""

    entries: list[tuple[str, int | None, list[tuple[str, str]], str, list[int]]] = field(default_factory=list)
    defaults: list[tuple[str, str, list[int]]] = field(default_factory=list)
    send: tuple[int, bytes] | None = None
    expect: tuple[int, str] | None = None


def _action(text: str) -> tuple[str, list[int]]:
    match = _CALL.match(text.strip())
    if not match:
        raise ValueError(f"not an action call: {text!r}")
    args = [a for a in match.group(2).split(",") if a.strip()]
    return match.group(1), [int(a.split(":", 1)[1], 0) for a in args]


def parse_stf(text: str) -> StfTest:
    """Parse P4Testgen's STF output (the template of its STF test backend)."""
    test = StfTest()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word == "packet":
            port, data = rest.split(None, 1)
            test.send = (int(port), bytes.fromhex(data.replace(" ", "").removeprefix("0x")))
        elif word == "expect":
            port, data = rest.split(None, 1)
            test.expect = (int(port), data.replace(" ", "").removeprefix("0x").removesuffix("$"))
        elif word == "setdefault":
            table, call = rest.split(None, 1)
            test.defaults.append((table, *_action(call)))
        elif word == "add":
            parts = rest.split()
            table, parts = parts[0], parts[1:]
            priority = int(parts.pop(0)) if parts and ":" not in parts[0] and "(" not in parts[0] else None
            call_at = next(i for i, p in enumerate(parts) if "(" in p)
            keys = [tuple(p.split(":", 1)) for p in parts[:call_at]]
            test.entries.append((table, priority, keys, *_action(" ".join(parts[call_at:]))))
        else:
            raise ValueError(f"line {number}: unknown STF command {word!r}")
    if test.send is None:
        raise ValueError("no 'packet' line")
    return test


def key_value(value: str) -> int | tuple[int, int]:
    """An exact key as an int; a '0b' pattern whose '*' bits all trail as (value, prefix)."""
    if not value.startswith("0b"):
        return int(value, 0)
    bits = value[2:]
    prefix = len(bits.rstrip("*"))
    if "*" in bits[:prefix]:
        raise ValueError(
            f"ternary pattern {value} is not a prefix: tests/p4sim installs exact and lpm entries only")
    return int(bits[:prefix] or "0", 2) << (len(bits) - prefix), prefix


def matches(expected: str, frame: bytes) -> bool:
    """The expected hex with '*' nibbles against a frame, length included."""
    got = frame.hex()
    if len(got) != len(expected):
        return False
    return all(e in ("*", g) for e, g in zip(expected.lower(), got, strict=True))


def p4sim_name(table: str) -> str:
    # P4Testgen's Tofino target names control-plane objects under the pipe ("pipe.Ctl.tbl"),
    # while p4sim names them by control and table.
    return table.removeprefix("pipe.")


def replay(test: StfTest, main: Path = p4_replay.P4_TNA_MAIN,
           one_pass: bool = True) -> list[tuple[int, bytes]]:
    """The test's packet through p4sim after its entries; ``one_pass``: as P4Testgen models
    Tofino (``ONE_PASS``), else the whole program with its resubmission."""
    from tests import p4sim

    switch = (p4sim.Switch(main, ONE_PASS, model_resubmit=False) if one_pass
              else p4sim.Switch(main))
    for table, action, args in test.defaults:
        switch.set_default(p4sim_name(table), action.split(".")[-1], args)
    for table, _priority, keys, action, args in test.entries:
        switch.add_entry(p4sim_name(table), tuple(key_value(v) for _, v in keys), action.split(".")[-1], args)
    assert test.send is not None
    port, frame = test.send
    return switch.process(frame, port)


SET_CONFIG_PARAMS = ("mode", "threshold", "congestion_threshold", "frac_bits", "capacity",
                     "max_clusters", "max_blocks", "cluster_quota", "feedback")
"""olaf_config's set_config parameters in order (p4/tna/config.p4)."""


def queue_answers(test: StfTest) -> list[bytes] | None:
    """The reference queue's answers (UDP payloads) to the test's packet under the config that
    the test writes into olaf_config; None where the test writes none, or the packet is a
    MODEL, which the program forwards by LPM instead of answering."""
    from dataplane.queue import Mode
    from worker_transport.codec import decode, encode

    written = [args for table, _, args in test.defaults if table.endswith("olaf_config")]
    assert test.send is not None
    payload = p4_replay.udp_payload(test.send[1])
    if not written or p4_replay.is_valid_model(payload):
        return None
    config = dict(zip(SET_CONFIG_PARAMS, written[-1], strict=True))
    config["mode"] = Mode(config["mode"]).name.lower()
    queue = p4_replay.reference_queue_for(config, p4_replay.TNA_VALUES)
    responses, _, _ = queue.process(decode([payload], p4_replay.TNA_VALUES))
    return encode(responses)


SAMPLE = """# p4testgen seed: 1
# Date generated: 2026-12-07-07:40:00.000
# Current statement coverage: 0.25
# Traces
# [Parser] start

# Table OlafIngress.util_lookup
add OlafIngress.util_lookup OlafIngress.util_lookup.used:0x03 OlafIngress.set_util(u:0xbf)

# Table OlafIngress.fwd
add OlafIngress.fwd 5 hdr.ipv4.dst:0b00001010******** OlafIngress.forward(port:0x1,mac:0x0)

# Table OlafIngress.olaf_config
setdefault OlafIngress.olaf_config OlafIngress.set_config(capacity:0x4,mode:0x0)

packet 0 00112233445566778899aabb0800
expect 1 0011223344**6677$
"""


def test_stf_parser_reads_every_command_of_the_generator_template() -> None:
    test = parse_stf(SAMPLE)
    assert test.send == (0, bytes.fromhex("00112233445566778899aabb0800"))
    assert test.expect == (1, "0011223344**6677")
    assert test.defaults == [("OlafIngress.olaf_config", "OlafIngress.set_config", [4, 0])]
    used = [("OlafIngress.util_lookup.used", "0x03")]
    assert test.entries[0] == ("OlafIngress.util_lookup", None, used, "OlafIngress.set_util", [0xBF])
    table, priority, keys, action, args = test.entries[1]
    assert (table, priority, action, args) == ("OlafIngress.fwd", 5, "OlafIngress.forward", [1, 0])
    assert key_value(keys[0][1]) == (0x0A00, 8)


def test_stf_wildcards_and_refusals() -> None:
    assert matches("0011**33", bytes.fromhex("0011ab33"))
    assert not matches("0011**33", bytes.fromhex("0011ab34"))
    assert not matches("0011**33", bytes.fromhex("0011ab3300"))
    with pytest.raises(ValueError, match="not a prefix"):
        key_value("0b1*01")
    with pytest.raises(ValueError, match="unknown STF command"):
        parse_stf("remove t x\npacket 0 00")
    with pytest.raises(ValueError, match="no 'packet' line"):
        parse_stf("# only comments\n")


def test_queue_cross_check_agrees_with_p4sim_on_an_olaf_message() -> None:
    """The §3 path of the harness: a DATA message under a config written by setdefault, the
    division tables written as entries (as P4Testgen writes them), answered alike by p4sim
    and the reference queue."""
    config = [0, 65536, 192, 16, 4, 16, 1024, 4, 2]
    test = StfTest(defaults=[("OlafIngress.olaf_config", "set_config", config)])
    for table, action in p4_replay.TNA_UTIL_LOOKUPS.items():
        for x in range(5):
            test.entries.append((table, None, [("x", hex(x))], action, [255 * x // 4]))
    message = p4_replay.olaf_message(p4_replay.TNA_VALUES, msg_type=1, cluster_id=0, block_id=0)
    test.send = (0, p4_replay.request_frame(message, 0))
    answers = queue_answers(test)
    assert answers
    assert [p4_replay.udp_payload(f) for _, f in replay(test, one_pass=False)] == answers


GENERATED_TNA = sorted(TNA_TESTS.glob("*.stf")) if TNA_TESTS.is_dir() else []


def disagreement(test: StfTest) -> str | None:
    """How p4sim's one-pass replay of a generated test differs from what P4Testgen expects,
    or None where they agree."""
    # One ingress pass (ONE_PASS): the queue's decisions happen in the second pass, so these
    # tests check the first pass and egress, not an answer the reference queue could give.
    out = replay(test)
    if test.expect is None:
        return None if out == [] else f"P4Testgen expects a drop; p4sim sent {[(p, f.hex()) for p, f in out]}"
    port, want = test.expect
    if [p for p, _ in out] != [port]:
        return f"P4Testgen expects port {port}; p4sim: {[p for p, _ in out]}"
    return None if matches(want, out[0][1]) else f"expected {want}\n     p4sim {out[0][1].hex()}"


NO_TESTS = ("tests/p4testgen/tna/ holds no P4Testgen test: generate them with the command in "
            "toolchain/p4testgen/README.md")


@pytest.mark.skipif(not GENERATED_TNA, reason=NO_TESTS)
@pytest.mark.parametrize("path", GENERATED_TNA, ids=[p.stem for p in GENERATED_TNA])
def test_p4testgen_tna_test_agrees_with_p4sim(path: Path) -> None:
    problem = disagreement(parse_stf(path.read_text()))
    assert problem is None, problem


MUTANTS = {"minus-as-plus": {"-": "+"}, "xor-as-or": {"^": "|"},
           "no-saturation": {"|-|": "-", "|+|": "+"}}
"""p4sim mutants: each reads the binary operators on the left as those on the right."""


@pytest.mark.skipif(not GENERATED_TNA, reason=NO_TESTS)
@pytest.mark.parametrize("name", MUTANTS)
def test_what_the_generated_tests_cannot_see(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle's reach, measured (tests/p4testgen/README.md, "What it checks"): p4sim with
    `-` read as `+` (the TTL), `^` as `|` (the frac_bits and worker checks) or saturating
    arithmetic made plain (the reward margins) still agrees with every committed test, because
    P4Testgen wildcards every header it forwards and the queue's decisions happen in the pass it
    does not model. A regeneration whose tests kill one of these fails here: then say so there."""
    from tests.p4sim.evaluate import Evaluator

    original, swap = Evaluator.binary, MUTANTS[name]
    monkeypatch.setattr(Evaluator, "binary",
                        lambda self, op, le, re_, env: original(self, swap.get(op, op), le, re_, env))
    survivors = [p.stem for p in GENERATED_TNA if disagreement(parse_stf(p.read_text())) is None]
    assert len(survivors) == len(GENERATED_TNA)
