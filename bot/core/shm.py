"""NCCL's shared memory in a container: `df -Pk /dev/shm` read there, the triage's evidence for an NCCL failure and the
pre-flight's check of a multi-GPU launch. NCCL's shared-memory transport (between GPUs of one node without peer to
peer) makes its segments in /dev/shm, and NCCL fails to initialise when it cannot. Pure: the edges run df."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# NVIDIA's NCCL troubleshooting guide gives a container's /dev/shm 1 GiB in its example (`docker run --shm-size=1g`)
SHM_ADVISED_KIB = 1024 * 1024


@dataclass(frozen=True)
class DfRow:
    """One filesystem of `df -Pk PATH`: the one PATH is on."""

    size_kib: int
    free_kib: int
    mounted_on: str


def parse_df(stdout: str) -> DfRow | None:
    """The last filesystem row of `df -Pk` (POSIX format: name, 1024-blocks, used, available, capacity, mount)."""
    rows = [line.split(None, 5) for line in stdout.strip().splitlines()[1:]]
    if not rows or len(rows[-1]) < 6 or not (rows[-1][1].isdigit() and rows[-1][3].isdigit()):
        return None
    return DfRow(int(rows[-1][1]), int(rows[-1][3]), rows[-1][5])


# NCCL's words for the shared-memory segment it could not make, with its size in bytes (the failure's log, and the
# form NVIDIA's troubleshooting guide quotes)
_SHM_SEGMENT = re.compile(r"shared memory segment \S+ \(size (\d+)\)|failed to extend \S+ to (\d+) bytes")


def shm_evidence(df_stdout: str | None, log_lines: Iterable[str]) -> str:
    """How much room the container's /dev/shm has (from `df -Pk /dev/shm` there, None when unreadable), against the
    segment NCCL's log says it could not make. NCCL keeps its shared-memory transport's buffers there."""
    row = parse_df(df_stdout) if df_stdout is not None else None
    if row is None:
        return "/dev/shm in the container: not readable"
    asked = max((int(m.group(1) or m.group(2)) for line in log_lines for m in _SHM_SEGMENT.finditer(line)),
                default=None)
    text = _room(row)
    if asked is not None:
        more = ", more than is free" if asked > row.free_kib * 1024 else ""
        text += f"; NCCL could not make a {_size(asked)} segment there{more}"
    return text


def _room(row: DfRow) -> str:
    where = "" if row.mounted_on == "/dev/shm" else f" (not its own mount: it is on {row.mounted_on})"
    return f"/dev/shm in the container: {_size(row.free_kib * 1024)} free of {_size(row.size_kib * 1024)}{where}"


def _size(size_bytes: int) -> str:
    return f"{size_bytes / 2**30:.1f} GiB" if size_bytes >= 2**30 else f"{size_bytes / 2**20:.1f} MiB"


def shm_health(df_stdout: str | None, gpus: int) -> tuple[str, str] | None:
    """The pre-flight's word on /dev/shm for a launch over ``gpus`` GPUs ("ok" | "warn", detail); None for one GPU
    (NCCL has no peer there) or when df could not be read. Less free than NVIDIA's guide gives a container is a
    warning, not a failure: NCCL uses it only where the GPUs have no peer-to-peer path."""
    row = parse_df(df_stdout) if df_stdout is not None and gpus > 1 else None
    if row is None:
        return None
    if row.free_kib >= SHM_ADVISED_KIB:
        return "ok", _room(row)
    return "warn", (f"{_room(row)}: NCCL makes its shared-memory segments there (9.2 MiB each in the failures "
                    "seen) and fails to initialise when it cannot; NVIDIA's NCCL guide gives a container 1 GiB")
