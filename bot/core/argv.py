"""Builders of remote argv tuples. The only place remote commands are spelled.

Every builder takes validated, typed arguments and returns a tuple of strings; the SSH
transport joins it with :func:`shlex.join`, so no argument is ever interpreted by a shell.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bot.core.flags import HOST_RE, launch_env
from bot.core.stacks import HEADER as STACK_HEADER

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


def nvidia_smi_query_memory_errors(fields: Sequence[str]) -> Argv:
    """ECC / retired-page / remapped-row counters, printed *with* a header so a field an older
    driver refuses can be dropped and the answer still read by name."""
    for name in fields:
        if not re.fullmatch(r"[a-z0-9_.]+", name):
            raise ValueError(f"not a query field: {name!r}")
    return ("nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,nounits")


def kernel_log_journal(hours: int) -> Argv:
    """The node's kernel messages of the last ``hours``, with ISO times (systemd journal)."""
    return ("journalctl", "-k", "--no-pager", "-q", "-o", "short-iso", f"--since=-{_check_int(hours, 'hours', 1)}h")


def kernel_log_ring() -> Argv:
    """The kernel ring buffer with ISO times: the fallback where there is no journal."""
    return ("dmesg", "--time-format=iso")


def nvidia_smi_p2p_read() -> Argv:
    """The GPUs' peer-to-peer read capability matrix (what custom all-reduce needs)."""
    return ("nvidia-smi", "topo", "-p2p", "r")


def nvidia_smi_versions() -> Argv:
    """Driver and CUDA version: the XML header, with the smallest display section."""
    return ("nvidia-smi", "-q", "-x", "-d", "COMPUTE")


def _check_int(value: int, what: str, low: int, high: int | None = None) -> str:
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"from {low} to {high}"
        raise ValueError(f"{what} must be an integer {bounds}, got {value!r}")
    return str(value)


def pct_config(vmid: int) -> Argv:
    """Container ``vmid``'s configuration as Proxmox stores it (``key: value`` lines), read on the node."""
    return ("pct", "config", _check_int(vmid, "vmid", 100))


def pct_exec(vmid: int, argv: Argv) -> Argv:
    """Run ``argv`` inside LXC container ``vmid`` (no shell: ``lxc-attach`` execs it)."""
    if not argv:
        raise ValueError("empty argv")
    return ("pct", "exec", _check_int(vmid, "vmid", 100), "--keep-env", "0", "--", *argv)


def stat_device_nodes(paths: Iterable[str]) -> Argv:
    """Each path's file type and, for a device, its major and minor number in hex: one ``path|type|major|minor`` line
    a path (symlinks followed); a path that does not exist gets no line, and stat exits 1."""
    checked = [checked_path(path) for path in paths]
    if not checked:
        raise ValueError("no paths to stat")
    return ("stat", "-L", "-c", "%n|%F|%t|%T", "--", *checked)


def read_proc_entries(pids: Iterable[int], proc_root: str = "/proc") -> Argv:
    """Print ``<proc_root>/<pid>/cgroup:<line>`` for each PID, its ``status`` file's ``NSpgid:`` line (its process
    group in each PID namespace it is in, the container's last) and its ``stat`` line (when it started), then the
    node's ``uptime`` (so that a start time reads as how long it has run); missing PIDs are skipped."""
    root = proc_root.rstrip("/")
    checked = [_check_int(pid, "pid", 1) for pid in sorted(set(pids))]
    paths = [f"{root}/{pid}/{name}" for name in ("cgroup", "status", "stat") for pid in checked]
    return ("grep", "-H", "-s", "-E", r"^([0-9]+:|NSpgid:|[0-9]+ \(|[0-9]+\.[0-9]+ [0-9])", *paths, f"{root}/uptime")


