"""The P4 sources agree with the Python wire format and with the committed p4info.

No compiler is needed: the P4 files are read as text (comments stripped, #define and
`const` values resolved). Checked for the v1model program (p4/include/) and the TNA
program (p4/tna/): the OLAF header's field names, widths, signedness and order, the
message-type, outcome, mode and verdict codes, the UDP port, V and header length, the
default configuration; and, for v1model, that every table, action, counter and
register declared in the source is the one p4/olaf.p4info.txtpb describes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from dataplane.queue import QueueConfig
from worker_transport.codec import Verdict
from worker_transport.protocol import (
    FLAG_CONGESTED,
    HEADER_FIELDS,
    HEADER_LEN,
    MAX_VALUES_P4,
    MAX_VALUES_TNA,
    OLAF_PORT,
    SIGNED_FIELDS,
    VALUE_BYTES,
    VERSION,
    Mode,
    MsgType,
    Outcome,
)

REPO = Path(__file__).resolve().parent.parent
P4_DIR = REPO / "p4"
V1MODEL_FILES = sorted((P4_DIR / "include").glob("*.p4")) + [P4_DIR / "olaf.p4"]
TNA_FILES = sorted((P4_DIR / "tna").glob("*.p4"))
TARGETS = {"v1model": V1MODEL_FILES, "tna": TNA_FILES}

sys.path.insert(0, str(P4_DIR / "tools"))
import p4info  # noqa: E402


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def with_includes(files: list[Path]) -> list[Path]:
    """The files and, recursively, every file they #include "..." (relative to the includer)."""
    seen: list[Path] = []
    todo = [f.resolve() for f in files]
    while todo:
        f = todo.pop(0)
        if f in seen:
            continue
        seen.append(f)
        for inc in re.findall(r'^\s*#include\s+"([^"]+)"', f.read_text(), flags=re.M):
            todo.append((f.parent / inc).resolve())
    return seen


class P4Source:
    """The text of a set of P4 files (and what they include) with #define and const values."""

    def __init__(self, files: list[Path]) -> None:
        if not files:
            raise FileNotFoundError("no P4 files")
        self.files = with_includes(files)
        self.text = "\n".join(strip_comments(f.read_text()) for f in self.files)
        self.defines: dict[str, str] = {}
        for name, value in re.findall(r"^\s*#define\s+(\w+)[ \t]+([^\n]+)$", self.text, flags=re.M):
            self.defines.setdefault(name, value.strip())
        self.consts: dict[str, int] = {}
        for name, value in re.findall(r"\bconst\s+(?:bit|int)<\d+>\s+(\w+)\s*=\s*([^;]+);", self.text):
            self.consts[name] = self.value(value)

    def value(self, expr: str) -> int:
        expr = expr.strip()
        seen = 0
        while expr in self.defines and seen < 10:
            expr, seen = self.defines[expr], seen + 1
        expr = re.sub(r"\b\d+w(0x[0-9a-fA-F]+|\d+)", r"\1", expr)
        if re.fullmatch(r"0x[0-9a-fA-F]+|\d+", expr):
            return int(expr, 0)
        if expr in self.consts:
            return self.consts[expr]
        raise ValueError(f"cannot evaluate {expr!r}")

    def header_fields(self, header: str) -> list[tuple[str, int, bool]]:
        match = re.search(r"\bheader\s+" + header + r"\s*\{([^}]*)\}", self.text)
        if match is None:
            raise AssertionError(f"header {header} not found")
        return [
            (name, int(width), kind == "int")
            for kind, width, name in re.findall(r"\b(bit|int)<(\d+)>\s+(\w+)\s*;", match.group(1))
        ]


@pytest.fixture(params=sorted(TARGETS), scope="module")
def source(request: pytest.FixtureRequest) -> P4Source:
    files = TARGETS[request.param]
    if not files:
        pytest.fail(f"no P4 files for {request.param}")
    src = P4Source(files)
    src.target = request.param
    return src


