"""GPU peer access, as `nvidia-smi topo -p2p r` reports it, and what it means for a launch.

SGLang's custom all-reduce (on by default at tp > 1) exchanges activations through CUDA peer
access. Where the GPUs or the platform lack it — consumer cards, some PCIe chipsets, IOMMU/ACS
settings, a VM or container passthrough — a launch can stop with "peer access is not supported
between these two devices" (corpus: sglang-4814), and the fix is `--disable-custom-all-reduce`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# the legend nvidia-smi prints under the matrix
P2P_STATUS = {
    "OK": "Status Ok", "CNS": "Chipset not supported", "GNS": "GPU not supported",
    "TNS": "Topology not supported", "NS": "Not supported", "DR": "Disabled by regkey", "U": "Unknown",
}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ROW = re.compile(r"^\s*GPU(\d+)\s+(.*)$")


def parse_p2p_matrix(text: str) -> dict[tuple[int, int], str]:
    """(row GPU, column GPU) -> status for every off-diagonal cell; {} when the text holds no matrix.

    The header names the columns (``GPU0 GPU1 ...``); rows start with their GPU, tab- or
    space-separated, with or without the legend, ANSI underlines stripped."""
    columns: list[int] = []
    cells: dict[tuple[int, int], str] = {}
    for raw in text.splitlines():
        line = _ANSI.sub("", raw)
        if not columns:
            names = line.split()
            if names and all(re.fullmatch(r"GPU\d+", n) for n in names):
                columns = [int(n[3:]) for n in names]
            continue
        row = _ROW.match(line)
        if row is None:
            if line.strip().startswith("Legend"):
                break
            continue
        values = row.group(2).split()
        for column, value in zip(columns, values, strict=False):
            if column != int(row.group(1)):
                cells[(int(row.group(1)), column)] = value
    return cells


def peer_access_check(matrix: dict[tuple[int, int], str], gpus: Sequence[int]) -> tuple[str, str]:
    """("ok" | "warn", detail) for the GPUs a launch uses (their indices), read both ways."""
    if not matrix:
        return "warn", "nvidia-smi printed no P2P matrix: peer access between the launch GPUs is unknown"
    used = sorted(set(gpus))
    missing = [(a, b) for a in used for b in used if a != b and (a, b) not in matrix]
    if missing:
        return "warn", f"the P2P matrix does not list GPU{missing[0][0]}->GPU{missing[0][1]}"
    bad = [(a, b, matrix[(a, b)]) for i, a in enumerate(used) for b in used[i + 1:]
           if matrix[(a, b)] != "OK" or matrix[(b, a)] != "OK"]
    if not bad:
        together = len(used) > 1 and used == list(range(used[0], used[-1] + 1))
        named = f"GPU{used[0]}-GPU{used[-1]}" if together else ", ".join(f"GPU{i}" for i in used)
        return "ok", f"peer access OK between {named}"
    a, b, status = bad[0]
    status = status if status != "OK" else matrix[(b, a)]
    named = P2P_STATUS.get(status, status)
    more = f" (and {len(bad) - 1} more pair(s))" if len(bad) > 1 else ""
    return "warn", (f"GPU{a}<->GPU{b}: {status} ({named}){more}: SGLang's custom all-reduce needs peer access and "
                    "can stop with 'peer access is not supported between these two devices'; add "
                    "--disable-custom-all-reduce")
