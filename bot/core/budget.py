"""Will this SGLang launch fit, and why: SGLang's own memory arithmetic, by version.

The model follows ../shared/research/sglang-memory.md (formulas tied to SGLang's source):

    pre   = free GiB per GPU after distributed init (min over ranks)
    slack = pre * (1 - mem_fraction_static)      # graphs, activations, (old eras) draft model
    rest  = (pre - weights) - slack              # KV pool (+ hybrid state pools)
    tokens = rest * 2^30 / cell_bytes            # cell counts only full-attention layers

with each version's defaults, hybrid-state rules and exact error texts. Everything here is
pure: a :class:`BudgetInput` in, a :class:`Budget` (lines, verdict, remedies) out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from bot.core.flags import FlagEdit, LaunchFlags, redacted, sglang_spec_params
from bot.core.gpus import gpu_compute_capability
from bot.core.model import (
    DTYPE_BYTES,
    GIB,
    NO_QUANT,
    TORCH_DTYPE_NAMES,
    DraftSize,
    ModelConfigError,
    ModelSpec,
    Quantization,
    default_group,
    eagle_draft_size,
    kv_bytes_per_token,
    lm_head_copy_bytes,
    loadable_group,
    mamba_bytes_per_request,
    mtp_draft_size,
    pipeline_stages,
    quantization_from,
    quantized_inputs,
    read_config,
    rope_table_bytes,
    uneven_bytes,
    weight_bytes_per_gpu,
    weight_parts,
    with_group,
)

MIB = 1 << 20
MM_RESERVATION_FROM = (0, 5, 16)  # the first release after 2026-07-20 (research notes §2)
MM_CACHE_GIB = 100 / 1024
MAX_CONTEXT_GIB = 3.0  # the most CUDA context + NCCL is believed to take before `Load weight begin`
CURRENT = (0, 5, 15)  # the newest SGLang release modelled


# --------------------------------------------------------------------------- versions

@dataclass(frozen=True, order=True)
class SglangVersion:
    major: int
    minor: int
    patch: int
    label: str = field(compare=False, default="")

    @property
    def tuple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    @property
    def era(self) -> str:
        """A: <=0.4.x; B: 0.5.0-0.5.9; C1: 0.5.10-11; C2: 0.5.12-13; D: >=0.5.14."""
        v = self.tuple
        if v < (0, 5, 0):
            return "A"
        if v < (0, 5, 10):
            return "B"
        if v < (0, 5, 12):
            return "C1"
        if v < (0, 5, 14):
            return "C2"
        return "D"

    def __str__(self) -> str:
        return self.label or f"{self.major}.{self.minor}.{self.patch}"


def parse_version(text: str | None) -> SglangVersion:
    """``0.5.9``, ``v0.5.10.post1``, ``0.5.0rc2``, ``current``/None (the newest modelled)."""
    if not text or text.strip().lower() in ("current", "latest", "head", "main"):
        return SglangVersion(*CURRENT, label=f"{'.'.join(map(str, CURRENT))} (current)")
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        raise ValueError(f"not an SGLang version: {text!r}")
    return SglangVersion(int(match.group(1)), int(match.group(2)), int(match.group(3) or 0),
                         label=text.strip().lstrip("v"))


# minimum SGLang per model type, and the version the model card asks for
@dataclass(frozen=True)
class Support:
    loads_from: tuple[int, int, int]
    recommended: tuple[int, int, int]
    why: str


SUPPORT: dict[str, Support] = {
    "qwen3_next": Support((0, 5, 2), (0, 5, 2), "Qwen3-Next support arrived in 0.5.2"),
    "qwen3_5": Support((0, 5, 9), (0, 5, 10), "Qwen3.5 support arrived in 0.5.9; the Qwen3.6 cookbook "
                       "requires SGLang >= 0.5.10 (0.5.9 loads it but output quality is degraded)"),
    "qwen3_5_moe": Support((0, 5, 9), (0, 5, 10), "Qwen3.5/3.6 MoE: as qwen3_5"),
    "gemma4": Support((0, 5, 11), (0, 5, 12), "Gemma 4 support"),
    "gemma4_unified": Support((0, 5, 11), (0, 5, 12), "Gemma 4 support"),
    "deepseek_v4": Support((0, 5, 14), (0, 5, 14), "DeepSeek-V4 pools (DSV4PoolConfigurator)"),
    "glm_moe_dsa": Support((0, 5, 8), (0, 5, 8), "GLM-5 DSA support"),
}


# --------------------------------------------------------------------------- inputs

def context_gib(tp: int) -> float:
    """What the CUDA context (and NCCL's buffers at tp > 1) take of each GPU before loading: observed 0.7-1.1 GiB."""
    return 0.75 + (0.35 if tp > 1 else 0.0)


def unbalanced_text(least_gib: float, local_gib: float) -> str:
    """SGLang's tensor-parallel memory-balance refusal (model_runner's check after distributed init)."""
    return ("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
            f"min_per_gpu_memory={least_gib:.2f}, local_gpu_memory={local_gib:.2f}, "
            f"local_gpu_memory * 0.9={local_gib * 0.9:.2f}")


@dataclass(frozen=True)
class GpuPlan:
    """The GPUs a launch will use: name, total MiB each, and free MiB each when read live."""

    name: str
    total_mib: int | None
    count: int
    free_mib: tuple[int, ...] = ()
    pre_gib: float | None = None  # measured pre-load free memory (from a previous log), if known

    def pre_load_gib(self, tp: int) -> tuple[float, str]:
        """Free GiB per GPU after CUDA context + NCCL, and how it was obtained."""
        if self.pre_gib is not None:
            return self.pre_gib, "given (measured by SGLang's `Load weight begin` on this host)"
        overhead = context_gib(tp)
        if self.free_mib:
            return min(self.free_mib) / 1024 - overhead, (
                f"min free {min(self.free_mib)} MiB over the GPUs minus ~{overhead:.2f} GiB CUDA context/NCCL")
        if self.total_mib:
            return self.total_mib / 1024 - overhead, (
                f"{self.total_mib} MiB total (GPUs assumed empty) minus ~{overhead:.2f} GiB CUDA context/NCCL")
        raise ValueError("GPU memory unknown: give total MiB or free MiB per GPU")

    @property
    def total_for_defaults(self) -> int | None:
        return self.total_mib

    @property
    def vendor(self) -> str:
        return "amd" if re.search(r"\bAMD\b|Radeon|Instinct|\bMI\d{3}", self.name) else "nvidia"

    @property
    def compute_capability(self) -> tuple[int, int] | None:
        return gpu_compute_capability(self.name) if self.vendor == "nvidia" else None


@dataclass(frozen=True)
class BudgetInput:
    model: ModelSpec
    flags: LaunchFlags
    gpus: GpuPlan
    version: SglangVersion
    weights_bytes_total: int | None = None  # safetensors total_size, when known: beats the estimate
    quant: Quantization | None = None  # overrides the config's (e.g. an AWQ build of a base config)
    draft_config: dict[str, Any] | None = None  # the --speculative-draft-model-path's config.json, when read
    measured_load: MeasuredLoad | None = None  # what an earlier load of this checkpoint logged
    mtp_in_checkpoint: bool | None = None  # its index holds the MTP layers its config names (None: unknown)


@dataclass(frozen=True)
class MeasuredLoad:
    """What an earlier load of the same checkpoint, in the same layout, logged about itself: its
    weights per GPU (`Load weight end ... mem usage=`) and, when the free memory before it is known,
    what CUDA context and NCCL took before `Load weight begin`. SGLang trees and checkpoints differ
    in what they keep whole, unquantized or repacked; the measurement has all of that, the estimate none."""

    weights_gib: float
    layout: str  # LaunchFlags.weight_layout of that load
    source: str  # e.g. "attempt a20261202-101500-1a2b's log"
    load_format: str | None = None  # as `Load weight end` printed it: "quant=awq", "dtype=bfloat16"
    context_gib: float | None = None  # free GiB at its pre-flight minus its `Load weight begin. avail mem`


def load_format_conflict(load_format: str | None, quant: Quantization, dtype: str) -> str | None:
    """Why a logged load cannot have been this checkpoint (e.g. it loaded AWQ int4 and this one is
    bfloat16), or None when it can. Weights from another checkpoint would mislead the budget."""
    if not load_format:
        return None  # older SGLang does not print it
    kind, _, value = load_format.partition("=")
    if kind == "dtype":
        # older SGLang prints the model dtype even for a quantized load (GLM-5-FP8 on 0.5.8 printed
        # `dtype=torch.bfloat16`): only a different width of an unquantized load is a conflict
        if quant.method == "none" and DTYPE_BYTES.get(value, 2.0) != DTYPE_BYTES.get(dtype, 2.0):
            return f"that load was {value}, this launch loads {dtype}"
        return None
    try:
        logged = quantization_from(value)
    except ValueError:
        return None if quant.method != "none" else f"that load was {value}, this launch loads {dtype}"
    if logged.method != quant.method:
        planned = quant.label if quant.method != "none" else f"unquantized {dtype}"
        return f"that load was {logged.label}, this launch loads {planned}"
    return None


def planned_format_conflict(logged: str | None, planned: str | None) -> str | None:
    """Why the load a server logged is not the one a budget planned (``Budget.weights_format``), or None:
    a launch whose log shows another format ran another checkpoint than the config.json that was read."""
    if not logged or not planned:
        return None
    kind, _, value = planned.partition("=")
    if kind == "quant":
        try:
            return load_format_conflict(logged, quantization_from(value), "bfloat16")
        except ValueError:
            return None
    return load_format_conflict(logged, NO_QUANT, value)


# --------------------------------------------------------------------------- outputs

class VerdictKind(StrEnum):
    FITS = "fits"
    FAILS = "fails"
    DEGRADED = "degraded"  # starts, but with a limit that defeats the plan


@dataclass(frozen=True)
class BudgetLine:
    label: str
    gib: float | None
    why: str
    value: str | None = None  # for lines that are counts (tokens, slots) rather than GiB


@dataclass(frozen=True)
class Remedy:
    change: str  # as shown: "--mem-fraction-static 0.91", "free the GPUs first (...)"
    flags: LaunchFlags | None  # the launch with the change made, for the budget; None when it is not a launch
    effect: str
    cost_rank: int  # lower is cheaper: keeps capability, then trades capacity, then hardware
    # the changes to the launch's own flags, made in order; none for anything else (free the GPUs ...)
    edits: tuple[FlagEdit, ...] = ()
    frees_gpus: bool = False  # the remedy is to free memory others hold on the GPUs (:func:`stop_launches_first`)

    @classmethod
    def of(cls, edit: FlagEdit, base: LaunchFlags, effect: str, cost_rank: int) -> Remedy:
        """A remedy that is ``edit`` made to the launch's flags ``base``: shown as the edit's words, its budget's flags
        read from the same edit."""
        return cls(edit.words(), base.edited(edit), effect, cost_rank, (edit,))

    @property
    def flag_change(self) -> tuple[str, str | None] | None:
        """(flag, value) when the remedy is one launch flag set and nothing else; None for anything else (free GPUs,
        more GPUs, a dropped flag, a flag that also needs an environment variable, two changes)."""
        if self.flags is None or len(self.edits) != 1:
            return None
        edit = self.edits[0]
        if edit.flag is None or edit.drop or edit.env:
            return None
        return edit.flag, edit.value

    def launch_flags(self, argv: Sequence[str]) -> tuple[str, ...] | None:
        """The launch's own flags ``argv`` with this remedy's changes (flags set or dropped, with the environment
        words they need) and nothing else changed; None when the remedy is not a flag change."""
        if self.flags is None or not self.edits:
            return None
        changed = tuple(argv)
        for edit in self.edits:
            changed = edit.applied(changed)
        return changed

    def on_top_of(self, first: Remedy) -> Remedy:
        """This remedy as computed for the launch with ``first``'s change made: its button makes both changes (an
        environment-only ``first`` joins this one's words as ``(env ...)``), its effect says it was computed so."""
        env_only = bool(first.edits) and all(e.flag is None for e in first.edits)
        words = tuple(w for e in first.edits for w in e.env) if env_only else ()
        effect = f"with {' '.join(words) or first.change}: {self.effect}"
        if self.flags is None or not self.edits or not first.edits:
            return replace(self, effect=effect)
        edits = (*self.edits[:-1], self.edits[-1].with_env(*words)) if env_only else (*first.edits, *self.edits)
        return replace(self, change=" + ".join(e.words() for e in edits), effect=effect, edits=edits)


@dataclass(frozen=True)
class Budget:
    version: SglangVersion
    era: str
    mem_fraction_static: float
    mfs_auto: bool
    pre_gib: float
    weights_gib: float
    draft_weights_gib: float
    draft_load_gib: float  # what the draft's own `Load weight end ... mem usage` shows (its transient copies too)
    slack_gib: float
    rest_gib: float
    kv_cell_bytes: float
    kv_tokens: int
    swa_tokens: int | None
    mamba_per_request_bytes: float
    mamba_slots: int | None
    mamba_state_gib: float
    spec_state_gib: float
    max_running_requests: int | None
    context_len: int | None
    runtime_need_gib: float
    headroom_gib: float
    verdict: VerdictKind
    error_text: str | None
    reasons: tuple[str, ...]
    lines: tuple[BudgetLine, ...]
    remedies: tuple[Remedy, ...] = ()
    not_modelled: tuple[str, ...] = ()
    model_notes: tuple[str, ...] = ()  # what the estimate from config.json leaves out
    weights_source: str = "estimate"  # estimate | checkpoint size | measured (an earlier load's own log)
    reason_kinds: tuple[str, ...] = ()  # one per reason: support, radix, admit, capped, swa, context, headroom
    # the format the estimate loads, as SGLang's `Load weight end` prints it: "quant=awq", "dtype=bfloat16"
    weights_format: str | None = None
    # False when error_text is gpuops' own account of the failure (SGLang's message for it is not fixed, or not
    # public): it is not shown as the line SGLang prints
    error_verbatim: bool = True
    # which flag or layer leads to error_text, when SGLang's words do not say (a split, a top-k left None)
    error_why: str | None = None

    @property
    def fixable(self) -> frozenset[str]:
        """Degradations a launch flag can change (not the SGLang version or a silent radix switch)."""
        return frozenset(self.reason_kinds) - {"support", "radix"}

    @property
    def fits(self) -> bool:
        return self.verdict is VerdictKind.FITS

    @property
    def summary(self) -> str:
        """The verdict in one line; a failure whose words do not say what leads to it (which layer does not split,
        which flag left a None) says that first."""
        if self.error_why and self.error_text:
            return f"{self.error_why}: SGLang stops with {self.error_text}"
        if self.error_text:
            return self.error_text
        # SGLang's support for the model is its own pre-flight line; here, what the memory allows
        memory = [r for r, k in zip(self.reasons, self.reason_kinds, strict=True) if k != "support"]
        slots = f", {self.mamba_slots} state slots" if self.mamba_slots is not None else ""
        return "; ".join([*memory, f"{self.kv_tokens:,} KV tokens{slots}, {self.headroom_gib:.1f} GiB headroom"])

    @property
    def memory_degraded(self) -> bool:
        """Starts degraded for a reason of memory or flags, not only SGLang's support for the model."""
        return any(k != "support" for k in self.reason_kinds)


# --------------------------------------------------------------------------- defaults

def default_chunked_prefill(total_mib: int | None, era: str) -> int:
    if era == "A" or total_mib is None:
        return 8192
    gib = total_mib / 1024
    if gib < 35:
        return 2048
    if gib < 60:
        return 4096
    if gib < 160:
        return 8192
    return 16384


def default_cuda_graph_max_bs(total_mib: int | None, tp: int, era: str) -> int:
    if era == "A" or total_mib is None:
        return 160
    gib = total_mib / 1024
    if gib < 20:
        return 8
    if gib < 35:
        return 24 if tp < 4 else 80
    if gib < 60:
        return 32 if tp < 4 else 160
    return 256 if tp < 4 else 512


def vlm_factor(model: ModelSpec) -> float:
    """adjust_mem_fraction_for_vlm: more slack for bigger vision towers."""
    if not model.vision_layers or not model.vision_hidden:
        return 1.0
    size = model.vision_layers * model.vision_hidden**2 / (24 * 1024**2)
    return 0.95 * min(1.05, max(0.8, 1 - 0.1 * (size - 1)))


def default_mem_fraction_static(model: ModelSpec, flags: LaunchFlags, total_mib: int | None,
                                version: SglangVersion, chunk: int, graph_bs: int) -> tuple[float, str]:
    """SGLang's automatic --mem-fraction-static for this version, GPU size and launch."""
    v = version.tuple
    tp_pp = flags.tp * flags.pp
    if total_mib is None:
        return 0.88, "GPU size unknown: SGLang's fallback 0.88"
    gib = total_mib / 1024
    if v <= (0, 4, 6):
        if total_mib <= 81920:
            table = [(16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)]
            mfs = next((m for t, m in table if flags.tp >= t), 0.88)
            return mfs, f"0.4.6 table for tp={flags.tp}"
        return (total_mib - 13 * 1024) / total_mib, "0.4.6: (gpu_mem - 13 GiB)/gpu_mem"
    if v < (0, 5, 3):
        reserved = 32.0 if gib >= 160 else 12 + tp_pp / 2 if gib >= 90 else 9.5 + tp_pp / 2 if gib >= 35 \
            else 2.8 + tp_pp / 10
        reserved += 2 if flags.speculative else 0
        reserved += 4 if flags.enable_dp_attention else 0
        return (gib - reserved) / gib, f"0.4.7-0.5.2: {reserved:.1f} GiB reserved for this GPU class"
    reserved_mib = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp_pp / 8 * 1024
    why = f"512 + {max(chunk, 2048)}*1.5 + {graph_bs}*2 + {tp_pp}/8*1024 MiB"
    if v >= (0, 5, 10) and not flags.enable_torch_compile and not model.multimodal and not flags.disable_cuda_graph \
            and not flags.disable_piecewise_cuda_graph:
        reserved_mib += 512  # piecewise prefill graphs
        why += " + 512 MiB piecewise graphs"
    if gib > 60:
        reserved_mib = max(reserved_mib, 10 * 1024)
    if flags.speculative:
        extra = 6 if flags.speculative_algorithm == "STANDALONE" else (4 if v >= (0, 5, 9) else 2)
        if v < (0, 5, 13):
            reserved_mib += extra * 1024
            why += f" + {extra} GiB speculative"
    mfs = round((total_mib - reserved_mib) / total_mib, 3)
    factor = vlm_factor(model)
    if factor != 1.0:
        mfs = mfs * factor
        why += f", x{factor:.3f} for the vision tower"
    return mfs, why


# --------------------------------------------------------------------------- error texts

def not_enough_memory_text(version: SglangVersion, mfs: float) -> str:
    base = "Not enough memory. Please try to increase --mem-fraction-static."
    v = version.tuple
    if v < (0, 5, 3):
        return base
    if v < (0, 5, 10):
        return f"{base} Current value: self.server_args.mem_fraction_static={mfs:g}"
    return f"{base} Current value: mem_fraction_static={mfs:g}"


def swa_pool_text(swa_tokens: int, window: int, page: int) -> str:
    """SGLang's refusal of a sliding-window pool that could never admit a request (its pool configurator; before
    the check the scheduler spun at warmup with every request waiting)."""
    return (f"SWA pool ({swa_tokens} tokens) cannot hold even one request: the prefill admission floor is "
            f"sliding_window_size ({window}) + page_size ({page}). Increase --swa-full-tokens-ratio or the total KV "
            "budget.")


def e2_text(mfs: float, minimum: float) -> str:
    return (f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={mfs:g}. "
            f"Raise --mem-fraction-static above {minimum:.4f} (minimum viable = 1 - available/pre = {minimum:.4f}). "
            "If using speculative decoding, draft weights are now counted.")


# SGLang's AWQ/GPTQ linear methods (create_weights) when a rank's share of a layer's input is not whole groups
AWQ_SPLIT_TEXT = ("ValueError: The input size is not aligned with the quantized weight shape. This can be caused "
                  "by too large tensor parallel size.")


# a bare `assert` in SGLang's layer constructors: the traceback's last line says no more than this
SPLIT_ASSERT_TEXT = "AssertionError"

# Triton's refusal to compile SGLang's fused-MoE kernel for FP8 (e4m3) weights below compute capability 8.9,
# as an Ampere launch of an FP8 MoE checkpoint logs it after loading (corpus: minimax-m25-21, sglang-18875)
FP8_MOE_TEXT = ("ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 dtypes are "
                "('fp8e4b15', 'fp8e5')\")")


def fp8_moe_misfit(model: ModelSpec, quant: Quantization, gpus: GpuPlan) -> str | None:
    """Why FP8 experts cannot run on these GPUs, or None. SGLang's fused-MoE kernel is Triton, and Triton
    compiles fp8e4nv only for compute capability 8.9+ (Ada, Hopper, Blackwell); the Marlin weight-only
    fallback for Ampere fails later in the MoE reduction (sglang-18875), so an FP8 MoE checkpoint loads
    its weights and then stops at the first forward."""
    cap = gpus.compute_capability
    if model.moe is None or quant.method != "fp8" or quant.kept_fraction("experts") >= 1.0:
        return None
    if cap is None or cap >= (8, 9):
        return None
    return (f"the experts are FP8 (e4m3): SGLang's fused-MoE Triton kernel needs compute capability 8.9 (Ada, "
            f"Hopper); {gpus.name.removeprefix('NVIDIA ')} is {cap[0]}.{cap[1]}, so the weights load and the kernel "
            "then fails to compile at the first forward")


# The dtypes of a hybrid model's recurrent state (configs/mamba_utils.py mamba2_state_dtype). From 0.5.9
# (sglang#18532, 2026-02-10) the SSM state's is --mamba-ssm-dtype (server_args writes it into SGLANG_MAMBA_SSM_DTYPE),
# else that variable, else config.json's mamba_ssm_dtype, else float32; the conv state's is SGLANG_MAMBA_CONV_DTYPE,
# else bfloat16, whatever dtype the model runs in. Before, server_args wrote its own default (float32) over the
# variable, no config was read and the conv state was always bfloat16.
MAMBA_CONV_ENV, MAMBA_SSM_ENV = "SGLANG_MAMBA_CONV_DTYPE", "SGLANG_MAMBA_SSM_DTYPE"
STATE_DTYPES_FROM = (0, 5, 9)
STATE_DTYPES = ("float32", "bfloat16", "float16")  # the names mamba2_state_dtype maps; others fall back


@dataclass(frozen=True)
class StateDtypes:
    conv: str
    ssm: str
    conv_why: str


def state_dtypes(model: ModelSpec, flags: LaunchFlags, version: SglangVersion) -> StateDtypes:
    """The dtypes SGLang holds a hybrid model's conv and SSM state in, for this launch and version."""
    if version.tuple < STATE_DTYPES_FROM:
        return StateDtypes("bfloat16", flags.mamba_ssm_dtype or "float32", "always bfloat16 before SGLang 0.5.9")
    conv_env, ssm_env = flags.env_value(MAMBA_CONV_ENV), flags.env_value(MAMBA_SSM_ENV)
    config_ssm = model.linear.ssm_dtype if model.linear and model.linear.ssm_dtype in STATE_DTYPES else "float32"
    ssm = flags.mamba_ssm_dtype or (ssm_env if ssm_env in STATE_DTYPES else config_ssm)
    if conv_env in STATE_DTYPES:
        return StateDtypes(str(conv_env), ssm, f"{MAMBA_CONV_ENV}={conv_env}")
    return StateDtypes("bfloat16", ssm, f"{MAMBA_CONV_ENV}'s default")


def conv_state_conflict(model: ModelSpec, flags: LaunchFlags, version: SglangVersion) -> str | None:
    """Why the first request will fail when the conv state is not in the dtype the model runs in (``model`` as it
    loads), or None. SGLang copies the layer's input into the conv state as it is, and torch refuses to mix two
    dtypes (sglang#19773, #30178, #31719: a float16 model, an AWQ build or --dtype half, over the bfloat16 default).
    Kimi's KDA layers are left out: no report shows them failing so."""
    la = model.linear
    if la is None or la.kind == "kda" or model.dtype not in TORCH_DTYPE_NAMES:
        return None
    dtypes = state_dtypes(model, flags, version)
    if dtypes.conv == model.dtype:
        return None
    return (f"the first request fails: the conv state is {dtypes.conv} ({dtypes.conv_why}) and the model runs in "
            f"{model.dtype}; SGLang raises RuntimeError: Index put requires the source and destination dtypes match, "
            f"got {TORCH_DTYPE_NAMES[dtypes.conv]} for the destination and {TORCH_DTYPE_NAMES[model.dtype]} for the "
            "source (or causal_conv1d's Expected conv_states_.scalar_type() == input_type)")


def tp_misfit(model: ModelSpec, tp: int, attn_tp: int, moe_tp: int | None = None) -> str | None:
    """Why the model's heads or MLP cannot be split over ``tp``, or None when they can. SGLang's
    attention layers assert ``total_num_heads % tp_size == 0`` and that the KV heads divide tp (or tp
    divides them, each head then replicated), its MLP that the intermediate size splits."""
    if attn_tp > 1 and model.heads % attn_tp:
        return f"{model.heads} attention heads do not split over tp {attn_tp}"
    kv_counts = {model.kv_heads, model.full_kv_heads or model.kv_heads} if model.mla is None and \
        model.full_layers + model.sliding_layers else set()
    for kv in sorted(kv_counts):
        if kv >= attn_tp and kv % attn_tp:
            return f"{kv} KV heads do not split over tp {attn_tp}"
        if kv < attn_tp and attn_tp % kv:
            return f"tp {attn_tp} is not a multiple of the {kv} KV heads (each would be copied to tp/{kv} ranks)"
    linear = model.linear
    if linear is not None and linear.kind == "shortconv":
        # its state is one Mamba2StateShape head as wide as the hidden state, whose channels ``divide`` over tp
        if model.linear_layers and attn_tp > 1 and model.hidden % attn_tp:
            return f"the {model.hidden} short-convolution channels do not split over tp {attn_tp}"
    elif linear is not None and model.linear_layers and attn_tp > 1 and linear.num_value_heads % attn_tp:
        # Mamba2StateShape.create divides the state's heads by the attention TP size (``divide`` asserts)
        return f"the {linear.num_value_heads} {_linear_name(model)} heads do not split over tp {attn_tp}"
    if tp > 1 and model.has_dense_mlp and model.intermediate % tp:
        return f"the MLP's intermediate size {model.intermediate} does not split over tp {tp}"
    experts_tp = moe_tp or tp
    if experts_tp > 1 and model.moe is not None and model.moe.intermediate % experts_tp:
        return f"the experts' intermediate size {model.moe.intermediate} does not split over {experts_tp} ranks"
    return None


def _linear_name(model: ModelSpec) -> str:
    kind = model.linear.kind if model.linear is not None else "gdn"
    return {"mamba2": "Mamba-2", "kda": "KDA", "shortconv": "short-convolution"}.get(kind, "linear-attention")


def split_error_text(model: ModelSpec, attn_tp: int) -> str:
    """What SGLang raises for a model whose heads do not split over tp: an assert in the layer constructors
    (``divide``), except Kimi-Linear's KDA layers (its first layers), which raise their own ValueError."""
    la = model.linear
    if la is not None and la.kind == "kda" and model.linear_layers and la.num_value_heads % attn_tp:
        return f"ValueError: KDA num_heads ({la.num_value_heads}) must be divisible by global tp_size ({attn_tp})"
    return SPLIT_ASSERT_TEXT


def block_misfit(model: ModelSpec, tp: int, moe_tp: int, quant: Quantization) -> tuple[str, str] | None:
    """(SGLang's error, why) when a block-wise FP8 checkpoint's blocks do not split over the ranks, checked in
    the order SGLang builds the first layer (its MLP or its experts); None when they split.

    SGLang's Fp8 methods refuse a rank's share of an MLP or expert projection that is not whole blocks:
    Qwen3-235B's experts (1536 wide) give 192 a rank at tp 8, not a multiple of 128. Expert parallelism
    keeps experts whole on a rank (``--ep-size``), so only ``tp / ep`` ranks split each one."""
    if quant.block is None:
        return None
    block_n, block_k = quant.block
    moe = model.moe
    found: dict[str, tuple[str, str]] = {}
    dense = model.intermediate // tp if tp > 1 and model.intermediate else 0
    if dense and model.has_dense_mlp and not quant.experts_only:
        error = _block_error(dense, block_n, block_k, f"Weight output_partition_size = {dense}",
                             f"Weight input_size_per_partition = {dense}")
        if error:
            found["mlp"] = (error, f"the MLP's {model.intermediate} split over tp {tp} leaves {dense} a rank")
    if moe is not None and moe_tp > 1:
        per = moe.intermediate // moe_tp
        error = _block_error(per, block_n, block_k, f"The output_size of gate's and up's weight = {per}",
                             f"The input_size of down's weight = {per}")
        if error:
            found["experts"] = (error, f"the experts' {moe.intermediate} split over {moe_tp} ranks leaves {per} a rank")
    first_is_moe = moe is not None and 0 not in moe.dense_layers and not moe.dense_and_moe
    order = ("experts", "mlp") if first_is_moe else ("mlp", "experts")
    hit = next((found[k] for k in order if k in found), None)
    if hit is None:
        return None
    return hit[0], f"{hit[1]}, not whole {block_n}x{block_k} blocks"


def _block_error(size: int, block_n: int, block_k: int, as_output: str, as_input: str) -> str | None:
    """SGLang's Fp8 wording when ``size`` a rank is not whole blocks: its output check comes first."""
    if size % block_n:
        return f"ValueError: {as_output} is not divisible by weight quantization block_n = {block_n}."
    if size % block_k:
        return f"ValueError: {as_input} is not divisible by weight quantization block_k = {block_k}."
    return None


def split_misfit(model: ModelSpec, tp: int, quant: Quantization, attn_tp: int, moe_tp: int | None = None) -> str | None:
    """Why a checkpoint's stated group size cannot be split over ``tp``, or None when it can."""
    group = quant.group_size
    if not quant.bits or not group or group <= 0:
        return None
    inputs = quantized_inputs(model, tp, quant, attn_tp, moe_tp)
    bad = next(((name, size) for name, size in inputs.items() if size % group), None)
    if bad is None:
        return None
    return (f"the {bad[0]} takes {bad[1]} inputs a rank at tp {tp}, not a multiple of the checkpoint's "
            f"group size {group}")


def e5_text(architecture: str) -> str:
    return (f"Speculative decoding for {architecture} is not compatible with radix cache when using "
            "--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
            "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.")


# --------------------------------------------------------------------------- the engine

@dataclass
class _Work:
    """Mutable scratch of one computation (kept private; the result is frozen): the explanation's lines, the
    first refusal SGLang would print (it stops at the first) and the ways the launch would start degraded."""

    lines: list[BudgetLine] = field(default_factory=list)
    error: str | None = None
    error_verbatim: bool = True
    error_why: str | None = None
    # (kind, text); kinds: support, radix, admit, capped, context, headroom, state_dtype
    degraded: list[tuple[str, str]] = field(default_factory=list)

    def line(self, label: str, gib: float | None, why: str, value: str | None = None) -> None:
        self.lines.append(BudgetLine(label, gib, why, value))

    def fail(self, error: str, verbatim: bool = True, why: str | None = None) -> None:
        """``verbatim``: ``error`` is SGLang's own text (its numbers filled in), not a description of the failure;
        ``why``: what leads to it, when its words do not say."""
        if self.error is None:
            self.error, self.error_verbatim, self.error_why = error, verbatim, why

    def degrade(self, kind: str, text: str) -> None:
        self.degraded.append((kind, text))


def compute_budget(inp: BudgetInput, with_remedies: bool = True) -> Budget:
    budget = _compute(inp)
    if with_remedies and not budget.fits:
        budget = replace(budget, remedies=tuple(find_remedies(inp, budget)))
    return budget


def _compute(inp: BudgetInput) -> Budget:
    """With pipeline parallelism every rank sizes its own pools from its own layers; the launch is
    bound by the rank that fails, else by the one with the fewest KV tokens."""
    if inp.flags.pp <= 1:
        return _compute_rank(inp)
    whole = weight_bytes_per_gpu(inp.model, 1)
    stages = pipeline_stages(inp.model, inp.flags.pp)
    ranks = []
    for stage in stages:
        share = None
        if inp.weights_bytes_total:  # the checkpoint's bytes, split as the estimate splits them
            share = int(inp.weights_bytes_total * weight_bytes_per_gpu(stage, 1) / whole)
        # a measurement is rank 0's, which holds only the first stage: every stage is estimated
        ranks.append(_compute_rank(replace(inp, model=stage, weights_bytes_total=share, measured_load=None)))
    failing = [i for i, b in enumerate(ranks) if b.verdict is VerdictKind.FAILS]
    bind = failing[0] if failing else min(range(len(ranks)), key=lambda i: ranks[i].kv_tokens)
    stage = stages[bind]
    assert stage.stage is not None
    rank, pp, first, _ = stage.stage
    holds = ["embeddings"] if rank == 0 else []
    holds += ["lm_head"] if rank == pp - 1 else []
    others = ", ".join(f"rank {i}: {b.kv_tokens:,}" for i, b in enumerate(ranks) if i != bind)
    line = BudgetLine("pipeline rank", None,
                      f"layers {first}-{first + stage.layers - 1}" + (f" + {' + '.join(holds)}" if holds else "")
                      + f"; binds the launch ({'it fails' if failing else 'fewest KV tokens'}; {others})",
                      value=f"{rank + 1} of {pp}")
    chosen = ranks[bind]
    return replace(chosen, lines=(line, *chosen.lines))


DTYPE_FLAG = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32",
              "float32": "float32"}  # --dtype; "auto" keeps the checkpoint's, except a float32 one (below)