def test_olaf_header_matches_wire_format(source: P4Source) -> None:
    expected = [(name, bits, name in SIGNED_FIELDS) for name, bits in HEADER_FIELDS]
    assert source.header_fields("olaf_t") == expected
    assert sum(bits for _, bits, _ in source.header_fields("olaf_t")) == HEADER_LEN * 8


def test_value_header_is_one_signed_word(source: P4Source) -> None:
    assert source.header_fields("olaf_value_t") == [("value", VALUE_BYTES * 8, True)]


def test_wire_constants(source: P4Source) -> None:
    c = source.consts
    assert c["OLAF_PORT"] == OLAF_PORT
    assert c["OLAF_VERSION"] == VERSION
    assert c["OLAF_HEADER_LEN"] == HEADER_LEN
    assert c["FLAG_CONGESTED"] == FLAG_CONGESTED
    assert source.value("OLAF_V") == MAX_VALUES_P4
    assert c["OLAF_V8"] == MAX_VALUES_P4
    assert c["OLAF_UPDATE_UDP_LEN"] == 8 + HEADER_LEN + VALUE_BYTES * MAX_VALUES_P4
    assert c["OLAF_MIN_UDP_LEN"] == 8 + HEADER_LEN
    if source.target == "tna":
        # Tofino carries V = 32 values (p4/README.md says why); lengths follow from it.
        v = source.value("OLAF_TNA_V")
        assert v == MAX_VALUES_TNA and c["OLAF_TNA_V8"] == v
        assert c["OLAF_TNA_UPDATE_UDP_LEN"] == 8 + HEADER_LEN + VALUE_BYTES * v
        assert re.search(r"olaf_value_t\[OLAF_TNA_V\]\s+values;", source.text)
    else:
        assert re.search(r"olaf_value_t\[OLAF_V\]\s+values;", source.text)
    for t in MsgType:
        assert c[f"MSG_{t.name}"] == t.value, t
    for o in Outcome:
        assert c[f"OUTCOME_{o.name}"] == o.value, o
    for m in Mode:
        assert c[f"MODE_{m.name}"] == m.value, m


def test_verdict_codes(source: P4Source) -> None:
    for v in Verdict:
        assert source.consts[f"VERDICT_{v.name}"] == v.value, v


def test_default_config_is_queue_config_default(source: P4Source) -> None:
    d = QueueConfig()
    assert source.value("OLAF_DEFAULT_MODE") == d.mode.value
    assert source.value("OLAF_DEFAULT_THRESHOLD") == d.threshold
    assert source.value("OLAF_DEFAULT_CONGESTION_THRESHOLD") == d.congestion_threshold
    assert source.value("OLAF_DEFAULT_FRAC_BITS") == d.frac_bits
    assert source.value("OLAF_DEFAULT_CAPACITY") == d.capacity
    assert source.value("OLAF_DEFAULT_MAX_CLUSTERS") == d.max_clusters
    assert source.value("OLAF_DEFAULT_MAX_BLOCKS") == d.max_blocks
    # The compiled sizes hold at least the defaults.
    assert source.value("OLAF_CAPACITY") >= d.capacity
    assert source.value("OLAF_MAX_CLUSTERS") >= d.max_clusters
    assert source.value("OLAF_MAX_BLOCKS") >= d.max_blocks


# -- what p4c's bmv2 back end and simple_switch accept (no compiler here) ------------------
#
# Restrictions documented in p4lang/behavioral-model docs/simple_switch.md ("P4_16 plus
# v1model architecture notes") and the forms shared/P4-NOTES.md records as compiled by
# p4c 1.2.5. Checked on the source text so that an edit which would fail at review fails
# here first.