def nvidia_device_holders(proc_root: str = "/proc") -> Argv:
    """Print ``<proc_root>/<pid>/fd <device>`` for each open file descriptor (and ``.../map_files <device>`` for each
    mapping), of any process on the node, of an NVIDIA device node (``/dev/nvidia0``, ``/dev/nvidiactl``, ...): who
    holds a GPU open, whether or not nvidia-smi lists memory for it. ``find`` exits 1 when a process ended while it
    read (its /proc entry went): that is normal."""
    root = checked_path(proc_root.rstrip("/") or "/")
    return ("find", root, "-mindepth", "3", "-maxdepth", "3", "-lname", "/dev/nvidia*", "-printf", r"%h %l\n")


def with_timeout(seconds: int, argv: Argv, kill_after: int = 5) -> Argv:
    """Bound a command on the far side: an SSH client timeout alone leaves it running."""
    return ("timeout", "-k", _check_int(kill_after, "kill_after", 1), _check_int(seconds, "seconds", 1), *argv)


def read_file(path: str) -> Argv:
    return ("cat", "--", checked_path(path))


# A log too long to read whole: its head (start-up, the attempt's own first line) and its tail (where a failure
# while serving is), with one marker line between them saying what was skipped. A fixed script: the path and
# sizes arrive as positional parameters.
LOG_EXCERPT_SCRIPT = (
    'f="$1"; h="$2"; t="$3"\n'
    'size=$(stat -c %s -- "$f") || exit 1\n'
    'if [ "$size" -le $((h + t)) ]; then exec cat -- "$f"; fi\n'
    'lines=$(wc -l < "$f")\n'
    'head -c "$h" -- "$f"\n'
    "printf '\\n[gpuops: skipped %s bytes of a log of %s lines]\\n' \"$((size - h - t))\" \"$lines\"\n"
    'exec tail -c "$t" -- "$f"\n'
)
_EXCERPT_MARK = re.compile(r"^\[gpuops: skipped (?P<bytes>\d+) bytes of a log of (?P<lines>\d+) lines\]$", re.M)
LOG_HEAD_BYTES = 512 * 1024
LOG_TAIL_BYTES = 1536 * 1024


def log_excerpt(path: str, head_bytes: int = LOG_HEAD_BYTES, tail_bytes: int = LOG_TAIL_BYTES) -> Argv:
    return ("bash", "-c", LOG_EXCERPT_SCRIPT, "gpuops-log-excerpt", checked_path(path),
            _check_int(head_bytes, "head_bytes", 1), _check_int(tail_bytes, "tail_bytes", 1))


# The last lines of a log as it is now, after one line with the file's mtime and line count; at most ``max_bytes``
# of them (a progress bar rewritten with carriage returns makes one line megabytes long). A fixed script: the path
# and sizes arrive as positional parameters.
LOG_TAIL_SCRIPT = (
    'f="$1"; n="$2"; b="$3"\n'
    'm=$(stat -c %Y -- "$f") || exit 1\n'
    'l=$(wc -l < "$f") || exit 1\n'
    'echo "$m $l"\n'
    'tail -n "$n" -- "$f" | tail -c "$b"\n'
)
LOG_TAIL_MAX_BYTES = 64 * 1024
LOG_TAIL_MAX_LINES = 200


def log_tail(path: str, lines: int, max_bytes: int = LOG_TAIL_MAX_BYTES) -> Argv:
    return ("bash", "-c", LOG_TAIL_SCRIPT, "gpuops-log-tail", checked_path(path),
            _check_int(lines, "lines", 1, LOG_TAIL_MAX_LINES), _check_int(max_bytes, "max_bytes", 1))


def excerpt_of_chunks(chunks: Iterable[bytes], head_bytes: int = LOG_HEAD_BYTES,
                      tail_bytes: int = LOG_TAIL_BYTES) -> bytes:
    """What LOG_EXCERPT_SCRIPT prints for a file, from the file's bytes as a stream (a compressed log read as it
    is decompressed): whole up to ``head_bytes + tail_bytes``, else its head, the skipped-bytes mark, its tail.
    Holds at most head + tail + one chunk."""
    head = bytearray()
    tail = bytearray()
    size = newlines = 0
    for chunk in chunks:
        size += len(chunk)
        newlines += chunk.count(b"\n")
        if len(head) < head_bytes:
            taken = head_bytes - len(head)
            head += chunk[:taken]
            chunk = chunk[taken:]
        tail += chunk
        del tail[:max(0, len(tail) - tail_bytes)]
    if size <= head_bytes + tail_bytes:
        return bytes(head + tail)
    mark = f"\n[gpuops: skipped {size - head_bytes - tail_bytes} bytes of a log of {newlines} lines]\n"
    return bytes(head) + mark.encode() + bytes(tail)


