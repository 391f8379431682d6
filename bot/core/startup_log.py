"""Where an SGLang startup is, read from its log: the stages a launch passes through and the
numbers SGLang prints on the way (weights, KV pool, graphs), or the first error line.

Line shapes follow ../shared/research/sglang-memory.md §7 (tested on the startup corpus).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

from bot.core.flags import scrub_secrets


class Stage(IntEnum):
    STARTING = 0
    DIST_INIT = 1
    LOADING_WEIGHTS = 2
    WEIGHTS_LOADED = 3
    KV_ALLOCATED = 4
    CAPTURING_GRAPHS = 5
    GRAPHS_CAPTURED = 6
    READY = 7


STAGE_LABEL = {
    Stage.STARTING: "starting",
    Stage.DIST_INIT: "distributed init",
    Stage.LOADING_WEIGHTS: "loading weights",
    Stage.WEIGHTS_LOADED: "weights loaded",
    Stage.KV_ALLOCATED: "KV pool allocated",
    Stage.CAPTURING_GRAPHS: "capturing CUDA graphs",
    Stage.GRAPHS_CAPTURED: "CUDA graphs captured",
    Stage.READY: "ready",
}

# SGLang's own words for its life-cycle, shared with the triage (which places a finding, or a log that
# stopped, by them)
READY_LINE = "The server is fired up and ready to roll"  # once it serves
CAPTURE_LINE = r"Capture (?:.*?)(?:cuda|CUDA) graph"  # + " begin." / " end." / " failed:"
CAPTURE_BAR = r"Capturing (?:batches \(bs=|num tokens \(num_tokens=)"  # tqdm: graph / piecewise-graph capture
COMPILE_BAR = r"Compiling num tokens \(num_tokens="  # tqdm: piecewise-graph compile
LOAD_END_LINE = r"Load weight end\."
SCHEDULER_LINE = r"max_total_num_tokens=(?P<tok>\d+),.*?max_running_requests=(?P<mrr>\d+), context_len=(?P<ctx>\d+)"
BENIGN_NOTICE = "Ignore import error when loading "  # the model registry skipping a module: not an error
# the parent's words for a child that died without a word of its own (killed, or a crash in native code): the
# launcher finding a scheduler dead before it was ready (its "Exit code: N" follows), and newer releases' watchdog
SCHEDULER_DEAD_LINE = r"Rank (?P<rank>\d+) scheduler is dead"
CHILD_CRASHED_LINE = r"Subprocess (?P<child>\w+) \(pid=\d+\) crashed with exit code (?P<code>-?\d+)"

_INIT_END = re.compile(r"Init torch distributed ends\.")
_LOAD_BEGIN = re.compile(r"Load weight begin\. avail mem=(?P<avail>[\d.]+) GB")
_LOAD_END = re.compile(LOAD_END_LINE + r".*?avail mem=(?P<avail>[\d.]+) GB(?:, mem usage=(?P<usage>-?[\d.]+) GB)?")
_LOAD_FORMAT = re.compile(r"\b(?:quant=(?P<quant>[\w-]+)|dtype=torch\.(?P<dtype>\w+))")
_SHARDS = re.compile(r"Loading safetensors checkpoint shards:\s+(?P<pct>\d+)%")
_KV = re.compile(r"KV Cache is allocated\.(?: dtype: [\w.]+,)? #tokens: (?P<tokens>\d+)")
_KV_NO_COUNT = re.compile(r"KV Cache is allocated\.")
_MAMBA = re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (?P<size>\d+)")
_GRAPH_BEGIN = re.compile(rf"{CAPTURE_LINE} begin\.")
_GRAPH_END = re.compile(rf"{CAPTURE_LINE} end\.")
# the graph bars' counts; one log line holds many \r updates
_GRAPH_STEP = re.compile(rf"(?P<bar>{COMPILE_BAR}|{CAPTURE_BAR})[^)]*\):\s+\d+%\|[^|]*\|\s*"
                         r"(?P<done>\d+)/(?P<total>\d+)")
_SCHED = re.compile(SCHEDULER_LINE)
_READY = re.compile(READY_LINE)
_RANK = re.compile(r"\bTP(\d+)\b")
_TRACEBACK_HEADER = "Traceback (most recent call last)"
_ERROR = re.compile(
    rf"(?:^|\s)(?:{re.escape(_TRACEBACK_HEADER)}|[A-Za-z_.]*(?:Error|Exception)(?::|$)|"
    rf"Received sigquit|SIGQUIT received|CUDA out of memory|Not enough memory|{SCHEDULER_DEAD_LINE}|"
    rf"{CHILD_CRASHED_LINE})"
)

# the line a traceback ends in, unindented after its frames: `torch.OutOfMemoryError: ...`, `AssertionError`
# (a class name, so not a level another process logs meanwhile: `INFO:     127.0.0.1 - "GET /health"`)
_RAISED = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*[a-z]\w*(?::\s|:?$)")
# an exception with no message of its own (a failed `assert`): the code line its traceback printed above it says what
_BARE_RAISED = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\s*:?\s*$")
_CARETS = re.compile(r"^\s*[\^~]+\s*$")  # Python 3.11+ marks the failing expression under the code line


@dataclass(frozen=True)
class Progress:
    stage: Stage = Stage.STARTING
    weights_percent: int | None = None
    avail_before_load_gib: float | None = None
    weights_gib: float | None = None
    weights_format: str | None = None  # how the load says it held them: "quant=awq", "dtype=bfloat16"
    graphs_step: str | None = None  # the last graph bar seen: "capturing 12/52", "compiling 3/58"
    kv_tokens: int | None = None
    mamba_slots: int | None = None
    max_running_requests: int | None = None
    context_len: int | None = None
    error_line: str | None = None  # the first line that says something went wrong
    error_line_no: int | None = None
    lines_read: int = 0
    code_line: str = ""  # the last indented line read (a traceback's code line), for an exception that says nothing

    @property
    def failed(self) -> bool:
        return self.error_line is not None

    @property
    def label(self) -> str:
        text = STAGE_LABEL[self.stage]
        if self.stage is Stage.LOADING_WEIGHTS and self.weights_percent is not None:
            text += f" {self.weights_percent}%"
        if Stage.WEIGHTS_LOADED <= self.stage < Stage.GRAPHS_CAPTURED and self.graphs_step:
            step = self.graphs_step
            text += f" ({step.removeprefix('capturing ') if self.stage is Stage.CAPTURING_GRAPHS else step})"
        return text


def observed_of(progress: Progress) -> dict[str, object]:
    """The log's readings as an attempt records them (``observed``)."""
    return {k: v for k, v in {
        "weights_gib": progress.weights_gib, "weights_format": progress.weights_format,
        "avail_before_load_gib": progress.avail_before_load_gib,
        "kv_tokens": progress.kv_tokens, "mamba_slots": progress.mamba_slots,
        "max_running_requests": progress.max_running_requests, "context_len": progress.context_len,
        "stage": progress.label,
    }.items() if v is not None}