LONGER_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def context_over_derived_text(context_length: int, derived: int) -> str:
    """SGLang's ModelConfig error for a --context-length above the config's (some releases prefix it "Warning: ")."""
    return (f"ValueError: User-specified context_length ({context_length}) is greater than the derived context_length "
            f"({derived}). This may lead to incorrect model outputs or CUDA errors. Note that the derived "
            "context_length may differ from max_position_embeddings in the model's config. To allow overriding this "
            "maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")


def load_dtype(flag: str | None, checkpoint_dtype: str, model_type: str) -> str:
    """The dtype SGLang builds the model in (model_config._get_and_verify_dtype): --dtype when given; with
    "auto" the checkpoint's, except that a float32 checkpoint is loaded as float16 (Gemma's as bfloat16)."""
    if flag in DTYPE_FLAG:
        return DTYPE_FLAG[flag]
    if checkpoint_dtype == "float32":
        return "bfloat16" if model_type.startswith("gemma") else "float16"
    return checkpoint_dtype


def _target_weights(inp: BudgetInput, quant: Quantization, online: Quantization | None, attn_tp: int,
                    measured: MeasuredLoad | None, conflict: str | None, downcast: bool,
                    group_why: str) -> tuple[float, str, str]:
    """The target's weights per GPU in GiB, why, and what they come from: the checkpoint's size, an estimate
    from its geometry, or (``measured`` without a ``conflict``) an earlier load of this checkpoint."""
    model, flags, tp = inp.model, inp.flags, inp.flags.tp
    earlier = None if conflict else measured
    if inp.weights_bytes_total and online is None:
        extra = uneven_bytes(model, tp, quant, attn_tp)
        head_copy = lm_head_copy_bytes(model, tp)
        weights = (inp.weights_bytes_total / tp + extra + head_copy) / GIB
        weights_why = f"checkpoint size {inp.weights_bytes_total / GIB:.2f} GiB / tp {tp}"
        if head_copy:
            weights_why += (f" + {head_copy / GIB:.2f} GiB lm_head that SGLang builds and fills from the tied "
                            "embeddings (the checkpoint stores them once)")
        weights_source = "checkpoint size"
        if extra >= 0.05 * GIB and attn_tp < tp:
            weights_why += (f" + {extra / GIB:.2f} GiB every rank holds beyond its share (DP attention: attention "
                            f"over {attn_tp} GPU(s), embeddings whole; {_whole_parts(model)})")
        elif extra >= 0.05 * GIB:
            weights_why += f" + {extra / GIB:.2f} GiB every rank holds whole ({_whole_parts(model)})"
    else:
        weights_source = "estimate"
        # AWQ/GPTQ MoE runs on Marlin kernels, which are CUDA-only: on ROCm the fused-MoE layer
        # creates its expert weights unquantized (a startup OOM that the int4 byte count hides)
        experts_dense = bool(model.moe) and quant.method in ("awq", "gptq") and inp.gpus.vendor == "amd"
        weights = weight_bytes_per_gpu(model, tp, quant, experts_unquantized=experts_dense, attn_tp=attn_tp) / GIB
        embeddings = "embeddings on every rank" if model.replicated_embeddings else "embeddings vocab-parallel"
        if attn_tp < tp:
            embeddings = f"DP attention: attention over {attn_tp} GPU(s), embeddings on every rank"
        weights_why = (f"{_params(model) / 1e9:.2f} B params x {quant.label if quant.method != 'none' else model.dtype}"
                       f", sharded over tp={tp} ({embeddings}; norms replicated)")
        if model.linear is not None and model.linear.kind == "shortconv" and not model.linear.sharded and tp > 1:
            weights_why += "; the short convolutions whole on every rank"
        if model.lm_head_copy:
            weights_why += "; with the lm_head SGLang builds and fills from the tied embeddings"
        if online is not None:
            weights_why += f"; --quantization {flags.quantization} quantizes the {model.dtype} checkpoint as it loads"
        if experts_dense:
            weights_why += f"; MoE experts in {model.dtype}: no AWQ MoE kernel on ROCm"
        kept = [f"{part}" + ("" if share >= 1 else f" ({share:.0%})") for part, share in quant.kept
                if part in ("attention", "mlp", "experts", "linear attention")]
        if kept:
            weights_why += f"; checkpoint keeps {', '.join(kept)} in {model.dtype}"
    weights_why += group_why
    if downcast and weights_source != "measured":
        weights_why += (f"; the float32 checkpoint is loaded as {model.dtype} (--dtype auto), half its bytes on "
                        "disk")
    # built while the weights load, so `Load weight end ... mem usage` counts them
    rope_fp32 = inp.gpus.vendor != "amd"
    rope = rope_table_bytes(model, fp32=rope_fp32) / GIB
    weights += rope
    if rope >= 0.05:
        weights_why += (f"; + {rope:.2f} GiB RoPE cos/sin tables ({_rope_why(model)}, "
                        f"{'fp32' if rope_fp32 else model.dtype}, on every rank)")
    if measured is not None and conflict:
        weights_why += f"; {measured.source} logged {measured.weights_gib:.2f} GiB, not used: {conflict}"
    elif earlier is not None:
        estimate = weights
        weights_source = "measured"
        weights = earlier.weights_gib
        off = (estimate - weights) / weights
        weights_why = (f"measured: {earlier.source} logged {earlier.weights_gib:.2f} GiB per GPU for this checkpoint "
                       f"({earlier.layout}); the estimate was {estimate:.2f} GiB ({off:+.1%})")
    return weights, weights_why, weights_source


