"""Processes as ``/proc`` shows them, for the tests that check nothing of a run is left."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def processes(file: str) -> Iterator[tuple[int, bytes]]:
    """(pid, ``/proc/PID/file``) of every process that is still there to be read."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                yield int(entry.name), (entry / file).read_bytes()
            except OSError:
                continue


def stat_fields(stat: bytes) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after ``pid (comm)``: state, ppid, pgrp, ... (comm
    may hold spaces, so split after its closing parenthesis)."""
    return stat[stat.rindex(b")") + 2:].split()


def alive(pid: int) -> bool:
    """Whether ``pid`` is there and not a zombie (a container's init may never reap one,
    and it holds nothing)."""
    try:
        return stat_fields(Path(f"/proc/{pid}/stat").read_bytes())[0] != b"Z"
    except (OSError, ValueError, IndexError):
        return False
