"""The next experiment for a triage finding that is not about memory, as a change to the launch flags.

Memory findings get the budget engine's computed remedies; the others get the experiment their
label names, when it is one change to the launch: turn off the feature the failure is in (to
confirm it), add the switch that avoids it, or set the library variable that turns a transport
off (NCCL_P2P_DISABLE=1). Each one is offered as a button that relaunches through the pre-flight;
a label with no such experiment gets none (its next step stays advice).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bot.core.attempts import CT_MEMORY_CHANGE
from bot.core.budget import Budget, VerdictKind
from bot.core.diagnosis import (
    ARGUMENT_ERROR,
    CONTEXT_OVER_MODEL,
    CONV_DTYPE_LINE,
    CONV_KERNEL_LINE,
    HOST_OOM_KILL,
    NCCL_OOM_LINE,
    NCCL_SHM_LINE,
    NONE_WITH_INT_LINE,
    PIECEWISE_LINE,
    Finding,
)
from bot.core.flags import env_words, flag_spans, parse_sglang_flags, with_env, with_flag, without_flags
from bot.core.installed_flags import GPUOPS_TABLE, corrected_argv, flag_problems
from bot.core.model import TORCH_DTYPE_NAMES
from bot.errors import UsageError

SPECULATIVE_FLAGS = ("--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
                     "--speculative-num-draft-tokens", "--speculative-draft-model-path")


@dataclass(frozen=True)
class Experiment:
    change: str  # what the button says: "--disable-cuda-graph", "drop --enable-torch-compile"
    argv: tuple[str, ...]  # the launch flags with the change made
    why: str


@dataclass(frozen=True)
class _Move:
    """One label's experiment: add a switch or an environment word (NAME=value), or drop a flag (with the flags that
    only go with it)."""

    add: bool
    flags: tuple[str, ...]  # the first is the one the change is named after
    why: str
    value: str | None = None  # an addition's value ("--attention-backend triton"); None: a switch
    shown: str | None = None  # how a drop is named when not after its flag
    shows_value: bool = False  # a drop named with the flag's value ("drop --quantization fp8")
    only_value: str = ""  # a drop made only when the flag's value starts so ("fp8": an FP8 KV cache)
    unless: str = ""  # not offered when the finding's evidence matches this pattern (it points elsewhere)
    when: str = ""  # offered only when the finding's evidence matches this pattern
    not_with: tuple[str, ...] = ()  # an addition not offered when the launch has one of these (a drop of it is)
    decides: bool = True  # False: a relaunch for more detail, whose outcome neither confirms nor refutes the finding

    @property
    def env(self) -> bool:
        return "=" in self.flags[0]


# the piecewise CUDA-graph runner off, when the evidence places the failure in it (its wrapper, its advice, its
# progress): as SGLang's own message says, or, where the launch turned the runner on, without the flag that did
_PIECEWISE_OFF = (
    _Move(True, ("--disable-piecewise-cuda-graph",), "the same launch without piecewise CUDA graphs, as SGLang's "
          "message says: if it starts, piecewise capture is the cause", when=PIECEWISE_LINE,
          not_with=("--enable-piecewise-cuda-graph", "--enforce-piecewise-cuda-graph")),
    *(_Move(False, (flag,), "the same launch without piecewise CUDA graphs: if it starts, piecewise capture is the "
            "cause", when=PIECEWISE_LINE)
      for flag in ("--enable-piecewise-cuda-graph", "--enforce-piecewise-cuda-graph")),
)
# a label's experiments, each offered when the failed launch's flags allow it (a drop needs the flag given)
MOVES: dict[str, tuple[_Move, ...]] = {
    "gpu_p2p_unsupported": (_Move(True, ("--disable-custom-all-reduce",),
                                  "custom all-reduce needs peer access these GPUs lack; NCCL does without"),),
    # the piecewise runner's failure: that runner off; any other capture: CUDA graphs off
    "cuda_graph_capture_error": (
        *_PIECEWISE_OFF,
        _Move(True, ("--disable-cuda-graph",),
              "the same launch without CUDA graphs: if it starts, capture is the cause", unless=PIECEWISE_LINE)),
    "torch_compile_error": (_Move(False, ("--enable-torch-compile", "--torch-compile-max-bs"),
                                  "the same launch without torch.compile: if it starts, the compiler is the cause"),),
    # a top-k left None where SGLang settles the parameters: name it (1, a chain), as the budget's remedy does
    "speculative_decoding_error": (_Move(
        True, ("--speculative-eagle-topk",), "the same launch with its top-k named (1, a chain of the steps given): "
        "if it starts, the unset top-k was the cause", value="1", when=NONE_WITH_INT_LINE,
        not_with=("--speculative-eagle-topk",)), _Move(
        False, SPECULATIVE_FLAGS,
        "the same launch without speculative decoding: if it starts, the draft/verify path is the cause",
        "--speculative-algorithm (and its settings)"),),
    # the conv state in the dtype the error names as the source (the model's); causal_conv1d's words name none, and
    # the reports of it are float16 models (--dtype half)
    "mamba_cache_error": (
        *(_Move(True, (f"SGLANG_MAMBA_CONV_DTYPE={dtype}",), f"the conv state in the model's dtype ({dtype}): if the "
                "first request passes, the dtype mismatch was the cause",
                when=rf"\b{name} for the source" + (f"|{CONV_KERNEL_LINE}" if dtype == "float16" else ""))
          for dtype, name in TORCH_DTYPE_NAMES.items()),
        _Move(True, ("--disable-radix-cache",), "the hybrid state pool without its radix cache",
              unless=CONV_DTYPE_LINE)),
    "trust_remote_code_required": (_Move(True, ("--trust-remote-code",),
                                         "let transformers run the checkpoint's own code (read it first: it runs in "
                                         "the container)"),),
    # a backend the launch named: SGLang chooses instead; the one SGLang chose itself: triton, the portable one
    "attention_backend_unsupported": (_Move(False, ("--attention-backend",),
                                            "let SGLang choose the attention backend for this GPU"),
                                      _Move(True, ("--attention-backend",), "the portable Triton attention backend "
                                            "instead of the one SGLang chose for this GPU and model", value="triton")),
    # FP8 kernels need compute capability 8.9 (Ada/Hopper): an online FP8 quantization or an FP8 KV cache on Ampere
    "quant_unsupported_on_gpu": (
        _Move(False, ("--quantization",), "load the checkpoint as it is stored, without the online quantization",
              shows_value=True),
        _Move(False, ("--kv-cache-dtype",), "keep the KV cache in the model's dtype: FP8 needs an Ada or newer GPU",
              shows_value=True, only_value="fp8")),
}
# NCCL's transports between GPUs of one node: peer to peer (PCIe/NVLink), else shared memory in /dev/shm, else sockets.
# Turning one off shows which failed; a shared-memory error already names its transport, so P2P is not tried then, and
# an NCCL out-of-memory is GPU memory, with no transport to try.
MOVES["nccl_error"] = (
    # what NCCL's own error asks for ("run with NCCL_DEBUG=INFO for details"): the relaunch's log names the transport
    # and the call that failed; not offered when the log already has NCCL's own lines
    _Move(True, ("NCCL_DEBUG=INFO",), "the same launch with NCCL's own log: its WARN lines name the transport and "
          "the call that failed (a triage of that attempt reads them)",
          unless=rf"NCCL (?:INFO|WARN)\b|{NCCL_SHM_LINE}|{NCCL_OOM_LINE}", decides=False),
    _Move(True, ("NCCL_P2P_DISABLE=1",), "NCCL without its peer-to-peer transport: if it starts, GPU-to-GPU access "
          "on this node is the cause (IOMMU/ACS on the host, or what the container passes)",
          unless=f"{NCCL_SHM_LINE}|{NCCL_OOM_LINE}"),
    _Move(True, ("NCCL_SHM_DISABLE=1",), "NCCL without its /dev/shm transport: if it starts, the container's "
          "/dev/shm is the cause; give it room rather than keep this (the fallback is slower)",
          unless=NCCL_OOM_LINE))
MOVES["watchdog_timeout"] = MOVES["cuda_graph_capture_error"]
# a kernel fault inside the piecewise runner (its wrapper quoting the fault): the runner off shows if it is the cause
MOVES["illegal_memory_access"] = _PIECEWISE_OFF
MOVES["unsupported_feature_combination"] = MOVES["speculative_decoding_error"]
# findings the budget engine sizes the next experiment for: memory, a model that does not split over tp, and a context
# longer than the model's
BUDGETED_LABELS = frozenset({"kv_pool_oom", "cuda_graph_oom", "weight_load_oom", "runtime_oom",
                             "flashinfer_workspace_oom", "context_exceeds_kv_pool", "tp_divisibility_error",
                             CONTEXT_OVER_MODEL})
# the launch flags the budget's remedies change: an attempt that changed one of them tested a budgeted finding
BUDGET_FLAGS = frozenset({"--mem-fraction-static", "--mamba-ssm-dtype", "--max-running-requests",
                          "--mamba-full-memory-ratio", "--max-mamba-cache-size", "--mamba-scheduler-strategy",
                          "--context-length", "--kv-cache-dtype", "--max-total-tokens", "--chunked-prefill-size",
                          "--cuda-graph-max-bs", "--disable-cuda-graph", "--tp-size", "--tp", "--ep-size", "--dp",
                          "--enable-dp-attention"})


# startup memory failures: a budget that says the same launch fits on the GPUs now contradicts the log
STARTUP_MEMORY_LABELS = frozenset({"kv_pool_oom", "cuda_graph_oom", "weight_load_oom"})


def unsized_experiment(label: str, budget: Budget | None, argv: Sequence[str]) -> Experiment | None:
    """For a startup memory failure whose budget (of the same launch on the GPUs as they are now) says it starts, so
    computes no change: the same launch again, which tells the two readings apart. Either memory was held when it
    ran that is free now (a leftover since stopped), or the budget misjudges this launch. None otherwise."""
    if label not in STARTUP_MEMORY_LABELS or budget is None or budget.remedies or \
            budget.verdict is VerdictKind.FAILS:
        return None
    return Experiment("the same flags", tuple(argv), (
        f"the budget of this launch on the GPUs as they are now says it starts ({budget.summary}), so it computes no "
        "change: either memory was held when it ran that is free now, or the budget misjudges this launch; the same "
        "launch again tells which (its pre-flight shows whether the GPUs are clean)"))


def label_experiments(label: str, argv: Sequence[str], evidence: str = "") -> tuple[Experiment, ...]:
    """The flag experiment for a finding's label, given the failed launch's flags and the finding's evidence lines
    (none when the flags already make the change, or the label's next step is not a flag)."""
    try:
        flags = parse_sglang_flags(argv)
    except UsageError:
        return ()
    found = []
    for move in MOVES.get(label, ()):
        if (move.unless and re.search(move.unless, evidence)) or (move.when and not re.search(move.when, evidence)):
            continue
        if any(without_flags(argv, flag) != tuple(argv) for flag in move.not_with):
            continue
        if move.env:
            if move.flags[0] not in argv[:env_words(argv)]:
                found.append(Experiment(move.flags[0], with_env(argv, move.flags[0]), move.why))
            continue
        given = without_flags(argv, move.flags[0]) != tuple(argv)
        value = str(getattr(flags, move.flags[0].removeprefix("--").replace("-", "_"), ""))
        if move.add and not given:
            change = move.flags[0] + (f" {move.value}" if move.value else "")
            found.append(Experiment(change, with_flag(argv, move.flags[0], move.value), move.why))
        elif not move.add and given and value.startswith(move.only_value):
            shown = (move.shown or move.flags[0]) + (f" {value}" if move.shows_value else "")
            found.append(Experiment(f"drop {shown}", without_flags(argv, *move.flags), move.why))
    return tuple(found)


def finding_experiments(finding: Finding, argv: Sequence[str]) -> tuple[Experiment, ...]:
    """A finding's flag experiments: for SGLang's argparse refusal, from the flags it quotes; else its label's."""
    if finding.label == ARGUMENT_ERROR and finding.evidence:
        return argument_experiments(finding.evidence[0].text, argv)
    return label_experiments(finding.label, argv, "\n".join(e.text for e in finding.evidence))


_UNRECOGNIZED = re.compile(r": error: unrecognized arguments: (?P<tokens>.+?)\s*$")


def argument_experiments(error_line: str, argv: Sequence[str]) -> tuple[Experiment, ...]:
    """For SGLang's argparse refusing flags it does not have (``error_line``): the launch with each refused flag
    replaced by the one in gpuops' table it is a typo of, when each has one, and the launch without them. None when
    the refused flags are not this launch's."""
    quoted = _UNRECOGNIZED.search(error_line)
    if quoted is None:
        return ()
    refused = {t.partition("=")[0] for t in quoted.group("tokens").split() if t.startswith("--")}
    given = {a.partition("=")[0] for a in argv if a.startswith("--")}
    if not refused or not refused <= given:
        return ()
    found = []
    typos = [p for p in flag_problems(GPUOPS_TABLE, argv) if p.given in refused]
    corrected = corrected_argv(argv, typos) if {p.given for p in typos} == refused else None
    if corrected is not None:
        fixes = ", ".join(f"{p.correction} (not {p.given})" for p in typos)
        found.append(Experiment(fixes, corrected, "the refused flags are a typo away from flags SGLang has"))
    kept: list[str] = []
    dropped: list[str] = []
    for start, end in flag_spans(argv, lambda name: None):  # a refused flag goes with the values after it
        (dropped if argv[start].partition("=")[0] in refused else kept).extend(argv[start:end])
    found.append(Experiment("drop " + " ".join(dropped), tuple(kept),
                            "launch without what this SGLang release does not have (the pre-flight checks the rest)"))
    return tuple(found)


def made_experiment(label: str, changes: Sequence[str]) -> str | None:
    """The change among an attempt's ``changes`` (bot.core.attempts.changes_between) that made one of ``label``'s
    experiments that decide it (not a relaunch for more detail), or None."""
    moves = [move for move in MOVES.get(label, ()) if move.decides]
    wanted = {("+" if move.add else "-", move.flags[0]) for move in moves if not move.env}
    words = {move.flags[0] for move in moves if move.env}
    return next((c for c in changes if _changed_flag(c) in wanted or _env_set(c) in words), None)


def made_budget_change(label: str, changes: Sequence[str]) -> str | None:
    """The change among an attempt's ``changes`` that moved a budget flag, for a budgeted ``label`` (for a launch the
    kernel's OOM killer ended: the container's RAM limit raised), or None. Such a change that starts confirms the
    finding; one that is not enough refutes nothing."""
    if label == HOST_OOM_KILL:
        return next((c for c in changes if (raised := CT_MEMORY_CHANGE.match(c)) is not None
                     and float(raised.group("after")) > float(raised.group("before"))), None)
    if label not in BUDGETED_LABELS:
        return None
    return next((c for c in changes if _changed_flag(c)[1] in BUDGET_FLAGS), None)


def _env_set(change: str) -> str | None:
    """The NAME=value a line of bot.core.attempts.changes_between leaves set: "+ NAME=value", "NAME=old -> value"."""
    added = re.fullmatch(r"\+ ([A-Za-z_]\w*=\S*)", change)
    if added:
        return added.group(1)
    moved = re.fullmatch(r"([A-Za-z_]\w*)=\S* -> (\S*)", change)
    return f"{moved.group(1)}={moved.group(2)}" if moved else None


def _changed_flag(change: str) -> tuple[str, str]:
    """("+" added | "-" removed | "" changed value, flag) of one line of bot.core.attempts.changes_between:
    "+ --flag [value]", "- --flag [value]", "--flag old -> new"."""
    words = change.split()
    if words[:1] in (["+"], ["-"]) and len(words) > 1:
        return words[0], words[1]
    return "", words[0] if words else ""