@dataclass(frozen=True)
class _Draft:
    layers: int
    weights_gib: float  # per GPU, kept
    shared_gib: float  # per GPU, held only while it loads (its own embeddings/lm_head)
    why: str


# EAGLE3 with no --speculative-draft-model-path on a model without bundled draft layers: SGLang loads the target
# again as its draft and raises an AttributeError building the draft's head (which attribute depends on the
# model class: Qwen2's set_embed, Llama's hot_token_id), or runs out of memory loading the copy first
EAGLE3_WITHOUT_DRAFT_TEXT = ("AttributeError building the EAGLE3 draft: with no --speculative-draft-model-path the "
                             "target checkpoint is loaded a second time as the draft, and an ordinary model has no "
                             "EAGLE3 draft head (sglang#36528); give --speculative-draft-model-path an EAGLE3 draft "
                             "for this model")


def _draft_model(inp: BudgetInput, quant: Quantization, attn_tp: int, era: str, target_gib: float,
                 w: _Work) -> _Draft:
    """The speculative draft per GPU: the checkpoint's own MTP layers, an EAGLE head, or a standalone model."""
    model, flags, tp = inp.model, inp.flags, inp.flags.tp
    draft_layers = 0
    draft_weights = 0.0
    draft_shared = 0.0
    note = ""
    size: DraftSize | None = None
    if flags.speculative_algorithm == "EAGLE" and not flags.speculative_draft_model_path:
        # NEXTN/MTP without a draft path: the checkpoint's own MTP layers. Qwen3-Next's config
        # states no count though its checkpoint carries one (SGLang's NextN heads are one layer)
        draft_layers = model.mtp_layers or 1
        size = mtp_draft_size(model, draft_layers, quant)
        note = "" if model.mtp_layers else " (the config states no MTP layer count: one assumed)"
        if model.no_mtp:
            note = " (sized as one MTP layer, but this checkpoint has none)"
            w.degrade("support", "the checkpoint's config states no MTP layer (num_nextn_predict_layers 0): "
                      "NEXTN/MTP without --speculative-draft-model-path has no draft head to load; give "
                      "an EAGLE draft model's path")
        elif inp.mtp_in_checkpoint is False:
            note = " (sized from the config, but the checkpoint holds no MTP tensor)"
            w.degrade("support", f"the config names {model.mtp_layers} MTP layer(s) but the checkpoint's "
                      "index holds no MTP tensor (quantized or pruned without them): NEXTN/MTP would draft "
                      "from uninitialized weights, accepting next to nothing; launch without "
                      "--speculative-algorithm, or give --speculative-draft-model-path a checkpoint that "
                      "has them")
    elif flags.speculative_algorithm == "EAGLE3" and not flags.speculative_draft_model_path and not model.mtp_layers:
        # with no draft path SGLang takes the target checkpoint itself as the EAGLE3 draft: it loads the weights a
        # second time, then fails building the draft's head, which an ordinary target does not have (sglang#36528;
        # a checkpoint that bundles its own draft layers is the one case that works)
        draft_layers = model.layers
        draft_weights = target_gib
        note = " (no --speculative-draft-model-path: SGLang loads the target checkpoint again as the draft)"
        w.fail(EAGLE3_WITHOUT_DRAFT_TEXT, verbatim=False)
    elif flags.speculative_algorithm == "STANDALONE" and (small := _standalone_draft(inp.draft_config)):
        draft_layers = small.layers
        draft_weights = weight_bytes_per_gpu(small, tp, small.quant) / GIB
        note = f" (a {_params(small) / 1e9:.2f} B-param standalone draft, from its config)"
    else:
        size = eagle_draft_size(model, flags.speculative_algorithm == "EAGLE3", inp.draft_config)
        draft_layers = int((inp.draft_config or {}).get("num_hidden_layers") or 1)
        note = f" ({size.why})"
        if flags.speculative_algorithm == "STANDALONE":
            note = (" (the standalone draft's config was not read: its size is unknown, one layer shaped like "
                    "the target's is counted, a lower bound)")
    if size is not None:
        draft_weights = size.bytes_per_gpu(tp, with_shared=False) / GIB
        if era != "D":
            # before 0.5.14 the draft loads into the reserve with its own embeddings and lm_head and keeps
            # them while its KV pool is made (from 0.5.14 the pools are sized after the target's replace them)
            draft_shared = size.bytes_per_gpu(tp, with_shared=True, shared_whole=attn_tp < tp) / GIB \
                - draft_weights
        if draft_shared:
            note += (f"; + {draft_shared:.2f} GiB of its own embeddings/lm_head while it loads, freed once the "
                     "target's are shared")
    where = "counted before sizing the pools" if era == "D" else "loaded after the target: comes out of the slack"
    return _Draft(draft_layers, draft_weights, draft_shared, f"{draft_layers} draft layer(s){note}, {where}")