@dataclass(frozen=True)
class LogExcerpt:
    """What ``log_excerpt`` printed: the text, and how its line numbers map back to the file's."""

    text: str
    skipped_bytes: int = 0
    mark_line: int | None = None  # 1-based line of the marker in ``text``
    line_shift: int = 0  # added to a line number after the marker to get the file's

    def file_line(self, line_no: int) -> int:
        return line_no + self.line_shift if self.mark_line is not None and line_no > self.mark_line else line_no


def parse_log_excerpt(text: str) -> LogExcerpt:
    mark = _EXCERPT_MARK.search(text)
    if mark is None:
        return LogExcerpt(text)
    mark_line = text.count("\n", 0, mark.start()) + 1
    # the tail's first (partial) line is line (total - newlines in the tail + 1) of the file, and mark_line + 1 here
    tail_newlines = text.count("\n", mark.end() + 1)
    return LogExcerpt(text, int(mark.group("bytes")), mark_line, int(mark.group("lines")) - tail_newlines - mark_line)


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

# prints the option strings of the installed SGLang's own launch parser after a marker line, as JSON
# {"--flag": takes a value, ...}: the parser `python -m sglang.launch_server` builds (ServerArgs.add_cli_args on a
# plain argparse parser). A fixed script with no user text in it; importing SGLang may log, hence the marker.
SGLANG_FLAGS_MARK = "gpuops-sglang-flags:"
SGLANG_FLAGS_SCRIPT = (
    "import argparse, json\n"
    "from sglang.srt.server_args import ServerArgs\n"
    "parser = argparse.ArgumentParser()\n"
    "ServerArgs.add_cli_args(parser)\n"
    "options = {o: a.nargs != 0 for a in parser._actions for o in a.option_strings}\n"
    f"print({SGLANG_FLAGS_MARK!r} + json.dumps(options), flush=True)\n"
)


def sglang_flags(python: str) -> Argv:
    """Run with no GPU visible: importing SGLang must not open a CUDA context (memory on a GPU the pre-flight is
    checking is clean) for a list of option strings that does not depend on the device."""
    return ("env", "CUDA_VISIBLE_DEVICES=", python, "-c", SGLANG_FLAGS_SCRIPT)


# prints, after a marker line, the SGLANG_*/SGL_* names the installed SGLang's own source mentions, as a JSON list:
# the variables it can read. The package is found, not imported (no torch, no CUDA context); a fixed script with no
# user text in it
SGLANG_ENV_MARK = "gpuops-sglang-env:"
SGLANG_ENV_SCRIPT = (
    "import importlib.util, json, os, re\n"
    "spec = importlib.util.find_spec('sglang')\n"
    "names = set()\n"
    "for root in (spec.submodule_search_locations or []) if spec else []:\n"
    "    for folder, _, files in os.walk(root):\n"
    "        for name in files:\n"
    "            if name.endswith('.py'):\n"
    "                try:\n"
    "                    text = open(os.path.join(folder, name), encoding='utf-8', errors='ignore').read()\n"
    "                except OSError:\n"
    "                    continue\n"
    "                names.update(re.findall(r'\\b(?:SGLANG|SGL)_[A-Z0-9_]*[A-Z0-9]\\b', text))\n"
    f"print({SGLANG_ENV_MARK!r} + json.dumps(sorted(names) if spec else None), flush=True)\n"
)


def sglang_env_names(python: str) -> Argv:
    return (python, "-c", SGLANG_ENV_SCRIPT)


