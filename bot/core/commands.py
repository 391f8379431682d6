"""Parsing of command text typed by people (slash commands, mentions, the console).

User text is tokenised here and only ever leaves as typed values; it never reaches a shell.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from bot.errors import UsageError

GPU_USAGE = "usage: `/gpu status [all | <node> | <node>:<vmid> | <container>]` or `/gpu help`"


@dataclass(frozen=True)
class GpuStatusRequest:
    target: str  # unresolved spec: resolved against the inventory by the caller


@dataclass(frozen=True)
class GpuHelpRequest:
    pass


GpuRequest = GpuStatusRequest | GpuHelpRequest


def tokens(text: str) -> list[str]:
    try:
        return shlex.split(text or "")
    except ValueError as exc:
        raise UsageError(f"could not read the command ({exc}). {GPU_USAGE}") from None


def parse_gpu_command(text: str) -> GpuRequest:
    words = tokens(text)
    if not words or words[0] in ("help", "-h", "--help"):
        return GpuHelpRequest()
    verb, args = words[0].lower(), words[1:]
    if verb == "status":
        if len(args) > 1:
            raise UsageError(f"`status` takes one target, got {len(args)}. {GPU_USAGE}")
        return GpuStatusRequest(args[0] if args else "all")
    shown = verb if len(verb) <= 30 else verb[:30] + "…"
    raise UsageError(f"unknown subcommand `{shown}`. {GPU_USAGE}")


SGLANG_USAGE = ("usage: `/sglang budget <container> <model path in the container> [sglang flags]` "
                "or `/sglang help`")


@dataclass(frozen=True)
class SglangBudgetRequest:
    target: str
    model_path: str
    flags: tuple[str, ...]


@dataclass(frozen=True)
class SglangHelpRequest:
    pass


SglangRequest = SglangBudgetRequest | SglangHelpRequest


def parse_sglang_command(text: str) -> SglangRequest:
    try:
        words = shlex.split(text or "")
    except ValueError as exc:
        raise UsageError(f"could not read the command ({exc}). {SGLANG_USAGE}") from None
    if not words or words[0] in ("help", "-h", "--help"):
        return SglangHelpRequest()
    verb, args = words[0].lower(), words[1:]
    if verb == "budget":
        if len(args) < 2 or args[0].startswith("-") or args[1].startswith("-"):
            raise UsageError(f"`budget` needs a container and a model path. {SGLANG_USAGE}")
        if not args[1].startswith("/"):
            raise UsageError(f"the model path must be absolute inside the container, got `{args[1][:60]}`. "
                             f"{SGLANG_USAGE}")
        return SglangBudgetRequest(args[0], args[1], tuple(args[2:]))
    shown = verb if len(verb) <= 30 else verb[:30] + "…"
    raise UsageError(f"unknown subcommand `{shown}`. {SGLANG_USAGE}")
