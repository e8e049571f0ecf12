"""The testbed's one error type, in a module of its own: the testbed and the switch
launchers it drives (bmv2.py) both raise it, and neither imports the other for it."""

from __future__ import annotations


class TestbedError(RuntimeError):
    """The testbed could not be built or a process in it failed; the message says which."""
