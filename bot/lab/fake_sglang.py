"""Lab stand-in for ``python -m sglang.launch_server`` inside a lab container (stdlib + gpuops).

It replays a real SGLang log from bot/lab/data/logs (see SOURCE.md), chosen by scenario,
while holding fake GPU memory under its own PID in the node's scenario file (so nvidia-smi,
`/gpu status` and `/gpu free` see it), and once "ready" answers /health, /v1/models and
/v1/completions on its port. SIGTERM releases the memory and exits, like the real server; SIGUSR1 makes it
live on without answering (a hung server); SIGUSR2 makes each generation slow (a server under load).

Scenario: the file named by ``GPUOPS_LAB_SCENARIO`` holds ``{"queue": [...], "delay_s": 0.05}``;
each launch takes the next outcome (``ready``, ``kv_pool_oom``, ``sigquit_after_oom``, ``torch_compile_error``,
``p2p_unsupported``, ``port_in_use``, ``hang``, ``slow_load``: silent for a while after weight loading began, then on
to ready (the scenario's ``pause_s``, default 3, makes any outcome silent that long there); ``gpu_memory_occupied``,
``nccl_shm_error``: NCCL's /dev/shm transport fails, unless the launch's environment turned it off with
NCCL_SHM_DISABLE=1; ``piecewise_graph_error``: the piecewise CUDA-graph runner fails, unless the launch has
--disable-piecewise-cuda-graph; ``unhealthy``: it says ready, then answers every request 503, as SIGUSR1 makes it);
an empty queue means ``auto``: SGLang's tensor-parallel memory-balance check first (some launch GPUs with far less
free memory than another: ``gpu_memory_occupied``), then gpuops' own budget engine decides from the flags and free
memory.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bot.core.flags import LaunchFlags
from bot.lab.fake_nvidia_smi import listed_processes, orphaned
from bot.lab.fake_server_args import ServerArgs

LOGS = Path(__file__).resolve().parent / "data" / "logs"


def _locked_update(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    with open(str(path) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads(path.read_text())
        change(state)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(path)


def link_stat(proc_dir: Path, pid: int) -> None:
    """The node's ``proc/<pid>/stat`` is the real process's own (its start time): gone when the process is, and a
    later process's when the PID is reused, as on a node."""
    stat = proc_dir / "stat"
    stat.unlink(missing_ok=True)
    stat.symlink_to(f"/proc/{pid}/stat")


class Holder:
    """This process's GPU memory in the node scenario (node.json), attributed to its container."""

    def __init__(self, state_dir: Path, vmid: str, pid: int) -> None:
        self.node_json = state_dir / "node.json"
        self.proc_dir = state_dir / "proc" / str(pid)
        self.vmid = vmid
        self.pid = pid

    def hold(self, gpu_indexes: list[int], mib: int, name: str) -> None:
        def change(state: dict[str, Any]) -> None:
            uuids = {g["index"]: g["uuid"] for g in state["gpus"]}
            state["processes"] = [p for p in state["processes"] if p["pid"] != self.pid]
            for index in gpu_indexes:
                state["processes"].append({"pid": self.pid, "gpu_uuid": uuids[index], "name": name, "used_mib": mib})

        _locked_update(self.node_json, change)
        self.proc_dir.mkdir(parents=True, exist_ok=True)
        (self.proc_dir / "cgroup").write_text(f"0::/lxc/{self.vmid}/ns/system.slice/sglang.scope\n")
        (self.proc_dir / "status").write_text(f"Name:\tpython3\nNSpgid:\t{os.getpgrp()}\n")
        link_stat(self.proc_dir, self.pid)

    def release(self) -> None:
        def change(state: dict[str, Any]) -> None:
            state["processes"] = [p for p in state["processes"] if p["pid"] != self.pid]

        _locked_update(self.node_json, change)


