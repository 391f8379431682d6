"""How a `gpuops` command ends when a signal, not the person, ends it.

Killed outright by SIGTERM (`kill`, `timeout`, systemd) or SIGHUP (the terminal or the SSH session to the jump host
closed), a command left what its ``finally`` blocks would have put right: a launch's tracking lease held until it
expired, the lab's launched server running and its files in /tmp. Here either signal cancels the command's task as
Ctrl-C does, so those blocks run, and the command ends with :class:`Interrupted`, whose exit status is 128 + the
signal's number, as a shell reports a process a signal ended. (`gpuops serve` stops on its own terms: bot/app.py.)
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

HANDLED = (signal.SIGTERM, signal.SIGHUP)
_CLEANING_UP: set[asyncio.Task[Any]] = set()
T = TypeVar("T")


class Interrupted(KeyboardInterrupt):
    """A command ended by SIGTERM or SIGHUP: handled where Ctrl-C is (``except KeyboardInterrupt``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


@contextmanager
def cleaning_up() -> Iterator[None]:
    """The current task is putting things right on its way out: a signal arriving now lets it finish instead of
    cutting it short (a server left running, a lease held, files left behind)."""
    task = asyncio.current_task()
    if task is not None:
        _CLEANING_UP.add(task)
    try:
        yield
    finally:
        if task is not None:
            _CLEANING_UP.discard(task)


async def interruptible(work: Awaitable[T]) -> T:
    """``await work`` in the current task; SIGTERM or SIGHUP cancel that task (once), and then raise Interrupted."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    received: list[int] = []

    def stop(signum: int) -> None:
        if not received and task not in _CLEANING_UP:
            received.append(signum)
            task.cancel()

    for signum in HANDLED:
        loop.add_signal_handler(signum, stop, signum)
    try:
        return await work
    except asyncio.CancelledError:
        if not received:
            raise
        raise Interrupted(received[0]) from None
    finally:
        for signum in HANDLED:
            loop.remove_signal_handler(signum)