def balanced(text: str, open_at: int) -> str:
    """The text inside the {...} block whose "{" is at ``open_at``."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
    raise AssertionError("unbalanced braces")


def bodies(text: str, keyword: str) -> dict[str, tuple[str, str]]:
    """name -> (parameter list, body) of every ``keyword name(...) {...}`` declaration."""
    found = {}
    for m in re.finditer(r"\b" + keyword + r"\s+(\w+)\s*\(([^)]*)\)\s*\{", text):
        found[m.group(1)] = (m.group(2), balanced(text, m.end() - 1))
    return found


def statements(block: str) -> list[str]:
    return [st.strip() for st in re.split(r";", block) if st.strip()]


@pytest.fixture(scope="module")
def v1model_source() -> P4Source:
    return P4Source(V1MODEL_FILES)


def test_every_table_is_applied_once(source: P4Source) -> None:
    """simple_switch: no apply of the same table twice in one control execution."""
    tables = re.findall(r"\btable\s+(\w+)\s*\{", source.text)
    assert tables
    for name in tables:
        assert len(re.findall(r"\b" + name + r"\.apply\s*\(", source.text)) == 1, name


def test_every_action_parameter_is_used(source: P4Source) -> None:
    """p4c warns about an unused action parameter (shared/P4-NOTES.md)."""
    for name, (params, body) in bodies(source.text, "action").items():
        for pname in re.findall(r"(\w+)\s*(?:,|$)", params.strip()):
            assert re.search(r"\b" + pname + r"\b", body), f"{name}({pname}) unused"


def test_v1model_actions_have_no_conditionals(v1model_source: P4Source) -> None:
    """Every branch stays in apply blocks, where p4c's bmv2 back end takes any if."""
    for name, (_, body) in bodies(v1model_source.text, "action").items():
        assert not re.search(r"\b(if|switch)\s*\(", body), name


def test_v1model_fixed_function_controls(v1model_source: P4Source) -> None:
    """simple_switch.md: VerifyChecksum only verify_checksum calls, ComputeChecksum only
    update_checksum calls, the deparser only emit calls."""
    text = v1model_source.text
    main = re.search(r"V1Switch\s*\((.*?)\)\s*main\s*;", text, flags=re.S).group(1)
    names = [a.strip().removesuffix("()") for a in main.split(",")]
    controls = bodies(text, "control")
    allowed = {1: "verify_checksum(", 4: "update_checksum(", 5: "packet.emit("}
    for position, call in allowed.items():
        body = controls[names[position]][1]
        apply_block = balanced(body, body.index("{", body.index("apply")))
        for st in statements(apply_block):
            assert st.startswith(call), f"{names[position]}: {st[:40]!r}"


def test_v1model_parser_never_rejects_explicitly(v1model_source: P4Source) -> None:
    """simple_switch.md: p4c + simple_switch do not support transitioning to reject."""
    assert not re.search(r"\breject\b", v1model_source.text)


def test_loops_have_the_compiled_form(source: P4Source) -> None:
    """P4-NOTES.md: ``for (bit<32> i = 0; i < N; i = i + 1)`` is what p4c 1.2.5 unrolled;
    header stacks are indexed only by a literal or such a loop variable."""
    loops = re.findall(r"\bfor\s*\(([^)]*)\)", source.text)
    loop_vars = set()
    for header in loops:
        m = re.fullmatch(
            r"\s*bit<32>\s+(\w+)\s*=\s*0\s*;\s*(\w+)\s*<\s*\w+\s*;\s*(\w+)\s*=\s*(\w+)\s*\+\s*1\s*", header
        )
        assert m and m.group(1) == m.group(2) == m.group(3) == m.group(4), header
        loop_vars.add(m.group(1))
    # Macro parameters (TNA's OLAF_VALUE_APPLY(i)) are literals once expanded.
    code = "\n".join(line for line in source.text.splitlines() if not line.lstrip().startswith("#"))
    for index in re.findall(r"\bvalues\[([^\]]+)\]", code):
        if index in ("OLAF_V", "OLAF_TNA_V"):
            continue  # the stack's declaration
        assert re.fullmatch(r"\d+", index) or index in loop_vars, index


