"""A model's geometry from its Hugging Face ``config.json``: what the memory budget needs.

Handles dense MHA/GQA, MLA (DeepSeek/Kimi/GLM-DSA), sliding-window hybrids (Gemma),
hybrid linear attention (Qwen3-Next, Qwen3.5/3.6 Gated DeltaNet; Mamba-2 in Nemotron-H, Granite 4.0-H and
Falcon-H1; Kimi-Linear's KDA; LFM2's short convolutions), MoE, multimodal wrappers
with a nested ``text_config``, and MTP heads. Weights are counted per component from the
geometry, then turned into bytes per GPU for a dtype or quantization and a TP size.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

GIB = 1 << 30

DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "fp8": 1.0, "float8": 1.0}
TORCH_DTYPE_NAMES = {"float16": "Half", "bfloat16": "BFloat16", "float32": "Float"}  # as torch's errors name them
# "ffn": a layer with no token mixer, only an MLP or experts (Nemotron-H's "-" and "E" layers)
LayerKind = Literal["full", "sliding", "linear", "ffn"]


class ModelConfigError(ValueError):
    """The config lacks something the budget needs (named in the message)."""


@dataclass(frozen=True)
class Quantization:
    """Bytes per weight of the quantized linear layers; everything else stays in the model dtype."""

    method: str  # none | fp8 | awq | gptq | int4 | nvfp4 | compressed-tensors
    bytes_per_param: float
    experts_only: bool = False  # the scheme targets only routed experts
    # weight parts the checkpoint leaves in the model dtype, with the fraction of each (from its
    # modules_to_not_convert / ignore / exclude_modules list): e.g. (("attention", 1.0),)
    kept: tuple[tuple[str, float], ...] = ()
    expert_bytes_per_param: float | None = None  # routed experts in their own format (DeepSeek-V4 "expert_dtype")
    # integer group-wise schemes (AWQ, GPTQ, ...): bits and the group size as the checkpoint states it
    # (None: not stated, so the default is assumed; -1: one scale per output channel)
    bits: int = 0
    group_size: int | None = None
    block: tuple[int, int] | None = None  # block-wise FP8 (weight_block_size): (block_n, block_k)

    @property
    def label(self) -> str:
        return self.method

    def kept_fraction(self, part: str) -> float:
        return dict(self.kept).get(part, 0.0)


NO_QUANT = Quantization("none", 0.0)
UNKNOWN_QUANT = Quantization("unknown", 2.0)  # a format not sized here: counted at 16 bits, an upper bound


def quantization_from(name: str | None, bits: int | None = None, group_size: int | None = None,
                      experts_only: bool = False) -> Quantization:
    """Storage cost of a weight-quantization scheme, scales and zero-points included."""
    if not name or name in ("none", "None"):
        return NO_QUANT
    method = name.lower().replace("_marlin", "").replace("-", "_")
    if method in ("fp8", "w8a8_fp8", "fbgemm_fp8", "modelopt_fp8"):
        return Quantization("fp8", 1.0 + 4 / (128 * 128), experts_only)  # block-wise fp32 scales
    if method in ("awq", "gptq", "auto_round", "autoround", "int4", "w4a16", "moe_wna16"):
        bits = bits or 4
        # packed weights + one fp16 scale and one packed zero-point per group (per channel: negligible)
        return Quantization(method, bits / 8 + _group_cost(bits / 8 + 2, group_size or default_group(method)),
                            experts_only, bits=bits, group_size=group_size)
    if method in ("nvfp4", "modelopt_fp4", "modelopt"):
        return Quantization("nvfp4", 0.5 + 1 / 16, experts_only)  # fp8 scale per 16 weights
    if method == "mxfp4":
        # an E8M0 exponent per 32 weights; SGLang's Mxfp4Config quantizes only the fused MoE experts
        return Quantization("mxfp4", 0.5 + 1 / 32, True)
    if method in ("w8a8_int8", "int8", "w8a16_int8", "qoq"):
        return Quantization("int8", 1.0, experts_only)  # per-channel scales: negligible
    if method in ("compressed_tensors", "pack_quantized"):
        bits = bits or 4
        return Quantization("compressed-tensors", bits / 8 + _group_cost(2, group_size or default_group(method)),
                            experts_only, bits=bits, group_size=group_size)
    raise ModelConfigError(f"unknown quantization {name!r}")


def default_group(method: str) -> int:
    """The group size assumed when a checkpoint does not state one (compressed-tensors INT4 builds use 32)."""
    return 32 if method.replace("-", "_") in ("compressed_tensors", "pack_quantized") else 128


def _group_cost(bytes_per_group: float, group: int) -> float:
    return 0.0 if group <= 0 else bytes_per_group / group


@dataclass(frozen=True)
class LinearAttention:
    """Gated DeltaNet / mamba-style layers: per-request conv + SSM state instead of KV."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    ssm_dtype: str = "float32"
    # "gdn": Gated DeltaNet (Qwen3-Next/3.5/3.6); "mamba2": a Mamba-2 mixer (Nemotron-H), whose groups,
    # heads, head width and state size SGLang's Mamba2StateShape takes in the places of the key heads,
    # value heads, value head width and key head width; "kda": Kimi Delta Attention (Kimi-Linear), as many
    # key as value heads of one width: the same state arithmetic, other weights
    kind: Literal["gdn", "mamba2", "kda", "shortconv"] = "gdn"
    gated_norm: bool = True  # a Mamba-2 mixer's RMSNorm over its inner width (Falcon-H1: mamba_rms_norm)
    # "shortconv": LFM2's gated short convolution, whose only state is the last conv_kernel - 1 inputs (SGLang sizes
    # it as a Mamba2StateShape of width hidden with no SSM state: value_head_dim = hidden, key_head_dim = 0).
    # Dense LFM2 builds its projections as plain nn.Linear (whole on every rank, never quantized); LFM2-MoE splits
    # them over tp like any column/row-parallel layer.
    sharded: bool = True
    bias: bool = False  # the short convolution's projections and filter carry biases (conv_bias)


@dataclass(frozen=True)
class Mla:
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None
    index_head_dim: int | None = None  # DSA indexer (GLM-5, DeepSeek-V3.2)
    index_n_heads: int = 32


@dataclass(frozen=True)
class Moe:
    num_experts: int
    intermediate: int
    shared_intermediate: int  # 0 when none
    dense_layers: frozenset[int]  # layers with a dense MLP instead of experts
    dense_and_moe: bool = False  # Gemma 4 26B: a dense MLP *and* the experts in each layer
    latent: int = 0  # Nemotron-H LatentMoE: the experts work in this width, projected in and out of it


@dataclass(frozen=True)
class ModelSpec:
    name: str
    architecture: str
    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    dtype: str
    max_context: int | None
    layer_kinds: tuple[LayerKind, ...]
    sliding_window: int | None = None
    full_kv_heads: int | None = None  # Gemma 4 global layers: their own KV geometry
    full_head_dim: int | None = None
    full_k_eq_v: bool = False
    mla: Mla | None = None
    linear: LinearAttention | None = None
    moe: Moe | None = None
    mtp_layers: int = 0
    no_mtp: bool = False  # the config states 0 MTP layers (Kimi-K2.5), unlike one that does not say (Qwen3-Next)
    attn_output_gate: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, Gemma 3/4)
    vision_params: int = 0  # split over tp like the LM's layers
    vision_projector_params: int = 0  # held whole on every rank (MoonViT's projector)
    quant: Quantization = NO_QUANT
    multimodal: bool = False
    vision_layers: int = 0
    vision_hidden: int = 0
    transformers_version: str | None = None  # the transformers that wrote this config.json
    # SGLang's Gemma 3/4 embed with a plain nn.Embedding (not vocab-parallel): every TP rank holds
    # the whole table, and it doubles as the tied lm_head (models/gemma3_causal.py, gemma4_causal.py)
    replicated_embeddings: bool = False
    per_layer_input: int = 0  # Gemma 4 E2B/E4B: hidden_size_per_layer_input (PLE), 0 when absent
    per_layer_vocab: int = 0  # vocab_size_per_layer_input
    # SGLang's RoPE cos/sin tables, (positions, width) each: one per distinct rope, shared by the layers using it
    rope_tables: tuple[tuple[int, int], ...] = ()
    # one pipeline-parallel rank's share: (rank, pp size, first layer, whole model's layer count)
    stage: tuple[int, int, int, int] | None = None
    # Nemotron-H's mamba and attention layers run no MLP; its MLP and MoE layers are separate layers
    mixer_only_layers: frozenset[int] = frozenset()
    mlp_matrices: int = 3  # gate, up and down; 2 for an ungated MLP (up and down: relu2, gelu)
    # Falcon-H1: every layer runs attention and a Mamba-2 mixer side by side (KV and state in each layer)
    parallel_hybrid: bool = False
    # LFM2 ties its lm_head to the embeddings in the checkpoint, but SGLang builds a ParallelLMHead of its own and
    # copies the embedding table into it: the GPU holds both, the checkpoint one
    lm_head_copy: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def full_layers(self) -> int:
        return sum(1 for k in self.layer_kinds if k == "full")

    @property
    def sliding_layers(self) -> int:
        return sum(1 for k in self.layer_kinds if k == "sliding")

    @property
    def linear_layers(self) -> int:
        """Layers holding per-request state: every layer of a parallel hybrid (Falcon-H1)."""
        return self.layers if self.parallel_hybrid else sum(1 for k in self.layer_kinds if k == "linear")

    @property
    def has_dense_mlp(self) -> bool:
        """Some layer runs a dense MLP: no MoE, a dense prefix, or Gemma 4 26B's MLP beside the experts."""
        return self.moe is None or bool(self.moe.dense_layers) or self.moe.dense_and_moe

    @property
    def is_hybrid_linear(self) -> bool:
        return self.linear is not None and self.linear_layers > 0

    @property
    def is_hybrid_swa(self) -> bool:
        """A separate, smaller KV pool for the sliding-window layers: SGLang builds one only for the
        architectures its ``is_hybrid_swa_model`` lists; any other model's sliding layers hold a full KV
        cache each (Gemma 2/3: the window is applied at attention time)."""
        return self.sliding_layers > 0 and self.full_layers > 0 and self.architecture in SWA_POOL_ARCHITECTURES