def record_oom_kill(node_json: Path, vmid: str, pid: int, anon_rss_kib: int) -> None:
    """The kernel's lines for the OOM killer killing ``pid`` at CT ``vmid``'s memory limit, into the node's kernel log
    (the lab's journalctl and dmesg print it), worded as the kernel words them."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime())

    def change(state: dict[str, Any]) -> None:
        state.setdefault("kernel_log", []).extend([
            f"{now} {state.get('name', 'pve')} kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=ns,"
            f"mems_allowed=0,oom_memcg=/lxc/{vmid},task_memcg=/lxc/{vmid}/ns/system.slice/sglang.scope,task=python3,"
            f"pid={pid},uid=100000",
            f"{now} {state.get('name', 'pve')} kernel: Memory cgroup out of memory: Killed process {pid} (python3) "
            f"total-vm:{anon_rss_kib * 3}kB, anon-rss:{anon_rss_kib}kB, file-rss:10240kB, shmem-rss:0kB, UID:100000 "
            "pgtables:23156kB oom_score_adj:0"])

    _locked_update(node_json, change)


def next_outcome(scenario_file: str | None) -> tuple[str, float, float]:
    """(outcome, seconds between log lines, seconds it is silent after weight loading began: the scenario's
    ``pause_s``, else 3 for ``slow_load`` and none for the others)."""
    if not scenario_file or not os.path.exists(scenario_file):
        return "auto", 0.05, 0.0
    path = Path(scenario_file)
    with open(str(path) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text())
        queue = data.get("queue", [])
        outcome = queue.pop(0) if queue else "auto"
        data["queue"] = queue
        path.write_text(json.dumps(data))
    pause = data.get("pause_s", 3.0 if outcome == "slow_load" else 0.0)
    return outcome, float(data.get("delay_s", 0.05)), float(pause)


def model_dir(model_path: str) -> Path:
    """SGLang takes a directory or a Hub id (org/name); a Hub id loads from the Hugging Face cache
    (HF_HUB_CACHE, else HF_HOME/hub) at the snapshot its refs/main names, as huggingface_hub resolves it offline."""
    from bot.core.argv import hub_cache, hub_repo_dir, hub_snapshot_dir, is_hub_id

    if Path(model_path).is_dir() or not is_hub_id(model_path):
        return Path(model_path)
    repo = hub_repo_dir(os.path.abspath(hub_cache(os.environ, os.path.expanduser("~"))), model_path)
    return Path(hub_snapshot_dir(repo, (Path(repo) / "refs" / "main").read_text()))


def free_mib(state: dict[str, Any], gpus: list[int]) -> tuple[int, ...]:
    """Each launch GPU's free memory as SGLang reads it before loading: less what every process and leftover holds."""
    by_index = {g["index"]: g for g in state["gpus"]}
    return tuple(by_index[i]["memory_total_mib"] - by_index[i].get("memory_used_mib", 1)
                 - orphaned(by_index[i])
                 - sum(p["used_mib"] for p in listed_processes(state) if p["gpu_uuid"] == by_index[i]["uuid"])
                 for i in gpus)


def unbalanced_line(free_mib: tuple[int, ...]) -> str:
    """SGLang's refusal when one rank's GPU has less than 90 % of another's free memory, raised as its
    RuntimeError, with this lab's numbers: the least free over the ranks and the emptiest rank's own."""
    from bot.core.budget import unbalanced_text

    return "RuntimeError: " + unbalanced_text(min(free_mib) / 1024, max(free_mib) / 1024)


