"""The device configs pushed with the P4Info: one job, building the bytes a target wants
(bmv2's JSON, a Tofino's packed binaries); the software switch takes none."""

from __future__ import annotations

from pathlib import Path


def bmv2_device_config(json_path: str | Path) -> bytes:
    """bmv2's device config is the JSON that ``p4c-bm2-ss`` writes."""
    return Path(json_path).read_bytes()


def tofino_device_config(program_name: str, binary_path: str | Path, context_path: str | Path) -> bytes:
    """Tofino device config in PI's packing (PI's Barefoot backend, Stratum's ``stratum_bf``).

    Little-endian 32-bit length and bytes of the program name, then of ``tofino.bin``,
    then of ``context.json`` (both from ``bf-p4c``'s output directory), as ONOS and PI's
    tools build it. Stratum's ``stratum_bfrt`` does not read this packing: it takes a
    ``BfPipelineConfig`` made by Stratum's ``bf_pipeline_builder``, which ``push_pipeline``
    sends as given (``olaf ctl push --device-config FILE``).
    """
    parts = [program_name.encode(), Path(binary_path).read_bytes(), Path(context_path).read_bytes()]
    return b"".join(len(p).to_bytes(4, "little") + p for p in parts)
