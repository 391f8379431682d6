"""Where a launch's processes are now: py-spy's stack dumps of each process in its process group.

A hung start-up names only the stage it stopped at; the stacks say what each rank is waiting in (an all-reduce, a
CUDA graph capture, a file read). ``argv.stack_dumps`` runs ``py-spy dump --json`` once per process (its JSON output
leaves out subprocesses) and prints a header line before each; this module reads that output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

HEADER = "gpuops-process "  # "<header><pid> <py-spy's exit status>", then the command line, then py-spy's output


@dataclass(frozen=True)
class Frame:
    function: str
    file: str  # as py-spy shortens it: the path from the package on
    line: int


@dataclass(frozen=True)
class ThreadStack:
    name: str
    active: bool  # running Python code, not waiting (py-spy's "active"; "idle" otherwise)
    frames: tuple[Frame, ...]  # innermost first, as py-spy lists them


@dataclass(frozen=True)
class ProcessStacks:
    pid: int
    command: str  # its /proc cmdline (SGLang's ranks retitle theirs: sglang::scheduler_TP0)
    threads: tuple[ThreadStack, ...] = ()
    problem: str | None = None  # why py-spy gave no stacks (its own words)


def parse_stack_dumps(text: str) -> tuple[ProcessStacks, ...]:
    """Each process's stacks (or py-spy's reason for none), in the order dumped."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith(HEADER):
            blocks.append([line[len(HEADER):]])
        elif blocks:
            blocks[-1].append(line)
    found = []
    for head, *rest in blocks:
        pid_text, _, status = head.partition(" ")
        if pid_text.isdigit():
            command = rest[0].strip() if rest else ""
            found.append(_process(int(pid_text), command, status.strip(), "\n".join(rest[1:]).strip()))
    return tuple(sorted(found, key=lambda p: p.pid))  # the launch's own process (its group's leader) first


def _process(pid: int, command: str, status: str, output: str) -> ProcessStacks:
    if status != "0":
        # its "Error: ..." line (a Rust backtrace may follow it)
        said = next((x.strip().removeprefix("Error: ") for x in output.splitlines() if x.startswith("Error:")), "")
        reason = "py-spy did not answer within its time limit" if status in ("124", "137") else \
            said or f"py-spy exited {status}"
        return ProcessStacks(pid, command, problem=reason[:300])
    try:
        threads = json.loads(output)
    except json.JSONDecodeError:
        return ProcessStacks(pid, command, problem="py-spy's answer was not JSON: " + output[:200])
    if not isinstance(threads, list):
        return ProcessStacks(pid, command, problem="py-spy's answer was not a list of threads")
    return ProcessStacks(pid, command, tuple(_thread(t) for t in threads if isinstance(t, dict)))


def _thread(data: dict[str, object]) -> ThreadStack:
    frames = data.get("frames")
    return ThreadStack(
        str(data.get("thread_name") or f"thread {data.get('thread_id')}"),
        bool(data.get("active")),
        tuple(Frame(str(f.get("name")), str(f.get("short_filename") or f.get("filename")), int(f.get("line") or 0))
              for f in (frames if isinstance(frames, list) else ()) if isinstance(f, dict)),
    )


def stack_lines(processes: tuple[ProcessStacks, ...], depth: int = 4) -> tuple[str, ...]:
    """What each process is doing, innermost frames first: its main thread and every active one (idle helper
    threads — thread pools, watchdogs — are counted, not shown)."""
    lines: list[str] = []
    for process in processes:
        title = f"PID {process.pid} {process.command[:80]}".rstrip()
        if process.problem is not None:
            lines.append(f"{title}: no stacks ({process.problem})")
            continue
        shown = [t for t in process.threads if t.active or t.name == "MainThread"] or list(process.threads[:1])
        hidden = len(process.threads) - len(shown)
        lines.append(title + (f" (+{hidden} idle thread{'s' if hidden != 1 else ''})" if hidden else ""))
        for thread in shown:
            where = [f"{f.function} ({f.file}:{f.line})" for f in thread.frames[:depth]]
            more = " <- …" if len(thread.frames) > depth else ""
            state = "active" if thread.active else "idle"
            lines.append(f"  {thread.name} ({state}): " + (" <- ".join(where) + more if where else "no Python frames"))
    return tuple(lines)