def auto_outcome(args: argparse.Namespace, extra: list[str], state: dict[str, Any],
                 gpus: list[int], free: tuple[int, ...]) -> tuple[str, int, str | None]:
    """Decide with gpuops' own arithmetic: fail the way the budget predicts, else start. A refusal SGLang makes
    before loading (a context longer than the model's) is printed as the budget predicts SGLang prints it."""
    try:
        from bot.core.budget import BudgetInput, GpuPlan, compute_budget, parse_version
        from bot.core.flags import parse_sglang_flags
        from bot.core.model import read_config
    except ImportError:
        return "ready", 40000, None
    version = os.environ.get("GPUOPS_LAB_SGLANG_VERSION", "current")
    model = read_config(json.loads((model_dir(args.model_path) / "config.json").read_text()))
    flags = parse_sglang_flags(extra)
    by_index = {g["index"]: g for g in state["gpus"]}
    total = min(by_index[i]["memory_total_mib"] for i in gpus)
    budget = compute_budget(BudgetInput(model, flags, GpuPlan("lab", total, len(gpus), free),
                                        parse_version(version)), with_remedies=False)
    if budget.error_text and "is greater than the derived context_length" in budget.error_text:
        return "refused_before_load", 0, budget.error_text
    hold = int((budget.pre_gib * budget.mem_fraction_static) * 1024) if budget.error_text is None else \
        int(budget.weights_gib * 1024)
    return ("kv_pool_oom" if budget.error_text else "ready"), max(hold, 1000), None


class Terminated(Exception):
    """Raised from the SIGTERM handler (setting an Event there can deadlock the main thread)."""


UNHEALTHY = threading.Event()  # SIGUSR1: the server lives but stops answering (SGLang's /health then says 503)
SLOW = threading.Event()  # SIGUSR2: it answers, but each generation takes GPUOPS_LAB_SLOW_S seconds (default 1)