@dataclass(frozen=True)
class _HybridPool:
    slots: int | None
    state_gib: float
    spec_gib: float  # intermediate SSM state for the draft tokens
    rest_gib: float  # left for the KV cache after them
    max_running_requests: int | None


def _hybrid_pool(inp: BudgetInput, dtypes: StateDtypes, per_conv: float, per_ssm: float, rest: float, radix_off: bool,
                 strategy: str, overlap: bool, mrr_requested: int | None, w: _Work) -> _HybridPool:
    """A hybrid linear-attention model's state slots (conv + SSM per request) out of the pools, before the KV
    cache: how many requests they admit, and what is left."""
    model, flags, version, spec = inp.model, inp.flags, inp.version, inp.flags.speculative
    per = per_conv + per_ssm
    mrr_final = mrr_requested
    ratio = 1 if radix_off else 3 + (0 if strategy == "no_buffer" else (2 if overlap else 1))
    r = flags.mamba_full_memory_ratio if flags.mamba_full_memory_ratio is not None else (
        0.9 if version.tuple >= (0, 5, 4) else 0.0)
    d = flags.draft_tokens(model.architecture)
    slots, reserved_bytes, spec_bytes, mamba_error = _mamba_plan(
        version, rest, per, r, d, ratio, radix_off, mrr_requested, flags.max_mamba_cache_size, spec)
    mamba_gib = (slots or 0) * per / GIB
    spec_gib = spec_bytes / GIB
    rest -= reserved_bytes / GIB
    conv = f"conv {per_conv / MIB:.2f} MiB" + ("" if dtypes.conv == "bfloat16" else f" ({dtypes.conv})")
    if model.linear is not None and model.linear.kind == "shortconv":
        held = f"{conv} (the last {model.linear.conv_kernel - 1} inputs; no SSM state)"
    else:
        held = f"{conv} + SSM {per_ssm / MIB:.2f} MiB ({dtypes.ssm})"
    w.line("hybrid state per request", None,
           f"{held} x {model.linear_layers} {_linear_name(model)} layers, per GPU", value=f"{per / MIB:.2f} MiB")
    w.line("hybrid state pool", mamba_gib,
           f"{slots} state slots (mamba_ratio {ratio}, --mamba-full-memory-ratio {r})",
           value=f"{slots} slots")
    if spec_gib:
        w.line("speculative state", spec_gib, f"intermediate SSM state for {d} draft tokens per request")
    w.line("left for KV after state", rest, "pools left for the full-attention KV cache")
    if mamba_error:
        w.fail(mamba_error)
    elif slots is not None:
        cap = slots // ratio
        estimated = mrr_final if mrr_final is not None else 4096
        if cap < estimated:
            mrr_final = cap
            if cap <= 0:
                w.degrade("admit", f"max_running_requests = {slots}//{ratio} = 0: the server starts "
                          "but cannot admit a request")
            elif mrr_requested is not None and cap < mrr_requested:
                w.degrade("capped", f"max_running_requests capped to {cap} by the hybrid state pool "
                          f"({slots} slots, {ratio} per request)")
    return _HybridPool(slots, mamba_gib, spec_gib, rest, mrr_final)


def _kv_cell(inp: BudgetInput, draft_layers: int, era: str) -> tuple[float, float, float, str]:
    """Bytes per token of the KV cache on one GPU (full-attention layers, the sliding ones at their ratio, the
    draft's layers where they share the pool), the element size, the sliding ratio, and why."""
    model, flags, tp, spec = inp.model, inp.flags, inp.flags.tp, inp.flags.speculative
    kv_bytes = 1.0 if flags.kv_cache_dtype.startswith("fp8") else 0.5 if flags.kv_cache_dtype.startswith("fp4") \
        else DTYPE_BYTES.get(model.dtype if flags.kv_cache_dtype == "auto" else "bfloat16", 2.0)
    full_cell, swa_cell = kv_bytes_per_token(model, tp, kv_bytes)
    cell = full_cell
    why_cell = _cell_why(model, tp, kv_bytes)
    if spec and era == "D" and model.full_layers:
        cell = full_cell * (1 + draft_layers / model.full_layers)
        why_cell += f", x(1 + {draft_layers}/{model.full_layers}) for the draft KV"
    swa_ratio = flags.swa_full_tokens_ratio if flags.swa_full_tokens_ratio is not None else 0.8
    if model.is_hybrid_swa:
        cell = full_cell + swa_ratio * swa_cell
        why_cell += f"; sliding layers at --swa-full-tokens-ratio {swa_ratio}"
    elif swa_cell:
        cell += swa_cell  # no separate sliding pool for this architecture: every layer holds the full KV
        why_cell += f"; + {model.sliding_layers} sliding-window layers, each with a full KV cache in SGLang"
    return cell, kv_bytes, swa_ratio, why_cell


