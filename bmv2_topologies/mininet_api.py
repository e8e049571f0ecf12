"""Mininet's Python API from Debian's ``mininet`` package, inside the project's venv.

Debian installs Mininet 2.3.0 for the system Python (``/usr/lib/python3/dist-packages``);
the project runs on the venv's Python (same minor version, 3.11). Putting all of
dist-packages on ``sys.path`` would let Debian's copies of numpy, grpc etc. shadow or mix
with the venv's, so only the ``mininet`` package itself is loaded from there, by file
location; its own imports are the standard library and ``mininet.*``.
Set ``OLAF_MININET_DIR`` to use a Mininet installed elsewhere (the directory holding
``mininet/__init__.py``'s parent).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
import warnings
from pathlib import Path
from types import ModuleType

SEARCH = ("/usr/lib/python3/dist-packages", "/usr/local/lib/python3/dist-packages")


class MininetMissing(RuntimeError):
    """Mininet or one of the programs it runs is not installed; the message says how to fix it."""


def _locate() -> Path | None:
    dirs = [os.environ["OLAF_MININET_DIR"]] if os.environ.get("OLAF_MININET_DIR") else list(SEARCH)
    for d in dirs:
        init = Path(d) / "mininet" / "__init__.py"
        if init.is_file():
            return init
    return None


def load_mininet() -> ModuleType:
    """The ``mininet`` package (already imported, importable, or loaded from Debian's copy)."""
    if "mininet" in sys.modules:
        return sys.modules["mininet"]
    try:
        return importlib.import_module("mininet")
    except ImportError:
        pass
    init = _locate()
    if init is None:
        raise MininetMissing("Mininet is not installed: apt-get install --no-install-recommends mininet")
    spec = importlib.util.spec_from_file_location(
        "mininet", init, submodule_search_locations=[str(init.parent)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mininet"] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules["mininet"]
        raise
    return module


def mininet_modules() -> tuple[ModuleType, ModuleType, ModuleType]:
    """``(mininet.node, mininet.link, mininet.log)``, with Mininet's console logging quietened."""
    load_mininet()
    with warnings.catch_warnings():
        # mininet.node imports distutils (deprecated in 3.11, still present).
        warnings.simplefilter("ignore", DeprecationWarning)
        node = importlib.import_module("mininet.node")
        link = importlib.import_module("mininet.link")
        log = importlib.import_module("mininet.log")
    log.setLogLevel("warning")
    return node, link, log


def missing_requirements() -> str | None:
    """None when a testbed can be built here, else why not (for skips and error messages)."""
    if os.geteuid() != 0:
        return "Mininet needs root (namespaces, veth pairs, tc)"
    for tool, package in (("mnexec", "mininet"), ("ip", "iproute2"), ("tc", "iproute2"),
                          ("ethtool", "ethtool"), ("ifconfig", "net-tools")):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (apt-get install --no-install-recommends {package})"
    try:
        load_mininet()
    except MininetMissing as e:
        return str(e)
    return None
