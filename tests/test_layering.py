"""The import layering of DESIGN.md §6, checked on the source: the ground floors never
import upward, and ``olaf.drl`` has no import cycle, not even one held apart by imports
inside functions (those count here as much as the ones at the top)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("worker_transport", "dataplane", "control_plane", "verification", "bmv2_topologies",
            "olaf")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_imports(path: Path) -> set[str]:
    """Every project module ``path`` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from pkg import mod`` may name a module: count both forms.
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found.update(n for n in names if n.split(".")[0] in PACKAGES)
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    return {name: {m for m in project_imports(path) if m in files and m != name}
            for name, path in files.items()}


def cycle_in(g: dict[str, set[str]], nodes: set[str]) -> list[str] | None:
    """One import cycle among ``nodes``, or None (depth-first search)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g[n] & nodes):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)) is not None:
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(nodes):
        if n not in state and (found := visit(n)) is not None:
            return found
    return None


def test_olaf_drl_has_no_import_cycle() -> None:
    g = graph()
    drl = {n for n in g if n.startswith("olaf.drl.")}
    assert len(drl) > 20
    assert cycle_in(g, drl) is None


def test_the_cycle_finder_finds_a_cycle() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycle_in(g, set(g)) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": set()}, {"a", "b"}) is None


@pytest.mark.parametrize(("package", "forbidden"), [
    ("worker_transport", ("dataplane", "control_plane", "olaf", "bmv2_topologies", "verification")),
    ("dataplane", ("control_plane", "olaf", "bmv2_topologies", "verification")),
    ("control_plane", ("olaf", "bmv2_topologies")),
])
def test_ground_floors_never_import_upward(package: str, forbidden: tuple[str, ...]) -> None:
    g = graph()
    upward = sorted((n, m) for n, deps in g.items() if n.split(".")[0] == package
                    for m in deps if m.split(".")[0] in forbidden)
    assert upward == []


def test_each_learner_config_lives_beside_its_algorithm() -> None:
    from olaf.drl.a2c import A2C, A2CConfig
    from olaf.drl.config import RunConfig
    from olaf.drl.impact import Impact, ImpactConfig
    from olaf.drl.server import PsConfig

    assert (Impact.Config, A2C.Config) == (ImpactConfig, A2CConfig)
    cfg = RunConfig()
    assert (cfg.impact, cfg.learner, cfg.ps) == (ImpactConfig(), A2CConfig(), PsConfig())


def test_building_the_cli_does_not_import_the_learners() -> None:
    # Every subcommand's parser is built for any `olaf ...`, so reading RunConfig's
    # defaults there must not pay for torch (2 s here): the learners import it.
    import subprocess
    import sys

    code = ("import sys, olaf.cli; olaf.cli.build_parser(); "
            "loaded = sorted({'torch', 'olaf.drl.impact', 'olaf.drl.a2c'} & set(sys.modules)); "
            "print(loaded); sys.exit(bool(loaded))")
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
