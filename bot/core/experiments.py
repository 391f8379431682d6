"""The next experiment for a triage finding that is not about memory, as a change to the launch flags.

Memory findings get the budget engine's computed remedies; the others get the experiment their
label names, when it is one flag change: turn off the feature the failure is in (to confirm it),
or add the switch that avoids it. Each one is offered as a button that relaunches through the
pre-flight; a label with no flag-shaped experiment gets none (its next step stays advice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.core.flags import parse_sglang_flags, with_flag, without_flags
from bot.errors import UsageError

SPECULATIVE_FLAGS = ("--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
                     "--speculative-num-draft-tokens", "--speculative-draft-model-path")


@dataclass(frozen=True)
class Experiment:
    change: str  # what the button says: "--disable-cuda-graph", "drop --enable-torch-compile"
    argv: tuple[str, ...]  # the launch flags with the change made
    why: str


def label_experiments(label: str, argv: Sequence[str]) -> tuple[Experiment, ...]:
    """The flag experiments for a finding's label, given the failed launch's flags (none when the
    flags already make the change, or the label's next step is not a flag)."""
    try:
        flags = parse_sglang_flags(argv)
    except UsageError:
        return ()
    given = set(flags.passthrough)
    out: list[Experiment] = []

    def add(flag: str, why: str) -> None:
        out.append(Experiment(flag, with_flag(argv, flag, None), why))

    def drop(flags_: Sequence[str], shown: str, why: str) -> None:
        out.append(Experiment(f"drop {shown}", without_flags(argv, *flags_), why))

    if label == "gpu_p2p_unsupported" and "--disable-custom-all-reduce" not in given:
        add("--disable-custom-all-reduce", "custom all-reduce needs peer access these GPUs lack; NCCL does without")
    if label in ("cuda_graph_capture_error", "watchdog_timeout") and not flags.disable_cuda_graph:
        add("--disable-cuda-graph", "the same launch without CUDA graphs: if it starts, capture is the cause")
    if label == "torch_compile_error" and flags.enable_torch_compile:
        drop(("--enable-torch-compile", "--torch-compile-max-bs"), "--enable-torch-compile",
             "the same launch without torch.compile: if it starts, the compiler is the cause")
    if label in ("speculative_decoding_error", "unsupported_feature_combination") and flags.speculative_algorithm:
        drop(SPECULATIVE_FLAGS, "--speculative-algorithm (and its settings)",
             "the same launch without speculative decoding: if it starts, the draft/verify path is the cause")
    if label == "mamba_cache_error" and not flags.disable_radix_cache:
        add("--disable-radix-cache", "the hybrid state pool without its radix cache")
    if label == "attention_backend_unsupported" and "--attention-backend" in given:
        drop(("--attention-backend",), "--attention-backend", "let SGLang choose the attention backend for this GPU")
    if label == "quant_unsupported_on_gpu" and flags.quantization:
        drop(("--quantization",), f"--quantization {flags.quantization}",
             "load the checkpoint as it is stored, without the online quantization")
    return tuple(out)


# how an attempt's change list (bot.core.attempts.changes_between) shows a label's experiment made
EXPERIMENT_CHANGE = {
    "gpu_p2p_unsupported": "+ --disable-custom-all-reduce",
    "cuda_graph_capture_error": "+ --disable-cuda-graph",
    "watchdog_timeout": "+ --disable-cuda-graph",
    "torch_compile_error": "- --enable-torch-compile",
    "speculative_decoding_error": "- --speculative-algorithm",
    "unsupported_feature_combination": "- --speculative-algorithm",
    "mamba_cache_error": "+ --disable-radix-cache",
    "attention_backend_unsupported": "- --attention-backend",
    "quant_unsupported_on_gpu": "- --quantization",
}


def made_experiment(label: str, changes: Sequence[str]) -> str | None:
    """The change among an attempt's ``changes`` that tests ``label``'s experiment, or None."""
    wanted = EXPERIMENT_CHANGE.get(label)
    return next((c for c in changes if wanted and (c == wanted or c.startswith(wanted + " "))), None)