def serve(host: str, port: int, model: str, api_key: str | None = None) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _refused(self) -> bool:
            """SGLang's --api-key: every path but /health and /metrics needs `Authorization: Bearer <key>`."""
            if api_key is None or self.path.startswith(("/health", "/metrics")) \
                    or self.headers.get("Authorization") == "Bearer " + api_key:
                return False
            data = json.dumps({"error": "Unauthorized"}).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return True

        def _json(self, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            if self._refused():
                return
            if UNHEALTHY.is_set():
                self.send_error(503)
                return
            if self.path == "/health":
                self._json({})
            elif self.path == "/v1/models":
                self._json({"object": "list", "data": [{"id": model, "object": "model"}]})
            else:
                self.send_error(404)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length", 0))
            self.rfile.read(length)
            if self._refused():
                return
            if self.path == "/v1/completions":
                if SLOW.is_set():
                    time.sleep(float(os.environ.get("GPUOPS_LAB_SLOW_S", "1")))
                self._json({"choices": [{"text": " OK.", "index": 0, "finish_reason": "stop"}]})
            else:
                self.send_error(404)

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    server = Server((host, port), Handler)  # SGLang binds its --host only (127.0.0.1 unless given)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str]) -> int:
    # the whole command line through the container's SGLang parser first: a flag it lacks, a bad abbreviation or a
    # missing value stops the launch here with argparse's own words and exit 2, as it stops SGLang
    full = argparse.ArgumentParser(prog="launch_server.py")
    ServerArgs.add_cli_args(full)
    full.parse_args(argv)
    parser = argparse.ArgumentParser(prog="sglang.launch_server (lab stand-in)")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tp-size", "--tp", type=int, default=1, dest="tp")
    parser.add_argument("--api-key")
    parser.add_argument("--base-gpu-id", type=int, default=0)
    parser.add_argument("--gpu-id-step", type=int, default=1)
    args, extra = parser.parse_known_args(argv)
    extra = [*extra, "--tp-size", str(args.tp)]
    state_dir = Path(os.environ["FAKE_PVE_STATE"])
    vmid = os.environ.get("FAKE_CT", "0")
    state = json.loads((state_dir / "node.json").read_text())
    passed = state["containers"].get(vmid, {}).get("gpus", [0])  # the node's GPUs, as the container numbers them
    placed = LaunchFlags(tp=args.tp, base_gpu_id=args.base_gpu_id, gpu_id_step=args.gpu_id_step).gpu_indices
    if max(placed) >= len(passed):  # torch's words (real, from an issue's log) when a rank's index is not there
        print("torch.AcceleratorError: CUDA error: invalid device ordinal\n"
              "GPU device may be out of range, do you have enough GPUs?", flush=True)
        return 1
    gpus = [passed[i] for i in placed]
    outcome, delay, pause = next_outcome(os.environ.get("GPUOPS_LAB_SCENARIO"))
    if outcome == "nccl_shm_error" and os.environ.get("NCCL_SHM_DISABLE") == "1":
        outcome = "auto"  # NCCL goes on without the transport that failed
    if outcome == "piecewise_graph_error" and "--disable-piecewise-cuda-graph" in extra:
        outcome = "auto"  # the server runs without the runner that failed
    hold_mib = 40000
    refusal: str | None = None
    free = free_mib(state, gpus)
    if outcome == "auto" and len(gpus) > 1 and min(free) < 0.9 * max(free):
        outcome = "gpu_memory_occupied"
    if outcome == "auto":
        outcome, hold_mib, refusal = auto_outcome(args, extra, state, gpus, free)
    holder = Holder(state_dir, vmid, os.getpid())

    def on_term(signum: int, frame: object) -> None:
        raise Terminated

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR1, lambda signum, frame: UNHEALTHY.set())
    signal.signal(signal.SIGUSR2, lambda signum, frame: SLOW.set())
    if outcome == "unhealthy":
        UNHEALTHY.set()
    # each failure replays its own log; the other outcomes cut or end ready.log (an unknown outcome is a KeyError)
    log_name = {**dict.fromkeys(("ready", "hang", "slow_load", "gpu_memory_occupied", "host_oom_kill",
                                 "refused_before_load", "unhealthy"), "ready.log"),
                **{name: f"{name}.log" for name in ("kv_pool_oom", "sigquit_after_oom", "torch_compile_error",
                                                    "p2p_unsupported", "port_in_use", "nccl_shm_error",
                                                    "piecewise_graph_error")}}[outcome]
    lines = (LOGS / log_name).read_text().splitlines()
    if refusal is not None:  # ModelConfig raises while the server starts, before any rank or weight
        lines = ["Traceback (most recent call last):", refusal]
    if outcome == "gpu_memory_occupied":  # refused at distributed init, before any weight is loaded
        lines = [*lines[:next(i for i, x in enumerate(lines) if "Init torch distributed ends" in x)],
                 unbalanced_line(free)]
    if outcome == "hang":
        lines = lines[:5]  # stops after weight loading began, and never says more
    if outcome == "host_oom_kill":  # the kernel kills the scheduler while weights load; the launcher says it died
        stamp = time.strftime("[%Y-%m-%d %H:%M:%S]", time.gmtime())
        lines = [*lines[:5], f"{stamp} Rank 0 scheduler is dead. Please check if there are relevant logs.",
                 f"{stamp} Exit code: -9"]
    # SGLang prints every server argument, the API key among them (what quotes a log line must redact it)
    print(f"server_args=ServerArgs(model_path={args.model_path!r}, port={args.port}, tp_size={args.tp}, "
          f"api_key={args.api_key!r}) [gpuops lab stand-in]", flush=True)
    try:
        for n, line in enumerate(lines):
            time.sleep(delay)
            if pause and n == 5:
                time.sleep(pause)  # silent after weight loading began (a slow disk, a first JIT compile), then on
            if "Load weight begin" in line and "TP0" in line:
                holder.hold(gpus, hold_mib // 2, "python3 -m sglang.launch_server")
            if "Load weight end" in line and "TP0" in line:
                holder.hold(gpus, hold_mib, "python3 -m sglang.launch_server")
            if "fired up" in line:
                serve(args.host, args.port, args.model_path.rstrip("/").rsplit("/", 1)[-1], args.api_key)
                print(line, flush=True)
                while True:
                    time.sleep(3600)
            if "scheduler is dead" in line:
                record_oom_kill(state_dir / "node.json", vmid, os.getpid(), 45 * 1024 * 1024)
            print(line, flush=True)
        if outcome == "hang":
            while True:
                time.sleep(3600)
        return 1  # the failure logs end in the error: the server exits
    except Terminated:
        return 0
    finally:
        holder.release()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