def python_package_versions(python: str, packages: Sequence[str]) -> Argv:
    for name in packages:
        if not re.match(PACKAGE_RE, name):
            raise ValueError(f"not a package name: {name!r}")
    return (python, "-c", VERSIONS_SCRIPT, *packages)


def df_dev_shm() -> Argv:
    """The room in /dev/shm, where NCCL's shared-memory transport makes its segments (POSIX df, KiB)."""
    return ("df", "-Pk", "/dev/shm")


PATH_MAX = 4096


def checked_path(path: str) -> str:
    """An absolute path without NUL, newlines or '..' (it is still passed as one argv element); a ValueError says
    which of these it is not, with the path shown (its end kept: the file name)."""
    shown = path if len(path) <= 80 else f"{path[:40]}…{path[-39:]}"
    shown = shown.replace("\0", "\\0").replace("\n", "\\n").replace("`", "'")
    if len(path) > PATH_MAX:
        raise ValueError(f"`{shown}` is {len(path)} characters long, more than {PATH_MAX}")
    if "\0" in path or "\n" in path:
        raise ValueError(f"`{shown}` has a line break or NUL in it")
    if not path.startswith("/"):
        raise ValueError(f"`{shown}` is not an absolute path (one that starts with /)")
    if "/../" in path + "/":
        raise ValueError(f"`{shown}` has a `..` in it: give the path without it (a path is used as written, "
                         "not resolved)")
    return path


# a Hugging Face Hub model id, `org/name`, as SGLang's --model-path accepts it
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
_REVISION = re.compile(r"[0-9a-f]{40}")
DEFAULT_HF_CACHE = "/root/.cache/huggingface/hub"


def is_hub_id(text: str) -> bool:
    return bool(_HUB_ID.fullmatch(text)) and ".." not in text


def hub_cache(env: Mapping[str, str], home: str) -> str:
    """The Hugging Face hub cache a process with this environment uses: HF_HUB_CACHE, else HF_HOME/hub, else
    ~/.cache/huggingface/hub (huggingface_hub's order); a relative setting stays relative, as it is to that process."""
    return env.get("HF_HUB_CACHE") or f"{env.get('HF_HOME') or home.rstrip('/') + '/.cache/huggingface'}/hub"


def hub_repo_dir(cache: str, model_id: str) -> str:
    """Where the Hugging Face cache keeps a Hub model: ``<cache>/models--<org>--<name>``."""
    if not is_hub_id(model_id):
        raise ValueError(f"not a Hugging Face model id (org/name): {model_id[:80]!r}")
    org, name = model_id.split("/")
    return checked_path(f"{cache.rstrip('/')}/models--{org}--{name}")


def hub_snapshot_dir(repo_dir: str, ref: str) -> str:
    """The snapshot a cached model's ``refs/main`` names (the files the Hub's `main` had when downloaded)."""
    revision = ref.strip()
    if not _REVISION.fullmatch(revision):
        raise ValueError(f"refs/main does not hold a commit hash: {revision[:60]!r}")
    return checked_path(f"{repo_dir}/snapshots/{revision}")


def to_command(argv: Argv) -> str:
    return shlex.join(argv)


# --------------------------------------------------------------------------- SGLang lifecycle

# Start detached in a new session (its own process group: pid == pgid) writing to a NEW log whose
# first line names the attempt. Every user value arrives as a positional parameter, never in the script.
LAUNCH_SCRIPT = (
    'log="$1"; attempt="$2"; shift 2\n'
    'mkdir -p -- "$(dirname -- "$log")" || exit 3\n'
    'if [ -e "$log" ]; then echo "refusing to reuse existing log $log" >&2; exit 4; fi\n'
    'printf "gpuops attempt %s started %s\\n" "$attempt" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$log" || exit 3\n'
    'setsid -- "$@" >>"$log" 2>&1 </dev/null &\n'
    'echo "$!"\n'
)


