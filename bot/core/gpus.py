"""Total memory of GPU models as nvidia-smi reports it (MiB), for planning without a live read.

Values are those printed in the corpus outputs (tests/fixtures/nvidia-smi), except the RTX
A6000, whose 49140 MiB is the ECC-off figure of the seed host (46068 MiB with ECC on).
A live `/gpu status` read always wins over this table.
"""

from __future__ import annotations

import re

KNOWN_GPU_MIB: dict[str, int] = {
    "RTX A6000": 49140,
    "RTX A5000": 24564,
    "GeForce RTX 3090": 24576,
    "GeForce RTX 4090": 24564,
    "GeForce RTX 5090": 32607,
    "L40S": 46068,
    "A10G": 23028,
    "Tesla T4": 15360,
    "A100-SXM4-40GB": 40537,
    "A100-SXM4-80GB": 81920,
    "H100 80GB HBM3": 81559,
    "H100 NVL": 95830,
    "H200": 143771,
    "RTX PRO 6000 Blackwell Max-Q Workstation Edition": 97887,
}


def gpu_total_mib(name: str) -> int | None:
    """Look a GPU up by a loose name: "A6000", "rtx 3090", "NVIDIA H100 80GB HBM3"."""
    wanted = name.lower().replace("nvidia", "").replace("geforce", "").strip()
    for known, mib in KNOWN_GPU_MIB.items():
        if known.lower().replace("geforce", "").strip() == wanted:
            return mib
    # whole words only: "H20" is not the H200, "A100" is either A100 (ambiguous: None)
    word = re.compile(rf"(?<![\w-]){re.escape(wanted)}(?![\w-])") if wanted else None
    matches = [mib for known, mib in KNOWN_GPU_MIB.items() if word and word.search(known.lower())]
    return matches[0] if len(set(matches)) == 1 else None