def progress_recorded(observed: Mapping[str, Any]) -> Progress:
    """The progress an attempt's record keeps (what :func:`observed_of` wrote), for its card drawn again once the
    log is no longer followed (a stop, an exit while serving, an edit Slack refused). The stage is the one whose
    label the recorded one starts with."""
    label = str(observed.get("stage", ""))
    stage = max((s for s in Stage if label.startswith(STAGE_LABEL[s])), key=lambda s: len(STAGE_LABEL[s]),
                default=Stage.STARTING)

    def number(key: str, kind: type) -> Any:
        value = observed.get(key)
        return kind(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return Progress(stage=stage, weights_gib=number("weights_gib", float),
                    weights_format=str(observed["weights_format"]) if observed.get("weights_format") else None,
                    avail_before_load_gib=number("avail_before_load_gib", float), kv_tokens=number("kv_tokens", int),
                    mamba_slots=number("mamba_slots", int), max_running_requests=number("max_running_requests", int),
                    context_len=number("context_len", int))


def advance(progress: Progress, lines: list[str]) -> Progress:
    """Fold new log lines into the progress (call with each new chunk, in order)."""
    p = progress
    for line in lines:
        rank = _RANK.search(line[:80])
        first_rank = rank is None or rank.group(1) == "0"  # numbers are rank 0's (the others repeat them)
        number = p.lines_read + 1
        p = replace(p, lines_read=number)
        benign = "WARNING" in line or BENIGN_NOTICE in line
        if (p.error_line is None and _ERROR.search(line) and not benign) or (
                # the header says only that something raised; the exception it ends in says what
                p.error_line is not None and _TRACEBACK_HEADER in p.error_line and _RAISED.match(line)):
            said = line.strip()
            if _BARE_RAISED.match(said) and p.code_line:
                said = f"{said.rstrip(':')}: (raised by: {p.code_line})"
            p = replace(p, error_line=scrub_secrets(said)[:500], error_line_no=number)
        if not _CARETS.match(line):
            code = line.strip()[:300] if line[:1].isspace() and not line.lstrip().startswith('File "') else ""
            if code != p.code_line:
                p = replace(p, code_line=code)
        if _READY.search(line):
            p = replace(p, stage=Stage.READY)
            continue
        if m := _SCHED.search(line):
            p = replace(p, kv_tokens=p.kv_tokens or int(m.group("tok")), max_running_requests=int(m.group("mrr")),
                        context_len=int(m.group("ctx")))
        steps = list(_GRAPH_STEP.finditer(line))
        if steps and first_rank:
            last = steps[-1]
            what = last.group("bar").split()[0].lower()
            p = replace(p, graphs_step=f"{what} {last.group('done')}/{last.group('total')}")
        if _GRAPH_END.search(line):
            p = _at_least(p, Stage.GRAPHS_CAPTURED)
        elif _GRAPH_BEGIN.search(line):
            p = _at_least(p, Stage.CAPTURING_GRAPHS)
        elif m := _MAMBA.search(line):
            p = replace(p, mamba_slots=int(m.group("size")) if first_rank or p.mamba_slots is None else p.mamba_slots)
        elif m := _KV.search(line):
            tokens = int(m.group("tokens")) if first_rank or p.kv_tokens is None else p.kv_tokens
            p = replace(_at_least(p, Stage.KV_ALLOCATED), kv_tokens=tokens)
        elif _KV_NO_COUNT.search(line):
            p = _at_least(p, Stage.KV_ALLOCATED)
        elif m := _LOAD_END.search(line):
            usage = m.group("usage")
            target_pair = p.stage < Stage.KV_ALLOCATED  # a draft model's pair comes after the target's pools
            if usage and target_pair and (first_rank or p.weights_gib is None):
                fmt = _LOAD_FORMAT.search(line)
                shown = None if fmt is None else (f"quant={fmt.group('quant')}" if fmt.group("quant")
                                                  else f"dtype={fmt.group('dtype')}")
                p = replace(p, weights_gib=float(usage), weights_format=shown)
            p = _at_least(p, Stage.WEIGHTS_LOADED)
        elif shards := _SHARDS.findall(line):  # the last of a line's \r updates
            p = replace(_at_least(p, Stage.LOADING_WEIGHTS), weights_percent=int(shards[-1]))
        elif m := _LOAD_BEGIN.search(line):
            if p.avail_before_load_gib is None or (first_rank and p.stage < Stage.WEIGHTS_LOADED):
                p = replace(p, avail_before_load_gib=float(m.group("avail")))
            p = _at_least(p, Stage.LOADING_WEIGHTS)
        elif _INIT_END.search(line):
            p = _at_least(p, Stage.DIST_INIT)
    return p


def _at_least(p: Progress, stage: Stage) -> Progress:
    return replace(p, stage=max(p.stage, stage))
