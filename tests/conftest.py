"""Test-suite set-up shared by every test file.

The P4 toolchains (p4c, bmv2, p4c-barefoot) that ``scripts/setup.sh`` unpacks
from ``../shared/p4tools/`` live in the ignored ``.p4tools/`` folder; putting
its ``bin/`` first on PATH here is what lets the P4 tests find them. Without
the folder, PATH is left alone and those tests skip with their reason (a user
who installed p4c and bmv2 system-wide gets theirs).
"""

import os
from pathlib import Path

P4TOOLS_BIN = Path(__file__).resolve().parent.parent / ".p4tools" / "p4tools" / "bin"

if P4TOOLS_BIN.is_dir() and str(P4TOOLS_BIN) not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = f"{P4TOOLS_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