def test_no_run_time_division(source: P4Source) -> None:
    """p4c rejects / and % on run-time operands outside actions (p4lang/p4c#1232);
    the programs use none at all."""
    code = "\n".join(line for line in source.text.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"[/%]", code)


# -- v1model program against the p4info ----------------------------------------------------


@pytest.fixture(scope="module")
def v1model() -> P4Source:
    return P4Source(V1MODEL_FILES)


def test_compiled_sizes_match_p4info_tool(v1model: P4Source) -> None:
    assert v1model.value("OLAF_CAPACITY") == p4info.CAPACITY
    assert v1model.value("OLAF_V") == p4info.VALUES == 1 << v1model.value("OLAF_V_SHIFT")
    assert v1model.value("OLAF_MAX_CLUSTERS") == p4info.MAX_CLUSTERS
    assert v1model.value("OLAF_MAX_BLOCKS") == p4info.MAX_BLOCKS == 1 << v1model.value("OLAF_BLOCK_SHIFT")
    assert v1model.value("OLAF_INDEX_SIZE") == p4info.INDEX_SIZE
    assert v1model.value("OLAF_VALUE_SLOTS") == p4info.VALUE_SLOTS


def test_registers_match_p4info(v1model: P4Source) -> None:
    declared = {
        name: (v1model.value(size), int(width), kind == "int")
        for kind, width, size, name in re.findall(
            r"\bregister<\s*(bit|int)<(\d+)>\s*>\s*\(\s*(\w+)\s*\)\s*(\w+)\s*;", v1model.text
        )
    }
    described = {
        r.name.removeprefix("OlafIngress."): (r.size, r.bits, r.signed) for r in p4info.PROGRAM.registers
    }
    assert declared == described


def test_counters_match_p4info(v1model: P4Source) -> None:
    pattern = r"\bcounter\s*\(\s*(\w+)\s*,\s*CounterType\.packets\s*\)\s*(\w+)\s*;"
    declared = {name: v1model.value(size) for size, name in re.findall(pattern, v1model.text)}
    assert declared == {c.name.removeprefix("OlafIngress."): c.size for c in p4info.PROGRAM.counters}
    assert len(Outcome) <= declared["outcome_counter"] and max(MsgType) < declared["msg_type_counter"]


def test_actions_match_p4info(v1model: P4Source) -> None:
    declared = {}
    for name, params in re.findall(r"\baction\s+(\w+)\s*\(([^)]*)\)", v1model.text):
        declared[name] = [
            (pname, int(width)) for _, width, pname in re.findall(r"\b(bit|int)<(\d+)>\s+(\w+)", params)
        ]
    described = {
        a.name.split(".")[-1]: [(p.name, p.bits) for p in a.params]
        for a in p4info.PROGRAM.actions
        if a.name != "NoAction"
    }
    assert declared == described


