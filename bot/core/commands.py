"""Parsing of command text typed by people (slash commands, mentions, the console).

User text is tokenised here and only ever leaves as typed values; it never reaches a shell.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.core.argv import LOG_TAIL_MAX_LINES, checked_path, is_hub_id
from bot.errors import UsageError

DEFAULT_LOG_LINES = 40  # lines of an attempt's log `/sglang log` shows unless asked for another count

GPU_USAGE = ("usage: `/gpu status [all | <node> | <node>:<vmid> | <container>]`, `/gpu health [target]`, "
             "`/gpu free <node|container>` or `/gpu help`")


@dataclass(frozen=True)
class GpuStatusRequest:
    target: str  # unresolved spec: resolved against the inventory by the caller


@dataclass(frozen=True)
class GpuFreeRequest:
    target: str


@dataclass(frozen=True)
class GpuHealthRequest:
    target: str


@dataclass(frozen=True)
class GpuHelpRequest:
    pass


GpuRequest = GpuStatusRequest | GpuFreeRequest | GpuHealthRequest | GpuHelpRequest


# what a phone's or a desktop's "smart punctuation", or a paste from a web page, puts in place of the ASCII a command
# line means: curly quotes, non-breaking and thin spaces
_TYPED_FOR_ASCII = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2018": "'", "\u2019": "'",
                                  "\u00a0": " ", "\u2007": " ", "\u2009": " ", "\u202f": " "})
_DASHED_FLAG = re.compile(r"^[\u2013\u2014](?=[a-z])")  # `--tp` turned into `—tp` (em dash) or `–tp` (en dash)


_SLACK_MARKUP = re.compile(r"<(?P<target>[^<>|]+)(?:\|(?P<label>[^<>]*))?>")


def typed_text(text: str) -> str:
    """Text as the person typed it, from the markup Slack delivers it in: a link or a channel as what it showed
    (`<http://x|x>` -> `x`, `<#C1|ops>` -> `#ops`), and `&amp;`, `&lt;`, `&gt;` as the characters (Slack escapes
    them in every text it sends). A user mention (`<@U1>`) or a special one (`<!here>`) is left as it is."""
    def shown(link: re.Match[str]) -> str:
        target, label = link.group("target"), link.group("label")
        if target.startswith(("@", "!")):
            return link.group(0)
        if target.startswith("#"):
            return f"#{label}" if label else target
        return label if label is not None else target.removeprefix("mailto:")

    return _SLACK_MARKUP.sub(shown, text).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def command_words(text: str, usage: str) -> list[str]:
    """The words of a typed command as a shell splits them, read as typed (without Slack's markup, ``typed_text``)
    and as the ASCII it stands for: curly quotes and non-breaking spaces as plain ones, and a flag whose two hyphens
    became one dash (`—tp`) as that flag. Every reply shows the flags as read (a launch's pre-flight shows its
    command line)."""
    try:
        words = shlex.split(typed_text(text or "").translate(_TYPED_FOR_ASCII))
    except ValueError as exc:
        raise UsageError(f"could not read the command ({exc}). {usage}") from None
    return [_DASHED_FLAG.sub("--", word) for word in words]


def parse_gpu_command(text: str) -> GpuRequest:
    words = command_words(text, GPU_USAGE)
    if not words or words[0].lower() in ("help", "-h", "--help"):
        return GpuHelpRequest()
    verb, args = words[0].lower(), words[1:]
    if verb == "status":
        if len(args) > 1:
            raise UsageError(f"`status` takes one target, got {len(args)}. {GPU_USAGE}")
        return GpuStatusRequest(args[0] if args else "all")
    if verb == "health":
        if len(args) > 1:
            raise UsageError(f"`health` takes one target. {GPU_USAGE}")
        return GpuHealthRequest(args[0] if args else "all")
    if verb == "free":
        if len(args) != 1 or args[0] == "all":
            raise UsageError(f"`free` takes one node or container (never `all`). {GPU_USAGE}")
        return GpuFreeRequest(args[0])
    shown = verb if len(verb) <= 30 else verb[:30] + "…"
    raise UsageError(f"unknown subcommand `{shown}`. {GPU_USAGE}")


SGLANG_USAGE = (
    "usage: `/sglang budget <container> <model path or org/name> [flags]`, "
    "`/sglang launch <container> <model path or org/name> [NAME=value ...] [flags] [--force]` or "
    "`/sglang launch <profile>`, "
    "`/sglang stop <container|attempt>`, `/sglang triage [container|attempt]`, "
    "`/sglang log [container|attempt] [lines]`, `/sglang history [container]`, `/sglang help`"
)


@dataclass(frozen=True)
class SglangBudgetRequest:
    target: str
    model_path: str
    flags: tuple[str, ...]


@dataclass(frozen=True)
class SglangLaunchRequest:
    target: str
    model_path: str
    flags: tuple[str, ...]
    force: bool = False


@dataclass(frozen=True)
class SglangStopRequest:
    target: str  # a container or an attempt id


@dataclass(frozen=True)
class SglangTriageRequest:
    target: str | None  # a container or an attempt id; None: the latest failed attempt here


@dataclass(frozen=True)
class SglangLogRequest:
    target: str | None  # a container or an attempt id; None: the latest attempt here
    lines: int


@dataclass(frozen=True)
class SglangHistoryRequest:
    target: str | None


@dataclass(frozen=True)
class SglangHelpRequest:
    pass


SglangRequest = (SglangBudgetRequest | SglangLaunchRequest | SglangStopRequest | SglangHistoryRequest
                 | SglangTriageRequest | SglangLogRequest | SglangHelpRequest)


_LINES_OPTION = re.compile(r"(?:-n|--lines)(?:=?(\d+))?|-(\d+)")  # tail's ways: -n 50, -n50, --lines=50, -50


def log_args(args: Sequence[str], usage: str) -> tuple[str | None, int]:
    """``[container|attempt] [lines]`` of ``log``: a bare number is the line count, and so is one given as ``tail``
    and ``gpuops log`` take it (``-n 50``, ``--lines 50``, ``-50``)."""
    names: list[str] = []
    counts: list[int] = []
    words = list(args)
    while words:
        word = words.pop(0)
        option = _LINES_OPTION.fullmatch(word)
        if word.isdigit():
            counts.append(int(word))
        elif option is None:
            if word.startswith("-"):
                raise UsageError(f"`log` takes no option `{word[:40]}`; give the line count as a number "
                                 f"(`log sglang-a6000 50`, or `-n 50`). {usage}")
            names.append(word)
        elif (count := option.group(1) or option.group(2)) is not None:
            counts.append(int(count))
        elif words and words[0].isdigit():
            counts.append(int(words.pop(0)))
        else:
            raise UsageError(f"`{word}` needs a line count after it (`{word} 50`). {usage}")
    if len(names) > 1 or len(counts) > 1:
        raise UsageError(f"`log` takes at most a container or attempt id and a line count. {usage}")
    return (names[0] if names else None), checked_log_lines(counts[0] if counts else DEFAULT_LOG_LINES)


def checked_log_lines(lines: int) -> int:
    if not 1 <= lines <= LOG_TAIL_MAX_LINES:
        raise UsageError(f"`log` shows from 1 to {LOG_TAIL_MAX_LINES} lines, not {lines}")
    return lines


def _model_args(verb: str, args: list[str]) -> tuple[str, str, tuple[str, ...]]:
    if len(args) < 2 or args[0].startswith("-") or args[1].startswith("-"):
        raise UsageError(f"`{verb}` needs a container and a model path. {SGLANG_USAGE}")
    if not args[1].startswith("/") and not is_hub_id(args[1]):
        raise UsageError(f"the model must be an absolute path inside the container or a Hugging Face id "
                         f"(org/name) cached there, got `{args[1][:60]}`. {SGLANG_USAGE}")
    if args[1].startswith("/"):
        try:
            checked_path(args[1])
        except ValueError as exc:
            raise UsageError(f"the model path {exc}") from None
    return args[0], args[1], tuple(args[2:])


def parse_sglang_command(text: str, profiles: Mapping[str, Any] | None = None) -> SglangRequest:
    words = command_words(text, SGLANG_USAGE)
    if not words or words[0].lower() in ("help", "-h", "--help"):
        return SglangHelpRequest()
    verb, args = words[0].lower(), words[1:]
    if verb == "budget":
        return SglangBudgetRequest(*_model_args(verb, args))
    if verb == "launch":
        force = "--force" in args
        args = [a for a in args if a != "--force"]
        if len(args) == 1 and profiles and args[0] in profiles:
            profile = profiles[args[0]]
            return SglangLaunchRequest(profile.container, profile.model_path, tuple(profile.flags), force)
        target, model, flags = _model_args(verb, args)
        return SglangLaunchRequest(target, model, flags, force)
    if verb == "stop":
        if len(args) != 1:
            raise UsageError(f"`stop` takes one container or attempt id. {SGLANG_USAGE}")
        return SglangStopRequest(args[0])
    if verb == "triage":
        if len(args) > 1:
            raise UsageError(f"`triage` takes at most one container or attempt id. {SGLANG_USAGE}")
        return SglangTriageRequest(args[0] if args else None)
    if verb == "log":
        return SglangLogRequest(*log_args(args, SGLANG_USAGE))
    if verb == "history":
        if len(args) > 1:
            raise UsageError(f"`history` takes at most one container. {SGLANG_USAGE}")
        return SglangHistoryRequest(args[0] if args else None)
    shown = verb if len(verb) <= 30 else verb[:30] + "…"
    raise UsageError(f"unknown subcommand `{shown}`. {SGLANG_USAGE}")
