"""Use case: the last lines of an attempt's own log as it is now: what a launch is doing, read without SSH.

The log is the attempt's own (its path was recorded when it was launched, named after the attempt), read in its
container with a byte limit; secret values are taken off before anyone sees a line.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.core import argv as remote
from bot.core.attempts import Attempt
from bot.core.commands import DEFAULT_LOG_LINES
from bot.core.log_lines import LogTail, parse_log_tail
from bot.errors import CommandFailed
from bot.status import Transport


@dataclass(frozen=True)
class AttemptLog:
    attempt: Attempt
    tail: LogTail | None
    problem: str | None = None  # why the log could not be read


async def read_attempt_log(transport: Transport, attempt: Attempt, lines: int = DEFAULT_LOG_LINES) -> AttemptLog:
    if not attempt.log_path:
        return AttemptLog(attempt, None, "this attempt has no log (a refused pre-flight writes none)")
    try:
        result = await transport.run(attempt.node, remote.pct_exec(attempt.vmid, remote.log_tail(attempt.log_path,
                                                                                                  lines)))
    except CommandFailed as exc:  # the file is gone (removed, rotated away) or unreadable
        return AttemptLog(attempt, None, f"{attempt.log_path} could not be read in CT {attempt.vmid}: {exc.last_word}")
    return AttemptLog(attempt, parse_log_tail(result.stdout, remote.LOG_TAIL_MAX_BYTES))
