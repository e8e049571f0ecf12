"""Every generated table in README.md and docs/ is what its command prints from the
committed CSVs (docs/results/tables.py): a table nobody can regenerate fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def tables():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("tables", ROOT / "docs" / "results" / "tables.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_every_generated_table_is_what_its_command_prints() -> None:
    module = tables()
    blocks = [m for path in module.documents() for m in module.BLOCK.finditer(path.read_text())]
    assert len(blocks) >= 10, "docs/results.md's tables are generated blocks"
    assert module.stale_blocks() == [], "run .venv/bin/python docs/results/tables.py"


def test_a_changed_table_is_caught_and_rewritten(tmp_path: Path) -> None:
    module = tables()
    cmd = "olaf sweep docs/results/sweep-headline.toml --report --top olaf-rev2"
    good = f"<!-- generated: {cmd} -->\n{module.output_of(cmd)}<!-- end generated -->\n"
    tampered = good.replace("not estimable", "1.23 [1.01, 1.50]", 1)
    assert tampered != good
    assert module.rebuild("before\n" + tampered + "after\n") == "before\n" + good + "after\n"
    with pytest.raises(ValueError):
        module.output_of("rm -rf /")