def _compute_rank(inp: BudgetInput) -> Budget:
    """One rank's budget, in SGLang's startup order: the refusals made before anything loads, the weights,
    the static reserve, the hybrid state pool, the KV pool, then what the reserve must hold at runtime."""
    inp, downcast = _in_load_dtype(inp)
    model, flags, version = inp.model, inp.flags, inp.version
    era, tp, spec = version.era, flags.tp, flags.speculative
    w = _Work()
    _check_speculative_params(flags, model.architecture, version, w)
    _check_support(model, version, w)

    # defaults that depend on version and GPU size
    total_mib = inp.gpus.total_for_defaults
    chunk = flags.chunked_prefill_size or default_chunked_prefill(total_mib, era)
    graph_bs = flags.cuda_graph_max_bs or default_cuda_graph_max_bs(total_mib, tp, era)
    if flags.mem_fraction_static is not None:
        mfs, mfs_why, mfs_auto = flags.mem_fraction_static, "--mem-fraction-static as given", False
    else:
        mfs, mfs_why = default_mem_fraction_static(model, flags, total_mib, version, chunk, graph_bs)
        mfs_auto = True
    # every speculative algorithm, NGRAM too, runs at most 48 requests unless told ("Max running requests is reset
    # to 48 for speculative decoding")
    spec_capped = flags.speculative_algorithm is not None and flags.max_running_requests is None
    mrr_requested = 48 if spec_capped else flags.max_running_requests
    context_len = flags.context_length or model.max_context

    quant = inp.quant or model.quant
    online = None
    if quant.method == "none" and flags.quantization in ONLINE_QUANT:
        quant = online = quantization_from("fp8")  # SGLang quantizes a 16-bit checkpoint to FP8 as it loads
    # an earlier load counts only in this layout and only if it was this checkpoint's format
    measured = inp.measured_load if inp.measured_load and inp.measured_load.layout == flags.weight_layout else None
    conflict = None if measured is None else load_format_conflict(measured.load_format, quant, model.dtype)
    pre = _free_before_load(inp, None if conflict else measured, w)

    # weights
    attn_tp = tp // flags.dp if flags.enable_dp_attention and flags.dp > 1 and tp % flags.dp == 0 else tp
    quant, group_why = _group_over_tp(model, tp, quant, attn_tp, flags.moe_tp)
    _refuse_before_load(inp, quant, attn_tp, w)
    fp8_moe = fp8_moe_misfit(model, quant, inp.gpus)
    if fp8_moe is not None:
        w.line("FP8 MoE kernel", None, fp8_moe)
    weights, weights_why, weights_source = _target_weights(inp, quant, online, attn_tp, measured, conflict,
                                                         downcast, group_why)
    w.line("target weights", weights, weights_why)
    draft = _draft_model(inp, quant, attn_tp, era, weights, w) if spec else _Draft(0, 0.0, 0.0, "")
    if spec:
        w.line("draft weights", draft.weights_gib, draft.why)
    draft_counted = draft.weights_gib if era == "D" else 0.0  # from 0.5.14 the draft loads before the pools
    if weights + draft_counted >= pre:
        w.fail("torch.OutOfMemoryError: CUDA out of memory (while loading weights: "
               f"{weights:.2f} GiB of weights per GPU, {pre:.2f} GiB free)", verbatim=False)

    # the static reserve, and what is left for the pools
    avail = pre - weights - draft_counted
    slack = pre * (1 - mfs)
    rest = avail - slack
    w.line("static reserve pre x (1 - mfs)", slack,
           f"mem_fraction_static {mfs:.3f} ({mfs_why}); holds CUDA graphs, activations, torch.compile"
           + (", and the draft model" if spec and era != "D" else ""))
    if model.multimodal and version.tuple >= MM_RESERVATION_FROM:
        # SGLang after 2026-07-20 (`mm_runtime_reservation_gb`) keeps SGLANG_VLM_CACHE_SIZE_MB (100 MB by
        # default) of a multimodal model's budget for its image cache before sizing the pools
        rest -= MM_CACHE_GIB
        w.line("multimodal cache reservation", MM_CACHE_GIB, "SGLANG_VLM_CACHE_SIZE_MB (100 MB) held back from the "
                                                             "pools for image features")
    w.line("left for KV/state pools", rest, "free after weights - static reserve")

    # hybrid linear-attention state
    hybrid = model.is_hybrid_linear
    radix_off, strategy, overlap = _radix_and_strategy(inp, w)
    dtypes = state_dtypes(model, flags, version)
    per_conv, per_ssm = mamba_bytes_per_request(model, tp, dtypes.ssm, dtypes.conv)
    mamba_slots: int | None = None
    mamba_gib = spec_gib = 0.0
    mrr_final = mrr_requested
    if hybrid and w.error is None:
        pool = _hybrid_pool(inp, dtypes, per_conv, per_ssm, rest, radix_off, strategy, overlap, mrr_requested, w)
        mamba_slots, mamba_gib, spec_gib, rest = pool.slots, pool.state_gib, pool.spec_gib, pool.rest_gib
        mrr_final = pool.max_running_requests

    # KV cell and tokens
    cell, kv_bytes, swa_ratio, why_cell = _kv_cell(inp, draft.layers, era)
    w.line("KV bytes per token", None, why_cell, value=f"{cell:,.0f} B")
    tokens = _kv_tokens(inp, rest, cell, mfs, 1 - avail / pre if pre > 0 else 1.0, w)
    page = flags.page
    swa_tokens = int(tokens * swa_ratio) // page * page if model.is_hybrid_swa and tokens else None
    w.line("KV cache capacity", tokens * cell / GIB if tokens else 0.0,
           "tokens the full-attention pool holds" + (f"; sliding pool {swa_tokens:,}" if swa_tokens else ""),
           value=f"{tokens:,} tokens")
    if w.error is None and swa_tokens is not None and model.sliding_window:
        _check_swa_floor(swa_tokens, model.sliding_window, page, era, w)
    if w.error is None and spec_capped and not hybrid:
        mrr_final = 48
    if w.error is None and context_len and tokens and tokens < context_len:
        w.degrade("context", f"KV pool ({tokens:,} tokens) is smaller than the context length ({context_len:,}): "
                             f"requests longer than {tokens - 1:,} tokens will be rejected")

    # what the slack must hold at runtime (estimates: SGLang does not pre-compute these)
    need, need_lines = _runtime_need(model, flags, version, tokens, chunk, graph_bs, draft.weights_gib,
                                     draft.layers, kv_bytes, era, mrr_final, draft.shared_gib)
    for label, gib, why in need_lines:
        w.line(label, gib, why)
    headroom = slack - need
    w.line("runtime headroom (estimate)", headroom, "static reserve - runtime needs above")
    if w.error is None and headroom < 0:
        w.degrade("headroom", f"the static reserve ({slack:.2f} GiB) is {-headroom:.2f} GiB short of the runtime "
                              "needs: expect a CUDA out of memory at graph capture or the first long prefill")
    if fp8_moe is not None:
        w.fail(FP8_MOE_TEXT)  # after the load and the pools: the first forward compiles the kernel
    if (conv_conflict := conv_state_conflict(model, flags, version)) is not None:
        # it comes at the first request: an earlier failure is still SGLang's first, and this one stays in view
        if w.error is None:
            w.fail(conv_conflict, verbatim=False)
        else:
            w.degrade("state_dtype", conv_conflict)

    error, degraded = w.error, w.degraded
    kind = VerdictKind.FAILS if error else VerdictKind.DEGRADED if degraded else VerdictKind.FITS
    return Budget(
        version=version, era=era, mem_fraction_static=mfs, mfs_auto=mfs_auto, pre_gib=pre, weights_gib=weights,
        draft_weights_gib=draft.weights_gib, draft_load_gib=draft.weights_gib + draft.shared_gib, slack_gib=slack,
        rest_gib=rest, kv_cell_bytes=cell, kv_tokens=tokens, swa_tokens=swa_tokens,
        mamba_per_request_bytes=per_conv + per_ssm, mamba_slots=mamba_slots, mamba_state_gib=mamba_gib,
        spec_state_gib=spec_gib, max_running_requests=mrr_final, context_len=context_len, runtime_need_gib=need,
        headroom_gib=headroom, verdict=kind, error_text=error, reasons=tuple(text for _, text in degraded),
        reason_kinds=tuple(k for k, _ in degraded), lines=tuple(w.lines),
        not_modelled=redacted(flags.unknown),  # shown to people: a secret value never is
        model_notes=tuple(n for n in model.notes
                          if inp.weights_bytes_total is None or "not counted in the weights" not in n),
        weights_source=weights_source,
        weights_format=f"quant={quant.method}" if quant.method != "none" else f"dtype={model.dtype}",
        error_verbatim=w.error_verbatim,
        error_why=w.error_why,
    )


def _in_load_dtype(inp: BudgetInput) -> tuple[BudgetInput, bool]:
    """The input in the dtype SGLang builds the model in, and whether that halves a float32 checkpoint."""
    model, flags = inp.model, inp.flags
    downcast = flags.dtype not in DTYPE_FLAG and model.dtype == "float32"
    if (wanted := load_dtype(flags.dtype, model.dtype, model.model_type)) != model.dtype:
        # weights and an "auto" KV cache follow --dtype; a 16-bit checkpoint's bytes scale with it
        if inp.weights_bytes_total and (inp.quant or model.quant).method == "none":
            scale = DTYPE_BYTES.get(wanted, 2.0) / DTYPE_BYTES.get(model.dtype, 2.0)
            inp = replace(inp, weights_bytes_total=int(inp.weights_bytes_total * scale))
        inp = replace(inp, model=replace(model, dtype=wanted))
    return inp, downcast


# server_args' own check, before anything is read or loaded: with no --speculative-num-steps SGLang chooses steps,
# top-k and draft tokens together for the model, and asserts the other two were not given (a bare `assert`)
PARTIAL_SPEC_PARAMS_TEXT = ("AssertionError in server_args: --speculative-eagle-topk or --speculative-num-draft-tokens "
                            "is given without --speculative-num-steps; SGLang then chooses all three itself and "
                            "asserts that neither of the other two was given")


# server_args compares the top-k it left None with 1 (`speculative_eagle_topk > 1`, unguarded): Python's own words.
# Seen for Qwen3.5 with NEXTN, 3 steps and 4 draft tokens on a nightly of 2026-03-10 (between 0.5.9 and 0.5.10),
# reported again in sglang#22895 (2026-04) and #34361 (2026-08, still open). An early-2025 tree tested page_size > 1
# first and did not reach the comparison with --page-size 1; a report against 0.5.5 (gpustack#3392) names a top-k
# None error but not where it stopped. So only 0.5.9 on is known to stop here
TOPK_MISSING_TEXT = "TypeError: '>' not supported between instances of 'NoneType' and 'int'"
TOPK_MISSING_FROM = (0, 5, 9)


_SPEC_CHOICE_WHY = {True: " (a chain: its choice for most models in current releases)",
                    False: " (a tree: its choice for Llama and Grok)"}


