"""SGLang launch flags: the known set with typed values, and the ones the budget models.

``parse_sglang_flags`` reads an argv the way SGLang's argparse does (``--flag value``,
``--flag=value``, boolean switches, unique prefixes). Flags that matter for memory become
:class:`LaunchFlags` fields; known flags that do not are kept as ``passthrough``; unknown
flags are listed, never silently dropped.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from bot.errors import UsageError


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError("needs a number") from None


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError("needs a whole number") from None


def _fraction(text: str) -> float:
    value = _number(text)
    if not 0 < value < 1:
        raise ValueError("must be between 0 and 1")
    return value


def _positive(text: str) -> int:
    value = _whole(text)
    if value < 1:
        raise ValueError("must be a positive integer")
    return value


def _index(text: str) -> int:
    value = _whole(text)
    if value < 0:
        raise ValueError("must be a GPU index, 0 or more")
    return value


def _tcp_port(text: str) -> int:
    value = _whole(text)
    if not 1 <= value <= 65535:
        raise ValueError("must be a TCP port, 1 to 65535")
    return value


HOST_RE = re.compile(r"[A-Za-z0-9._-]{1,253}|\[?[0-9A-Fa-f:.]{2,45}(%[\w.-]{1,32})?\]?")  # a name, IPv4 or IPv6


def _host(text: str) -> str:
    if not HOST_RE.fullmatch(text):
        raise ValueError("must be an IP address or a host name")
    return text


def _ratio(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise ValueError("must be positive")
    return value


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return text

    return parse


def _text(text: str) -> str:
    if not text or "\n" in text or "\0" in text:
        raise ValueError("must be a single-line value")
    return text


SWITCH = None  # marker: a boolean flag that takes no value

# flag -> (LaunchFlags field or None, value parser or SWITCH)
MODELLED: dict[str, tuple[str, Callable[[str], Any] | None]] = {
    "--tp-size": ("tp", _positive),
    "--pp-size": ("pp", _positive),
    "--dp-size": ("dp", _positive),
    "--base-gpu-id": ("base_gpu_id", _index),
    "--gpu-id-step": ("gpu_id_step", _positive),
    "--mem-fraction-static": ("mem_fraction_static", _fraction),
    "--context-length": ("context_length", _positive),
    "--max-running-requests": ("max_running_requests", _positive),
    "--max-total-tokens": ("max_total_tokens", _positive),
    "--chunked-prefill-size": ("chunked_prefill_size", _whole),
    "--cuda-graph-max-bs": ("cuda_graph_max_bs", _positive),
    "--disable-cuda-graph": ("disable_cuda_graph", SWITCH),
    "--disable-piecewise-cuda-graph": ("disable_piecewise_cuda_graph", SWITCH),
    "--enable-torch-compile": ("enable_torch_compile", SWITCH),
    "--torch-compile-max-bs": ("torch_compile_max_bs", _positive),
    "--kv-cache-dtype": ("kv_cache_dtype", _choice("auto", "fp8_e4m3", "fp8_e5m2", "bf16", "bfloat16", "fp4_e2m1")),
    "--page-size": ("page_size", _positive),
    "--disable-radix-cache": ("disable_radix_cache", SWITCH),
    "--speculative-algorithm": ("speculative_algorithm",
                                _choice("EAGLE", "EAGLE3", "NEXTN", "MTP", "STANDALONE", "NGRAM", "DFLASH")),
    "--speculative-num-steps": ("speculative_num_steps", _positive),
    "--speculative-eagle-topk": ("speculative_eagle_topk", _positive),
    "--speculative-num-draft-tokens": ("speculative_num_draft_tokens", _positive),
    "--speculative-draft-model-path": ("speculative_draft_model_path", _text),
    "--mamba-full-memory-ratio": ("mamba_full_memory_ratio", _ratio),
    "--max-mamba-cache-size": ("max_mamba_cache_size", _positive),
    "--mamba-ssm-dtype": ("mamba_ssm_dtype", _choice("float32", "bfloat16", "float16")),
    "--mamba-scheduler-strategy": ("mamba_scheduler_strategy",
                                   _choice("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy")),
    "--swa-full-tokens-ratio": ("swa_full_tokens_ratio", _ratio),
    "--quantization": ("quantization", _text),
    "--dtype": ("dtype", _choice("auto", "half", "float16", "bfloat16", "float", "float32")),
    "--disable-overlap-schedule": ("disable_overlap_schedule", SWITCH),
    "--enable-dp-attention": ("enable_dp_attention", SWITCH),
    "--ep-size": ("ep", _positive),
    "--enable-ep-moe": ("enable_ep_moe", SWITCH),  # older releases: expert parallelism over the whole TP group
}
ALIASES = {
    "--tp": "--tp-size", "--tensor-parallel-size": "--tp-size", "--pp": "--pp-size",
    "--pipeline-parallel-size": "--pp-size", "--dp": "--dp-size", "--data-parallel-size": "--dp-size",
    "--mamba-radix-cache-strategy": "--mamba-scheduler-strategy", "--ep": "--ep-size",
    "--expert-parallel-size": "--ep-size", "--model": "--model-path",
}
# known, not memory-relevant: accepted and passed to the server unchanged
PASSTHROUGH: dict[str, Callable[[str], Any] | None] = {
    "--model-path": _text, "--tokenizer-path": _text, "--host": _host, "--port": _tcp_port,
    "--served-model-name": _text, "--trust-remote-code": SWITCH, "--reasoning-parser": _text,
    "--tool-call-parser": _text, "--chat-template": _text, "--attention-backend": _text,
    "--linear-attn-backend": _text, "--sampling-backend": _text, "--log-level": _text,
    "--disable-custom-all-reduce": SWITCH, "--enable-metrics": SWITCH, "--api-key": _text,
    "--random-seed": _whole, "--max-prefill-tokens": _positive, "--schedule-policy": _text,
    "--is-embedding": SWITCH, "--revision": _text, "--load-format": _text, "--download-dir": _text,
    "--speculative-draft-model-quantization": _text, "--watchdog-timeout": _ratio,
    "--nnodes": _positive, "--node-rank": _whole, "--dist-init-addr": _text, "--enable-mixed-chunk": SWITCH,
    "--skip-server-warmup": SWITCH, "--mm-attention-backend": _text, "--grammar-backend": _text,
    # piecewise (prefill) CUDA graphs: opt-in in older releases, forced on in newer ones (off: a modelled flag)
    "--enable-piecewise-cuda-graph": SWITCH, "--enforce-piecewise-cuda-graph": SWITCH,
}


# SGLang's own choice of (steps, top-k, draft tokens) when --speculative-num-steps is not given (server_args'
# auto_choose_speculative_params): a tree of 5 steps x top-k 4 verifying 8 tokens for Llama and Grok in every release
# read; a chain of 3 steps verifying 4 for STANDALONE, the DeepSeek/GLM/gpt-oss/Bailing MTP families and, in current
# releases, every other model (releases of 2025 still gave the others the tree).
TREE_SPEC_ARCHITECTURES = frozenset({"LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"})
# --speculative-adaptive with no steps given: SGLang starts at the middle of its adaptive config's candidate steps,
# which gpuops does not read; sized as this many
ADAPTIVE_STEPS_SIZED = 3
# NGRAM with no --speculative-num-draft-tokens: SGLang's default (its match window, 12 in every release read)
NGRAM_DRAFT_TOKENS = 12


@dataclass(frozen=True)
class SpecParams:
    """Speculative decoding's shape: draft steps, candidates per step, tokens verified per request per step."""
    steps: int
    topk: int
    draft_tokens: int
    chosen_by_sglang: bool

    @property
    def words(self) -> str:
        return f"{self.steps} steps, top-k {self.topk}, {self.draft_tokens} draft tokens"