def sglang_launch(python: str, log_path: str, attempt_id: str, flags: Sequence[str]) -> Argv:
    """argv that starts ``python -m sglang.launch_server <flags>`` detached and prints its PID; the NAME=VALUE words
    that open ``flags`` (checked again here) become its environment through ``env``."""
    env = launch_env(flags)
    head = ("env", "--", *env) if env else ()
    return ("bash", "-c", LAUNCH_SCRIPT, "gpuops-launch", checked_path(log_path), attempt_id, *head, python, "-m",
            "sglang.launch_server", *flags[len(env):])


def kill_group(pgid: int, signal: str) -> Argv:
    if signal not in ("TERM", "KILL", "INT"):
        raise ValueError(f"signal {signal!r} not allowed")
    return ("kill", f"-{signal}", "--", f"-{_check_int(pgid, 'pgid', 2)}")


# signal a confirmed process only while it is that process: its PID and the start time read when the stop was asked
# (``<proc_root>/<pid>/stat`` field 22). Once it ends its PID can be given to a later process, which must be left
# alone, and a zombie has ended already. Prints each PID it signalled (signal 0: each such process still running).
SAME_PROCESS_SCRIPT = (
    'sig="$1"; root="$2"; shift 2\n'
    'for pair in "$@"; do\n'
    '  pid="${pair%:*}"; want="${pair#*:}"\n'
    '  read -r stat 2>/dev/null <"$root/$pid/stat" || continue\n'
    '  read -r -a f <<<"${stat##*) }"\n'
    '  [ "${f[0]}" != Z ] && [ "${f[19]}" = "$want" ] && kill "-$sig" "$pid" 2>/dev/null && echo "$pid"\n'
    'done\n'
    'exit 0\n'
)


def signal_same_processes(processes: Iterable[tuple[int, int]], signal: str, proc_root: str = "/proc") -> Argv:
    """Send ``signal`` (TERM, KILL, or 0 to ask which still run) to each (PID, start time) still that process."""
    if signal not in ("TERM", "KILL", "0"):
        raise ValueError(f"signal {signal!r} not allowed")
    pairs = sorted({(int(_check_int(pid, "pid", 2)), int(_check_int(started, "start time", 0)))
                    for pid, started in processes})
    if not pairs:
        raise ValueError("no processes to signal")
    return ("bash", "-c", SAME_PROCESS_SCRIPT, "gpuops-signal", signal, checked_path(proc_root.rstrip("/") or "/"),
            *(f"{pid}:{started}" for pid, started in pairs))


def process_alive(pid: int) -> Argv:
    return ("kill", "-0", _check_int(pid, "pid", 2))


# whether a launch's process still runs, told by what only it has: its standard output is the attempt's own log (the
# launch started it so). A PID alone is not enough: once the server exits (or its container restarts) the same number
# can be another process's, which a stop must never signal.
_LAUNCHED_TEST = (  # exits 1 unless $pid runs (not a zombie), 2 unless it writes to $log
    'read -r stat 2>/dev/null <"/proc/$pid/stat" || exit 1\n'
    'case "${stat##*) }" in Z*) exit 1;; esac\n'
    '[ "/proc/$pid/fd/1" -ef "$log" ] ||\n'  # the same file, however its path is spelled
    '  [ "$(readlink "/proc/$pid/fd/1")" = "$log (deleted)" ] || exit 2\n'  # or the log removed while it runs
)
LAUNCHED_PROCESS_SCRIPT = 'pid="$1"; log="$2"\n' + _LAUNCHED_TEST + 'exit 0\n'
LAUNCHED_RUNS, LAUNCHED_GONE, LAUNCHED_PID_REUSED = 0, 1, 2


def launched_process(pid: int, log_path: str) -> Argv:
    """Exit 0 when the process ``pid`` runs and writes to ``log_path`` (a launch's server), 1 when no process has
    that PID (or only its zombie), 2 when another process has it now."""
    return ("bash", "-c", LAUNCHED_PROCESS_SCRIPT, "gpuops-pid", _check_int(pid, "pid", 2),
            posixpath.normpath(checked_path(log_path)))