def _check_speculative_params(flags: LaunchFlags, architecture: str, version: SglangVersion, w: _Work) -> None:
    """The speculative parameters as server_args settles them: none given are chosen for the model, a partial set is
    refused, steps without a top-k stop on a None, a chain's draft tokens are set to steps + 1."""
    if flags.partial_speculative_params:
        w.fail(PARTIAL_SPEC_PARAMS_TEXT, verbatim=False)
        given = " and ".join(f"{flag} {value}" for flag, value in flags.steps_companions)
        w.line("speculative parameters", None, f"{given} without --speculative-num-steps: SGLang "
               "takes all three from its own defaults for the model or none")
    elif flags.topk_missing:
        known = version.tuple >= TOPK_MISSING_FROM
        why = (f"--speculative-num-steps {flags.speculative_num_steps} without --speculative-eagle-topk: SGLang fills "
               "in top-k only with the steps, so it stays None, "
               + (f"and SGLang {version}'s server_args compares that None with 1" if known else
                  "which stops SGLang 0.5.9 and later (a TypeError); sized here as top-k 1"))
        if known:
            w.fail(TOPK_MISSING_TEXT, why=why)
        w.line("speculative parameters", None, why)
    elif flags.speculative_algorithm == "NGRAM":
        d = flags.draft_tokens(architecture)
        w.line("speculative parameters", None, f"NGRAM: no draft model; each request verifies {d} draft tokens"
               + ("" if flags.speculative_num_draft_tokens else " (SGLang's default)") + ", and SGLang runs at most "
               "48 requests unless --max-running-requests says otherwise", value=f"{d} verified")
    elif flags.speculative_adaptive and (adaptive := flags.spec_params(architecture)) is not None:
        given = "as given" if flags.speculative_num_steps else "not read from its adaptive config"
        w.line("speculative parameters", None, "--speculative-adaptive: SGLang moves the steps between candidates as "
               f"it serves, verifying steps + 1 tokens; sized at {adaptive.steps} steps ({given})",
               value=f"{adaptive.draft_tokens} verified")
    elif (chosen := flags.spec_params(architecture)) is not None and chosen.chosen_by_sglang:
        w.line("speculative parameters", None, f"no --speculative-num-steps: SGLang chooses {chosen.words} for "
               f"{architecture}{_SPEC_CHOICE_WHY[chosen.topk == 1]}", value=f"{chosen.draft_tokens} verified")
    elif (adjusted := flags.draft_tokens_adjusted) is not None:
        w.line("speculative draft tokens", None, f"--speculative-num-draft-tokens {flags.speculative_num_draft_tokens} "
               f"is replaced by {adjusted} (--speculative-num-steps {flags.speculative_num_steps} + 1): with "
               "--speculative-eagle-topk 1 SGLang sets it so, and warns", value=str(adjusted))


def _check_support(model: ModelSpec, version: SglangVersion, w: _Work) -> None:
    """Whether this SGLang loads the model type at all, and whether it runs it as well as a later one."""
    support = SUPPORT.get(model.model_type)
    if support and version.tuple < support.loads_from:
        w.fail(f"model type {model.model_type} is not supported by SGLang {version} ({support.why})", verbatim=False)
    elif support and version.tuple < support.recommended:
        w.degrade("support", f"SGLang {version} is below {'.'.join(map(str, support.recommended))} for "
                             f"{model.model_type}: {support.why}")


def _free_before_load(inp: BudgetInput, earlier: MeasuredLoad | None, w: _Work) -> float:
    """GiB free on a GPU when the weights start loading (after CUDA context and NCCL); SGLang's refusal of
    ranks whose free memory differs too much."""
    tp = inp.flags.tp
    pre, pre_why = inp.gpus.pre_load_gib(tp)
    if (earlier is not None and earlier.context_gib is not None and 0 < earlier.context_gib <= MAX_CONTEXT_GIB
            and inp.gpus.free_mib and inp.gpus.pre_gib is None):
        # only a plausible context (observed 0.7-1.1 GiB): a larger gap means that load's free memory was read
        # on other GPUs or while something else was loading
        pre = min(inp.gpus.free_mib) / 1024 - earlier.context_gib
        pre_why = (f"min free {min(inp.gpus.free_mib)} MiB over the GPUs minus the {earlier.context_gib:.2f} GiB "
                   f"CUDA context/NCCL took in {earlier.source}")
    w.line("free before load (pre)", pre, pre_why)
    free = inp.gpus.free_mib[:tp]
    if tp > 1 and len(free) > 1 and inp.gpus.pre_gib is None and w.error is None:
        # after distributed init every rank compares the least free memory over the ranks with its own
        least, local = min(free) / 1024 - context_gib(tp), max(free) / 1024 - context_gib(tp)
        if least < 0.9 * local:
            w.fail(unbalanced_text(least, local))
            w.line("GPU balance", None, f"free memory differs across the launch GPUs ({', '.join(map(str, free))} "
                   "MiB): SGLang refuses to start when one rank has less than 90 % of another's, as other "
                   "processes hold some of it")
    return pre


def _group_over_tp(model: ModelSpec, tp: int, quant: Quantization, attn_tp: int,
                   moe_tp: int | None) -> tuple[Quantization, str]:
    """An AWQ/GPTQ checkpoint that does not state its group size can only have one that splits over this tp."""
    if not quant.bits or quant.group_size is not None:
        return quant, ""
    group = loadable_group(model, tp, quant, attn_tp, moe_tp)
    if group is None or group >= default_group(quant.method):
        return quant, ""
    inputs = quantized_inputs(model, tp, quant, attn_tp, moe_tp)
    tight = next(f"{name} {size}" for name, size in inputs.items() if size % (2 * group))
    return with_group(quant, group), (f"; group size not stated: {group}, the largest that divides every quantized "
                                      f"layer's input on a rank ({tight} at tp {tp})")


def _refuse_before_load(inp: BudgetInput, quant: Quantization, attn_tp: int, w: _Work) -> None:
    """What SGLang refuses before any weight loads: a context beyond the config's, layers that do not split over
    tp (heads, MLP, a quantized layer's groups or FP8 blocks)."""
    model, flags, tp = inp.model, inp.flags, inp.flags.tp
    # a --json-model-override-args may change the config's context keys: then the limit is not known here
    overridden = any(x.startswith("--json-model-override-args") for x in (*flags.unknown, *flags.passthrough))
    context, derived = flags.context_length or 0, model.max_context or 0
    longer = bool(context and derived and context > derived and not overridden and w.error is None)
    if longer and flags.env_set(LONGER_CONTEXT_ENV):
        w.degrade("context", f"--context-length {context:,} is longer than the {derived:,} the config allows, let "
                  f"through by {LONGER_CONTEXT_ENV}=1: SGLang warns it \"may lead to incorrect model outputs or CUDA "
                  "errors\"")
    elif longer:
        # ModelConfig refuses it before anything loads, unless the server's environment allows it
        w.fail(context_over_derived_text(context, derived))
        w.line("context length", None, f"--context-length {context:,} is longer than the {derived:,} the config "
               f"allows; SGLang refuses it unless the server runs with {LONGER_CONTEXT_ENV}=1 (\"may lead to "
               "incorrect model outputs or CUDA errors\")")
    if w.error is not None:
        return
    if (heads := tp_misfit(model, tp, attn_tp, flags.moe_tp)) is not None:
        w.fail(split_error_text(model, attn_tp), why=heads)
        w.line("layers over tp", None, heads)
    elif (misfit := split_misfit(model, tp, quant, attn_tp, flags.moe_tp)) is not None:
        w.fail(AWQ_SPLIT_TEXT, why=misfit)
        w.line("quantized layers over tp", None, misfit)
    elif (blocks := block_misfit(model, tp, flags.moe_tp, quant)) is not None:
        error, why = blocks
        w.fail(error, why=why)
        w.line("quantized layers over tp", None, why)


def _radix_and_strategy(inp: BudgetInput, w: _Work) -> tuple[bool, str, bool]:
    """Whether the radix cache is off, the mamba scheduler strategy, and whether overlap scheduling runs with it;
    speculative decoding on a hybrid model needs the radix cache off or a strategy that supports it."""
    flags, version = inp.flags, inp.version
    radix_off = flags.disable_radix_cache
    strategy = flags.mamba_scheduler_strategy or "auto"
    if strategy == "auto":
        strategy = "extra_buffer" if version.tuple >= (0, 5, 14) and not flags.disable_overlap_schedule \
            else "no_buffer"
    overlap = not flags.disable_overlap_schedule and strategy != "no_buffer"
    if (inp.model.is_hybrid_linear and flags.speculative and not radix_off and strategy == "no_buffer"
            and w.error is None):
        if version.tuple >= (0, 5, 10):
            w.fail(e5_text(inp.model.architecture))
        else:
            radix_off = True
            w.degrade("radix", "radix cache silently disabled: speculative decoding on a hybrid model "
                               "(`Disabling radix cache since speculative decoding ... is not supported`)")
    return radix_off, strategy, overlap


def _check_swa_floor(swa_tokens: int, window: int, page: int, era: str, w: _Work) -> None:
    """A request's prefill needs one window plus a page of the sliding-window pool: a pool no larger than that
    admits nothing, however far it drains. SGLang 0.5.14+ refuses it at startup; older releases start and then
    wait forever at warmup (sgl-project/sglang#37610)."""
    if window + page < swa_tokens:
        return
    if era == "D":
        w.fail(swa_pool_text(swa_tokens, window, page))
    else:
        w.degrade("swa", f"the sliding-window pool ({swa_tokens:,} tokens) is not larger than one window ({window:,}) "
                         f"+ a page ({page}): no request can be admitted, the server waits at warmup (SGLang 0.5.14+ "
                         "refuses this at startup: `SWA pool (N tokens) cannot hold even one request`)")


