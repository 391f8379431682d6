"""Total memory of GPU models as nvidia-smi reports it (MiB), for planning without a live read.

Values are those printed in the corpus outputs (tests/fixtures/nvidia-smi), except:
- the RTX A6000, whose 49140 MiB is the ECC-off figure of the seed host (46068 MiB with ECC on);
- the H20, H100 PCIe, H800, A100 80GB PCIe, B200, L4, RTX 6000 Ada, A800 80GB, L40, A40, L20, A10 and
  the V100s, read from public
  `nvidia-smi --query-gpu=name,memory.total --format=csv` outputs (each seen in several independent
  copies with the same figure; see tests/fixtures/SOURCES.md).
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
    "H100 PCIe": 81559,
    "H800": 81559,
    "H20": 97871,
    "A100 80GB PCIe": 81920,
    "B200": 183359,
    "L4": 23034,
    "RTX 6000 Ada Generation": 49140,
    "H200": 143771,
    "RTX PRO 6000 Blackwell Max-Q Workstation Edition": 97887,
    "A800-SXM4-80GB": 81920,
    "L40": 46068,
    "A40": 46068,
    "L20": 46068,
    "A10": 23028,
    "Tesla V100-SXM2-32GB": 32768,
    "Tesla V100-PCIE-16GB": 16384,
}


def gpu_matches(name: str) -> dict[str, int]:
    """The known GPUs a loose name ("A6000", "rtx 3090", "NVIDIA H100 80GB HBM3") may mean: the
    exact model when the name is one, else every model containing it as whole words ("H20" is
    not the H200)."""
    wanted = name.lower().replace("nvidia", "").replace("geforce", "").strip()
    if not wanted:
        return {}
    for known, mib in KNOWN_GPU_MIB.items():
        if known.lower().replace("geforce", "").strip() == wanted:
            return {known: mib}
    return {known: mib for known, mib in KNOWN_GPU_MIB.items() if _has_words(known.lower(), wanted)}


# a count written with the model: "2x RTX A6000", "8 × H20", "8*H20" lead; "RTX 3090 x2", "H100 ×8" trail (an x
# after a space, so "RTX 3090" keeps its X)
_LEADING_COUNT = re.compile(r"^\s*(\d+)\s*[xX×*]\s*(?=\S)")
_TRAILING_COUNT = re.compile(r"(?:\s+[xX]|\s*[×*])\s*(\d+)\s*$")


def split_gpu_count(name: str) -> tuple[int | None, str]:
    """The count and the model of a name written with how many there are ("2x RTX A6000" -> (2, "RTX A6000"));
    (None, name) when it states none."""
    for pattern in (_LEADING_COUNT, _TRAILING_COUNT):
        if found := pattern.search(name):
            return int(found.group(1)), (name[:found.start()] + name[found.end():]).strip()
    return None, name.strip()


def gpu_total_mib(name: str) -> int | None:
    """Total MiB of the GPU a loose name means, or None when it is unknown or its candidates
    differ in size ("A100": 40 or 80 GB; "H100": the SXM and PCIe have 81559 MiB, the NVL 95830)."""
    sizes = set(gpu_matches(name).values())
    return sizes.pop() if len(sizes) == 1 else None


# compute capability by model, as NVIDIA publishes it (developer.nvidia.com/cuda-gpus); matched as
# whole words in the GPU's name, so "H200" is not "H20" and "L40S" is not "L4"
COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "A100": (8, 0), "A800": (8, 0), "A30": (8, 0),
    "RTX A6000": (8, 6), "RTX A5000": (8, 6), "RTX A4000": (8, 6), "A40": (8, 6), "A10": (8, 6), "A10G": (8, 6),
    "RTX 3090": (8, 6), "RTX 3080": (8, 6), "RTX 3070": (8, 6), "RTX 3060": (8, 6),
    "RTX 4090": (8, 9), "RTX 4080": (8, 9), "L40S": (8, 9), "L40": (8, 9), "L4": (8, 9), "L20": (8, 9),
    "RTX 6000 Ada": (8, 9),
    "H100": (9, 0), "H800": (9, 0), "H200": (9, 0), "H20": (9, 0), "GH200": (9, 0),
    "B200": (10, 0), "B300": (10, 3), "GB200": (10, 0),
    "RTX 5090": (12, 0), "RTX PRO 6000": (12, 0),
    "T4": (7, 5), "RTX 2080": (7, 5), "RTX 2070": (7, 5), "V100": (7, 0),
}


def gpu_compute_capability(name: str) -> tuple[int, int] | None:
    """(major, minor) of an NVIDIA GPU from its name ("NVIDIA RTX A6000" -> (8, 6)); None when unknown."""
    found = {cap for model, cap in COMPUTE_CAPABILITY.items() if _has_words(name.lower(), model.lower())}
    return found.pop() if len(found) == 1 else None


def _has_words(text: str, words: str) -> bool:
    """``words`` in ``text`` as whole words: "h20" is not in "h200", "l4" not in "l40s"."""
    return re.search(rf"(?<!\w){re.escape(words)}(?!\w)", text) is not None
