"""The P4 sources agree with the Python wire format, and the committed p4info is p4c's.

The P4 files are read as text (comments stripped, #define and `const` values resolved),
so these checks need no compiler. Checked for the v1model program (p4/include/) and the
TNA program (p4/tna/): the OLAF header's field names, widths, signedness and order, the
message-type, outcome, mode and verdict codes, the UDP port, V and header length, the
default configuration; for v1model, that the generated per-value files are current and
that p4/olaf.p4info.txtpb describes the declared sizes and is served by the control
plane. When p4c-bm2-ss is on PATH, the program is compiled and the p4info it writes must
equal the committed one (ordering of repeated entries aside).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dataplane.queue import FEEDBACK_REVISIONS, SLOT_FIELDS, QueueConfig
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
    # The feedback revisions olaf_config's feedback selects (DESIGN.md section 3, Feedback).
    assert (c["FEEDBACK_REV2"], c["FEEDBACK_REV3"]) == FEEDBACK_REVISIONS


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
    assert source.value("OLAF_DEFAULT_CLUSTER_QUOTA") == d.cluster_quota == d.capacity  # no limit
    assert source.value("OLAF_DEFAULT_FEEDBACK") == d.feedback == FEEDBACK_REVISIONS[-1]  # revision 3
    # The compiled sizes hold at least the defaults.
    assert source.value("OLAF_CAPACITY") >= d.capacity
    assert source.value("OLAF_MAX_CLUSTERS") >= d.max_clusters
    assert source.value("OLAF_MAX_BLOCKS") >= d.max_blocks


def test_set_config_parameters_are_the_control_planes(source: P4Source) -> None:
    """olaf_config's action on both targets has control_plane.p4info's parameters, widths
    and order (the controller writes the same entry everywhere), cluster_quota's 16 bits
    and feedback's 8 included, and those widths hold every quota the reference accepts
    (1..capacity) and every feedback revision."""
    from control_plane.p4info import CONFIG_PARAMS

    match = re.search(r"action\s+set_config\s*\((.*?)\)\s*\{", strip_comments(source.text), flags=re.S)
    assert match, "no action set_config"
    params = [re.fullmatch(r"\s*(?:bit|int)<(\d+)>\s+(\w+)\s*", p) for p in match.group(1).split(",")]
    assert all(params), match.group(1)
    assert [(m.group(2), int(m.group(1))) for m in params] == list(CONFIG_PARAMS.items())
    assert CONFIG_PARAMS["cluster_quota"] == CONFIG_PARAMS["capacity"]  # a quota is at most capacity
    assert source.value("OLAF_CAPACITY") < 1 << CONFIG_PARAMS["cluster_quota"]
    assert max(FEEDBACK_REVISIONS) < 1 << CONFIG_PARAMS["feedback"]
    # Settings added after the first program keep the earlier parameters' P4Runtime ids.
    assert list(CONFIG_PARAMS)[-2:] == ["cluster_quota", "feedback"]


# -- source rules ---------------------------------------------------------------------------
#
# What a compiler does not report: a for loop compiles for bmv2 but runs once
# (shared/P4-NOTES.md). The v1model program is otherwise checked by p4c itself
# (tests/test_vectors_bmv2.py compiles it with warnings as errors and runs it).


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


def test_v1model_has_no_for_loops() -> None:
    """P4-NOTES.md: p4c 1.2.5.16 compiles a for loop's body once for bmv2 and simple_switch
    runs it once; the per-value statements are generated instead, so every header-stack
    index is a literal."""
    source = P4Source(V1MODEL_FILES)
    assert not re.search(r"\bfor\s*\(", source.text)
    code = "\n".join(line for line in source.text.splitlines() if not line.lstrip().startswith("#"))
    indices = set(re.findall(r"\bvalues\[([^\]]+)\]", code))
    assert indices and all(re.fullmatch(r"\d+", i) for i in indices), indices


def _gen_values():  # noqa: ANN202 - a module loaded from p4/tools (not a package)
    spec = importlib.util.spec_from_file_location("olaf_gen_values", P4_DIR / "tools" / "gen_values.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_value_statements_are_current(tmp_path: Path) -> None:
    """p4/include/values_*.p4 are what p4/tools/gen_values.py writes for OLAF_V; an edit
    of V or of a generated file without regenerating fails here."""
    gen = _gen_values()
    v = P4Source(V1MODEL_FILES).value("OLAF_V")
    assert gen.values_per_block() == v
    assert gen.stale() == [], "run: python p4/tools/gen_values.py"
    for name, text in gen.render(v).items():
        indices = [int(i) for i in re.findall(r"\bvalues\[(\d+)\]", text)]
        assert sorted(set(indices)) == list(range(v)), name
        assert f'#include "{name}"' in (P4_DIR / "include" / "queue.p4").read_text(), name
    # The check sees a stale copy: one value missing, or files written for another V.
    for name, text in gen.render(v).items():
        (tmp_path / name).write_text(text)
    assert gen.stale(tmp_path, v) == []
    merge = tmp_path / "values_merge.p4"
    merge.write_text(merge.read_text().replace("hdr.values[7]", "hdr.values[6]"))
    assert gen.stale(tmp_path, v) == ["values_merge.p4"]
    assert len(gen.stale(tmp_path, v * 2)) == len(gen.FRAGMENTS)
    assert gen.main(["--check"]) == 0


def test_no_run_time_division(source: P4Source) -> None:
    """p4c rejects / and % on run-time operands outside actions (p4lang/p4c#1232);
    the programs use none at all."""
    code = "\n".join(line for line in source.text.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"[/%]", code)


# -- v1model program against the p4info ----------------------------------------------------
#
# p4/olaf.p4info.txtpb is the file p4c-bm2-ss writes (copied from its output); the
# control plane (control_plane/, the software switch's P4Runtime service, olaf ctl) loads it.


@pytest.fixture(scope="module")
def v1model() -> P4Source:
    return P4Source(V1MODEL_FILES)


def load_p4info(path: Path):  # noqa: ANN201 - p4info_pb2.P4Info, imported lazily
    from google.protobuf import text_format
    from p4.config.v1 import p4info_pb2

    return text_format.Parse(path.read_text(), p4info_pb2.P4Info())


def canonical(message):  # noqa: ANN001, ANN201 - any protobuf message
    """A copy of ``message`` with every repeated message field sorted by its serialized
    bytes (recursively): p4c does not promise an order for tables, actions, params..."""
    out = type(message)()
    out.CopyFrom(message)
    for field, value in out.ListFields():
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        if field.label == field.LABEL_REPEATED:
            items = sorted((canonical(v) for v in value), key=_serialized)
            del value[:]
            value.extend(items)
        else:
            value.CopyFrom(canonical(value))
    return out


def _serialized(message) -> bytes:  # noqa: ANN001 - any protobuf message
    return message.SerializeToString(deterministic=True)


COMMITTED_P4INFO = P4_DIR / "olaf.p4info.txtpb"


def test_canonical_ignores_order_only() -> None:
    info = load_p4info(COMMITTED_P4INFO)
    shuffled = type(info)()
    shuffled.CopyFrom(info)
    shuffled.actions.reverse()
    shuffled.tables[0].action_refs.reverse()
    shuffled.registers.reverse()
    assert shuffled != info and canonical(shuffled) == canonical(info)
    shuffled.registers[0].size += 1
    assert canonical(shuffled) != canonical(info)


@pytest.mark.skipif(shutil.which("p4c-bm2-ss") is None, reason="p4c-bm2-ss not on PATH")
def test_committed_p4info_is_what_p4c_writes(tmp_path: Path) -> None:
    """Compile p4/olaf.p4 (warnings are errors) and compare the p4info p4c writes with the
    committed one: same objects, names, ids, aliases, sizes, types and initial default
    action bytes, in whatever order."""
    compiled = tmp_path / "olaf.p4info.txtpb"
    cmd = ["p4c-bm2-ss", "--arch", "v1model", "--Werror", "--p4runtime-files", str(compiled),
           "-o", str(tmp_path / "olaf.json"), str(P4_DIR / "olaf.p4")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    fresh, committed = canonical(load_p4info(compiled)), canonical(load_p4info(COMMITTED_P4INFO))
    assert fresh == committed, "p4/olaf.p4info.txtpb is stale: copy p4c's (p4/README.md, Compile)"


def test_p4info_sizes_follow_the_constants(v1model: P4Source) -> None:
    """The registers and counters the controller reads have the sizes and widths that
    constants.p4 and the wire format give them."""
    info = load_p4info(COMMITTED_P4INFO)
    registers = {r.preamble.name.removeprefix("OlafIngress."): r for r in info.registers}
    assert v1model.value("OLAF_V") == 1 << v1model.value("OLAF_V_SHIFT")
    assert v1model.value("OLAF_MAX_BLOCKS") == 1 << v1model.value("OLAF_BLOCK_SHIFT")
    sizes = {
        "reg_values": v1model.value("OLAF_CAPACITY") * v1model.value("OLAF_V"),
        "reg_index": v1model.value("OLAF_MAX_CLUSTERS") * v1model.value("OLAF_MAX_BLOCKS"),
        "reg_cluster_count": v1model.value("OLAF_MAX_CLUSTERS"),
    }
    for name in ("occupied", "read_ptr", "write_ptr", "active_clusters"):
        sizes[f"reg_{name}"] = 1
    header = {name: (bits, name in SIGNED_FIELDS) for name, bits in HEADER_FIELDS}
    for name in SLOT_FIELDS:
        sizes[f"reg_slot_{name}"] = v1model.value("OLAF_CAPACITY")
        spec = registers[f"reg_slot_{name}"].type_spec.bitstring
        kind = spec.WhichOneof("type_spec")
        assert (getattr(spec, kind).bitwidth, kind == "int") == header[name], name
    assert v1model.value("OLAF_VALUE_SLOTS") == sizes["reg_values"]
    assert v1model.value("OLAF_INDEX_SIZE") == sizes["reg_index"]
    assert {n: r.size for n, r in registers.items()} == sizes
    counters = {c.preamble.name: c.size for c in info.counters}
    assert counters["OlafIngress.outcome_counter"] >= len(Outcome)
    assert counters["OlafIngress.msg_type_counter"] > max(MsgType)


def test_control_plane_serves_the_committed_p4info() -> None:
    """The software switch's P4Runtime schema accepts the compiler's p4info as it is."""
    from control_plane.p4info import Schema
    from control_plane.p4info import load_p4info as control_plane_load

    schema = Schema(control_plane_load(COMMITTED_P4INFO), QueueConfig())
    for name in ("OlafIngress.olaf_config", "OlafIngress.set_config", "OlafIngress.reg_values"):
        assert schema.has(name), name


def test_controls_are_the_contract_names(v1model: P4Source) -> None:
    controls = re.findall(r"\bcontrol\s+(\w+)\s*\(", v1model.text)
    assert "OlafIngress" in controls and "OlafEgress" in controls
    main = re.search(r"V1Switch\s*\((.*?)\)\s*main\s*;", v1model.text, flags=re.S).group(1)
    assert [s.strip().rstrip("()") for s in main.split(",")][2:4] == ["OlafIngress", "OlafEgress"]


def test_p4info_parses_as_p4runtime_proto() -> None:
    from google.protobuf import text_format
    from p4.config.v1 import p4info_pb2

    info = text_format.Parse((P4_DIR / "olaf.p4info.txtpb").read_text(), p4info_pb2.P4Info())
    names = {t.preamble.name: t for t in info.tables}
    assert set(names) == {"OlafIngress.olaf_config", "OlafIngress.ipv4_lpm", "OlafEgress.drop_sim",
                          "OlafIngress.update_source", "OlafIngress.pull_source"}
    ids = [x.preamble.id for kind in (info.tables, info.actions, info.counters, info.registers) for x in kind]
    assert len(ids) == len(set(ids))


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
    for name in ("olaf_config", "ipv4_lpm", "drop_sim", "util_lookup", "share_lookup"):
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
    old = re.sub(
        r"\(bit<32>\)\(\(\(int<32>\)current\) \|\+\| (hdr\.values\[\d+\]\.value)\)",
        r"current |+| \1",
        v1model.text.replace("register<bit<32>>(OLAF_VALUE_SLOTS)", "register<int<32>>(OLAF_VALUE_SLOTS)")
        .replace("bit<32> current;", "int<32> current;"),
    )
    assert "reg_values read into current, used without a (bit<32>) cast" in signed_register_misuses(old)
