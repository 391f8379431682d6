"""`gpuops lab` as its own process, ended by a signal rather than `quit`: what it started goes with it."""

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.edges.test_serve import alive, processes


def processes_under(workdir):
    """PIDs of the processes whose command line names ``workdir`` (the lab's SSH servers, Redis, SGLang stand-in)."""
    return processes(lambda _, cmdline: str(workdir) in cmdline)


class Console:
    """The lab's console, typed into as a person would; its output is collected line by line."""

    def __init__(self, tmp_path):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
        self.process = subprocess.Popen([sys.executable, "-m", "bot.cli", "lab"], cwd=ROOT, env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self):
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, pattern, timeout_s=90.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            self.seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found
        raise AssertionError(f"no {pattern!r} in the lab's output:\n{''.join(self.seen)}")

    def type(self, line):
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def exit_status(self, timeout_s=60.0):
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def close(self, workdir):
        """End this test's lab and, if it left them behind, the processes it started (by PID) and its files."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        if workdir is not None:
            for pid in processes_under(workdir):
                os.kill(pid, signal.SIGKILL)
            shutil.rmtree(workdir, ignore_errors=True)


def start(tmp_path):
    console = Console(tmp_path)
    model = console.wait_for(r"^\s+(/\S*/gpuops-lab-[^/\s]+)/\S*/models/Qwen3\.6-27B\s*$")
    return console, Path(model.group(1)), model.group(0).strip()


def test_sigterm_during_a_launch_stops_its_server_and_removes_the_lab(tmp_path):
    console, workdir, model = start(tmp_path)
    try:
        console.type(f"/sglang launch sglang-a6000 {model} --tp 2 --context-length 32768 "
                     "--mem-fraction-static 0.88 --mamba-ssm-dtype bfloat16")
        console.wait_for(r"Pre-flight passed")
        deadline = time.monotonic() + 60
        servers = []
        while not servers and time.monotonic() < deadline:
            servers = processes(lambda _, cmdline: str(workdir) in cmdline and "sglang.launch_server" in cmdline)
            time.sleep(0.2)
        assert servers, "the launch's server did not start"
        console.process.send_signal(signal.SIGTERM)
        assert console.exit_status() == 128 + signal.SIGTERM
        console.wait_for(r"gpuops: stopped by SIGTERM", timeout_s=5)
        assert not any(alive(pid) for pid in servers)  # started in a session of its own: a signal did not reach it
        assert processes_under(workdir) == []
        assert not workdir.exists()
    finally:
        console.close(workdir)


def test_ctrl_c_at_the_prompt_ends_the_lab_without_waiting_for_enter(tmp_path):
    console, workdir, _ = start(tmp_path)
    try:
        assert processes_under(workdir)  # its SSH servers and Redis
        console.process.send_signal(signal.SIGINT)  # stdin stays open: no line and no EOF follow
        assert console.exit_status() == 130
        assert processes_under(workdir) == []
        assert not workdir.exists()
    finally:
        console.close(workdir)