# py-spy's stacks of every live process in the launch's process group (its server and the ranks it started), while
# that group is still the launch's; py-spy from the container's SGLang environment, else its PATH. --nonblocking: a
# server that still serves is read, never paused.
STACK_DUMP_SCRIPT = (
    'pid="$1"; log="$2"; python="$3"\n' + _LAUNCHED_TEST +
    'spy="$(dirname -- "$python")/py-spy"\n'
    '[ -x "$spy" ] || spy="$(command -v py-spy)" || exit 3\n'
    'n=0\n'
    'for d in /proc/[0-9]*; do\n'
    '  read -r stat 2>/dev/null <"$d/stat" || continue\n'
    '  read -r -a f <<<"${stat##*) }"\n'
    '  { [ "${f[2]}" = "$pid" ] && [ "${f[0]}" != Z ]; } || continue\n'
    '  n=$((n + 1)); [ "$n" -le 16 ] || break\n'
    '  out="$(timeout -k 2 10 "$spy" dump --json --nonblocking --pid "${d#/proc/}" 2>&1)"; rc=$?\n'
    f'  printf \'{STACK_HEADER}%s %s\\n\' "${{d#/proc/}}" "$rc"\n'
    '  tr "\\0\\n" "  " <"$d/cmdline" | head -c 300; echo\n'
    '  printf "%s\\n" "$out"\n'
    'done\n'
    'exit 0\n'
)
STACKS_NO_PY_SPY = 3


def stack_dumps(pid: int, log_path: str, python: str) -> Argv:
    """py-spy's stacks of the launch's processes (``stacks.parse_stack_dumps`` reads them): exit 0, or 1 when the
    launch's process is gone, 2 when its PID is another process's now, 3 when the container has no py-spy."""
    return ("bash", "-c", STACK_DUMP_SCRIPT, "gpuops-stacks", _check_int(pid, "pid", 2),
            posixpath.normpath(checked_path(log_path)), checked_path(python))


def read_log_from(path: str, offset: int) -> Argv:
    """The log's bytes from ``offset`` on (tail counts from 1)."""
    return ("tail", "-c", f"+{int(_check_int(offset, 'offset', 0)) + 1}", checked_path(path))


# binds host:port as SGLang's server (uvicorn) will once its model is loaded, SO_REUSEADDR set as it sets it (a
# closed connection's TIME_WAIT holds nothing): a listener on that port at any address the bind covers stops it, and
# so does an address the container does not have; the socket is closed at once
PORT_FREE, PORT_IN_USE, PORT_UNBINDABLE = 0, 10, 11
PORT_SCRIPT = (
    "import errno, socket, sys\n"
    "try:\n"
    "    family, kind, proto, _, address = socket.getaddrinfo(sys.argv[1], int(sys.argv[2]),\n"
    "                                                          type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]\n"
    "    with socket.socket(family, kind, proto) as s:\n"
    "        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "        s.bind(address)\n"
    "except OSError as e:\n"
    "    print(e, file=sys.stderr)\n"
    f"    sys.exit({PORT_IN_USE} if e.errno == errno.EADDRINUSE else {PORT_UNBINDABLE})\n"
)


def port_bind(python: str, host: str, port: int) -> Argv:
    """Exit PORT_FREE when a server could bind host:port inside the container now, PORT_IN_USE when something holds
    it, PORT_UNBINDABLE (the reason on stderr) when it cannot be bound for another reason."""
    return (python, "-c", PORT_SCRIPT, _check_host(host), _check_int(port, "port", 1))


def _check_host(host: str) -> str:
    if not HOST_RE.fullmatch(host):
        raise ValueError(f"host {host[:60]!r} is not an address or host name")
    return host