def test_tables_match_p4info(v1model: P4Source) -> None:
    tables = dict(re.findall(r"\btable\s+(\w+)\s*\{(.*?)\n\s*\}\s*\n", v1model.text, flags=re.S))
    described = {t.name.split(".")[-1]: t for t in p4info.PROGRAM.tables}
    assert set(tables) == set(described)
    for name, body in tables.items():
        t = described[name]
        keys = re.findall(r"([\w.]+)\s*:\s*(exact|lpm|ternary)\s*;", body)
        assert [(k, m.upper()) for k, m in keys] == [(f.name, f.match_type) for f in t.keys], name
        actions = re.search(r"actions\s*=\s*\{([^}]*)\}", body).group(1)
        assert [a.strip() for a in actions.split(";") if a.strip()] == [
            a.split(".")[-1] for a in t.actions
        ], name
        default = re.search(r"default_action\s*=\s*(\w+)\s*\(", body).group(1)
        assert default == t.default_action.split(".")[-1], name
        size = re.search(r"\bsize\s*=\s*(\w+)\s*;", body)
        assert (v1model.value(size.group(1)) if size else p4info.DEFAULT_TABLE_SIZE) == t.size, name
    config_defaults = described["olaf_config"].default_args
    assert config_defaults == (
        v1model.value("OLAF_DEFAULT_MODE"),
        v1model.value("OLAF_DEFAULT_THRESHOLD"),
        v1model.value("OLAF_DEFAULT_CONGESTION_THRESHOLD"),
        v1model.value("OLAF_DEFAULT_FRAC_BITS"),
        v1model.value("OLAF_DEFAULT_CAPACITY"),
        v1model.value("OLAF_DEFAULT_MAX_CLUSTERS"),
        v1model.value("OLAF_DEFAULT_MAX_BLOCKS"),
    )


def test_controls_are_the_contract_names(v1model: P4Source) -> None:
    controls = re.findall(r"\bcontrol\s+(\w+)\s*\(", v1model.text)
    assert "OlafIngress" in controls and "OlafEgress" in controls
    main = re.search(r"V1Switch\s*\((.*?)\)\s*main\s*;", v1model.text, flags=re.S).group(1)
    assert [s.strip().rstrip("()") for s in main.split(",")][2:4] == ["OlafIngress", "OlafEgress"]


def test_p4info_file_is_current() -> None:
    assert (P4_DIR / "olaf.p4info.txtpb").read_text() == p4info.render()


def test_p4info_parses_as_p4runtime_proto() -> None:
    from google.protobuf import text_format
    from p4.config.v1 import p4info_pb2

    info = text_format.Parse((P4_DIR / "olaf.p4info.txtpb").read_text(), p4info_pb2.P4Info())
    names = {t.preamble.name: t for t in info.tables}
    assert set(names) == {"OlafIngress.olaf_config", "OlafIngress.ipv4_lpm", "OlafEgress.drop_sim"}
    ids = [x.preamble.id for kind in (info.tables, info.actions, info.counters, info.registers) for x in kind]
    assert len(ids) == len(set(ids))


def test_p4c_id_algorithm_on_known_ids() -> None:
    """Ids that p4c emitted for p4lang programs (tutorials, p4c testdata)."""
    known = {
        (p4info.PREFIX_ACTION, "NoAction"): 21257015,
        (p4info.PREFIX_ACTION, "MyIngress.drop"): 25652968,
        (p4info.PREFIX_TABLE, "MyIngress.dmac_table"): 35550025,
        (p4info.PREFIX_TABLE, "ingress.ecmp_group"): 38446407,
        (p4info.PREFIX_REGISTER, "ingress.flowlet_id"): 384519412,
    }
    for (prefix, name), id_ in known.items():
        assert p4info.assign_ids(prefix, [name])[name] == id_, name
    assert p4info.aliases(["ingress._drop", "egress._drop", "ingress.set_nhop"]) == {
        "ingress._drop": "ingress._drop",
        "egress._drop": "egress._drop",
        "ingress.set_nhop": "set_nhop",
    }


# -- TNA resource arithmetic ---------------------------------------------------------------


@pytest.fixture(scope="module")
def tna() -> P4Source:
    return P4Source(TNA_FILES)


def test_tna_resubmit_header_is_64_bits(tna: P4Source) -> None:
    """Tofino 1 resubmits at most 8 bytes of metadata with a packet."""
    assert sum(bits for _, bits, _ in tna.header_fields("olaf_resubmit_t")) == 64