def sglang_spec_params(algorithm: str, architecture: str) -> SpecParams:
    """What SGLang picks for ``architecture`` when the launch names none of the three (see TREE_SPEC_ARCHITECTURES)."""
    if algorithm != "STANDALONE" and architecture in TREE_SPEC_ARCHITECTURES:
        return SpecParams(5, 4, 8, chosen_by_sglang=True)
    return SpecParams(3, 1, 4, chosen_by_sglang=True)


def indices_text(indices: Iterable[int]) -> str:
    """GPU indices as a person reads them: ``1``, ``0..3`` for a run, else ``0, 2``."""
    ordered = sorted(set(indices))
    if len(ordered) > 1 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}..{ordered[-1]}"
    return ", ".join(str(i) for i in ordered)


@dataclass(frozen=True)
class LaunchFlags:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    base_gpu_id: int = 0  # the first GPU index the launch's ranks use, as the container numbers its GPUs
    gpu_id_step: int = 1
    mem_fraction_static: float | None = None  # None: SGLang's automatic default for the version and GPU
    context_length: int | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    disable_piecewise_cuda_graph: bool = False  # releases where piecewise (prefill) graphs are on by default
    enable_torch_compile: bool = False
    torch_compile_max_bs: int | None = None
    kv_cache_dtype: str = "auto"
    page_size: int | None = None
    disable_radix_cache: bool = False
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_draft_model_path: str | None = None
    mamba_full_memory_ratio: float | None = None
    max_mamba_cache_size: int | None = None
    mamba_ssm_dtype: str | None = None
    mamba_scheduler_strategy: str | None = None
    swa_full_tokens_ratio: float | None = None
    quantization: str | None = None
    dtype: str | None = None
    disable_overlap_schedule: bool = False
    enable_dp_attention: bool = False
    ep: int = 1
    enable_ep_moe: bool = False
    passthrough: tuple[str, ...] = ()  # known flags the budget does not model, as given
    unknown: tuple[str, ...] = ()  # flags SGLang's known set does not have
    env: tuple[str, ...] = ()  # the launch's NAME=VALUE environment words, checked

    @property
    def page(self) -> int:
        """Tokens per KV-cache page: --page-size, else SGLang's default of one."""
        return self.page_size or 1

    @property
    def gpus_needed(self) -> int:
        """GPUs one launch occupies: tp x pp, times dp unless DP attention runs inside the TP group."""
        return self.tp * self.pp * (1 if self.enable_dp_attention else self.dp)

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """The GPU index of each rank, as SGLang places them on one node: rank (pp, tp) of data-parallel replica d
        on ``base + d*tp*pp*step + pp*tp + tp*step`` (its engine puts the ranks of one replica, its data-parallel
        controller moves each next replica's base by tp*pp*step; the pipeline stage's offset is not stepped)."""
        replicas = 1 if self.enable_dp_attention else self.dp
        step = self.gpu_id_step
        return tuple(self.base_gpu_id + d * self.tp * self.pp * step + p * self.tp + t * step
                     for d in range(replicas) for p in range(self.pp) for t in range(self.tp))

    @property
    def gpus_spanned(self) -> int:
        """GPUs the container must see for this launch: up to its highest index."""
        return max(self.gpu_indices) + 1

    @property
    def gpus_placed(self) -> bool:
        """Whether --base-gpu-id or --gpu-id-step moves the launch off the first GPUs the container sees."""
        return self.base_gpu_id != 0 or self.gpu_id_step != 1

    def gpus_described(self) -> str:
        """Which GPUs the launch needs, in the words of the flags that decide it."""
        shape = f"tp {self.tp} x pp {self.pp} x dp {self.dp}"
        if not self.gpus_placed:
            return f"{self.gpus_needed} GPUs ({shape})"
        placed = ", ".join(f"{flag} {value}" for flag, value, default in (
            ("--base-gpu-id", self.base_gpu_id, 0), ("--gpu-id-step", self.gpu_id_step, 1)) if value != default)
        indices = set(self.gpu_indices)
        return f"GPU{'s' if len(indices) > 1 else ''} {indices_text(indices)} ({shape}, {placed})"

    @property
    def weight_layout(self) -> str:
        """What decides the bytes each GPU holds after loading: two launches with the same
        checkpoint and the same layout load the same weights per GPU."""
        dp_attention = self.dp if self.enable_dp_attention else 1
        return (f"tp {self.tp}, pp {self.pp}, dp-attention {dp_attention}, "
                f"quantization {self.quantization or 'checkpoint'}, dtype {self.dtype or 'auto'}")

    @property
    def moe_tp(self) -> int:
        """Ranks that split each expert: with expert parallelism a rank holds whole experts (tp / ep)."""
        ep = self.tp if self.enable_ep_moe else self.ep
        return max(1, self.tp // ep) if ep > 1 and self.tp % ep == 0 else self.tp

    @property
    def speculative(self) -> bool:
        return self.speculative_algorithm is not None and self.speculative_algorithm != "NGRAM"

    def spec_params(self, architecture: str) -> SpecParams | None:
        """Steps, top-k and the tokens each request verifies per step, as SGLang's EAGLE family settles them; None
        without speculative decoding. With no ``--speculative-num-steps`` SGLang chooses all three for the model
        (:func:`sglang_spec_params`); with top-k 1 (a chain) it sets the draft tokens to steps + 1 whatever was
        given, and warns. Steps without a top-k are sized as a chain (SGLang 0.5.9 and later stop on them). Adaptive
        speculation verifies steps + 1 tokens, its steps moving between candidates as it serves: sized at the steps
        given, else at ADAPTIVE_STEPS_SIZED."""
        if not self.speculative:
            return None
        if self.speculative_adaptive and self.eagle_family:  # a chain whose steps move between candidates
            steps = self.speculative_num_steps or ADAPTIVE_STEPS_SIZED
            return SpecParams(steps, self.speculative_eagle_topk or 1, steps + 1, chosen_by_sglang=False)
        if self.speculative_num_steps is None and not self.steps_companions and self.eagle_family:
            return sglang_spec_params(self.speculative_algorithm or "", architecture)
        steps = self.speculative_num_steps or 3
        topk = self.speculative_eagle_topk or 1
        if self.draft_tokens_adjusted is not None:
            draft = self.draft_tokens_adjusted
        elif self.speculative_num_draft_tokens:
            draft = self.speculative_num_draft_tokens
        else:
            draft = steps + 1 if topk == 1 else steps * topk
        return SpecParams(steps, topk, draft, chosen_by_sglang=False)

    def draft_tokens(self, architecture: str) -> int:
        """The tokens each request verifies per decode step (0 without speculative decoding); NGRAM, which has no
        draft model, verifies its window: --speculative-num-draft-tokens, else NGRAM_DRAFT_TOKENS."""
        if self.speculative_algorithm == "NGRAM":
            return self.speculative_num_draft_tokens or NGRAM_DRAFT_TOKENS
        params = self.spec_params(architecture)
        return params.draft_tokens if params else 0

    @property
    def eagle_family(self) -> bool:
        """EAGLE (NEXTN/MTP become it), EAGLE3 and STANDALONE: the algorithms SGLang's server_args resolves
        steps, top-k and draft tokens for together."""
        return self.speculative_algorithm in ("EAGLE", "EAGLE3", "STANDALONE")

    @property
    def draft_tokens_adjusted(self) -> int | None:
        """steps + 1, when a chain (``--speculative-eagle-topk 1`` with ``--speculative-num-steps``) is given another
        ``--speculative-num-draft-tokens``: SGLang replaces it (``speculative_num_draft_tokens is adjusted to
        speculative_num_steps + 1 when speculative_eagle_topk == 1``); None when it keeps the value given."""
        steps, given = self.speculative_num_steps, self.speculative_num_draft_tokens
        if self.eagle_family and steps and given and self.speculative_eagle_topk == 1 and given != steps + 1:
            return steps + 1
        return None

    @property
    def steps_companions(self) -> tuple[tuple[str, int], ...]:
        """(flag, value) of ``--speculative-eagle-topk`` and ``--speculative-num-draft-tokens``, those given."""
        named = (("--speculative-eagle-topk", self.speculative_eagle_topk),
                 ("--speculative-num-draft-tokens", self.speculative_num_draft_tokens))
        return tuple((flag, value) for flag, value in named if value is not None)

    @property
    def speculative_adaptive(self) -> bool:
        """``--speculative-adaptive``: SGLang picks the steps as it serves (gpuops does not model it)."""
        return "--speculative-adaptive" in self.passthrough or "--speculative-adaptive" in self.unknown

    @property
    def partial_speculative_params(self) -> bool:
        """``--speculative-eagle-topk`` or ``--speculative-num-draft-tokens`` without ``--speculative-num-steps``:
        SGLang then chooses all three itself and first asserts that neither of the other two was given (a bare
        AssertionError in server_args), unless adaptive speculation picks the steps."""
        return self.eagle_family and self.speculative_num_steps is None and bool(self.steps_companions) \
            and not self.speculative_adaptive

    @property
    def topk_missing(self) -> bool:
        """``--speculative-num-steps`` without ``--speculative-eagle-topk``: SGLang fills in top-k only when the steps
        are missing too, so it stays None, and server_args compares it with 1."""
        return self.eagle_family and self.speculative_num_steps is not None and self.speculative_eagle_topk is None \
            and not self.speculative_adaptive

    def edited(self, edit: FlagEdit) -> LaunchFlags:
        """These flags with ``edit`` made, as :func:`parse_sglang_flags` reads the edited launch: a flag set is parsed
        as it would be there, a dropped one is back at its default, the environment words are joined. Raises
        ValueError for a flag the budget does not model (an edit of one would not change what it computes)."""
        values: dict[str, Any] = {}
        if edit.flag is not None:
            name = _resolve(edit.flag)
            if name not in MODELLED:
                raise ValueError(f"{edit.flag} is not a flag the budget models")
            target, parser = MODELLED[name]
            if edit.drop:
                values[target] = next(f.default for f in fields(self) if f.name == target)
            else:
                values[target] = True if parser is SWITCH else _algorithm_as_run(target, parser(edit.value or ""))
        env = self.env
        for word in edit.env:
            env = with_env(env, word)
        return replace(self, **values, env=env)

    def env_value(self, name: str) -> str | None:
        """The value the launch's environment gives ``name`` (its last word for it), or None when it sets none."""
        values = [word.partition("=")[2] for word in self.env if word.partition("=")[0] == name]
        return values[-1] if values else None

    def env_set(self, name: str) -> bool:
        """Whether the launch's environment turns ``name`` on, as SGLang's get_bool_env_var reads it ("1", "true")."""
        value = self.env_value(name)
        return value is not None and value.lower() in ("1", "true")


def _resolve(name: str) -> str | None:
    name = ALIASES.get(name, name)
    if name in MODELLED or name in PASSTHROUGH:
        return name
    candidates = [f for f in (*MODELLED, *PASSTHROUGH, *ALIASES) if f.startswith(name)]
    resolved = {ALIASES.get(c, c) for c in candidates}
    return resolved.pop() if len(resolved) == 1 else None


def flag_spans(argv: Sequence[str], takes_value: Callable[[str], bool | None]) -> list[tuple[int, int]]:
    """``argv`` cut into its flags, each with the values that go with it, as (start, end) indices.
    ``takes_value(name)`` says whether a known flag takes one value (True: the next token, whatever it looks like)
    or none (False); None for a flag not known, whose values are every token up to the next flag (SGLang's launch
    takes no positional argument, and a list flag such as ``--cuda-graph-bs 1 2 4 8`` takes several). A
    ``--flag=value`` token carries its value; a token that is not a flag, before the first one, is a span alone."""
    spans = []
    i = 0
    while i < len(argv):
        start = i
        name, eq, _ = argv[i].partition("=")
        i += 1
        if argv[start].startswith("--") and not eq:
            takes = takes_value(name)
            if takes is None:
                while i < len(argv) and not argv[i].startswith("--"):
                    i += 1
            elif takes and i < len(argv):
                i += 1
        spans.append((start, i))
    return spans


def _parser(name: str) -> Callable[[str], Any] | None:
    """The value parser of a flag in the table (resolved), or SWITCH."""
    return MODELLED[name][1] if name in MODELLED else PASSTHROUGH[name]


def _takes_value(name: str) -> bool | None:
    resolved = _resolve(name)
    return None if resolved is None else _parser(resolved) is not SWITCH


# A launch's environment: NAME=VALUE words before its first flag, as `env` takes them (`/sglang launch ct /m
# SGLANG_ENABLE_SPEC_V2=1 NCCL_P2P_DISABLE=1 --tp 2`). Only the families that configure SGLang and the libraries under
# it: a loader's or interpreter's variable (LD_PRELOAD, PYTHONPATH, PATH) would run other code as root there.
ENV_PREFIXES = ("SGLANG_", "SGL_", "NCCL_", "GLOO_", "CUDA_", "TORCH_", "PYTORCH_", "TORCHINDUCTOR_", "TRITON_",
                "FLASHINFER_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "OMP_", "MKL_", "NVIDIA_")
ENV_NAMES = frozenset({"no_proxy", "NO_PROXY", "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                       "ALL_PROXY"})
# the pre-flight checks the GPUs the flags name (--base-gpu-id, tp x pp x dp): renumbering them under it would check
# other GPUs than the launch uses
ENV_REFUSED = {"CUDA_VISIBLE_DEVICES": "choose the GPUs with --base-gpu-id, which the pre-flight checks"}
_ENV_WORD = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>[^\n\0]{0,4096})")
_SECRET_ENV = re.compile(r"(?:^|_)(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD)(?:_|$)", re.I)  # HF_TOKEN, not TOKENIZERS_


def env_words(argv: Sequence[str]) -> int:
    """How many NAME=VALUE words open ``argv`` (the launch's environment; a flag's value never comes first)."""
    count = 0
    for token in argv:
        if token.startswith("-") or not _ENV_WORD.fullmatch(token):
            break
        count += 1
    return count


def with_env(argv: Sequence[str], word: str) -> tuple[str, ...]:
    """``argv`` with the environment word NAME=VALUE set (replacing that name's), other words and flags kept."""
    count, name = env_words(argv), word.partition("=")[0]
    kept = [w for w in argv[:count] if w.partition("=")[0] != name]
    return (*kept, word, *argv[count:])


def launch_env(argv: Sequence[str]) -> tuple[str, ...]:
    """The NAME=VALUE words that open ``argv``, checked; raises :class:`UsageError` for a variable a launch may not
    set, naming the ones it may."""
    words = tuple(argv[:env_words(argv)])
    for word in words:
        if (refusal := _env_refusal(word.partition("=")[0])) is not None:
            raise UsageError(refusal)
    return words


def _env_refusal(name: str) -> str | None:
    """Why a launch may not set the variable ``name``, or None when it may."""
    if name in ENV_REFUSED:
        return f"`{name}` is not set by a launch: {ENV_REFUSED[name]}"
    if not (name.startswith(ENV_PREFIXES) or name in ENV_NAMES):
        return (f"`{name}` is not a variable a launch may set: only " +
                ", ".join(f"{prefix}*" for prefix in ENV_PREFIXES) + " and the proxy variables (a loader's or "
                "interpreter's variable would run other code as root in the container)")
    return None


def _own_name(typed: str, name: str) -> str:
    """After a flag as the person typed it: SGLang's own name for it, when that differs (an alias, an abbreviation)."""
    return "" if typed == name else f" (SGLang's `{name}`)"


def parse_sglang_flags(argv: Sequence[str]) -> LaunchFlags:
    """Typed flags from an argv; raises :class:`UsageError` on a bad value, naming the flag."""
    values: dict[str, Any] = {}
    passthrough: list[str] = []
    unknown: list[str] = []
    env = launch_env(argv)
    argv = argv[len(env):]
    for start, end in flag_spans(argv, _takes_value):
        token = argv[start]
        if not token.startswith("--"):
            raise UsageError(f"unexpected argument `{token[:40]}`: SGLang flags start with --")
        raw_name, eq, inline = token.partition("=")
        name = _resolve(raw_name)
        if name is None:
            unknown += argv[start:end]  # with its values
            continue
        target, parser = MODELLED.get(name, (None, _parser(name)))
        if parser is SWITCH:
            if eq:
                raise UsageError(f"`{raw_name}`{_own_name(raw_name, name)} is a switch and takes no value")
            if target:
                values[target] = True
            else:
                passthrough.append(name)
            continue
        if not eq and end - start < 2:
            raise UsageError(f"`{raw_name}`{_own_name(raw_name, name)} needs a value")
        text = inline if eq else argv[start + 1]
        try:
            value = parser(text)
        except ValueError as exc:
            shown = REDACTED if name in SECRET_FLAGS else text[:40]
            raise UsageError(f"`{raw_name} {shown}`{_own_name(raw_name, name)}: {exc}") from None
        if target:
            values[target] = value
        else:
            passthrough += [name, str(text)]
    if "speculative_algorithm" in values:
        values["speculative_algorithm"] = _algorithm_as_run("speculative_algorithm", values["speculative_algorithm"])
    return LaunchFlags(**values, passthrough=tuple(passthrough), unknown=tuple(unknown), env=env)


def _algorithm_as_run(target: str, value: Any) -> Any:
    """SGLang rewrites NEXTN (and its MTP alias) to EAGLE; any other value as given."""
    return "EAGLE" if target == "speculative_algorithm" and value in ("NEXTN", "MTP") else value


def command_flags(tokens: Sequence[str]) -> tuple[str, ...]:
    """The flags of a launch command ("python -m sglang.launch_server --tp 2 ...", "sglang serve M --tp 2", a
    `docker run --gpus all IMAGE python3 -m sglang.launch_server ...` around either, or just the flags): from the
    first ``--`` token after SGLang's entry point (after the start, when the command names none), after the
    environment the command gives the server (see :func:`command_env`)."""
    launcher = next((i + 1 for i, t in enumerate(tokens)
                     if t in ("sglang.launch_server", "sglang/launch_server.py")
                     or t.endswith("/sglang/launch_server.py")
                     or (t == "serve" and i and tokens[i - 1].rsplit("/", 1)[-1] == "sglang")), 0)
    start = next((i for i, t in enumerate(tokens) if i >= launcher and t.startswith("--")), len(tokens))
    return (*command_env(tokens[:launcher]), *tokens[start:])


def command_env(tokens: Sequence[str]) -> tuple[str, ...]:
    """The NAME=VALUE words a command sets for the program it runs, before it (``tokens``: the command up to SGLang's
    entry point): the shell's own prefix (`NCCL_DEBUG=INFO python -m ...`), a script's `export NAME=value;`, `env`'s,
    and docker's `-e`/`--env`; one per name, the last given, and only those a launch may set (:func:`launch_env`)."""
    found: dict[str, str] = {}
    exporting = False  # inside an `export` statement, up to its `;`
    for i, token in enumerate(tokens):
        exported = exporting
        word = token.removeprefix("--env=").removesuffix(";" if exported else "")
        exporting = (exported and not token.endswith(";")) or token == "export"
        if not _ENV_WORD.fullmatch(word) or (exported and not word):
            continue
        prefix = all(t == "env" or _ENV_WORD.fullmatch(t) for t in tokens[:i])
        if prefix or exported or token.startswith("--env=") or (i and tokens[i - 1] in ("-e", "--env")):
            name = word.partition("=")[0]
            if _env_refusal(name) is None:
                found.pop(name, None)
                found[name] = word
    return tuple(found.values())


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value SGLang's argparse ends up with for ``flag`` (gpuops' name for it): the last one given, in any
    spelling (an alias, an abbreviation, ``--flag=value``); None when it is not given a value."""
    argv = argv[env_words(argv):]
    value = None
    for start, end in flag_spans(argv, _takes_value):
        name, eq, inline = argv[start].partition("=")
        if argv[start].startswith("--") and (_resolve(name) or name) == flag:
            value = inline if eq else (argv[start + 1] if end - start > 1 else None)
    return value


WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]"})  # noqa: S104 (recognised in a launch's flags, never bound)


def bind_host(argv: Sequence[str]) -> str:
    """The address a server launched with ``argv`` binds inside its container: the ``--host`` as given (a wildcard
    too), or SGLang's default 127.0.0.1."""
    host = flag_value(argv, "--host")
    return "127.0.0.1" if host is None else host.strip("[]")


def server_host(argv: Sequence[str]) -> str:
    """The address a server launched with ``argv`` answers on inside its container: the ``--host`` it binds, or
    127.0.0.1 for SGLang's default and for the wildcard addresses (which take loopback connections too)."""
    host = bind_host(argv)
    return "127.0.0.1" if host in WILDCARD_HOSTS else host


def _same_path(path: str) -> str:
    """A path as the filesystem reads it (``/m/`` and ``/m//`` are ``/m``); a Hub id as given."""
    return posixpath.normpath(path) if path.startswith("/") else path


def check_model_flag(argv: Sequence[str], model_path: str) -> None:
    """Raises :class:`UsageError` when ``argv`` names another model than ``model_path`` (the one a pre-flight and a
    budget read): SGLang would load the flag's."""
    given = flag_value(argv, "--model-path")
    if given is not None and _same_path(given) != _same_path(model_path):
        shown = given if len(given) <= 120 else given[:119] + "…"
        raise UsageError(f"`--model-path {shown}` in the flags names another model than `{model_path}`, "
                         "the one gpuops reads and checks: give the model once, as the command's model")


def with_flag(argv: Sequence[str], flag: str, value: str | None) -> tuple[str, ...]:
    """``argv`` with ``flag`` set to ``value`` (a switch when None): every spelling of the flag
    (aliases, ``--flag=value``) is replaced, and nothing else changes."""
    return (*without_flags(argv, flag), *([flag] if value is None else [flag, value]))


def without_flags(argv: Sequence[str], *flags: str) -> tuple[str, ...]:
    """``argv`` without any spelling of ``flags`` (aliases, abbreviations, ``--flag=value``) and
    their values (all of them for a flag outside gpuops' table); everything else is kept in order."""
    canonical = {_resolve(f) or f for f in flags}
    out: list[str] = []
    for start, end in flag_spans(argv, _takes_value):
        name = argv[start].partition("=")[0]
        if not (argv[start].startswith("--") and (_resolve(name) or name) in canonical):
            out += argv[start:end]
    return tuple(out)


@dataclass(frozen=True)
class FlagEdit:
    """One change to a launch's flags, as data: ``flag`` set to ``value`` (a switch when None) or, with ``drop``,
    removed with its value (``value`` then only names it); ``env`` the NAME=VALUE words the launch needs with it.
    An edit of environment words alone has no flag."""

    flag: str | None = None
    value: str | None = None
    drop: bool = False
    env: tuple[str, ...] = ()

    def applied(self, argv: Sequence[str]) -> tuple[str, ...]:
        """``argv`` with this change made, nothing else changed."""
        changed = tuple(argv)
        if self.flag is not None:
            changed = without_flags(changed, self.flag) if self.drop else with_flag(changed, self.flag, self.value)
        for word in self.env:
            changed = with_env(changed, word)
        return changed

    def words(self) -> str:
        """As shown: ``--flag value``, ``drop --flag value``, ``--flag value (env A=1)``, ``A=1 (env)``."""
        if self.flag is None:
            return f"{' '.join(self.env)} (env)"
        text = ("drop " if self.drop else "") + self.flag + (f" {self.value}" if self.value is not None else "")
        return f"{text} (env {' '.join(self.env)})" if self.env else text

    def with_env(self, *words: str) -> FlagEdit:
        return replace(self, env=(*self.env, *words))


# flags whose value is a secret: never shown (history, cards, threads, audit, errors), only passed on
SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key"})
REDACTED = "<redacted>"


# how secrets appear in a server's own log: SGLang prints its ServerArgs (``api_key='...'``), a command line may
# be echoed, and an HTTP client may log its Authorization header
_SECRET_IN_TEXT = re.compile(r"\b((?:admin_)?api_key=)('[^']*'|\"[^\"]*\")"
                             r"|(--(?:admin-)?api-key[= ])(\S+)"
                             r"|(Bearer )([\w.~+/=-]+)")


def scrub_secrets(text: str) -> str:
    """``text`` (a log line about to be shown) with secret values replaced by ``<redacted>``."""
    def hide(m: re.Match[str]) -> str:
        lead = m.group(1) or m.group(3) or m.group(5)
        return f"{lead}{REDACTED}"

    return _SECRET_IN_TEXT.sub(hide, text)


def _secret_positions(argv: Sequence[str]) -> list[tuple[int, bool, str]]:
    """(index, inline, flag) of each secret value in ``argv``: ``--api-key=v`` is inline, ``--api-key v``
    is not; ``flag`` is the canonical name of any spelling."""
    found = [(i, True, argv[i].partition("=")[0]) for i in range(env_words(argv))
             if _SECRET_ENV.search(argv[i].partition("=")[0])]  # HF_TOKEN=...
    for i, token in enumerate(argv):
        name, eq, _ = token.partition("=")
        flag = _resolve(name) or name
        if token.startswith("--") and flag in SECRET_FLAGS:
            if eq:
                found.append((i, True, flag))
            elif i + 1 < len(argv):
                found.append((i + 1, False, flag))
    return found


def redacted(argv: Sequence[str]) -> tuple[str, ...]:
    """``argv`` with every secret flag's value replaced by ``<redacted>`` (for anything shown or stored
    as a record of what was run)."""
    out = list(argv)
    for i, inline, _ in _secret_positions(argv):
        out[i] = f"{out[i].partition('=')[0]}={REDACTED}" if inline else REDACTED
    return tuple(out)


def secret_value(argv: Sequence[str], flag: str) -> str | None:
    """The last value given for ``flag`` (one of SECRET_FLAGS, any spelling), to pass on, never to show."""
    values = [argv[i].partition("=")[2] if inline else argv[i] for i, inline, name in _secret_positions(argv)
              if name == flag]
    return values[-1] if values else None


MODELLED_FIELDS = frozenset(f.name for f in fields(LaunchFlags)) - {"passthrough", "unknown", "env"}
__all__ = ["LaunchFlags", "MODELLED", "MODELLED_FIELDS", "PASSTHROUGH", "REDACTED", "SECRET_FLAGS", "bind_host",
           "check_model_flag", "command_env", "command_flags", "field", "flag_spans", "flag_value", "indices_text",
           "parse_sglang_flags", "redacted", "scrub_secrets", "secret_value", "server_host", "with_flag",
           "without_flags"]
