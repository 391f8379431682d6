"""Use case: read a node's hardware fault signals (ECC counters, retired pages, remapped rows,
Xid events in the kernel log) and the kernel OOM killer's kills for the health report.

Each signal is read where the node exposes it and said plainly where it does not: a driver
too old for a query field gets the query without that field; a node without a journal is
read through ``dmesg``; one that shows neither is named as "not readable", never as clean.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace

from bot.core import argv as remote
from bot.core.gpu_faults import (
    MEMORY_ERROR_FIELDS,
    GpuMemoryErrors,
    NodeFaults,
    OomKill,
    XidEvent,
    invalid_query_field,
    memory_errors_from_csv,
    oom_kills,
    xid_events,
)
from bot.errors import CommandFailed, GpuopsError, ParseError, RemoteError
from bot.status import Transport


async def read_memory_errors(transport: Transport, node: str) -> tuple[list[GpuMemoryErrors], tuple[str, ...]]:
    fields = list(MEMORY_ERROR_FIELDS)
    dropped: list[str] = []
    while True:
        try:
            out = await transport.run(node, remote.nvidia_smi_query_memory_errors(fields))
            return memory_errors_from_csv(out.stdout), tuple(dropped)
        except CommandFailed as exc:
            refused = invalid_query_field(exc.stdout + "\n" + exc.stderr_tail)
            if refused is None or refused not in fields or refused in ("index", "uuid", "pci.bus_id"):
                raise
            fields.remove(refused)
            dropped.append(refused)


@dataclass(frozen=True)
class KernelEvents:
    xid: list[XidEvent]
    oom_kills: list[OomKill]
    source: str  # journalctl | dmesg


async def read_kernel_events(transport: Transport, node: str, since: float, hours: int | None = None) -> KernelEvents:
    """The node's kernel log since ``since``: Xid events and the OOM killer's kills, from the journal (asked for the
    last ``hours``, by default the whole hours back to ``since``), else from the ring buffer."""
    if hours is None:
        hours = max(1, int((time.time() - since) // 3600) + 1)
    try:
        out = await transport.run(node, remote.kernel_log_journal(hours), timeout_s=30)
        if "No journal files were found" not in out.stdout + out.stderr:
            return KernelEvents(xid_events(out.stdout, since), oom_kills(out.stdout, since), "journalctl")
    except CommandFailed:
        pass  # no journalctl (or no access): the ring buffer may still be readable
    out = await transport.run(node, remote.kernel_log_ring(), timeout_s=30)
    return KernelEvents(xid_events(out.stdout, since), oom_kills(out.stdout, since), "dmesg")


async def read_faults(transport: Transport, node: str, now: float, hours: int = 24) -> NodeFaults:
    memory_task = read_memory_errors(transport, node)
    xid_task = read_kernel_events(transport, node, now - hours * 3600, hours)
    memory, xid = await asyncio.gather(memory_task, xid_task, return_exceptions=True)
    if isinstance(memory, BaseException):
        if not isinstance(memory, GpuopsError):
            raise memory
        problem = (memory.stdout.strip() or (memory.stderr_tail.splitlines() or [""])[-1] or memory.user_message) \
            if isinstance(memory, CommandFailed) else memory.user_message
        result = NodeFaults(node, memory_problem=f"ECC counters not readable: {_short(problem)}")
    else:
        gpus, dropped = memory
        result = NodeFaults(node, memory=tuple(gpus), dropped_fields=dropped)
    if isinstance(xid, BaseException):
        if not isinstance(xid, RemoteError | ParseError):
            raise xid
        return replace(result, xid_problem=f"kernel log not readable: {_short(xid.last_word)}")
    return replace(result, xid=tuple(xid.xid), oom_kills=tuple(xid.oom_kills), xid_source=xid.source)


def _short(text: str) -> str:
    """The first line: an nvidia-smi banner says what is wrong there, and details follow."""
    line = text.strip().splitlines()[0] if text.strip() else "no output"
    return line[:160]
