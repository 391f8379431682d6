"""Launch attempts: what was tried on a container, what changed since the last try, and what
happened, with every status transition timestamped. Plain values, serialisable to JSON."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

from bot.core.budget import MeasuredLoad
from bot.core.flags import env_words, parse_sglang_flags, redacted, without_flags
from bot.errors import UsageError


class AttemptStatus(StrEnum):
    PLANNED = "planned"
    LAUNCHING = "launching"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"
    ORPHANED = "orphaned"  # the bot lost track of it (restart) and the process was gone


ACTIVE = (AttemptStatus.PLANNED, AttemptStatus.LAUNCHING, AttemptStatus.READY)
TRANSITIONS: dict[AttemptStatus, tuple[AttemptStatus, ...]] = {
    AttemptStatus.PLANNED: (AttemptStatus.LAUNCHING, AttemptStatus.FAILED, AttemptStatus.STOPPED),
    AttemptStatus.LAUNCHING: (AttemptStatus.READY, AttemptStatus.FAILED, AttemptStatus.STOPPED, AttemptStatus.ORPHANED),
    AttemptStatus.READY: (AttemptStatus.FAILED, AttemptStatus.STOPPED, AttemptStatus.ORPHANED),
    AttemptStatus.FAILED: (),
    AttemptStatus.STOPPED: (),
    AttemptStatus.ORPHANED: (),
}


class TransitionError(ValueError):
    pass


@dataclass(frozen=True)
class Transition:
    status: AttemptStatus
    at: float
    note: str = ""


@dataclass(frozen=True)
class Check:
    """One pre-flight check: ok | warn | fail, with a one-line detail."""

    name: str
    result: str
    detail: str


# observed: how the server of an attempt that failed with it left running ended: a stop ({by, signal, memory, at}),
# or its process found gone ({exited, at}). The attempt stays failed (it did fail); its server no longer holds GPUs.
SERVER_ENDED = "server_ended"
# observed: the follower gave up on a launch whose server still ran (no output for the stall timeout, or not ready by
# the launch timeout): it failed, and its server was left running for a person to look at (py-spy) or stop
GAVE_UP_RUNNING = "gave_up_running"
# observed: how many seconds after the follower gave up on it (GAVE_UP_RUNNING) its server came up after all: a load
# slower or more silent than the timeouts allowed (a first JIT compile, checkpoint shards on slow storage)
CAME_UP_LATE = "came_up_late_s"
# observed: until when (epoch seconds) the bot reads on the log of a launch it gave up on, for it to come up after all
WATCHED_UNTIL = "watched_until"
GPUS_CLEAN_CHECK = "GPUs clean"  # the pre-flight's reading of the launch's GPUs: no process, no held memory


@dataclass(frozen=True)
class Attempt:
    id: str
    user: str
    channel: str
    node: str
    vmid: int
    container: str | None
    model_path: str
    argv: tuple[str, ...]  # the sglang flags as launched (model path and port included)
    port: int
    created_at: float
    transitions: tuple[Transition, ...] = ()
    changes: tuple[str, ...] = ()  # what changed since the previous attempt on this container
    checks: tuple[Check, ...] = ()
    predicted: dict[str, Any] = field(default_factory=dict)  # budget numbers before the launch
    observed: dict[str, Any] = field(default_factory=dict)  # numbers read from the attempt's own log
    forced: bool = False  # launched over a failed pre-flight, by an explicit --force
    log_path: str | None = None
    pid: int | None = None
    message_ts: str | None = None  # the channel message updated in place with progress
    thread_ts: str | None = None
    error_line: str | None = None
    hypotheses: tuple[str, ...] = ()
    tracker: str | None = None  # replica that follows the progress

    @property
    def left_running(self) -> bool:
        """Failed while its server process still ran: after its log said ready (the health check did not pass), or
        given up on as hung or too slow (:data:`GAVE_UP_RUNNING`). That process was not stopped, so it still held its
        GPUs then, for a person to look at or stop, until it ended (:meth:`with_server_ended`)."""
        return (self.status is AttemptStatus.FAILED
                and (self.observed.get("stage") == "ready" or bool(self.observed.get(GAVE_UP_RUNNING)))
                and len(self.transitions) >= 2 and self.transitions[-2].status is AttemptStatus.LAUNCHING
                and SERVER_ENDED not in self.observed)

    @property
    def given_up_at(self) -> float | None:
        """When the follower gave up on this launch while its server still ran, as long as that server is still left
        running and its log has not said ready since (then failing its health check): until then it may yet come up
        (see :meth:`came_up`)."""
        if self.left_running and self.observed.get(GAVE_UP_RUNNING) and self.observed.get("stage") != "ready":
            return self.transitions[-1].at
        return None

    def may_yet_come_up(self, now: float, watch_s: float) -> bool:
        """Given up on while its server still runs, and within the watch that reads its log on for ``watch_s`` (the
        launch timeout) from the give-up (see ``bot.launch.follow``): how it ends is not known yet, so it decides no
        hypothesis yet."""
        given_up = self.given_up_at
        return given_up is not None and now - given_up <= watch_s

    def came_up(self, at: float, note: str) -> Attempt:
        """A launch given up on whose server came up after all and passed its health check: ready. The one move out
        of ``failed``: the give-up stays in its transitions, and its error line (the timeout's, not a cause) goes."""
        given_up = self.given_up_at
        if given_up is None:
            raise TransitionError(f"attempt {self.id}: {self.status.value} -> ready is not a valid move")
        return replace(self, transitions=(*self.transitions, Transition(AttemptStatus.READY, at, note)),
                       observed={**self.observed, CAME_UP_LATE: round(at - given_up)}, error_line=None)

    @property
    def status(self) -> AttemptStatus:
        return self.transitions[-1].status if self.transitions else AttemptStatus.PLANNED

    @property
    def changes_text(self) -> str:
        """What changed, and that the launch went past a failed pre-flight, for history and summaries."""
        text = "; ".join(self.changes)
        return f"{text} (forced past a failed pre-flight)" if self.forced else text

    @property
    def target_label(self) -> str:
        base = f"{self.node}:{self.vmid}"
        return f"{base} ({self.container})" if self.container else base

    @property
    def found_gpus_clean(self) -> bool | None:
        """What its pre-flight read on the launch's GPUs: clean, held (launched past it with --force), or not
        read."""
        result = next((c.result for c in self.checks if c.name == GPUS_CLEAN_CHECK), None)
        return {"ok": True, "fail": False}.get(result or "")

    def with_server_ended(self, how: dict[str, Any]) -> Attempt:
        """The attempt, failed with its server left running, once that server ended: ``how`` is a stop's
        ``{by, signal, memory, at}`` or ``{exited, at}`` for a process found gone (see ``SERVER_ENDED``)."""
        return replace(self, observed={**self.observed, SERVER_ENDED: how})

    def moved(self, status: AttemptStatus, at: float, note: str = "") -> Attempt:
        if status == self.status and self.transitions:
            return self
        if self.transitions and status not in TRANSITIONS[self.status]:
            raise TransitionError(f"attempt {self.id}: {self.status.value} -> {status.value} is not a valid move")
        return replace(self, transitions=(*self.transitions, Transition(status, at, note)))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["transitions"] = [{"status": t.status.value, "at": t.at, "note": t.note} for t in self.transitions]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attempt:
        values = dict(data)
        values["transitions"] = tuple(Transition(AttemptStatus(t["status"]), t["at"], t.get("note", ""))
                                      for t in data.get("transitions", []))
        values["checks"] = tuple(Check(**c) for c in data.get("checks", []))
        for key in ("argv", "changes", "hypotheses"):
            values[key] = tuple(data.get(key, ()))
        return cls(**values)


def flag_pairs(argv: tuple[str, ...]) -> dict[str, str]:
    """``--flag value`` / ``--flag=value`` / switches, and the NAME=VALUE environment words that open ``argv`` ->
    {flag or name: value}; order-insensitive comparison."""
    pairs: dict[str, str] = dict(word.split("=", 1) for word in argv[:env_words(argv)])  # NAME=VALUE words
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            if eq:
                pairs[name] = value
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                pairs[name] = argv[i + 1]
                i += 1
            else:
                pairs[name] = "(on)"
        i += 1
    return pairs


SAME_FLAGS = "same flags as the previous attempt"  # changes_between's line for a relaunch that changed nothing


def changes_between(previous: tuple[str, ...] | None, current: tuple[str, ...]) -> tuple[str, ...]:
    """Human lines: what the new attempt changed relative to the previous one."""
    if previous is None:
        return ("first attempt on this container",)
    before, after = flag_pairs(redacted(previous)), flag_pairs(redacted(current))  # shown: no secret value
    lines = []
    for name in sorted(set(before) | set(after)):
        if name not in before:
            lines.append(f"+ {_pair(name, after[name])}")
        elif name not in after:
            lines.append(f"- {_pair(name, before[name])}")
        elif before[name] != after[name]:
            lines.append(f"{_pair(name, before[name])} -> {after[name]}")
    return tuple(lines) or (SAME_FLAGS,)


def _pair(name: str, value: str) -> str:
    """A flag as `--flag value`, an environment word as `NAME=value`."""
    return f"{name} {value}".rstrip() if name.startswith("--") else f"{name}={value}"


# a change of the container's RAM limit (`pct set -memory`) between two attempts: not a flag, but a change all the same
CT_MEMORY_CHANGE = re.compile(r"^CT memory (?P<before>[\d.]+) GiB -> (?P<after>[\d.]+) GiB$")


def ct_memory_change(previous_mib: int | None, current_mib: int | None) -> str | None:
    """The line for the container's RAM limit moving between two attempts (each read by its pre-flight)."""
    if previous_mib is None or current_mib is None or previous_mib == current_mib:
        return None
    return f"CT memory {previous_mib / 1024:.1f} GiB -> {current_mib / 1024:.1f} GiB"


_ID_RE = re.compile(r"^a[0-9]{8}-[0-9]{6}-[0-9a-f]{4}$")


def is_attempt_id(text: str) -> bool:
    return bool(_ID_RE.match(text))


def user_flags(argv: tuple[str, ...]) -> tuple[str, ...]:
    """An attempt's launch flags without the model path and port the launcher adds (in any spelling)."""
    return without_flags(argv, "--model-path", "--port")


def relaunch_flags(attempt: Attempt, default_port: int) -> tuple[str, ...]:
    """The flags that launch ``attempt`` again: its own, with its port when that is not the container's
    ``default_port`` (a port the person chose, say because the default one is taken, stays chosen)."""
    flags = user_flags(attempt.argv)
    return flags if attempt.port == default_port else (*flags, "--port", str(attempt.port))


def earlier_load(history: Sequence[Attempt], model_path: str, layout: str,
                 sglang: str | None) -> MeasuredLoad | None:
    """What the newest earlier load of this checkpoint in this layout, under the same SGLang (an
    upgrade can change what a load keeps), logged about itself, or None.

    ``history`` is newest first, as the store returns it."""
    wanted = model_path.rstrip("/")
    for attempt in history:
        gib = attempt.observed.get("weights_gib")
        if not isinstance(gib, int | float) or gib <= 0:
            continue
        if attempt.model_path.rstrip("/") != wanted:
            continue
        then = attempt.predicted.get("sglang")
        if sglang and then and then != sglang:
            continue
        try:
            their_layout = parse_sglang_flags(user_flags(attempt.argv)).weight_layout
        except UsageError:
            continue
        if their_layout == layout:
            shown = attempt.observed.get("weights_format")
            free_then = attempt.predicted.get("free_mib")
            avail = attempt.observed.get("avail_before_load_gib")
            context = None
            if isinstance(free_then, int | float) and isinstance(avail, int | float) and 0 < avail <= free_then / 1024:
                context = free_then / 1024 - avail
            return MeasuredLoad(float(gib), layout, f"attempt {attempt.id}'s log",
                                shown if isinstance(shown, str) else None, context)
    return None