# SGLang's model_config.is_hybrid_swa_model (Gemma 4 since its support landed)
SWA_POOL_ARCHITECTURES = frozenset({
    "Llama4ForConditionalGeneration", "GptOssForCausalLM", "MiMoV2FlashForCausalLM", "MiMoV2MTP",
    "Step3p5ForCausalLM", "Step3p5MTP", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration",
    "Gemma4UnifiedForConditionalGeneration",
})


def _get(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def _need(cfg: dict[str, Any], key: str, where: str) -> Any:
    if cfg.get(key) is None:
        raise ModelConfigError(f"{where}: `{key}` is missing")
    return cfg[key]


def holds_recurrent_state(config_text: str) -> bool:
    """Whether a config.json describes a model with per-request recurrent state (a hybrid of attention and linear
    attention, Mamba-2, KDA or short convolutions: SGLang's mamba state pool); False for any other model, and for a
    text that is no config this engine reads."""
    try:
        config = json.loads(config_text)
        return isinstance(config, dict) and read_config(config).is_hybrid_linear
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, ZeroDivisionError):
        return False  # a config this engine cannot read says nothing either way


def read_config(config: dict[str, Any], name: str = "model") -> ModelSpec:
    """Parse a config.json (flat, or a multimodal wrapper whose language model is its ``text_config``, or
    InternVL's ``llm_config``, or DeepSeek-VL2's ``language_config``)."""
    text, where = _language_config(config)
    architecture = (config.get("architectures") or text.get("architectures") or ["?"])[0]
    model_type = str(config.get("model_type") or text.get("model_type") or "?")
    own_type = str(text.get("model_type", model_type))  # the language model's, under a multimodal wrapper
    hidden = int(_need(text, "hidden_size", where))
    notes: list[str] = []
    blocks = _block_types(text)
    # Nemotron-H: the block list is the layer count (SGLang ignores the deprecated num_hidden_layers)
    layers = len(blocks) if blocks else int(_need(text, "num_hidden_layers", where))
    heads = int(_need(text, "num_attention_heads", where))
    kv_heads = int(_get(text, "num_key_value_heads", default=heads))
    head_dim = int(_get(text, "head_dim", default=hidden // heads))
    dtype = str(_get(text, "torch_dtype", "dtype", default=None) or _get(config, "torch_dtype", "dtype",
                                                                        default="bfloat16"))
    lfm2 = own_type.startswith("lfm2")
    if own_type == "lfm2_moe":
        head_dim = hidden // heads  # Lfm2MoeAttention: hidden_size // num_attention_heads, whatever head_dim says
    tied = _tied_embeddings(config, text, own_type)
    vocab = int(_need(text, "vocab_size", where))
    kinds = _layer_kinds(text, layers, architecture, blocks)
    parallel = own_type == "falcon_h1"
    linear = _linear_attention(text, kinds, blocks, parallel, hidden, where)
    mla = _mla(text, where)
    moe = _moe(text, layers, blocks, notes)
    intermediate = _mlp_width(text, own_type, moe, notes)
    vision = config.get("vision_config") or {}
    if config.get("downsample_ratio") and isinstance(vision, dict):  # InternVL: its projector sees shuffled pixels
        vision = {**vision, "downsample_ratio": config["downsample_ratio"]}
    vision_params, vision_projector = _vision_params(vision, hidden)
    quant = _quantization(config, text, kinds)
    mtp = _get(text, "num_nextn_predict_layers", "mtp_num_hidden_layers")  # None: the config does not say
    vision_unsized = bool(vision) and not (vision_params or vision_projector)
    notes += _uncounted_notes(config, text, quant, vision_unsized, moe, blocks, linear)
    return ModelSpec(
        name=name,
        architecture=architecture,
        model_type=model_type,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=int(_get(text, "v_head_dim", default=head_dim)) if mla is None else head_dim,
        intermediate=intermediate,
        vocab=vocab,
        tied_embeddings=tied,
        dtype=dtype.replace("torch.", ""),
        max_context=derived_context_length(text),
        layer_kinds=kinds,
        sliding_window=_get(text, "sliding_window", "attention_chunk_size") if "sliding" in kinds else None,
        full_kv_heads=_get(text, "num_global_key_value_heads"),
        full_head_dim=_get(text, "global_head_dim"),
        full_k_eq_v=bool(_get(text, "attention_k_eq_v", default=False)),
        mla=mla,
        linear=linear,
        moe=moe,
        mtp_layers=int(mtp or 0),
        no_mtp=mtp in (0, "0"),
        # Qwen3-Next gates its attention output without saying so (SGLang: getattr(config, "attn_output_gate", True))
        attn_output_gate=bool(_get(text, "attn_output_gate", default=own_type.startswith("qwen3_next"))),
        qkv_bias=bool(_get(text, "attention_bias", default=model_type.startswith("qwen2"))),
        qk_norm=own_type.startswith(("qwen3", "gemma3", "gemma4", "olmo2", "lfm2")),
        vision_params=vision_params,
        vision_projector_params=vision_projector,
        quant=quant,
        multimodal=bool(vision) or "ConditionalGeneration" in architecture,
        # what SGLang's adjust_mem_fraction_for_vlm reads: the vision config's num_hidden_layers and
        # hidden_size, 24 and 1024 when it has none (Qwen-VL names its depth "depth"); Kimi-K2.5's
        # vt_* keys are the defaults of SGLang's own KimiK25VisionConfig
        vision_layers=int(_get(vision, "num_hidden_layers", "vt_num_hidden_layers", default=24)) if vision else 0,
        vision_hidden=int(_get(vision, "hidden_size", "vt_hidden_size", default=1024)) if vision else 0,
        transformers_version=_get(config, "transformers_version") or _get(text, "transformers_version"),
        replicated_embeddings=own_type.startswith(("gemma3", "gemma4")),
        per_layer_input=int(_get(text, "hidden_size_per_layer_input", default=0) or 0),
        per_layer_vocab=int(_get(text, "vocab_size_per_layer_input", default=vocab) or vocab),
        # Nemotron-H's attention layers take no rotary embedding (models/nemotron_h.py builds no get_rope),
        # nor do those of a config whose position_embedding_type is "nope" (Granite 4.0-H)
        rope_tables=() if blocks or text.get("position_embedding_type") == "nope"
        else _rope_tables(text, kinds, head_dim, mla),
        mixer_only_layers=frozenset(i for i, b in enumerate(blocks) if b in ("mamba", "attention")),
        mlp_matrices=2 if _ungated_mlp(text, model_type) else 3,
        parallel_hybrid=parallel,
        lm_head_copy=lfm2 and tied,
        notes=tuple(notes),
    )


def _language_config(config: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The language model's part of a config, and where it is (for error messages)."""
    nested = next((key for key in ("text_config", "llm_config", "language_config")
                   if isinstance(config.get(key), dict) and config[key]), None)
    if nested is None:
        return config, "config.json"
    return config[nested], f"config.json {nested}"


def _mla(text: dict[str, Any], where: str) -> Mla | None:
    """DeepSeek-style multi-head latent attention, when the config has a KV LoRA rank."""
    if not text.get("kv_lora_rank"):
        return None
    return Mla(
        kv_lora_rank=int(text["kv_lora_rank"]),
        qk_rope_head_dim=int(_need(text, "qk_rope_head_dim", where)),
        qk_nope_head_dim=int(_get(text, "qk_nope_head_dim", default=128)),
        v_head_dim=int(_get(text, "v_head_dim", default=128)),
        q_lora_rank=_get(text, "q_lora_rank"),
        index_head_dim=_get(text, "index_head_dim"),
        index_n_heads=int(_get(text, "index_n_heads", default=32) or 32),
    )


def _mlp_width(text: dict[str, Any], own_type: str, moe: Moe | None, notes: list[str]) -> int:
    """The dense MLP's intermediate width, under each family's key."""
    # Llama 4 names its dense layers' MLP width intermediate_size_mlp (intermediate_size is the experts')
    value = _get(text, "intermediate_size_mlp", "intermediate_size", default=0)
    if isinstance(value, list):  # Nemotron-H: one width per MLP layer
        value = max(value) if value else 0
        notes.append("the MLP layers' widths differ; each is counted at the widest (an upper bound)")
    width = int(value)
    if own_type == "lfm2":
        width = _lfm2_mlp_width(text, width)
    if moe is None and text.get("shared_intermediate_size") and "num_local_experts" in text:
        # GraniteMoeHybrid without experts (Granite 4.0-H-Micro): each layer's MLP is its shared_mlp
        width = int(text["shared_intermediate_size"])
    return width


def _uncounted_notes(config: dict[str, Any], text: dict[str, Any], quant: Quantization, vision_unsized: bool,
                     moe: Moe | None, blocks: tuple[str, ...], linear: LinearAttention | None) -> list[str]:
    """What this config describes that the weights or the pools do not count, said rather than passed over."""
    notes = []
    if quant is UNKNOWN_QUANT:
        method = (config.get("quantization_config") or text.get("quantization_config") or {}).get("quant_method")
        notes.append(f"quantization {method!r} is not sized here: its layers are counted at 16 bits (an upper "
                     "bound); the checkpoint's size, or an earlier load's measured weights, replace the estimate")
    if vision_unsized:
        notes.append("the vision tower's size cannot be read from this config: it is not counted in the weights")
    if config.get("audio_config"):
        notes.append("an audio tower is loaded too and is not counted in the weights")
    unread_experts = sorted(k for k, v in text.items() if "expert" in k and _positive(v))
    if unread_experts and moe is None and not blocks:
        notes.append(f"this config describes experts ({', '.join(unread_experts[:3])}"
                     f"{', ...' if len(unread_experts) > 3 else ''}) that are not read here: the model is counted as "
                     "dense, far below its real size; give the checkpoint's size (or launch once and let the first "
                     "load's log decide) before trusting this budget")
    unread_state = sorted(k for k in text if k.startswith(STATE_KEY_PREFIXES) or k in STATE_KEYS)
    if isinstance(text.get("attn_type_list"), list) and 0 in text["attn_type_list"]:
        unread_state.insert(0, "attn_type_list")  # MiniMax-Text-01/M1: 0 marks a lightning (linear) attention layer
    if unread_state and linear is None:
        notes.append(f"this config describes state-space or linear-attention layers ({', '.join(unread_state[:3])}"
                     f"{', ...' if len(unread_state) > 3 else ''}) that are not modelled here: every layer is "
                     "counted as attention and no per-request state is counted; the first load's log decides")
    shared = int(_get(text, "num_kv_shared_layers", default=0) or 0)
    if shared:
        notes.append(f"{shared} layers reuse earlier layers' KV cache; the KV estimate counts every layer "
                     "(an upper bound on bytes per token)")
    return notes


def _linear_attention(text: dict[str, Any], kinds: tuple[LayerKind, ...], blocks: tuple[str, ...], parallel: bool,
                      hidden: int, where: str) -> LinearAttention | None:
    """The recurrent layers' geometry, by family: Gated DeltaNet (Qwen3-Next/3.5/3.6, ``linear_*`` keys) or a
    Mamba-2 mixer, whose groups, heads, head width and state size take the places of GDN's key heads, value
    heads, value head width and key head width in SGLang's Mamba2StateShape:
    Nemotron-H (``NemotronHConfig.mamba2_cache_params``: intermediate = mamba_num_heads x mamba_head_dim),
    Falcon-H1 (``FalconH1Config``: a mixer of mamba_d_ssm beside the attention in every layer) and
    Granite 4.0-H (``GraniteMoeHybridConfig.mamba_cache_params``); Kimi Delta Attention (Kimi-Linear's
    ``linear_attn_config``, KimiLinearStateShape: the same numbers of elements); or LFM2's short convolutions
    (``Lfm2Config.mamba2_cache_params``: a conv state as wide as the hidden state, no SSM state)."""
    ssm_dtype = str(_get(text, "mamba_ssm_dtype", default="float32"))
    if parallel:
        heads = int(_get(text, "mamba_n_heads", default=128))
        d_ssm = int(_get(text, "mamba_d_ssm", default=0) or int(_get(text, "mamba_expand", default=2)) * hidden)
        d_head = _get(text, "mamba_d_head", default="auto")
        return LinearAttention(
            num_key_heads=int(_get(text, "mamba_n_groups", default=1)), num_value_heads=heads,
            key_head_dim=int(_get(text, "mamba_d_state", default=256)),
            value_head_dim=d_ssm // heads if d_head in (None, "auto") else int(d_head),
            conv_kernel=int(_get(text, "mamba_d_conv", default=4)), ssm_dtype=ssm_dtype, kind="mamba2",
            gated_norm=bool(_get(text, "mamba_rms_norm", default=False)))
    if "linear" not in kinds:
        return None
    if str(text.get("model_type", "")).startswith("lfm2"):
        # Lfm2Config / Lfm2MoeConfig.mamba2_cache_params: Mamba2StateShape(intermediate = hidden, state_size = 0)
        return LinearAttention(num_key_heads=1, num_value_heads=1, key_head_dim=0, value_head_dim=hidden,
                               conv_kernel=int(_get(text, "conv_L_cache", default=3)), ssm_dtype="bfloat16",
                               kind="shortconv", sharded=text.get("model_type") == "lfm2_moe",
                               bias=bool(text.get("conv_bias", False)))
    kda = text.get("linear_attn_config")
    if isinstance(kda, dict):
        # KimiLinearConfig.mamba2_cache_params (KimiLinearStateShape): q, k and v each heads x head_dim wide
        heads, width = int(kda["num_heads"]), int(kda["head_dim"])
        return LinearAttention(num_key_heads=heads, num_value_heads=heads, key_head_dim=width, value_head_dim=width,
                               conv_kernel=int(kda.get("short_conv_kernel_size") or 4), ssm_dtype=ssm_dtype,
                               kind="kda")
    if blocks:
        return LinearAttention(
            num_key_heads=int(_get(text, "n_groups", "mamba_n_groups", default=8)),
            num_value_heads=int(_need(text, "mamba_num_heads", where)),
            key_head_dim=int(_get(text, "ssm_state_size", default=128)),
            value_head_dim=int(_get(text, "mamba_head_dim", default=64)),
            conv_kernel=int(_get(text, "conv_kernel", "mamba_d_conv", default=4)), ssm_dtype=ssm_dtype, kind="mamba2")
    if text.get("mamba_n_heads"):
        return LinearAttention(
            num_key_heads=int(_get(text, "mamba_n_groups", default=1)), num_value_heads=int(text["mamba_n_heads"]),
            key_head_dim=int(_get(text, "mamba_d_state", default=128)),
            value_head_dim=int(_get(text, "mamba_d_head", default=64)),
            conv_kernel=int(_get(text, "mamba_d_conv", default=4)), ssm_dtype=ssm_dtype, kind="mamba2")
    return LinearAttention(
        num_key_heads=int(_need(text, "linear_num_key_heads", where)),
        num_value_heads=int(_need(text, "linear_num_value_heads", where)),
        key_head_dim=int(_need(text, "linear_key_head_dim", where)),
        value_head_dim=int(_need(text, "linear_value_head_dim", where)),
        conv_kernel=int(_get(text, "linear_conv_kernel_dim", default=4)), ssm_dtype=ssm_dtype)


# config keys that describe recurrent (Mamba, linear-attention, short-conv) layers: a config that has them but
# whose layers were not read as such (Jamba, Bamba, Zamba ...) is said to be unmodelled
STATE_KEY_PREFIXES = ("mamba_", "ssm_", "linear_attn")
STATE_KEYS = frozenset({"attn_layer_period", "attn_layer_indices", "full_attn_idxs", "conv_L_cache", "state_size"})


# SGLang's get_context_length (hf_transformers_utils): the first of these keys the config has, in this order
CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                       "max_position_embeddings")


def derived_context_length(text: dict[str, Any]) -> int | None:
    """The context length SGLang derives from a config (and refuses a longer --context-length against): the first
    of CONTEXT_LENGTH_KEYS, times a rope scaling factor unless the scaling names its
    original_max_position_embeddings (YaRN) or is Llama 3's. None when the config names none of them (SGLang
    then assumes 2048)."""
    scaling = text.get("rope_scaling") or {}
    factor = 1.0
    if isinstance(scaling, dict) and scaling.get("factor") and "original_max_position_embeddings" not in scaling \
            and scaling.get("rope_type") != "llama3":
        factor = float(scaling["factor"])
    for key in CONTEXT_LENGTH_KEYS:
        if text.get(key) is not None:
            return int(factor * float(text[key]))
    return None


def _lfm2_mlp_width(text: dict[str, Any], stated: int) -> int:
    """LFM2's MLP width as Lfm2MLP builds it: ``block_ff_dim`` (transformers' Lfm2Config reads it over
    intermediate_size), and with ``block_auto_adjust_ff_dim`` two thirds of it, times
    ``block_ffn_dim_multiplier``, rounded up to ``block_multiple_of`` (LFM2-700M: 10240 -> 6912)."""
    width = int(_get(text, "block_ff_dim", default=stated) or stated)
    if not _get(text, "block_auto_adjust_ff_dim", default=True):
        return width
    width = int(2 * width / 3)
    multiplier = text.get("block_ffn_dim_multiplier", 1.0)
    if multiplier is not None:
        width = int(float(multiplier) * width)
        step = int(_get(text, "block_multiple_of", default=256) or 256)
        width = step * ((width + step - 1) // step)
    return width


# model types whose MLP has no gate projection: up (or fc1 / dense_h_to_4h / c_fc) and down only
UNGATED_MLP_TYPES = ("nemotron", "gpt_neox", "gpt_bigcode", "starcoder2", "falcon", "phi", "gpt2", "gptj", "opt",
                     "bloom", "mpt")
UNGATED_ACTIVATIONS = ("relu2", "squared_relu")


def _ungated_mlp(text: dict[str, Any], model_type: str) -> bool:
    """No gate matrix: the model types above (``phi3`` and ``phimoe`` are gated), or a squared-ReLU MLP."""
    own = str(text.get("model_type", model_type))
    if own in UNGATED_MLP_TYPES or own.startswith("nemotron_h"):
        return True
    return str(_get(text, "mlp_hidden_act", default="")) in UNGATED_ACTIVATIONS


NEMOTRON_BLOCKS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


def _block_types(text: dict[str, Any]) -> tuple[str, ...]:
    """Nemotron-H's layer list: ``layers_block_type`` (mamba, attention, mlp, moe), or the older
    ``hybrid_override_pattern`` string (M, *, -, E). Empty for every other model."""
    listed = text.get("layers_block_type")
    if isinstance(listed, list) and listed:
        unknown = sorted({str(b) for b in listed} - set(NEMOTRON_BLOCKS.values()))
        if unknown:
            raise ModelConfigError(f"layers_block_type {unknown} not understood")
        return tuple(str(b) for b in listed)
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        unknown = sorted(set(pattern) - set(NEMOTRON_BLOCKS))
        if unknown:
            raise ModelConfigError(f"hybrid_override_pattern characters {unknown} not understood")
        return tuple(NEMOTRON_BLOCKS[c] for c in pattern)
    return ()


# model types whose transformers config class defaults tie_word_embeddings to True (a config that
# leaves the key out ties: Gemma3TextConfig's tie_word_embeddings=True); other classes default False
TIED_BY_DEFAULT = ("gemma", "granitemoehybrid", "lfm2", "cohere")  # CohereConfig: tie_word_embeddings = True


def _tied_embeddings(config: dict[str, Any], text: dict[str, Any], model_type: str) -> bool:
    # LFM2's original configs name it tie_embedding (Lfm2Config reads that key as tie_word_embeddings)
    stated = _get(text, "tie_word_embeddings", "tie_embedding",
                  default=_get(config, "tie_word_embeddings", "tie_embedding", default=None))
    if stated is None:
        return model_type.startswith(TIED_BY_DEFAULT)
    return bool(stated)


def _vision_params(vision: dict[str, Any], text_hidden: int) -> tuple[int, int]:
    """A ViT tower's parameters split over tp, and those of a projector every rank holds whole.

    Per block qkv + proj (4h^2) and an MLP (two matrices, three when gated: Gemma 4's gate_up +
    down, Qwen2.5-VL's gate/up/down), plus what joins it to the LM: Qwen-VL's patch merger (one more
    per deep-stacked layer in Qwen3-VL), Gemma 4's 2-D position table and projection, or MoonViT's
    (Kimi-VL, Kimi-K2.5) learned 2-D position table and patch-merging projector, which SGLang builds
    from ReplicatedLinear."""
    layers = int(_get(vision, "depth", "num_hidden_layers", "vt_num_hidden_layers", default=0) or 0)
    h = int(_get(vision, "embed_dim", "hidden_size", "vt_hidden_size", default=0) or 0)
    if not layers or not h:
        return 0, 0
    ratio = vision.get("mlp_ratio")
    inter = int(_get(vision, "intermediate_size", "vt_intermediate_size", default=0) or (ratio or 4) * h)
    gated = str(vision.get("model_type", "")).startswith(("gemma4", "qwen2_5_vl"))
    params = layers * (4 * h * h + (3 if gated else 2) * h * inter)
    if vision.get("position_embedding_size"):
        return params + 2 * int(vision["position_embedding_size"]) * h + h * text_hidden, 0
    # Qwen2-VL names the ViT width embed_dim and the merger's output width hidden_size
    out_keys = ("out_hidden_size", "text_hidden_size") + (("hidden_size",) if "embed_dim" in vision else ())
    out = int(_get(vision, *out_keys, default=text_hidden) or text_hidden)
    kernel = vision.get("merge_kernel_size")
    if isinstance(kernel, list) and len(kernel) == 2:  # MoonViT
        merge = h * int(kernel[0]) * int(kernel[1])
        table = int(vision.get("init_pos_emb_height") or 0) * int(vision.get("init_pos_emb_width") or 0) * h
        return params + table, merge * merge + merge * out
    if vision.get("downsample_ratio"):
        # InternVL's mlp1: LayerNorm and Linear over the pixel-shuffled width (h / ratio^2), then Linear out -> out
        shuffled = int(h / float(vision["downsample_ratio"]) ** 2)
        return params, 2 * shuffled + shuffled * out + out * out
    merge = h * int(_get(vision, "spatial_merge_size", default=2) or 2) ** 2
    mergers = 1 + len(vision.get("deepstack_visual_indexes") or [])
    return params + mergers * (merge * merge + merge * out), 0


def _rope_tables(text: dict[str, Any], kinds: tuple[LayerKind, ...], head_dim: int,
                 mla: Mla | None) -> tuple[tuple[int, int], ...]:
    """(positions, width) of each RoPE cos/sin table SGLang builds while loading the model.

    ``get_rope`` caches one table per distinct rope (its width, positions, theta, scaling), so the
    layers of one kind share it. The table spans the config's ``max_position_embeddings`` (YaRN:
    ``original_max_position_embeddings x factor``) by the rotary width: ``head_dim x
    partial_rotary_factor``, ``qk_rope_head_dim`` (MLA, DeepSeek-V4), or the whole head for Gemma 4's
    "proportional" rope, which pads the unrotated dimensions with zero frequencies."""
    max_pos = int(text.get("max_position_embeddings") or 0)
    if not max_pos:
        return ()
    params = text.get("rope_parameters") or text.get("rope_scaling") or {}
    tables = {}
    for kind in sorted(set(kinds) - {"linear"}):
        own = params.get(f"{kind}_attention")  # Gemma 4: a rope per layer type
        p = own if isinstance(own, dict) else params
        dim = int(text.get("global_head_dim") or head_dim) if kind == "full" else head_dim
        rope_type = str(p.get("rope_type") or p.get("type") or "default")
        factor = float(p.get("partial_rotary_factor") or text.get("partial_rotary_factor") or 1.0)
        if mla is not None or text.get("qk_rope_head_dim"):  # MLA, DeepSeek-V4's shared latent head
            width = mla.qk_rope_head_dim if mla is not None else int(text["qk_rope_head_dim"])
        elif rope_type == "proportional":
            width = dim
        else:
            width = int(dim * factor)
        positions = max_pos
        if rope_type in ("yarn", "deepseek_yarn") and p.get("factor") and p.get("original_max_position_embeddings"):
            positions = int(p["original_max_position_embeddings"] * p["factor"])
        theta = p.get("rope_theta", text.get("rope_theta"))
        tables[(positions, width, str(theta), rope_type)] = (positions, width)
    return tuple(sorted(tables.values()))


def rope_table_bytes(spec: ModelSpec, fp32: bool = True) -> float:
    """Bytes of the RoPE tables on each rank. SGLang keeps them in fp32 on CUDA ("cache needs to be in FP32
    for numerical stability"); ROCm builds of 0.5.x cast them to the model dtype. Negligible for most
    models, 0.75 GiB for Gemma 4 at 262,144 positions with 512-wide global heads."""
    per = 4.0 if fp32 else DTYPE_BYTES.get(spec.dtype, 2.0)
    return sum(positions * width * per for positions, width in spec.rope_tables)


def _layer_kinds(text: dict[str, Any], layers: int, architecture: str = "",
                 blocks: tuple[str, ...] = ()) -> tuple[LayerKind, ...]:
    if blocks:
        by_block: dict[str, LayerKind] = {"mamba": "linear", "attention": "full", "mlp": "ffn", "moe": "ffn"}
        return tuple(by_block[b] for b in blocks)
    kda = (text.get("linear_attn_config") or {}).get("kda_layers")
    if isinstance(kda, list):
        # KimiLinearConfig.is_kda_layer: kda_layers counts from 1; every other layer is full (MLA) attention
        numbers = {int(n) for n in kda}
        return tuple("linear" if i + 1 in numbers else "full" for i in range(layers))
    names = text.get("layer_types")
    if not names and str(text.get("model_type", "")) == "lfm2":
        # Lfm2Config: layer_types from full_attn_idxs (every layer attention when neither is given)
        full = set(text.get("full_attn_idxs") or range(layers))
        names = ["full_attention" if i in full else "conv" for i in range(layers)]
    if names:
        mapping: dict[str, LayerKind] = {
            "full_attention": "full", "attention": "full", "sliding_attention": "sliding",
            "linear_attention": "linear", "mamba": "linear", "conv": "linear", "short_conv": "linear",
        }
        kinds = []
        for n in names[:layers]:
            if n not in mapping:
                raise ModelConfigError(f"layer type {n!r} not understood")
            kinds.append(mapping[n])
        return tuple(kinds)
    if str(text.get("model_type", "")) == "granitemoehybrid":
        # GraniteMoeHybridConfig without layer_types: attention every sixth layer, Mamba-2 elsewhere
        return tuple("full" if (i + 1) % 6 == 0 else "linear" for i in range(layers))
    interval = text.get("full_attention_interval")
    if interval and text.get("linear_num_value_heads"):
        return tuple("full" if (i + 1) % int(interval) == 0 else "linear" for i in range(layers))
    if architecture == "Llama4ForConditionalGeneration" and text.get("attention_chunk_size"):
        # SGLang's get_hybrid_layer_ids: every fourth layer is global, the rest chunked (windowed)
        return tuple("full" if (i + 1) % 4 == 0 else "sliding" for i in range(layers))
    return tuple("full" for _ in range(layers))


def _positive(value: Any) -> bool:
    """A config value that counts something: a positive number, or a list holding one."""
    if isinstance(value, list):
        return any(_positive(v) for v in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _widest(value: Any, what: str, notes: list[str]) -> int:
    """A per-layer list (Hunyuan's moe_intermediate_size, ERNIE-VL's text and vision expert groups) read at its
    largest entry, which over-counts rather than under-counts, and said so; a plain number as it is."""
    if isinstance(value, list):
        numbers = [int(v) for v in value if _positive(v)]
        if len(set(numbers)) > 1:
            notes.append(f"{what} differs by layer or expert group ({', '.join(map(str, sorted(set(numbers))))}); "
                         "each is counted at the largest (an upper bound)")
        return max(numbers, default=0)
    return int(value or 0)


def _moe(text: dict[str, Any], layers: int, blocks: tuple[str, ...] = (), notes: list[str] | None = None) -> Moe | None:
    said = notes if notes is not None else []
    # ERNIE 4.5 names them moe_num_experts
    experts = _widest(_get(text, "num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"),
                      "the number of experts", said)
    if not experts:
        return None
    if blocks and "moe" not in blocks:
        return None
    inter = _widest(_get(text, "moe_intermediate_size", default=_get(text, "intermediate_size", default=0)),
                    "the experts' width", said)
    # Granite's MoE layers also run a shared_mlp, shared_intermediate_size wide
    shared = int(_get(text, "shared_expert_intermediate_size", "shared_intermediate_size", default=0) or 0)
    # Kimi names the count num_shared_experts, Hunyuan num_shared_expert, ERNIE 4.5 moe_num_shared_experts
    shared_count = _widest(_get(text, "n_shared_experts", "num_shared_experts", "num_shared_expert",
                                "moe_num_shared_experts"), "the number of shared experts", said)
    if not shared and shared_count:
        # Nemotron-H: moe_shared_expert_intermediate_size x n_shared_experts (its NemotronHMoE)
        per_shared = int(_get(text, "moe_shared_expert_intermediate_size", default=inter) or inter)
        shared = int(shared_count) * per_shared
    if blocks:
        dense = {i for i, b in enumerate(blocks) if b == "mlp"}
        latent = int(_get(text, "moe_latent_size", default=0) or 0)
        return Moe(int(experts), inter, shared, frozenset(dense), latent=latent)
    if "moe_layer_start_index" in text:
        # ERNIE 4.5 (Ernie4DecoderLayer): experts in layers start..end, every moe_layer_interval-th; dense elsewhere
        starts, ends = text["moe_layer_start_index"], text.get("moe_layer_end_index")
        start = min(starts) if isinstance(starts, list) else int(starts)  # ERNIE-VL: one per modality
        if isinstance(ends, list):
            ends = max(ends, default=None)
        last = layers - 1 if ends is None or int(ends) < 0 else int(ends)
        interval = int(_get(text, "moe_layer_interval", default=1) or 1)
        dense_layers = frozenset(i for i in range(layers) if not (start <= i <= last and (i - start) % interval == 0))
        return Moe(int(experts), inter, shared, dense_layers)
    dense = set(range(int(_get(text, "first_k_dense_replace", "num_dense_layers", default=0) or 0)))
    dense.update(int(i) for i in (text.get("mlp_only_layers") or []))
    step = int(_get(text, "decoder_sparse_step", "interleave_moe_layer_step", default=1) or 1)
    if step > 1:
        dense.update(i for i in range(layers) if (i + 1) % step != 0)
    if "interleave_moe_layer_step" in text or str(text.get("model_type", "")).startswith("llama4"):
        # Llama 4: every MoE layer also runs one shared expert as wide as its experts (Llama4TextMoe's
        # shared_expert, which no config key names); an explicit moe_layers list names the MoE layers
        shared = shared or inter
        if isinstance(text.get("moe_layers"), list):
            moe_layers = {int(i) for i in text["moe_layers"]}
            dense = {i for i in range(layers) if i not in moe_layers}
    return Moe(int(experts), inter, shared, frozenset(dense), dense_and_moe=bool(text.get("enable_moe_block")))


def _quantization(config: dict[str, Any], text: dict[str, Any], kinds: tuple[LayerKind, ...]) -> Quantization:
    q = config.get("quantization_config") or text.get("quantization_config")
    if not q:
        return NO_QUANT
    try:
        scheme = _scheme(q)
    except ModelConfigError:
        # a format this engine does not size must not block the budget: count it at 16 bits (an upper
        # bound), say so, and let the checkpoint's own size or a measured load replace the estimate
        return UNKNOWN_QUANT
    expert_dtype = str(q.get("expert_dtype") or text.get("expert_dtype") or config.get("expert_dtype") or "")
    if not expert_dtype and "deepseek_v4" in (config.get("model_type"), text.get("model_type")):
        # a DeepSeek-V4 config that does not say keeps its routed experts in FP4: the loaders' default
        # (vLLM's DeepseekV4FP8Config, SGLang's V4 weight loader: getattr(config, "expert_dtype", "fp4"))
        expert_dtype = "fp4"
    if expert_dtype.lower() == "fp4":
        # DeepSeek-V4 releases: routed experts in MXFP4 (two values a byte + a UE8M0 scale per 32), the rest fp8
        scheme = replace(scheme, expert_bytes_per_param=0.5 + 1 / 32)
    # the modules the checkpoint leaves unquantized, whatever the quantizer called the list
    excluded = [str(name) for key in ("modules_to_not_convert", "ignore", "exclude_modules", "ignored_layers")
                if isinstance(q.get(key), list) for name in q[key]]
    if excluded and scheme.method != "none":
        return replace(scheme, kept=kept_parts(excluded, kinds))
    return scheme


def _scheme(q: dict[str, Any]) -> Quantization:
    method = str(q.get("quant_method", "")).lower()
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        first: dict[str, Any] = next(iter(groups.values()), {}) if isinstance(groups, dict) else {}
        weights = first.get("weights") or {}
        targets = " ".join(str(t) for t in first.get("targets", []))
        experts_only = "expert" in targets.lower()
        packing = str(first.get("format") or q.get("format") or "")
        if "nvfp4" in packing:  # nvfp4-pack-quantized: an fp8 scale per 16 weights
            return quantization_from("nvfp4", experts_only=experts_only)
        if "mxfp4" in packing:  # mxfp4-pack-quantized: an E8M0 exponent per 32 weights, on what it targets
            return Quantization("mxfp4", 0.5 + 1 / 32, experts_only)
        bits = int(weights.get("num_bits") or 4)
        if weights.get("strategy") in ("channel", "tensor") or bits >= 8:
            # one scale per output channel (or tensor): FP8-dynamic / W8A8 builds weigh a byte a weight
            return Quantization("fp8" if weights.get("type") == "float" and bits == 8 else "compressed-tensors",
                                bits / 8, experts_only)
        return quantization_from("compressed-tensors", bits, weights.get("group_size") or 32, experts_only)
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):  # NF4/FP4 with an fp32 absmax per 64 weights (8-bit, per 256 blocks, double)
            return Quantization("bitsandbytes", 0.5 + (1 / 64 + 4 / (64 * 256) if q.get("bnb_4bit_use_double_quant")
                                                       else 4 / 64))
        return Quantization("bitsandbytes", 1.0)
    if method == "quark":
        weight = ((q.get("global_quant_config") or {}).get("weight") or {})
        dtype = str(weight.get("dtype", "")).lower()
        if "fp4" in dtype:
            return Quantization("mxfp4", 0.5 + 1 / 32)  # Quark's MXFP4 covers every linear layer
        if "fp8" in dtype:
            return quantization_from("fp8")
        raise ModelConfigError(f"unknown quark weight dtype {dtype!r}")
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).lower()
        return quantization_from("fp8" if "fp8" in algo and "fp4" not in algo else "nvfp4")
    scheme = quantization_from(method, q.get("bits"), q.get("group_size"))
    block = q.get("weight_block_size")
    if scheme.method == "fp8" and isinstance(block, list) and len(block) == 2:
        scheme = replace(scheme, block=(int(block[0]), int(block[1])))
    return scheme


_TINY_OR_ROUTER = re.compile(
    r"router|shared_expert_gate|(^|[.*])gate$|\.gate\b(?!_)|in_proj_(a|b|ba)\b|a_log|dt_bias|norm")
_LAYER_INDEX = re.compile(r"layers\.(\d+)(\.|$)")
_PART_KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vision tower", ("visual", "vision", "vpm", "multi_modal_projector", "mm_projector", "merger", "audio")),
    ("mtp head", ("mtp",)),
    ("lm_head", ("lm_head",)),
    ("embeddings", ("embed_tokens", "wte")),
    ("linear attention", ("linear_attn",)),
    ("mlp", ("shared_expert",)),
    ("experts", ("experts",)),
    ("attention", ("self_attn", "attn", "attention")),
    ("mlp", ("mlp", "feed_forward")),
)


def exclusion_part(pattern: str) -> str | None:
    """The weight part an exclusion entry names, or None for a router, a norm or a tiny projection
    (already counted in the model dtype) and for a name this model does not know."""
    name = pattern.lower().removeprefix("re:")
    if _TINY_OR_ROUTER.search(name):
        return None
    for part, words in _PART_KEYWORDS:
        if any(word in name for word in words):
            return part
    return None


def kept_parts(patterns: list[str], kinds: tuple[LayerKind, ...]) -> tuple[tuple[str, float], ...]:
    """Fraction of each weight part an exclusion list keeps unquantized.

    A pattern without a layer index (``model.layers.*.self_attn``, ``re:.*self_attn.*``) keeps the
    whole part; ``model.layers.3.self_attn.q_proj`` keeps layer 3's share of it (one layer of the
    layers holding that part; a single named projection counts as its layer's whole share, an
    upper bound on the bytes kept)."""
    whole: set[str] = set()
    by_layer: dict[str, set[int]] = {}
    for pattern in patterns:
        part = exclusion_part(pattern)
        if part is None:
            continue
        match = _LAYER_INDEX.search(pattern)
        if match is None:
            whole.add(part)
        else:
            by_layer.setdefault(part, set()).add(int(match.group(1)))
    holders = {
        "attention": sum(1 for k in kinds if k in ("full", "sliding")),
        "linear attention": sum(1 for k in kinds if k == "linear"),
    }
    kept: dict[str, float] = {part: 1.0 for part in whole}
    for part, layer_set in by_layer.items():
        if part in whole:
            continue
        kept[part] = min(1.0, len(layer_set) / max(1, holders.get(part, len(kinds))))
    return tuple(sorted(kept.items()))


# ----------------------------------------------------------------------------- weights

@dataclass(frozen=True)
class WeightPart:
    name: str
    params: int
    sharded: bool  # split across tensor-parallel ranks
    quantizable: bool  # a linear layer that weight quantization applies to
    expert: bool = False
    max_split: int | None = None  # at most this many ranks share it (K/V heads: more ranks replicate them)


def weight_parts(spec: ModelSpec) -> list[WeightPart]:
    """Parameter counts by component, from the geometry (biases and norms included)."""
    h = spec.hidden
    first = spec.stage is None or spec.stage[0] == 0
    last = spec.stage is None or spec.stage[0] == spec.stage[1] - 1
    parts = []
    if first:
        parts.append(WeightPart("embeddings", spec.vocab * h, not spec.replicated_embeddings, False))
    # under pipeline parallelism the last rank builds its own lm_head even when tied: the tie cannot cross ranks
    if last and (not spec.tied_embeddings or spec.stage is not None or spec.lm_head_copy):
        parts.append(WeightPart("lm_head", spec.vocab * h, True, False))
    if spec.per_layer_input and first:
        # Gemma 4 per-layer embeddings (a replicated table) and the replicated projection into them
        width = (spec.stage[3] if spec.stage else spec.layers) * spec.per_layer_input
        parts.append(WeightPart("per-layer embeddings", spec.per_layer_vocab * width, False, False))
        parts.append(WeightPart("per-layer projection", h * width, False, True))
    attention = attention_whole = mlp = experts = linear = linear_small = linear_whole = norms = 0
    kv_by_heads: dict[int, int] = {}
    # Falcon-H1: the same Mamba-2 mixer beside the attention in every layer
    mixer = _attention_params(spec, "linear") if spec.parallel_hybrid else None
    for index, kind in enumerate(spec.layer_kinds):
        one = _attention_params(spec, kind)
        if mixer is not None:
            one = one._replace(linear=mixer.linear, linear_small=mixer.linear_small)
        attention += one.sharded
        attention_whole += one.whole
        if one.kv:
            kv_by_heads[one.kv_heads] = kv_by_heads.get(one.kv_heads, 0) + one.kv
        linear += one.linear
        linear_small += one.linear_small
        linear_whole += one.linear_whole
        dense_i, experts_i = _mlp_params(spec, index)
        mlp += dense_i
        experts += experts_i
        # one norm before the mixer and one before the MLP; Nemotron-H's one-block layers have one
        norms += h if kind == "ffn" or index in spec.mixer_only_layers else 2 * h
    parts += [
        WeightPart("attention", attention, True, True),
        WeightPart("attention down-projections", attention_whole, False, True),
        *(WeightPart("attention kv" + (f" ({heads} heads)" if len(kv_by_heads) > 1 else ""), params, True, True,
                     max_split=heads) for heads, params in sorted(kv_by_heads.items(), reverse=True)),
        # quantized with the checkpoint (see _attention_params); a checkpoint that keeps them in its
        # dtype says so in its exclusion list (Qwen's FP8 releases list linear_attn), read by kept_parts
        WeightPart("linear attention", linear, True, True),
        WeightPart("linear attention conv and gates", linear_small, True, False),
        # dense LFM2's short convolutions: plain nn.Linear, whole on every rank and never quantized
        WeightPart("short convolutions", linear_whole, False, False),
        WeightPart("mlp", mlp, True, True),
        WeightPart("experts", experts, True, True, expert=True),
        # Nemotron-H LatentMoE's fc1/fc2_latent_proj: ReplicatedLinear, whole on every rank
        WeightPart("latent projections", _moe_layers(spec) * 2 * h * (spec.moe.latent if spec.moe else 0),
                   False, True),
        WeightPart("norms and routers", norms + (h if last else 0) + _router_params(spec), False, False),
    ]
    if spec.vision_params and first:
        parts.append(WeightPart("vision tower", spec.vision_params, True, False))
    if spec.vision_projector_params and first:
        parts.append(WeightPart("vision projector", spec.vision_projector_params, False, False))
    return [p for p in parts if p.params]


def pipeline_stages(spec: ModelSpec, pp: int) -> list[ModelSpec]:
    """What each pipeline-parallel rank holds. Layers split evenly, the last ``layers % pp`` ranks
    one more (SGLang's ``get_pp_indices``); the first rank holds the embeddings (and a vision
    tower), the last the lm_head and any MTP head."""
    if pp <= 1:
        return [spec]
    base, extra = divmod(spec.layers, pp)
    stages = []
    start = 0
    for rank in range(pp):
        count = base + (1 if rank >= pp - extra else 0)
        moe = spec.moe
        if moe is not None:
            dense = frozenset(i - start for i in moe.dense_layers if start <= i < start + count)
            moe = replace(moe, dense_layers=dense)
        mixer_only = frozenset(i - start for i in spec.mixer_only_layers if start <= i < start + count)
        stages.append(replace(
            spec, layers=count, layer_kinds=spec.layer_kinds[start:start + count], moe=moe,
            mixer_only_layers=mixer_only,
            mtp_layers=spec.mtp_layers if rank == pp - 1 else 0, stage=(rank, pp, start, spec.layers)))
        start += count
    return stages


class LayerAttention(NamedTuple):
    sharded: int  # split over the attention-TP ranks
    whole: int  # every rank holds it
    kv: int  # K/V projections: split over at most kv_heads ranks
    kv_heads: int
    linear: int  # linear-attention projections
    linear_small: int  # linear-attention conv, gates and state parameters
    linear_whole: int = 0  # recurrent-layer parameters every rank holds whole, never quantized (LFM2's short convs)


def _attention_params(spec: ModelSpec, kind: LayerKind) -> LayerAttention:
    """One layer's attention parameters, by how SGLang splits them.

    K/V projections (QKVParallelLinear) are split over at most as many ranks as there are K/V heads;
    with more ranks each head is replicated. A ``attention_k_eq_v`` layer (Gemma 4's full layers)
    ships only k_proj, but SGLang allocates V as well and copies K into it.

    SGLang builds a Gated DeltaNet's in_proj_qkvz and out_proj with the checkpoint's quant_config
    (qwen3_next.py / qwen3_5.py), so they are quantized when the checkpoint is; its conv1d is built
    unquantized, and the beta/alpha projection, A_log, dt_bias and the gated norm are too small to matter.
    MLA's down-projections (``fused_qkv_a_proj_with_mqa``, or ``kv_a_proj_with_mqa`` without a
    q LoRA) and the DSA indexer's projections are ReplicatedLinear in SGLang: whole on every rank."""
    h = spec.hidden
    if kind == "ffn":
        return LayerAttention(0, 0, 0, 1, 0, 0)
    la = spec.linear
    if kind == "linear" and la is not None and la.kind == "shortconv":
        # Lfm2ShortConv: in_proj to the B and C gates and x (3 x hidden), out_proj, a depthwise filter of
        # conv_L_cache taps a channel (+ biases with conv_bias)
        projections = 4 * h * h + (4 * h if la.bias else 0)
        taps = h * la.conv_kernel + (h if la.bias else 0)
        if la.sharded:  # LFM2-MoE: column/row-parallel projections, the filter split along the channels
            return LayerAttention(0, 0, 0, 1, projections, taps)
        return LayerAttention(0, 0, 0, 1, 0, 0, projections + taps)
    if kind == "linear" and la is not None and la.kind == "mamba2":
        # MambaMixer2: in_proj to z, x, B, C and dt; a depthwise conv1d (with bias) over x, B, C; A_log,
        # D and dt_bias per head; a gated RMSNorm over the inner width; out_proj back to hidden
        inner = la.num_value_heads * la.value_head_dim
        conv_dim = inner + 2 * la.num_key_heads * la.key_head_dim
        in_proj = h * (inner + conv_dim + la.num_value_heads)
        small = conv_dim * (la.conv_kernel + 1) + 3 * la.num_value_heads + (inner if la.gated_norm else 0)
        return LayerAttention(0, 0, 0, 1, in_proj + inner * h, small)
    if kind == "linear" and la is not None and la.kind == "kda":
        # KimiDeltaAttention: q, k, v, beta, the low-rank forget and output gates (their f_a/g_a halves are
        # ReplicatedLinear: whole on every rank), o_proj; fp32 dt_bias, A_log and q/k/v short convolutions
        width = la.num_value_heads * la.value_head_dim
        rank = la.value_head_dim
        projections = h * 3 * width + h * la.num_value_heads + 2 * rank * width + width * h
        small = width + 3 * width * la.conv_kernel + la.num_value_heads + rank
        return LayerAttention(0, 2 * h * rank, 0, 1, projections, small)
    if kind == "linear":
        assert la is not None
        key_dim = la.num_key_heads * la.key_head_dim
        value_dim = la.num_value_heads * la.value_head_dim
        qkvz = h * (2 * key_dim + 2 * value_dim)
        out = value_dim * h
        small = h * 2 * la.num_value_heads + (2 * key_dim + value_dim) * la.conv_kernel \
            + 3 * la.num_value_heads + la.value_head_dim
        return LayerAttention(0, 0, 0, 1, qkvz + out, small)
    if spec.mla is not None:
        m = spec.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        down = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank  # kv_a (+ its norm)
        if m.q_lora_rank:
            down += h * m.q_lora_rank + m.q_lora_rank  # fused with q_a (+ its norm)
            q = m.q_lora_rank * spec.heads * qk
        else:
            q = h * spec.heads * qk
        kv_b = m.kv_lora_rank * spec.heads * (m.qk_nope_head_dim + m.v_head_dim)
        out = spec.heads * m.v_head_dim * h
        indexer = 0
        if m.index_head_dim:
            n = m.index_n_heads
            indexer = (m.q_lora_rank or h) * n * m.index_head_dim + h * m.index_head_dim + h * n
        return LayerAttention(q + kv_b + out, down + indexer, 0, 1, 0, 0)
    heads_dim = spec.head_dim
    kv_heads = spec.kv_heads
    if kind == "full" and spec.full_head_dim:  # K and V both allocated, attention_k_eq_v or not
        heads_dim = spec.full_head_dim
        kv_heads = spec.full_kv_heads or kv_heads
    q_out = spec.heads * heads_dim * (2 if spec.attn_output_gate else 1)
    kv = kv_heads * heads_dim * 2
    norms = 2 * heads_dim if spec.qk_norm else 0
    q_bias, kv_bias = (q_out, kv) if spec.qkv_bias else (0, 0)
    return LayerAttention(h * q_out + spec.heads * heads_dim * h + q_bias + norms, 0, h * kv + kv_bias,
                          kv_heads, 0, 0)


def _mlp_params(spec: ModelSpec, index: int) -> tuple[int, int]:
    """(dense MLP, experts) parameters of layer ``index``; past the last layer, an expert layer (MTP)."""
    if index in spec.mixer_only_layers:
        return 0, 0
    h = spec.hidden
    m = spec.mlp_matrices
    moe = spec.moe
    if moe is None or index in moe.dense_layers:
        return m * h * spec.intermediate, 0
    width = moe.latent or h
    experts = moe.num_experts * m * width * moe.intermediate
    shared = m * h * moe.shared_intermediate
    dense = m * h * spec.intermediate if moe.dense_and_moe else 0
    return dense + shared, experts


def _moe_layers(spec: ModelSpec) -> int:
    if spec.moe is None:
        return 0
    return sum(1 for i in range(spec.layers) if i not in spec.moe.dense_layers and i not in spec.mixer_only_layers)


def _router_params(spec: ModelSpec) -> int:
    return _moe_layers(spec) * spec.hidden * spec.moe.num_experts if spec.moe is not None else 0


@dataclass(frozen=True)
class DraftSize:
    """A draft model's bytes as SGLang builds it: its own layers, split over tp; the embeddings and
    lm_head it allocates while loading and then replaces with the target's (``set_embed_and_head``),
    vocab-parallel; and what every rank holds whole (the fc that mixes the target's hidden states is a
    plain nn.Linear)."""

    sharded: float
    shared: float  # allocated at load, freed once the target's embeddings and head are shared
    whole: float
    why: str

    def bytes_per_gpu(self, tp: int, with_shared: bool, shared_whole: bool = False) -> float:
        """``shared_whole``: under DP attention the draft's embeddings and lm_head are not split over tp."""
        shared = (self.shared if shared_whole else self.shared / tp) if with_shared else 0.0
        return self.sharded / tp + shared + self.whole


def mtp_draft_size(spec: ModelSpec, layers: int, quant: Quantization = NO_QUANT) -> DraftSize:
    """The checkpoint's own MTP/NextN layers (DeepseekV3ForCausalLMNextN, Qwen3_5ForCausalLMMTP, MiMo's
    MTP): decoder layers split over tp, built with the checkpoint's quantization (DeepSeek's FP8 NextN
    layer), an nn.Linear fc from 2 x hidden, and their own embeddings and lm_head, which SGLang builds
    empty, skips loading and swaps for the target's."""
    one = _attention_params(spec, "full")
    dense, experts = _mlp_params(spec, spec.layers)  # past the dense prefix: an expert layer if MoE
    linear = one.sharded + one.whole + one.kv + dense
    per = DTYPE_BYTES.get(spec.dtype, 2.0)
    # a checkpoint whose exclusion list names its MTP weights (Qwen's NVFP4 release: mtp.*) keeps them 16-bit
    quantized = quant.method not in ("none", "unknown") and quant.kept_fraction("mtp head") < 1.0
    linear_per = quant.bytes_per_param if quantized and not quant.experts_only else per
    expert_per = quant.expert_bytes_per_param or (quant.bytes_per_param if quantized else per)
    shared = spec.vocab * spec.hidden * (1 if spec.tied_embeddings else 2)
    return DraftSize(layers * (linear * linear_per + experts * expert_per), shared * per,
                     layers * 2 * spec.hidden * spec.hidden * per,
                     f"{layers} MTP layer(s) of the checkpoint" + (f", {quant.label}" if quantized else ""))


def eagle_draft_size(target: ModelSpec, eagle3: bool, draft: dict[str, Any] | None = None) -> DraftSize:
    """LlamaForCausalLMEagle / LlamaForCausalLMEagle3 (SGLang's llama_eagle*.py), from the draft's own
    config when there is one, else from the target's geometry.

    Both allocate their own vocab-parallel embeddings and lm_head while loading (counted by the draft's
    `Load weight end`); the target's replace them afterwards, except an EAGLE3 lm_head over its own
    draft vocabulary. EAGLE's fc takes 2 x hidden, EAGLE3's 3 x the target's hidden, and EAGLE3's first
    layer projects q/k/v from 2 x hidden (the embeddings and the hidden state side by side)."""
    c = draft or {}
    h = int(c.get("hidden_size") or target.hidden)
    heads = int(c.get("num_attention_heads") or target.heads)
    kv_heads = int(c.get("num_key_value_heads") or (heads if draft else target.kv_heads))
    head_dim = int(c.get("head_dim") or (h // heads if draft else target.head_dim))
    inter = int(c.get("intermediate_size") or max(target.intermediate, h))
    vocab = int(c.get("vocab_size") or target.vocab)
    layers = int(c.get("num_hidden_layers") or 1)
    tied = bool(c.get("tie_word_embeddings", False))
    target_h = int(c.get("target_hidden_size") or target.hidden)

    def decoder(qkv_in: int) -> int:
        return qkv_in * (heads + 2 * kv_heads) * head_dim + heads * head_dim * h + 3 * h * inter

    stack = decoder(2 * h if eagle3 else h) + (layers - 1) * decoder(h)
    draft_vocab = int(c.get("draft_vocab_size") or 0) if eagle3 else 0
    own_head = draft_vocab * h if draft_vocab and not tied else 0
    shared = vocab * h + (0 if tied or own_head else vocab * h)
    fc = (3 * target_h if eagle3 else 2 * h) * h
    per = DTYPE_BYTES.get(str(c.get("torch_dtype") or c.get("dtype") or target.dtype).replace("torch.", ""), 2.0)
    kind = "EAGLE3" if eagle3 else "EAGLE"
    if draft:
        why = f"{kind} draft from its config: {layers} layer(s) of {h}, vocab {vocab}"
        if own_head:
            why += f", its own lm_head over {draft_vocab} draft tokens"
    else:
        why = (f"{kind} draft config not read: one layer shaped like the target's"
               + (" (an EAGLE3 draft's own lm_head over a smaller draft vocabulary is not counted)" if eagle3
                  else ""))
    return DraftSize((stack + own_head) * per, shared * per, (fc + 4 * h * layers) * per, why)


def _part_bytes(spec: ModelSpec, quant: Quantization, experts_unquantized: bool) -> list[tuple[WeightPart, float]]:
    """Each weight part with its whole (unsharded) size in bytes."""
    base = DTYPE_BYTES.get(spec.dtype, 2.0)
    out = []
    for part in weight_parts(spec):
        per_param = base
        if part.expert and experts_unquantized:
            pass
        elif part.expert and quant.expert_bytes_per_param is not None:
            per_param = quant.expert_bytes_per_param
        elif part.quantizable and quant.method != "none" and (part.expert or not quant.experts_only):
            kept = quant.kept_fraction("attention" if part.name.startswith("attention") else part.name)
            per_param = kept * base + (1 - kept) * quant.bytes_per_param
        out.append((part, part.params * per_param))
    return out


ATTENTION_PARTS = ("attention", "linear attention", "linear attention conv and gates")


def part_divisor(part: WeightPart, tp: int, attn_tp: int | None = None) -> int:
    """How many GPUs share a part. With DP attention (``attn_tp`` = tp / dp < tp) SGLang shards
    attention over the attention-TP group only and builds the token embedding unsharded
    (``VocabParallelEmbedding(enable_tp=not is_dp_attention_enabled())``)."""
    attn = attn_tp or tp
    if not part.sharded:
        return 1
    if part.name in ATTENTION_PARTS or part.name.startswith("attention kv"):
        return min(attn, part.max_split or attn)
    if part.name == "embeddings" and attn < tp:
        return 1
    return tp


def weight_bytes_per_gpu(spec: ModelSpec, tp: int, quant: Quantization | None = None,
                         experts_unquantized: bool = False, attn_tp: int | None = None) -> float:
    """Bytes one GPU holds: each part over the GPUs that share it (:func:`part_divisor`)."""
    parts = _part_bytes(spec, quant or spec.quant, experts_unquantized)
    return sum(size / part_divisor(part, tp, attn_tp) for part, size in parts)


@dataclass(frozen=True)
class CheckpointIndex:
    """What a checkpoint's ``model.safetensors.index.json`` says beyond its config."""

    total_size: int | None  # the bytes of every tensor it holds
    mtp_tensors: bool | None  # whether it holds the MTP layers the config names (None: it cannot tell)


# where a text model's decoder layers live in a weight map (Llama-style, multimodal wrappers either way round);
# a vision tower's `encoder.layers.N` is not matched
_TEXT_LAYER = re.compile(r"^(?:model\.)?(?:language_model\.)?(?:model\.)?layers\.(\d+)\.")


def read_index(text: str, spec: ModelSpec) -> CheckpointIndex:
    """Read a safetensors index. MTP tensors are Qwen3.5's ``mtp.*``, MiMo's ``model.mtp_layers.*`` or DeepSeek's
    NextN layer stored as one more decoder layer (``model.layers.{num_hidden_layers}.*``). A checkpoint quantized
    or pruned without them still has a config naming them; an engine then drafts from uninitialized memory."""
    try:
        index = json.loads(text)
        stated = int(index["metadata"]["total_size"])
    except (ValueError, KeyError, TypeError):
        return CheckpointIndex(None, None)
    total = stated if stated > 0 else None  # some re-saves state 0: no size, the estimate stands
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not spec.mtp_layers or not isinstance(weight_map, dict) or not weight_map:
        return CheckpointIndex(total, None)
    for key in weight_map:
        name = str(key)
        if name.startswith("mtp.") or ".mtp." in name or "mtp_layers." in name:
            return CheckpointIndex(total, True)
        layer = _TEXT_LAYER.match(name)
        if layer and int(layer.group(1)) >= spec.layers:
            return CheckpointIndex(total, True)
    return CheckpointIndex(total, False)


def checkpoint_bytes(spec: ModelSpec, with_mtp: bool | None = None) -> float:
    """What the checkpoint's safetensors hold, by the geometry: every part once (a tied lm_head is
    not stored twice) plus the MTP layers the config names. ``with_mtp=False`` for a checkpoint
    whose weight map has none although its config names them (a pruned or re-saved one)."""
    whole = weight_bytes_per_gpu(spec, 1) - lm_head_copy_bytes(spec, 1)
    if spec.mtp_layers and with_mtp is not False:
        mtp = mtp_draft_size(spec, spec.mtp_layers, spec.quant)
        whole += mtp.sharded + mtp.whole  # its embeddings and lm_head are the target's, not stored again
    return whole


def lm_head_copy_bytes(spec: ModelSpec, tp: int) -> float:
    """Bytes a GPU holds of an lm_head SGLang builds for a tied checkpoint (LFM2), which no checkpoint file
    counts: vocab-parallel, in the model dtype."""
    if not spec.lm_head_copy:
        return 0.0
    return spec.vocab * spec.hidden * DTYPE_BYTES.get(spec.dtype, 2.0) / tp


def uneven_bytes(spec: ModelSpec, tp: int, quant: Quantization | None = None, attn_tp: int | None = None) -> float:
    """Bytes a GPU holds beyond an even 1/tp share of the checkpoint: the parts every rank keeps
    whole (norms, routers, Gemma's embedding table) or shares with fewer ranks (DP attention)."""
    parts = _part_bytes(spec, quant or spec.quant, False)
    return sum(size * (1 / part_divisor(part, tp, attn_tp) - 1 / tp) for part, size in parts)


MARLIN_GROUPS = (128, 64, 32)  # the group sizes SGLang's Marlin kernels take (besides per-channel)


def loadable_group(spec: ModelSpec, tp: int, quant: Quantization, attn_tp: int | None = None,
                   moe_tp: int | None = None) -> int | None:
    """The largest Marlin group size that divides the input of every quantized linear layer on one rank.

    A checkpoint whose group does not divide a row-parallel layer's per-rank input cannot be split
    over ``tp`` (SGLang refuses it), so when a checkpoint does not state its group this is the largest
    it can have: Gemma 4 26B's experts down-project from 704 = 2 x 352 rows, so at tp 2 only 32 fits."""
    inputs = quantized_inputs(spec, tp, quant, attn_tp, moe_tp)
    return next((g for g in MARLIN_GROUPS if all(size % g == 0 for size in inputs.values())), None)


def quantized_inputs(spec: ModelSpec, tp: int, quant: Quantization, attn_tp: int | None = None,
                     moe_tp: int | None = None) -> dict[str, int]:
    """Input width on one rank of each kind of linear layer the scheme quantizes (column-parallel
    layers take the whole hidden state; row-parallel ones a 1/tp share of their input; experts a 1/moe_tp
    share, whole under expert parallelism)."""
    attn = attn_tp or tp
    inputs: dict[str, int] = {}
    moe = spec.moe
    if moe is not None:
        inputs["experts' gate/up"] = moe.latent or spec.hidden  # LatentMoE experts take the latent width
        inputs["experts' down projection"] = moe.intermediate // (moe_tp or tp)
        if moe.shared_intermediate and not quant.experts_only:
            inputs["shared expert's down projection"] = moe.shared_intermediate // tp
    if quant.experts_only:
        return inputs
    inputs["q/k/v and gate/up"] = spec.hidden
    if spec.intermediate and spec.has_dense_mlp:
        inputs["MLP down projection"] = spec.intermediate // tp
    if spec.mla is not None:
        inputs["attention output"] = spec.heads * spec.mla.v_head_dim // attn
    else:
        inputs["attention output"] = spec.heads * spec.head_dim // attn
        if spec.full_head_dim and spec.full_layers:
            inputs["global attention output"] = spec.heads * spec.full_head_dim // attn
    if spec.linear is not None and spec.linear_layers and spec.linear.sharded:
        inputs["linear attention output"] = spec.linear.num_value_heads * spec.linear.value_head_dim // attn
    return inputs


def with_group(quant: Quantization, group: int) -> Quantization:
    """The same scheme with another group size (its parts kept in the model dtype unchanged)."""
    regrouped = quantization_from(quant.method, quant.bits or None, group, quant.experts_only)
    return replace(regrouped, kept=quant.kept, expert_bytes_per_param=quant.expert_bytes_per_param)


def kv_bytes_per_token(spec: ModelSpec, tp: int, kv_dtype_bytes: float) -> tuple[float, float]:
    """(full-attention layer bytes, sliding-window layer bytes) of one token on one GPU, all layers."""
    if spec.mla is not None:
        m = spec.mla
        per_layer = (m.kv_lora_rank + m.qk_rope_head_dim) * kv_dtype_bytes
        if m.index_head_dim:
            per_layer += m.index_head_dim + m.index_head_dim / 128 * 4  # fp8 indexer keys + fp32 scales
        return per_layer * spec.full_layers, 0.0
    full_heads = spec.full_kv_heads or spec.kv_heads
    full_dim = spec.full_head_dim or spec.head_dim
    # an attention_k_eq_v layer (Gemma 4's global layers) still gets its own V buffer
    full = max(1, full_heads // tp) * (full_dim + full_dim) * kv_dtype_bytes * spec.full_layers
    sliding = max(1, spec.kv_heads // tp) * (spec.head_dim + spec.v_head_dim) * kv_dtype_bytes * spec.sliding_layers
    return full, sliding


def mamba_bytes_per_request(spec: ModelSpec, tp: int, ssm_dtype: str | None = None,
                            conv_dtype: str = "bfloat16") -> tuple[float, float]:
    """(conv state, SSM state) bytes of one request on one GPU, over all linear layers."""
    la = spec.linear
    if la is None:
        return 0.0, 0.0
    groups = la.num_key_heads
    if groups % tp:
        groups += tp - groups % tp  # padded to a multiple of TP
    conv_dim = la.value_head_dim * la.num_value_heads + 2 * groups * la.key_head_dim
    conv = conv_dim / tp * (la.conv_kernel - 1) * DTYPE_BYTES[conv_dtype]
    ssm_bytes = DTYPE_BYTES[(ssm_dtype or la.ssm_dtype).replace("torch.", "")]
    ssm = la.num_value_heads / tp * la.value_head_dim * la.key_head_dim * ssm_bytes
    return conv * spec.linear_layers, ssm * spec.linear_layers
