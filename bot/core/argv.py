"""Builders of remote argv tuples. The only place remote commands are spelled.

Every builder takes validated, typed arguments and returns a tuple of strings; the SSH
transport joins it with :func:`shlex.join`, so no argument is ever interpreted by a shell.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence

Argv = tuple[str, ...]

GPU_QUERY_FIELDS: tuple[str, ...] = (
    "index", "uuid", "name", "pci.bus_id", "memory.used", "memory.total", "utilization.gpu",
    "temperature.gpu", "power.draw", "power.limit", "fan.speed", "pstate", "compute_mode", "driver_version",
)
APPS_QUERY_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "process_name", "used_memory")


def nvidia_smi_query_gpu(fields: Sequence[str] = GPU_QUERY_FIELDS) -> Argv:
    return ("nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits")


def nvidia_smi_query_apps(fields: Sequence[str] = APPS_QUERY_FIELDS) -> Argv:
    return ("nvidia-smi", "--query-compute-apps=" + ",".join(fields), "--format=csv,noheader,nounits")


def nvidia_smi_versions() -> Argv:
    """Driver and CUDA version: the XML header, with the smallest display section."""
    return ("nvidia-smi", "-q", "-x", "-d", "COMPUTE")


def _check_int(value: int, what: str, low: int) -> str:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{what} must be an integer >= {low}, got {value!r}")
    return str(value)


def pct_exec(vmid: int, argv: Argv) -> Argv:
    """Run ``argv`` inside LXC container ``vmid`` (no shell: ``lxc-attach`` execs it)."""
    if not argv:
        raise ValueError("empty argv")
    return ("pct", "exec", _check_int(vmid, "vmid", 100), "--keep-env", "0", "--", *argv)


def read_cgroups(pids: Iterable[int], proc_root: str = "/proc") -> Argv:
    """Print ``<proc_root>/<pid>/cgroup:<line>`` for each PID (missing PIDs are skipped)."""
    paths = [f"{proc_root.rstrip('/')}/{_check_int(pid, 'pid', 1)}/cgroup" for pid in sorted(set(pids))]
    return ("grep", "-H", "-s", "", *paths)


def with_timeout(seconds: int, argv: Argv, kill_after: int = 5) -> Argv:
    """Bound a command on the far side: an SSH client timeout alone leaves it running."""
    return ("timeout", "-k", _check_int(kill_after, "kill_after", 1), _check_int(seconds, "seconds", 1), *argv)


def read_file(path: str) -> Argv:
    return ("cat", "--", checked_path(path))


def safetensors_sizes(directory: str) -> Argv:
    """Byte size of each ``*.safetensors`` file directly in ``directory`` (no shell glob)."""
    return ("find", checked_path(directory), "-maxdepth", "1", "-name", "*.safetensors", "-printf", r"%s\n")


# prints {"package": "version" | null, ...} for the packages named in argv (a fixed script: no user text in it)
VERSIONS_SCRIPT = (
    "import json, sys, importlib.metadata as m\n"
    "out = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        out[name] = m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        out[name] = None\n"
    "print(json.dumps(out))\n"
)
PACKAGE_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def python_package_versions(python: str, packages: Sequence[str]) -> Argv:
    import re

    for name in packages:
        if not re.match(PACKAGE_RE, name):
            raise ValueError(f"not a package name: {name!r}")
    return (python, "-c", VERSIONS_SCRIPT, *packages)


def checked_path(path: str) -> str:
    """An absolute path without NUL, newlines or '..' (it is still passed as one argv element)."""
    if not path.startswith("/") or "\0" in path or "\n" in path or "/../" in path + "/" or len(path) > 4096:
        raise ValueError(f"not an absolute path: {path[:80]!r}")
    return path


def to_command(argv: Argv) -> str:
    return shlex.join(argv)
