"""Weight broadcast of the embedded mode: a shared-memory board with a version.

In the embedded ``olaf run`` the parameter server and the workers share a machine,
so instead of MODEL messages through the switch the server publishes its weights on
a ``multiprocessing.shared_memory`` segment, the "separate channel" of the issue.
Layout: ``int64 seq``, ``int64 version``, then the float32 weights. ``seq`` is a
seqlock: odd while the single writer is copying, so a reader that sees it odd or
changed across its copy retries and never takes torn weights.
"""

from __future__ import annotations

import time
from multiprocessing import shared_memory

import numpy as np

_HEADER = 16


class WeightBoard:
    """Single writer (the parameter server), any number of readers (worker processes)."""

    def __init__(self, num_params: int, name: str | None = None) -> None:
        """Create a board for ``num_params`` weights, or attach to ``name`` if given."""
        if num_params < 1:
            raise ValueError("num_params must be >= 1")
        size = _HEADER + 4 * num_params
        self.owner = name is None
        self._shm = shared_memory.SharedMemory(name=name, create=self.owner, size=size)
        if self._shm.size < size:
            self._shm.close()
            raise ValueError(f"shared memory {name!r} holds {self._shm.size} bytes, need {size}")
        self._header = np.ndarray(2, np.int64, self._shm.buf, 0)
        self._weights = np.ndarray(num_params, np.float32, self._shm.buf, _HEADER)
        if self.owner:
            self._header[:] = (0, -1)

    @property
    def name(self) -> str:
        return self._shm.name

    @property
    def version(self) -> int:
        return int(self._header[1])

    def publish(self, weights: np.ndarray, version: int) -> None:
        if weights.shape != self._weights.shape:
            raise ValueError(f"expected {self._weights.shape} weights, got {weights.shape}")
        self._header[0] += 1
        self._weights[:] = weights
        self._header[1] = version
        self._header[0] += 1

    def read(self, newer_than: int = -1, timeout: float = 1.0) -> tuple[np.ndarray, int] | None:
        """A consistent copy of (weights, version), or None if not newer than ``newer_than``."""
        deadline = time.monotonic() + timeout
        while True:
            before = int(self._header[0])
            if before % 2 == 0:
                version = int(self._header[1])
                if version <= newer_than:
                    return None
                weights = self._weights.copy()
                if int(self._header[0]) == before:
                    return weights, version
            if time.monotonic() > deadline:
                raise TimeoutError("weight board stayed mid-write")
            time.sleep(0)

    def close(self) -> None:
        """Detach; the owner also removes the segment."""
        del self._header, self._weights
        self._shm.close()
        if self.owner:
            self._shm.unlink()