# who listens on given TCP ports in this network namespace: LISTEN sockets from /proc/net/tcp{,6}, then the
# processes whose fds are those sockets (no ss/lsof needed in the container)
PORT_HOLDERS_SCRIPT = (
    "import json, os, sys\n"
    "want = {int(p) for p in sys.argv[1:]}\n"
    "inodes = {}\n"
    "for name in ('/proc/net/tcp', '/proc/net/tcp6'):\n"
    "    try:\n"
    "        rows = open(name).read().splitlines()[1:]\n"
    "    except OSError:\n"
    "        continue\n"
    "    for row in rows:\n"
    "        f = row.split()\n"
    "        port = int(f[1].rsplit(':', 1)[1], 16)\n"
    "        if f[3] == '0A' and port in want:\n"
    "            inodes[f[9]] = port\n"
    "holders = []\n"
    "for pid in sorted(filter(str.isdigit, os.listdir('/proc')), key=int):\n"
    "    try:\n"
    "        links = [os.readlink('/proc/%s/fd/%s' % (pid, fd)) for fd in os.listdir('/proc/%s/fd' % pid)]\n"
    "        cmd = open('/proc/%s/cmdline' % pid, 'rb').read().replace(b'\\0', b' ').decode(errors='replace')\n"
    "        group = int(open('/proc/%s/stat' % pid).read().rsplit(')', 1)[1].split()[2])\n"
    "    except (OSError, ValueError, IndexError):\n"
    "        continue\n"
    "    for port in sorted({inodes[x[8:-1]] for x in links if x.startswith('socket:[') and x[8:-1] in inodes}):\n"
    "        holders.append({'port': port, 'pid': int(pid), 'pgid': group, 'cmd': cmd.strip()[:300]})\n"
    "print(json.dumps({'listening': sorted(set(inodes.values())), 'holders': holders}))\n"
)


def port_holders(python: str, ports: Sequence[int]) -> Argv:
    """JSON {listening: [port], holders: [{port, pid, pgid, cmd}]} for the TCP ports, read from /proc in the
    container."""
    return (python, "-c", PORT_HOLDERS_SCRIPT, *(_check_int(p, "port", 1) for p in ports))


HEALTH_SCRIPT = (
    "import json, sys, time, urllib.request\n"
    "host = sys.argv[1]\n"
    "base = 'http://%s:%d' % ('[%s]' % host if ':' in host else host, int(sys.argv[2]))\n"
    "headers = {'Content-Type': 'application/json'}\n"
    "if len(sys.argv) > 3:\n"
    "    headers['Authorization'] = 'Bearer ' + sys.argv[3]\n"
    "out = {}\n"
    "def get(path, body=None):\n"
    "    data = None if body is None else json.dumps(body).encode()\n"
    "    req = urllib.request.Request(base + path, data=data, headers=headers)\n"
    "    with urllib.request.urlopen(req, timeout=30) as r:\n"
    "        return r.status, r.read().decode(errors='replace')\n"
    "try:\n"
    "    out['health'] = get('/health')[0]\n"
    "    models = json.loads(get('/v1/models')[1])\n"
    "    out['models'] = [m.get('id') for m in models.get('data', [])]\n"
    "    name = out['models'][0] if out['models'] else 'default'\n"
    "    began = time.monotonic()\n"
    "    gen = json.loads(get('/v1/completions', {'model': name, 'prompt': 'Say OK.', 'max_tokens': 8})[1])\n"
    "    out['generation_s'] = round(time.monotonic() - began, 3)\n"
    "    out['generation'] = gen['choices'][0]['text']\n"
    "except Exception as exc:\n"
    "    out['error'] = type(exc).__name__ + ': ' + str(exc)[:300]\n"
    "print(json.dumps(out))\n"
)


def health_check(python: str, host: str, port: int, api_key: str | None = None) -> Argv:
    """The server's /health, /v1/models and one 8-token generation (timed: ``generation_s``); with the
    server's own ``--api-key`` when it
    has one (passed as an argument: the server's own command line already holds it on that host)."""
    key = () if api_key is None else (_single_line(api_key),)
    return (python, "-c", HEALTH_SCRIPT, _check_host(host), _check_int(port, "port", 1), *key)


def _single_line(text: str) -> str:
    if not text or "\n" in text or "\0" in text:
        raise ValueError("not a single-line value")
    return text