def test_tna_stateful_alus_fit_tofino1(tna: P4Source) -> None:
    """Every Register is one stateful ALU: queue state + one per value <= 12 stages x 4."""
    values_file = next(f for f in tna.files if f.name == "values.p4")
    per_value = len(re.findall(r"\bRegister<", strip_comments(values_file.read_text())))
    others = sum(
        len(re.findall(r"\bRegister<", strip_comments(f.read_text()))) for f in tna.files if f != values_file
    )
    instances = len(set(re.findall(r"OLAF_VALUE_INSTANCE\((\d+)\)", tna.text)))
    applies = len(set(re.findall(r"OLAF_VALUE_APPLY\((\d+)\)", tna.text)))
    assert instances == applies == tna.value("OLAF_TNA_V")
    assert per_value == 1 and others + per_value * instances <= 48


def test_tna_uses_the_contract_names(tna: P4Source) -> None:
    for name in ("olaf_config", "ipv4_lpm", "drop_sim", "util_lookup"):
        assert re.search(r"\btable\s+" + name + r"\b", tna.text), name
    for name in (
        "outcome_counter",
        "msg_type_counter",
        "reg_occupied",
        "reg_read_ptr",
        "reg_write_ptr",
        "reg_active_clusters",
        "reg_cluster_count",
        "reg_index",
    ):
        assert re.search(r"\)\s*" + name + r"\s*;", tna.text), name


def signed_register_misuses(text: str) -> list[str]:
    """Uses of an int<W> register's read-back that bmv2 gets wrong.

    bmv2 holds a register cell as the unsigned number of its bits and register_read hands
    that number over, so a local read from a register<int<W>> must only be cast to
    bit<W> (p4c: & mask), never compared or added as it is. Registers whose values feed
    signed arithmetic are declared bit<W> instead and re-signed by one cast.
    """
    problems = []
    for width, reg in re.findall(r"\bregister<\s*int<(\d+)>\s*>\s*\([^)]*\)\s*(\w+)\s*;", text):
        allowed = (rf"\(bit<{width}>\)\s*$", rf"\bint<{width}>\s+$", r"\.read\(\s*$")
        for target in set(re.findall(rf"\b{reg}\.read\(\s*([\w.\[\]]+)\s*,", text)):
            if "." in target:
                continue  # a header field: deparsed as bytes, which are right
            for use in re.finditer(rf"(?<![\w.]){target}\b", text):
                before = text[max(0, use.start() - 40) : use.start()]
                if not any(re.search(pattern, before) for pattern in allowed):
                    problems.append(f"{reg} read into {target}, used without a (bit<{width}>) cast")
                    break
    return problems


def test_signed_register_reads_are_only_used_unsigned(v1model: P4Source) -> None:
    assert signed_register_misuses(v1model.text) == []
    # The value register feeds |+|, so it is unsigned and re-signed once per read.
    assert re.search(r"\bregister<\s*bit<32>\s*>\s*\(\s*OLAF_VALUE_SLOTS\s*\)\s*reg_values\s*;", v1model.text)


def test_signed_register_check_finds_a_raw_use(v1model: P4Source) -> None:
    keyed = "((bit<32>)hdr.olaf.reward ^ 32w0x80000000) > ((bit<32>)reward ^ 32w0x80000000)"
    assert v1model.text.count(keyed) == 1
    mutated = v1model.text.replace(keyed, "hdr.olaf.reward > reward")
    expected = "reg_slot_reward read into reward, used without a (bit<32>) cast"
    assert signed_register_misuses(mutated) == [expected]
    # The value register as it was before it became bit<32>: read and added as int<32>.
    old = (
        v1model.text.replace("register<bit<32>>(OLAF_VALUE_SLOTS) reg_values;",
                             "register<int<32>>(OLAF_VALUE_SLOTS) reg_values;")
        .replace("bit<32> current;", "int<32> current;")
        .replace("(bit<32>)(((int<32>)current) |+| hdr.values[i].value)", "current |+| hdr.values[i].value")
    )
    assert "reg_values read into current, used without a (bit<32>) cast" in signed_register_misuses(old)