def _kv_tokens(inp: BudgetInput, rest: float, cell: float, mfs: float, minimum_mfs: float, w: _Work) -> int:
    """Tokens the KV pool holds in what is left (``rest`` GiB), or SGLang's refusal when nothing is left
    (``minimum_mfs``: the fraction that would have held the weights, which 0.5.14's message names)."""
    if w.error is not None:
        return 0
    version = inp.version
    if rest <= 0:
        w.fail(e2_text(mfs, minimum_mfs) if version.era == "D" else not_enough_memory_text(version, mfs))
        return 0
    tokens = int(rest * GIB // cell) if cell else 0
    if inp.flags.max_total_tokens:
        tokens = min(tokens, inp.flags.max_total_tokens)
    page = inp.flags.page
    tokens = tokens // page * page
    if tokens <= 0:
        w.fail(not_enough_memory_text(version, mfs))
    return tokens


ONLINE_QUANT = ("fp8", "w8a8_fp8")  # flags that quantize an unquantized checkpoint at load time


def _whole_parts(model: ModelSpec) -> str:
    big = [p.name for p in weight_parts(model) if not p.sharded and p.params >= 0.01 * model.vocab * model.hidden]
    return ", ".join(big) or "norms and routers"


def _rope_why(model: ModelSpec) -> str:
    return " + ".join(f"{positions:,} positions x {width}" for positions, width in model.rope_tables)


def _params(model: ModelSpec) -> int:
    return sum(p.params for p in weight_parts(model))


def _cell_why(model: ModelSpec, tp: int, kv_bytes: float) -> str:
    if model.mla is not None:
        m = model.mla
        return f"MLA: ({m.kv_lora_rank} + {m.qk_rope_head_dim}) x {model.full_layers} layers x {kv_bytes:g} B"
    heads = max(1, (model.full_kv_heads or model.kv_heads) // tp)
    dim = model.full_head_dim or model.head_dim
    return (f"{heads} KV heads/GPU x ({dim} + {dim}) x {model.full_layers} full-attention layers x {kv_bytes:g} B"
            + (f" (the {model.linear_layers} {_linear_name(model)} layers hold state, not KV)"
               if model.linear_layers else ""))


def _mamba_plan(version: SglangVersion, rest_gib: float, per: float, r: float, d: int, ratio: int, radix_off: bool,
                mrr: int | None, explicit: int | None, spec: bool) -> tuple[int, float, float, str | None]:
    """State slots K, bytes reserved (state + speculative), speculative bytes, error text."""
    v = version.tuple
    rest = rest_gib * GIB
    if per <= 0:
        return 0, 0.0, 0.0, None
    if v < (0, 5, 4):  # Qwen3-Next launch: radix forced off
        k = explicit or mrr or 512
        return k, k * per, 0.0, None
    joint = v >= (0, 5, 12)
    spec_bytes = 0.0
    if explicit or (radix_off and (mrr or v < (0, 5, 9))):
        k = explicit or mrr or 512
        if spec and v >= (0, 5, 7):
            spec_bytes = per * (mrr or k) * d
        return k, k * per + spec_bytes, spec_bytes, None
    if not joint:
        if spec and v >= (0, 5, 7):
            spec_bytes = per * (mrr or 48) * d
        budget = (rest - spec_bytes) * r / (1 + r)
        k = max(0, math.floor(budget / per))
        return k, k * per + spec_bytes, spec_bytes, None
    budget = rest * r / (1 + r)
    k = math.floor(budget / (per * (1 + d / ratio))) if budget > 0 else 0
    if k <= 0:
        return k, 0.0, 0.0, (
            f"Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed max_mamba_cache_size={k} "
            f"(total_rest_memory={rest_gib:.2f} GB, mamba_cache_per_req={per / MIB:.2f} MB). Try: (1) reduce "
            "--max-running-requests, (2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, "
            "or (4) use GPUs with more memory.")
    capped = min(mrr if mrr is not None else k // ratio, k // ratio)
    if capped <= 0:
        return k, k * per, 0.0, (
            "Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            f"max_mamba_cache_size={k}, mamba_ratio={ratio}, resulting max_num_reqs={capped}. "
            "Try: (1) reduce --max-running-requests, "
            "(2) increase --mem-fraction-static, or (3) use GPUs with more memory.")
    spec_bytes = per * capped * d if spec else 0.0
    return k, k * per + spec_bytes, spec_bytes, None


def _standalone_draft(config: dict[str, Any] | None) -> ModelSpec | None:
    """A STANDALONE draft's geometry from its config, or None when there is none or it is unusable (the
    draft is then counted as one layer, a lower bound the draft line says)."""
    if config is None:
        return None
    try:
        return read_config(config, "draft")
    except ModelConfigError:
        return None


DRAFT_GRAPHS_GIB = 0.2  # the draft's own decode/extend graphs (estimate)


def _runtime_need(model: ModelSpec, flags: LaunchFlags, version: SglangVersion, tokens: int, chunk: int,
                  graph_bs: int, draft_weights: float, draft_layers: int, kv_bytes: float, era: str,
                  mrr: int | None, draft_shared: float = 0.0) -> tuple[float, list[tuple[str, float, str]]]:
    """Estimates of what must fit in the static reserve once the pools are allocated. A draft's
    transient copies (its own embeddings/lm_head) are freed before the draft's graphs are captured and
    before serving, so they count only where they exceed what comes after them."""
    lines: list[tuple[str, float, str]] = []
    h = model.hidden
    tp = flags.tp
    act = chunk * (2 * max(model.intermediate, model.hidden) / tp + 4 * h) * 2 / GIB + 0.25
    lines.append(("activations (estimate)", act, f"chunked prefill of {chunk} tokens + attention workspace"))
    if not flags.disable_cuda_graph:
        bs = min(graph_bs, mrr or graph_bs)
        verify = flags.draft_tokens(model.architecture) or 1
        graphs = 0.1 + 0.004 * bs * verify * (h / 4096) ** 0.5
        lines.append(("CUDA graphs (estimate)", graphs,
                      f"decode graphs up to bs {bs}" + (f" x {verify} verify tokens" if verify > 1 else "")))
    if flags.enable_torch_compile:
        lines.append(("torch.compile (estimate)", 0.5, f"compiled decode graphs up to bs "
                                                        f"{flags.torch_compile_max_bs or 32}"))
    if flags.speculative and era != "D":
        draft_kv = tokens * draft_layers * (kv_bytes_per_token(model, tp, kv_bytes)[0] / max(1, model.full_layers)) \
            / GIB
        # freed before the draft's graphs are captured and before serving allocates activations: they make
        # room for those two, while the target's graphs and compiled kernels were there already
        later = act + DRAFT_GRAPHS_GIB
        peak = max(0.0, draft_shared - later)
        lines.append(("draft model (weights, KV, graphs)", draft_weights + draft_kv + DRAFT_GRAPHS_GIB + peak,
                      f"before 0.5.14 the draft is built after the target, from the reserve: {draft_weights:.2f} GiB "
                      f"weights + {draft_kv:.2f} GiB KV for {tokens:,} tokens"
                      + (f" + {peak:.2f} GiB while its own embeddings/lm_head are still held" if peak else "")))
    return sum(g for _, g, _ in lines), lines


# --------------------------------------------------------------------------- remedies

def _good(b: Budget, original: Budget, need_tokens: int | None) -> bool:
    """A change helps when it removes the failure, or some of the degradations, and breaks nothing."""
    if b.verdict is VerdictKind.FAILS or b.headroom_gib < 0:
        return False
    if need_tokens is not None and b.kv_tokens < need_tokens and original.verdict is VerdictKind.FAILS:
        return False
    if original.verdict is VerdictKind.FAILS:
        return "admit" not in b.fixable
    return b.fixable < original.fixable


def find_remedies(inp: BudgetInput, failed: Budget) -> list[Remedy]:
    """The smallest changes that make the launch fit, each with its computed threshold, cheapest first."""
    if failed.error_text == FP8_MOE_TEXT:
        return _fp8_moe_remedies(inp)
    if failed.error_text == EAGLE3_WITHOUT_DRAFT_TEXT:
        return _draft_path_remedies(inp)
    if failed.error_text == PARTIAL_SPEC_PARAMS_TEXT:
        return _spec_params_remedies(inp)
    if failed.error_text == TOPK_MISSING_TEXT:
        return _topk_remedies(inp)
    if failed.error_text and "is greater than the derived context_length" in failed.error_text \
            and inp.model.max_context:
        return _context_limit_remedies(inp, failed, inp.model.max_context)
    loaded = _in_load_dtype(inp)[0].model
    if (conflict := conv_state_conflict(loaded, inp.flags, inp.version)) is not None:
        return _conv_dtype_remedies(inp, loaded, failed, conflict)
    remedies, settled = _free_first_remedies(inp, failed)
    if settled:
        return remedies
    trials = _Trials(inp, failed)
    remedies += _scheduler_remedies(trials)
    remedies += _fraction_remedies(trials)
    remedies += _state_pool_remedies(trials)
    remedies += _swa_remedies(trials)
    remedies += _context_remedies(trials)
    remedies += _split_remedies(trials)
    remedies += _wider_tp_remedies(trials, remedies)
    return sorted(remedies, key=lambda r: r.cost_rank)


@dataclass(frozen=True)
class _Trials:
    """The failed (or degraded) launch, relaunched on paper with changed flags."""

    inp: BudgetInput
    failed: Budget

    @property
    def flags(self) -> LaunchFlags:
        return self.inp.flags

    @property
    def model(self) -> ModelSpec:
        return self.inp.model

    def run(self, edit: FlagEdit) -> Budget:
        """The launch with ``edit`` made, relaunched on paper."""
        return _compute(_edited(self.inp, edit))

    def good(self, b: Budget) -> bool:
        """It helps, and still holds a useful context (32K, or the one asked for if shorter)."""
        return _good(b, self.failed, min(self.failed.context_len or 0, 32768) or None)

    def effect(self, b: Budget) -> str:
        return _effect(b, self.failed)


def _edited(inp: BudgetInput, edit: FlagEdit) -> BudgetInput:
    """The same budget question for the launch with ``edit`` made."""
    return replace(inp, flags=inp.flags.edited(edit))


def _context_limit_remedies(inp: BudgetInput, failed: Budget, limit: int) -> list[Remedy]:
    """The config's own context limit first; whatever else fails is then computed at that length."""
    edit = FlagEdit("--context-length", str(limit))
    at_limit = _edited(inp, edit)
    b = _compute(at_limit)
    first = Remedy.of(edit, inp.flags, f"the longest the config allows: {_effect(b, failed)}", 0)
    if b.verdict is not VerdictKind.FAILS:
        return [first]
    return [first] + [r.on_top_of(first) for r in find_remedies(at_limit, b)]


def _conv_dtype_remedies(inp: BudgetInput, model: ModelSpec, failed: Budget, conflict: str) -> list[Remedy]:
    """The conv state in the dtype the model runs in: SGLANG_MAMBA_CONV_DTYPE (from 0.5.9), or an unquantized model
    run in bfloat16, the state's default. What else fails or degrades is computed with the first of these (else
    each change would still fail at the first request); when it fails before the first request, it comes first.
    ``model``: the model as it loads (in the dtype it runs in)."""
    remedies = []
    if inp.version.tuple >= STATE_DTYPES_FROM:
        b = _compute(_edited(inp, edit := FlagEdit(env=(f"{MAMBA_CONV_ENV}={model.dtype}",))))
        remedies.append((Remedy.of(edit, inp.flags, f"the conv state in the model's dtype: {_effect(b, failed)}", 0),
                         b))
    if (inp.quant or inp.model.quant).method == "none" and state_dtypes(model, inp.flags, inp.version).conv == \
            "bfloat16":
        b = _compute(_edited(inp, edit := FlagEdit("--dtype", "bfloat16")))
        remedies.append((Remedy.of(edit, inp.flags, f"the model in the conv state's dtype: {_effect(b, failed)}", 1),
                         b))
    if not remedies:
        return []
    first, b = remedies[0]
    found = [r for r, _ in remedies]
    if b.verdict is VerdictKind.FITS:
        return found
    more = [r.on_top_of(first) for r in find_remedies(replace(inp, flags=first.flags or inp.flags), b)]
    return found + more if failed.error_text == conflict else more + found


FREE_FIRST = "free the GPUs first (/gpu free lists by PID what holds them)"


def frees_gpus_first(budget: Budget) -> bool:
    """Whether the budget's remedies start with freeing memory held on the GPUs before the launch."""
    return any(r.frees_gpus for r in budget.remedies)


def stop_launches_first(budget: Budget, launches: Sequence[tuple[str, str]], others: bool) -> Budget:
    """The budget with its free-first remedy naming the recorded launches that hold the GPUs: ``launches`` as
    (attempt id, how /gpu status labels it). A launch is stopped as the attempt it is (``/sglang stop <attempt>``
    signals its process group; ``/gpu free`` leaves a launch's processes to it), and ``/gpu free`` is named only for
    the other holders (``others``)."""
    if not launches:
        return budget
    named = " and ".join(label for _, label in launches)
    how = f"/sglang stop {launches[0][0]}" if len(launches) == 1 else "/sglang stop <attempt> for each"
    change = f"stop {named} first: {how}" + ("; then /gpu free lists by PID what else holds them" if others else "")
    return replace(budget, remedies=tuple(replace(r, change=change) if r.frees_gpus else r for r in budget.remedies))


def _free_first_remedies(inp: BudgetInput, failed: Budget) -> tuple[list[Remedy], bool]:
    """When memory is held on the GPUs before the launch, freeing them comes first. Freeing may be necessary but
    not enough: then the changes that fit are the ones computed for clean GPUs, and nothing else is (True)."""
    gpus = inp.gpus
    if not (gpus.free_mib and gpus.total_mib and gpus.pre_gib is None):
        return [], False
    held_gib = (gpus.total_mib - min(gpus.free_mib)) / 1024
    if held_gib <= 1.0:
        return [], False
    on_clean = replace(inp, gpus=replace(gpus, free_mib=tuple(gpus.total_mib - 1 for _ in gpus.free_mib)))
    clean = _compute(on_clean)
    still = clean.error_text if clean.verdict is VerdictKind.FAILS else None
    outcome = (f"even on clean GPUs this launch fails (`{still.split('. ')[0][:120]}`), so the changes below "
               "are computed for clean GPUs") if still else f"on clean GPUs: {_effect(clean, failed)}"
    where = "per GPU" if len(set(gpus.free_mib)) == 1 else "of the fullest GPU"
    free = Remedy(FREE_FIRST, None, f"{held_gib:.1f} GiB {where} is in use before the launch; {outcome}", 0,
                  frees_gpus=True)
    if not still:
        return [free], False
    return [free] + [replace(r, effect=f"after freeing the GPUs: {r.effect}")
                     for r in find_remedies(on_clean, clean)], True


def _scheduler_remedies(t: _Trials) -> list[Remedy]:
    """Speculative decoding on a hybrid model with the radix cache needs the extra_buffer strategy."""
    if not (t.failed.error_text and "no_buffer" in t.failed.error_text):
        return []
    edit = FlagEdit("--mamba-scheduler-strategy", "extra_buffer", env=("SGLANG_ENABLE_SPEC_V2=1",))
    return [Remedy.of(edit, t.flags, t.effect(t.run(edit)), 0)]


def _fraction_remedies(t: _Trials) -> list[Remedy]:
    """The smallest --mem-fraction-static that helps (up to 0.95), and a float32 SSM state halved."""
    remedies = []
    for step in range(1, 40):
        mfs = round(t.failed.mem_fraction_static + 0.01 * step, 2)
        if mfs > 0.95:
            break
        b = t.run(edit := FlagEdit("--mem-fraction-static", f"{mfs:.2f}"))
        if t.good(b):
            remedies.append(Remedy.of(edit, t.flags, f"smallest value that helps: {t.effect(b)}", 1))
            break
    linear = t.model.linear
    if linear is not None and state_dtypes(t.model, t.flags, t.inp.version).ssm == "float32":
        b = t.run(edit := FlagEdit("--mamba-ssm-dtype", "bfloat16"))
        if t.good(b) or (b.verdict is not VerdictKind.FAILS and (b.mamba_slots or 0) > (t.failed.mamba_slots or 0)):
            remedies.append(Remedy.of(edit, t.flags, f"halves the hybrid state: {t.effect(b)}", 2))
    return remedies


def _state_pool_remedies(t: _Trials) -> list[Remedy]:
    """A hybrid model's state pool: more slots for a capped concurrency, or fewer requests when it fails."""
    flags, failed = t.flags, t.failed
    remedies = []
    if "capped" in failed.fixable or "admit" in failed.fixable:
        base = flags.mamba_full_memory_ratio or 0.9
        ratios = [FlagEdit("--mamba-full-memory-ratio", f"{r:g}") for r in (0.9, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
                  if r > base]
        lifted = next(((edit, b) for edit in ratios if t.good(b := t.run(edit))), None)
        if lifted is not None:
            remedies.append(Remedy.of(lifted[0], flags, "smallest ratio that lifts the concurrency cap: "
                                      f"{t.effect(lifted[1])}", 2))
        elif ratios and base < 2.0:
            b = t.run(edit := FlagEdit("--mamba-full-memory-ratio", "2"))
            more = (b.max_running_requests or 0) > (failed.max_running_requests or 0)
            if b.verdict is not VerdictKind.FAILS and more:
                remedies.append(Remedy.of(edit, flags, "more state slots for fewer KV tokens (no ratio reaches the "
                                          f"requested concurrency): {t.effect(b)}", 2))
        if failed.max_running_requests and failed.max_running_requests > 0:
            cap = failed.max_running_requests
            remedies.append(Remedy.of(FlagEdit("--max-running-requests", str(cap)), flags,
                                      f"accept the {cap} concurrent requests the state pool allows, explicitly", 3))
    hybrid_failure = t.model.is_hybrid_linear and failed.verdict is VerdictKind.FAILS
    if hybrid_failure and (flags.speculative or flags.disable_radix_cache):
        start = flags.max_running_requests or 48
        for mrr in (32, 24, 16, 12, 8, 6, 4, 2, 1):
            if mrr >= start:
                continue
            b = t.run(edit := FlagEdit("--max-running-requests", str(mrr)))
            if t.good(b):
                remedies.append(Remedy.of(edit, flags, f"largest concurrency that fits: {t.effect(b)}", 3))
                break
    return remedies


def _swa_remedies(t: _Trials) -> list[Remedy]:
    """A sliding-window pool that admits no request: the smallest --swa-full-tokens-ratio whose pool holds one window
    and a page (a larger ratio also takes bytes from the full pool, so each step is relaunched on paper)."""
    failed, window = t.failed, t.model.sliding_window
    if not window or not failed.kv_tokens or not (
            "swa" in failed.fixable or (failed.error_text or "").startswith("SWA pool")):
        return []
    base = t.flags.swa_full_tokens_ratio or 0.8
    page = t.flags.page
    start = max(round(base + 0.01, 2), math.ceil((window + page + 1) / failed.kv_tokens * 100) / 100)
    for ratio in (round(start + 0.01 * step, 2) for step in range(100)):
        if ratio > 1.0:
            break
        b = t.run(edit := FlagEdit("--swa-full-tokens-ratio", f"{ratio:g}"))
        if b.verdict is not VerdictKind.FAILS and "swa" not in b.fixable and b.headroom_gib >= 0:
            return [Remedy.of(edit, t.flags, f"smallest ratio whose sliding-window pool admits a request: "
                              f"{t.effect(b)}", 1)]
    return []


def _context_remedies(t: _Trials) -> list[Remedy]:
    """A context the KV pool holds, or a KV cache in FP8 for twice the tokens."""
    remedies = []
    if "context" in t.failed.fixable and t.failed.kv_tokens:
        ctx = t.failed.kv_tokens // 1024 * 1024
        if ctx > 0:
            remedies.append(Remedy.of(FlagEdit("--context-length", str(ctx)), t.flags,
                                      f"fits the KV pool of {t.failed.kv_tokens:,} tokens", 4))
    if t.flags.kv_cache_dtype == "auto" and t.model.dtype in ("bfloat16", "float16"):
        b = t.run(edit := FlagEdit("--kv-cache-dtype", "fp8_e4m3"))
        if t.good(b):
            remedies.append(Remedy.of(edit, t.flags, f"halves KV bytes per token: {t.effect(b)}", 5))
    return remedies


def _split_remedies(t: _Trials) -> list[Remedy]:
    """A model that does not split over tp: expert parallelism, or the largest tp it splits over."""
    flags = t.flags
    if not _is_split_error(t.failed.error_text):
        return []
    remedies = []
    if t.model.moe is not None and flags.moe_tp > 1:
        b = t.run(edit := FlagEdit("--ep-size", str(flags.tp)))
        if b.verdict is not VerdictKind.FAILS:
            remedies.append(Remedy.of(edit, flags, "expert parallelism keeps each expert whole on a rank: "
                                      f"{t.effect(b)}", 1))
    for narrower in range(flags.tp - 1, 0, -1):
        b = t.run(edit := FlagEdit("--tp-size", str(narrower)))
        if not _is_split_error(b.error_text):
            remedies.append(Remedy.of(edit, flags, f"the largest tp the model splits over: {t.effect(b)}", 2))
            break
    return remedies


def _wider_tp_remedies(t: _Trials, found: list[Remedy]) -> list[Remedy]:
    """Twice the tp when the GPUs are there; else, when nothing cheaper was ``found``, what it would take."""
    flags = t.flags
    edit = FlagEdit("--tp-size", str(flags.tp * 2))
    wider = flags.edited(edit)
    if t.inp.gpus.count >= wider.gpus_spanned:
        b = t.run(edit)
        if t.good(b):
            return [Remedy.of(edit, flags, f"uses {wider.gpus_needed} GPUs: {t.effect(b)}", 6)]
    elif t.failed.verdict is VerdictKind.FAILS and not any(r.cost_rank < 6 for r in found):
        return [Remedy(f"tp {flags.tp * 2} (needs {wider.gpus_needed} GPUs; {t.inp.gpus.count} available)", None,
                       "more GPUs share the weights", 7)]
    return []


def _fp8_moe_remedies(inp: BudgetInput) -> list[Remedy]:
    """No flag makes FP8 experts run below compute capability 8.9: drop an online --quantization fp8,
    or load another build of the model (int4 MoE runs on Marlin from 8.0; BF16 on any), each sized."""
    if inp.flags.quantization in ONLINE_QUANT and (inp.quant or inp.model.quant).method == "none":
        b = _compute(_edited(inp, edit := FlagEdit("--quantization", inp.flags.quantization, drop=True)))
        return [Remedy.of(edit, inp.flags, f"the checkpoint's own {inp.model.dtype} experts: {_effect(b)}", 1)]
    int4 = _compute(replace(inp, quant=quantization_from("awq"), weights_bytes_total=None, measured_load=None))
    bf16 = _compute(replace(inp, quant=NO_QUANT, weights_bytes_total=None, measured_load=None))
    return [Remedy("an AWQ/GPTQ int4 build of this model", None,
                   f"its MoE runs on Marlin kernels from compute capability 8.0: {_effect(int4)}", 3),
            Remedy(f"a {inp.model.dtype} build of this model", None, f"no FP8 kernel needed: {_effect(bf16)}", 4)]


def _draft_path_remedies(inp: BudgetInput) -> list[Remedy]:
    """No memory change helps an EAGLE3 launch without its draft: name the draft, or launch without speculation."""
    b = _compute(_edited(inp, edit := FlagEdit("--speculative-algorithm", inp.flags.speculative_algorithm,
                                                drop=True)))
    return [Remedy("--speculative-draft-model-path <an EAGLE3 draft trained for this model>", None,
                   "the draft head EAGLE3 runs; `gpuops budget` sizes it from its config.json once given", 1),
            Remedy.of(edit, inp.flags, f"no speculative decoding: {_effect(b)}", 2)]


def _spec_params_remedies(inp: BudgetInput) -> list[Remedy]:
    """Give the steps too (a chain: draft tokens - 1 of them), or leave the choice of all three to SGLang. A tree
    (top-k above 1) has no steps that follow from the other two: only the missing flag is named."""
    flags = inp.flags
    topk, draft = flags.speculative_eagle_topk, flags.speculative_num_draft_tokens
    remedies = []
    if topk == 1:
        steps = draft - 1 if draft and draft > 1 else 3
        remedies.append(_chain_remedy(inp, FlagEdit("--speculative-num-steps", str(steps)), steps))
    elif topk is not None and draft is not None:
        remedies.append(Remedy("--speculative-num-steps <steps for this tree>", None,
                               f"SGLang takes steps, top-k ({topk}) and draft tokens ({draft}) together, or none", 1))
    if len(given := flags.steps_companions) == 1:
        flag, value = given[0]
        remedies.append(_sglang_chooses_remedy(inp, FlagEdit(flag, str(value), drop=True)))
    return remedies


def _topk_remedies(inp: BudgetInput) -> list[Remedy]:
    """Name the top-k: 1, a chain, as SGLang's MTP recipes give it; or, with no draft tokens given either, drop the
    steps and let SGLang choose all three."""
    flags = inp.flags
    steps = flags.speculative_num_steps or 0
    remedies = [_chain_remedy(inp, FlagEdit("--speculative-eagle-topk", "1"), steps)]
    if flags.speculative_num_draft_tokens is None:
        remedies.append(_sglang_chooses_remedy(inp, FlagEdit("--speculative-num-steps", str(steps), drop=True)))
    return remedies


def _chain_remedy(inp: BudgetInput, edit: FlagEdit, steps: int) -> Remedy:
    """The speculative parameters completed as a chain of ``steps`` by ``edit``, sized."""
    b = _compute(_edited(inp, edit))
    return Remedy.of(edit, inp.flags, f"a chain of {steps} steps verifying {steps + 1} draft tokens: {_effect(b)}", 1)


def _sglang_chooses_remedy(inp: BudgetInput, edit: FlagEdit) -> Remedy:
    """A speculative parameter dropped by ``edit`` so that SGLang chooses all three, sized."""
    b = _compute(_edited(inp, edit))
    chosen = sglang_spec_params(inp.flags.speculative_algorithm or "", inp.model.architecture)
    return Remedy.of(edit, inp.flags, f"SGLang chooses the three for {inp.model.architecture} ({chosen.words}): "
                     f"{_effect(b)}", 2)


def _is_split_error(text: str | None) -> bool:
    """One of the errors SGLang raises, before any weight loads, for a model that does not split over tp."""
    block = "is not divisible by weight quantization block_"
    kda = "must be divisible by global tp_size"
    return text in (AWQ_SPLIT_TEXT, SPLIT_ASSERT_TEXT) or block in (text or "") or kda in (text or "")


def _effect(b: Budget, before: Budget | None = None) -> str:
    """What a change leads to. A degradation the launch had ``before`` the change is shown with the
    verdict already, so only a new one is named here."""
    parts = [f"{b.kv_tokens:,} KV tokens"]
    if b.mamba_slots is not None:
        parts.append(f"{b.mamba_slots} state slots")
    if b.max_running_requests is not None:
        parts.append(f"max {b.max_running_requests} running requests")
    parts.append(f"{b.headroom_gib:.2f} GiB headroom")
    text = ", ".join(parts)
    if b.verdict is VerdictKind.FITS:
        return text
    new = [r for r in b.reasons if before is None or r not in before.reasons]
    if b.verdict is VerdictKind.FAILS or new:
        verdict = "still fails" if b.verdict is VerdictKind.FAILS else "starts degraded"
        return f"{text}; {verdict}: {(new or [b.error_text or ''])[0][:140]}"
    return f"{text} (the warnings above remain)"
