"""The budget engine, family by family, with arithmetic worked by hand (see the comments)."""

import json
import math
from dataclasses import replace

import pytest

from bot.core.budget import (
    BudgetInput,
    GpuPlan,
    VerdictKind,
    compute_budget,
    default_mem_fraction_static,
    load_dtype,
    not_enough_memory_text,
    parse_version,
    stop_launches_first,
    vlm_factor,
)
from bot.core.flags import FlagEdit, LaunchFlags, parse_sglang_flags
from bot.core.model import (
    GIB,
    ModelConfigError,
    checkpoint_bytes,
    derived_context_length,
    exclusion_part,
    kept_parts,
    kv_bytes_per_token,
    mamba_bytes_per_request,
    read_config,
    rope_table_bytes,
    weight_bytes_per_gpu,
    weight_parts,
)
from bot.core.startup_log import Progress, advance
from bot.errors import UsageError
from tests.conftest import FIXTURES

CONFIGS = FIXTURES / "model-configs"
STARTUP = [json.loads(x) for x in (FIXTURES / "sglang-startup/cases.jsonl").read_text().splitlines() if x]


def spec(name):
    return read_config(json.loads((CONFIGS / name / "config.json").read_text()), name)


def run(model, argv, version="current", total_mib=49140, count=2, pre=None, gpu="NVIDIA RTX A6000", **kw):
    flags = parse_sglang_flags(argv)
    return compute_budget(BudgetInput(model, flags, GpuPlan(gpu, total_mib, count, pre_gib=pre),
                                      parse_version(version), **kw))


# --------------------------------------------------------------------------- dense GQA

def test_llama_8b_weights_equal_the_published_checkpoint_size():
    # 128256x4096 embed + lm_head, 32 x (q 4096^2 + kv 2x4096x1024 + o 4096^2 + mlp 3x4096x14336 + 2 norms) + norm
    # = 8,030,261,248 params; x2 bytes = 16,060,522,496, the safetensors total_size of this checkpoint
    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    assert weight_bytes_per_gpu(llama, 1) == 16_060_522_496


def test_a_float32_checkpoint_loads_in_16_bits_under_dtype_auto():
    """SGLang's _get_and_verify_dtype: with --dtype auto a float32 checkpoint is built in float16 (Gemma's in
    bfloat16); an explicit --dtype float32 keeps 4 bytes a weight."""
    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    fp32 = replace(llama, dtype="float32")
    file_bytes = 2 * 16_060_522_496  # the same checkpoint saved in float32
    auto = run(fp32, [], count=1, weights_bytes_total=file_bytes)
    assert auto.weights_gib == pytest.approx(16_060_522_496 / GIB + 0.0625)
    assert "the float32 checkpoint is loaded as float16 (--dtype auto)" in auto.lines[1].why
    assert run(fp32, [], count=1).weights_gib == pytest.approx(auto.weights_gib)  # from the config alone too
    kept = run(fp32, ["--dtype", "float32"], count=1, weights_bytes_total=file_bytes)
    assert kept.weights_gib == pytest.approx(file_bytes / GIB + 0.0625)
    assert load_dtype(None, "float32", "gemma3") == "bfloat16" and load_dtype("auto", "bfloat16", "llama") == "bfloat16"


def test_llama_8b_kv_cell_and_tokens_by_hand():
    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    # 8 KV heads x (128 + 128) x 32 layers x 2 B = 131,072 B per token
    assert kv_bytes_per_token(llama, 1, 2.0) == (131_072, 0)
    # weights: the checkpoint's 16,060,522,496 B + the fp32 RoPE table, 131,072 positions x 128 x 4 B = 64 MiB,
    # = 15.0195 GiB (the log's pre 47.27 - after-load 32.22 = 15.05); rest = 47.27 x 0.88 - 15.0195 = 26.5781 GiB
    b = run(llama, ["--mem-fraction-static", "0.88"], version="0.4.6", count=1, pre=47.27,
            weights_bytes_total=16_060_522_496)
    assert b.weights_gib == pytest.approx(16_060_522_496 / GIB + 0.0625)
    rest = 47.27 * 0.88 - (16_060_522_496 / GIB + 0.0625)
    assert b.kv_tokens == math.floor(rest * GIB / 131_072)  # 217,728; the log showed 217,512 (+0.1%)
    assert "+ 0.06 GiB RoPE cos/sin tables (131,072 positions x 128, fp32" in b.lines[1].why
    assert b.verdict is VerdictKind.FITS


def test_tp_splits_kv_heads_and_weights():
    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    assert kv_bytes_per_token(llama, 2, 2.0)[0] == 65_536  # 4 heads per GPU
    assert kv_bytes_per_token(llama, 16, 2.0)[0] == 16_384  # never fewer than 1 head per GPU
    assert weight_bytes_per_gpu(llama, 2) < weight_bytes_per_gpu(llama, 1) / 2 + 1_000_000  # norms replicated


# --------------------------------------------------------------------------- MLA

def test_mla_cell_counts_latent_and_rope_only():
    r1 = spec("deepseek-ai__DeepSeek-R1")
    # (kv_lora_rank 512 + rope 64) x 2 B x 61 layers = 70,272 B, whatever the 128 nominal KV heads say
    assert kv_bytes_per_token(r1, 8, 2.0) == (70_272, 0)
    assert r1.mla is not None and r1.mtp_layers == 1


def test_dsa_indexer_adds_its_keys():
    glm = spec("zai-org__GLM-5.1")
    # fp8 KV: (512 + 64) x 1 B + indexer 128 B + 128/128 x 4 B scale = 708 B x 78 layers
    assert kv_bytes_per_token(glm, 8, 1.0) == (708 * 78, 0)


# --------------------------------------------------------------------------- sliding-window hybrid

def test_gemma4_sliding_and_global_layers_by_hand():
    gemma = spec("google__gemma-4-12B")
    assert (gemma.full_layers, gemma.sliding_layers, gemma.sliding_window) == (8, 40, 1024)
    full, sliding = kv_bytes_per_token(gemma, 2, 2.0)
    # global layers: max(1, 1 KV head // 2) x (512 + 512) x 2 B x 8 = 16,384 B
    # sliding layers: 8 // 2 heads x (256 + 256) x 2 B x 40 = 163,840 B
    assert (full, sliding) == (16_384, 163_840)
    # with --swa-full-tokens-ratio 0.8 a full token costs 16,384 + 0.8 x 163,840 = 147,456 B
    b = run(gemma, ["--tp", "2", "--mem-fraction-static", "0.85", "--swa-full-tokens-ratio", "0.8"],
            version="0.5.12", total_mib=24576, pre=22.91, weights_bytes_total=7_814_927_456)
    # the checkpoint is gemma-4-12B-it-AWQ's 7,814,927,456 B (see test_what_the_config_cannot_size_is_said_not_hidden).
    # SGLang's Gemma embeds with a plain nn.Embedding: each rank holds the whole 262,144 x 3,840 bf16
    # table (2,013,265,920 B), so only the rest of the checkpoint is split over tp=2; the global layers'
    # single K/V head (K copied into V: 8 x 3,840 x (512 + 512) x 2 B) cannot split, so both ranks hold it.
    # Each rank also builds two fp32 RoPE tables over 262,144 positions: 512 wide for the global layers
    # ("proportional" rope spans the whole head) and 256 for the sliding ones = 805,306,368 B
    table = 262_144 * 3_840 * 2
    global_kv = 8 * 3_840 * (512 + 512) * 2
    rope = 262_144 * (512 + 256) * 4
    by_hand = (7_814_927_456 - table) / 2 + table + global_kv / 2 + rope
    # (+ the replicated norms: 0.35 MB) = 5.356 GiB; the log's `mem usage` was 5.42
    assert b.weights_gib == pytest.approx(by_hand / GIB, rel=1e-4)
    rest = 22.91 - b.weights_gib - 22.91 * 0.15
    assert b.kv_cell_bytes == 147_456
    assert b.kv_tokens == math.floor(rest * GIB / 147_456)
    assert b.swa_tokens == int(b.kv_tokens * 0.8)


def test_a_sliding_window_pool_that_cannot_admit_a_request_is_refused_with_sglangs_text():
    from bot.core.budget import swa_pool_text

    # gemma-4-31B's sliding window is 1,024 tokens. SGLang caps the full pool at --max-total-tokens and gives the
    # sliding layers int(full x ratio) tokens (page-aligned); a prefill needs one window + a page of that pool, so
    # a pool of at most 1,024 + 1 admits nothing: SGLang 0.5.14+ refuses it, older releases wait at warmup
    gemma = spec("google__gemma-4-31b-it")
    argv = ["--tp", "2", "--context-length", "1024", "--max-total-tokens"]
    b = run(gemma, [*argv, "1280"], version="0.5.14")  # int(1,280 x 0.8) = 1,024
    assert b.verdict is VerdictKind.FAILS and b.error_text == swa_pool_text(1024, 1024, 1)
    assert b.error_text.startswith("SWA pool (1024 tokens) cannot hold even one request: the prefill admission "
                                   "floor is sliding_window_size (1024) + page_size (1).")
    # the smallest ratio that admits one: int(1,280 x 0.81) = 1,036 > 1,025 (0.80 gives 1,024); the full pool stays
    # at the 1,280 cap, so the remedy is that ratio alone
    assert b.remedies[0].change == "--swa-full-tokens-ratio 0.81"
    fixed = run(gemma, [*argv, "1280", "--swa-full-tokens-ratio", "0.81"], version="0.5.14")
    assert fixed.verdict is not VerdictKind.FAILS and fixed.swa_tokens == 1036
    # the boundary: int(1,282 x 0.8) = 1,025 is still the floor; int(1,283 x 0.8) = 1,026 admits
    assert run(gemma, [*argv, "1282"], version="0.5.14").verdict is VerdictKind.FAILS
    assert "swa" not in run(gemma, [*argv, "1283"], version="0.5.14").reason_kinds
    # a page of 64: the pool is 1,024 (already whole pages) and the floor 1,024 + 64
    paged = run(gemma, [*argv, "1344", "--page-size", "64"], version="0.5.14")  # int(1,344 x 0.8) = 1,075 -> 1,024
    assert paged.swa_tokens == 1024 and paged.error_text == swa_pool_text(1024, 1024, 64)
    # before 0.5.14 SGLang starts and no request is ever admitted: said, with the same remedy
    older = run(gemma, [*argv, "1280"], version="0.5.12")
    assert older.verdict is VerdictKind.DEGRADED and "swa" in older.reason_kinds
    assert older.remedies[0].change == "--swa-full-tokens-ratio 0.81"


# --------------------------------------------------------------------------- hybrid linear attention (GDN)

def test_a_gated_vision_tower_counts_three_mlp_matrices_as_its_print_shows():
    import re

    from bot.core.model import _vision_params

    # the real print(model) of Qwen2.5-VL-7B's vision tower: 32 blocks (qkv, proj, gate/up/down) and the merger
    text = (FIXTURES / "other-logs" / "qwen2.5-vl-7b-visual-print.txt").read_text()
    block, merger = text.split("(merger)")
    linear = re.compile(r"Linear\(in_features=(\d+), out_features=(\d+)")
    per_block = sum(int(a) * int(b) for a, b in linear.findall(block))
    printed = 32 * per_block + sum(int(a) * int(b) for a, b in linear.findall(merger))  # weights, biases aside
    # the same tower as its vision_config states it (depth, hidden, intermediate, merge, output width)
    vision = {"model_type": "qwen2_5_vl", "depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
              "spatial_merge_size": 2, "out_hidden_size": 3584}
    assert _vision_params(vision, 3584) == (printed, 0) and printed == 674_529_280


def test_internvl_reads_its_llm_config_and_counts_the_pixel_shuffle_projector():
    from bot.core.model import weight_parts

    # the shapes are those the same notebook prints for the loaded model (its module tree)
    ivl = spec("OpenGVLab__InternVL3-1B-Pretrained")
    parts = {p.name: p.params for p in weight_parts(ivl)}
    assert (ivl.layers, ivl.hidden, ivl.kv_heads, ivl.model_type) == (24, 896, 2, "internvl_chat")
    assert parts["embeddings"] == parts["lm_head"] == 151_674 * 896  # Embedding(151674, 896), untied lm_head
    assert parts["mlp"] == 24 * 3 * 896 * 4864  # gate/up (896 -> 4864), down (4864 -> 896)
    assert parts["vision tower"] == 24 * (4 * 1024 * 1024 + 2 * 1024 * 4096)  # qkv + proj, fc1 + fc2
    # mlp1: LayerNorm(4096), Linear(4096 -> 896), Linear(896 -> 896): 1024 x 4 channels after the pixel shuffle
    assert parts["vision projector"] == 2 * 4096 + 4096 * 896 + 896 * 896
    # all of the printed model, by hand: ViT blocks with biases, norms and layer scales 24 x 12,598,272, its patch
    # (603,136), class (1,024) and position (1,025 x 1,024) embeddings, mlp1 with biases 4,482,816, the LM with its
    # q/k/v biases and norms 629,697,920: 938,193,024; the estimate leaves the small terms out, within 0.5 %
    assert abs(sum(parts.values()) - 938_193_024) / 938_193_024 < 0.005


def test_qwen36_geometry_and_state_by_hand():
    q = spec("Qwen__Qwen3.6-27B")
    assert (q.full_layers, q.linear_layers, q.mtp_layers) == (16, 48, 1)
    # KV: 4 // 2 heads x (256 + 256) x 16 full layers x 2 B = 32,768 B per token
    assert kv_bytes_per_token(q, 2, 2.0)[0] == 32_768
    # conv: (128 x 48 + 2 x 16 x 128) / 2 x (4 - 1) x 2 B = 30,720 B per layer
    # ssm: 48 / 2 x 128 x 128 x 4 B (fp32) = 1,572,864 B per layer; x 48 linear layers
    conv, ssm = mamba_bytes_per_request(q, 2)
    assert (conv, ssm) == (30_720 * 48, 1_572_864 * 48)
    assert conv + ssm == 76_972_032  # 73.41 MiB per request
    assert sum(mamba_bytes_per_request(q, 2, "bfloat16")) == 30_720 * 48 + 786_432 * 48


def test_hybrid_state_dtypes_follow_sglangs_precedence_by_version():
    """configs/mamba_utils.py mamba2_state_dtype from 0.5.9 (sglang#18532): the SSM state in --mamba-ssm-dtype, else
    SGLANG_MAMBA_SSM_DTYPE, else config.json's mamba_ssm_dtype, else float32; the conv state in
    SGLANG_MAMBA_CONV_DTYPE, else bfloat16. Before 0.5.9 server_args wrote its own default (float32) over the
    variable and read no config."""
    from bot.core.budget import state_dtypes

    q = spec("Qwen__Qwen3.6-27B")  # its config says mamba_ssm_dtype float32
    bf16_config = replace(q, linear=replace(q.linear, ssm_dtype="bfloat16"))

    def dtypes(model, argv, version="0.5.10"):
        d = state_dtypes(model, parse_sglang_flags(argv), parse_version(version))
        return d.conv, d.ssm

    assert dtypes(q, []) == ("bfloat16", "float32")
    assert dtypes(bf16_config, []) == ("bfloat16", "bfloat16")
    assert dtypes(bf16_config, ["SGLANG_MAMBA_SSM_DTYPE=float32"]) == ("bfloat16", "float32")
    assert dtypes(q, ["SGLANG_MAMBA_SSM_DTYPE=bfloat16", "--mamba-ssm-dtype", "float32"]) == ("bfloat16", "float32")
    assert dtypes(q, ["SGLANG_MAMBA_SSM_DTYPE=fp16"]) == ("bfloat16", "float32")  # not a name it maps: ignored
    assert dtypes(q, ["SGLANG_MAMBA_CONV_DTYPE=float16"]) == ("float16", "float32")
    assert dtypes(bf16_config, ["SGLANG_MAMBA_SSM_DTYPE=bfloat16", "SGLANG_MAMBA_CONV_DTYPE=float16"],
                  "0.5.8") == ("bfloat16", "float32")
    assert dtypes(q, ["--mamba-ssm-dtype", "bfloat16"], "0.5.8") == ("bfloat16", "bfloat16")
    # the bytes: conv (128 x 48 + 2 x 16 x 128) / 2 x 3 x 4 B in float32 = 61,440 B per layer; SSM in bfloat16
    # 48 / 2 x 128 x 128 x 2 B = 786,432 B per layer; x 48 linear layers
    b = run(q, ["SGLANG_MAMBA_CONV_DTYPE=float32", "SGLANG_MAMBA_SSM_DTYPE=bfloat16", "--tp", "2", "--context-length",
                "32768"], version="0.5.10", pre=46.89)
    assert b.mamba_per_request_bytes == 48 * (61_440 + 786_432)
    assert "conv 2.81 MiB (float32) + SSM 36.00 MiB (bfloat16)" in next(x.why for x in b.lines
                                                                       if x.label == "hybrid state per request")


def test_an_edit_reads_onto_typed_flags_as_the_edited_launch_parses():
    """A remedy states its change once, as a FlagEdit: the budget's flags are read from it (LaunchFlags.edited) and the
    relaunch's argv made from it (FlagEdit.applied), and the two agree for a value, an alias, a switch, a drop (back
    to the default), NEXTN's rename, and environment words; a flag the budget does not model is refused."""
    argv = ("NCCL_P2P_DISABLE=1", "--tp", "2", "--quantization", "fp8", "--speculative-algorithm", "NEXTN",
            "--speculative-num-steps", "3", "--mem-fraction-static", "0.85")
    flags = parse_sglang_flags(argv)
    edits = (FlagEdit("--mem-fraction-static", "0.91"), FlagEdit("--tensor-parallel-size", "4"),
             FlagEdit("--disable-radix-cache"), FlagEdit("--quantization", "fp8", drop=True),
             FlagEdit("--tp-size", "2", drop=True), FlagEdit("--speculative-algorithm", "NEXTN", drop=True),
             FlagEdit("--speculative-algorithm", "MTP"), FlagEdit("--speculative-eagle-topk", "1"),
             FlagEdit(env=("SGLANG_MAMBA_CONV_DTYPE=float16",)),
             FlagEdit("--mamba-scheduler-strategy", "extra_buffer", env=("SGLANG_ENABLE_SPEC_V2=1",)))
    for edit in edits:
        assert flags.edited(edit) == parse_sglang_flags(edit.applied(argv)), edit.words()
    assert flags.edited(edits[0]).mem_fraction_static == 0.91 and flags.edited(edits[4]).tp == 1
    assert flags.edited(edits[6]).speculative_algorithm == "EAGLE"
    with pytest.raises(ValueError, match="--attention-backend is not a flag the budget models"):
        flags.edited(FlagEdit("--attention-backend", "triton"))


def test_a_hybrid_model_run_in_float16_fails_at_its_first_request_with_the_env_fix_first():
    """sglang#19773, #30178, #31719: the conv state stays bfloat16 (SGLANG_MAMBA_CONV_DTYPE's default) whatever the
    model runs in, and a float16 model (--dtype half, or an AWQ build whose config says float16) fails its first
    request. SGLANG_MAMBA_CONV_DTYPE set to the model's dtype fixed it there."""
    q = spec("Qwen__Qwen3.6-27B")
    argv = ["--tp", "2", "--context-length", "32768", "--mem-fraction-static", "0.88"]
    b = run(q, [*argv, "--dtype", "half"], version="0.5.10", pre=46.89)
    assert b.verdict is VerdictKind.FAILS and not b.error_verbatim
    assert "conv state is bfloat16 (SGLANG_MAMBA_CONV_DTYPE's default) and the model runs in float16" in b.error_text
    assert "got BFloat16 for the destination and Half for the source" in b.error_text
    env, dtype = b.remedies
    assert env.change == "SGLANG_MAMBA_CONV_DTYPE=float16 (env)" and dtype.change == "--dtype bfloat16"
    assert env.launch_flags(("NCCL_P2P_DISABLE=1", "--tp", "2")) == (
        "NCCL_P2P_DISABLE=1", "SGLANG_MAMBA_CONV_DTYPE=float16", "--tp", "2")
    assert env.flag_change is None
    fixed = run(q, ["SGLANG_MAMBA_CONV_DTYPE=float16", *argv, "--dtype", "half"], version="0.5.10", pre=46.89)
    assert fixed.verdict is VerdictKind.FITS and fixed.kv_tokens == b.kv_tokens
    assert run(q, argv, version="0.5.10", pre=46.89).verdict is VerdictKind.FITS  # bfloat16, as the config says
    # the other way round (#31719): a bfloat16 model with a float32 conv state
    wide = run(q, ["SGLANG_MAMBA_CONV_DTYPE=float32", *argv], version="0.5.10", pre=46.89)
    assert "got Float for the destination and BFloat16 for the source" in wide.error_text
    assert [r.change for r in wide.remedies] == ["SGLANG_MAMBA_CONV_DTYPE=bfloat16 (env)"]
    # an AWQ build whose config says float16 gets no --dtype remedy: its kernels take the dtype it was built in
    awq = replace(q, dtype="float16", quant=read_config(
        {**json.loads((CONFIGS / "Qwen__Qwen3.6-27B" / "config.json").read_text()),
         "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}, "awq").quant)
    awq_b = run(awq, argv, version="0.5.10", pre=46.89)
    assert [r.change for r in awq_b.remedies] == ["SGLANG_MAMBA_CONV_DTYPE=float16 (env)"]
    # before 0.5.9 the conv state was always bfloat16: only the model's dtype can change
    next_80b = spec("Qwen__Qwen3-Next-80B-A3B-Instruct")
    old = run(next_80b, ["--tp", "4", "--dtype", "half"], version="0.5.4", total_mib=81559, count=4)
    assert "(always bfloat16 before SGLang 0.5.9)" in old.error_text
    assert [r.change for r in old.remedies] == ["--dtype bfloat16"]


def test_an_earlier_failure_stays_first_and_its_remedies_carry_the_conv_fix():
    """The conv state fails only at the first request: a launch that fails before it fails with that first, the
    conflict is listed beside it, and the earlier failure's remedies are computed with the conv state fixed (else
    every one would still fail at the first request)."""
    from bot.core.budget import Remedy

    q = spec("Qwen__Qwen3.6-27B")
    b = run(q, ["--tp", "2", "--context-length", "65536", "--mem-fraction-static", "0.50", "--dtype", "half"],
            version="0.5.10", pre=46.89)
    assert b.verdict is VerdictKind.FAILS and b.error_text.startswith("Not enough memory")
    assert dict(zip(b.reason_kinds, b.reasons, strict=True))["state_dtype"].startswith("the first request fails")
    first, *rest = b.remedies
    assert first.change.startswith("--mem-fraction-static") and first.effect.startswith(
        "with SGLANG_MAMBA_CONV_DTYPE=float16: ")
    # its button sets the variable too: a relaunch without it would be refused again, for the conv state
    assert first.change.endswith(" (env SGLANG_MAMBA_CONV_DTYPE=float16)")
    assert first.launch_flags(("--tp", "2", "--dtype", "half")) == (
        "SGLANG_MAMBA_CONV_DTYPE=float16", "--tp", "2", "--dtype", "half", "--mem-fraction-static",
        first.change.split()[1])
    # a remedy that needs its own variable keeps it beside this one; a switch takes no value
    conv = Remedy.of(FlagEdit(env=("SGLANG_MAMBA_CONV_DTYPE=float16",)), first.flags, "", 0)
    spec_v2 = Remedy.of(FlagEdit("--mamba-scheduler-strategy", "extra_buffer", env=("SGLANG_ENABLE_SPEC_V2=1",)),
                        first.flags, "", 0).on_top_of(conv)
    assert spec_v2.change == ("--mamba-scheduler-strategy extra_buffer (env SGLANG_ENABLE_SPEC_V2=1 "
                              "SGLANG_MAMBA_CONV_DTYPE=float16)")
    assert spec_v2.launch_flags(("--tp", "2")) == ("SGLANG_ENABLE_SPEC_V2=1", "SGLANG_MAMBA_CONV_DTYPE=float16", "--tp",
                                                   "2", "--mamba-scheduler-strategy", "extra_buffer")
    switch = Remedy.of(FlagEdit("--disable-radix-cache"), first.flags, "", 1).on_top_of(conv)
    assert switch.change == "--disable-radix-cache (env SGLANG_MAMBA_CONV_DTYPE=float16)"
    assert switch.launch_flags(("--tp", "2")) == ("SGLANG_MAMBA_CONV_DTYPE=float16", "--tp", "2",
                                                  "--disable-radix-cache")
    # a dropped flag's relaunch sets it too
    plain = Remedy.of(FlagEdit("--speculative-algorithm", "NEXTN", drop=True), first.flags, "", 2).on_top_of(conv)
    assert plain.change == "drop --speculative-algorithm NEXTN (env SGLANG_MAMBA_CONV_DTYPE=float16)"
    assert plain.launch_flags(("--tp", "2", "--speculative-algorithm", "NEXTN")) == (
        "SGLANG_MAMBA_CONV_DTYPE=float16", "--tp", "2")
    assert rest[-2].change == "SGLANG_MAMBA_CONV_DTYPE=float16 (env)" and "still fails: Not enough memory" in \
        rest[-2].effect


# --------------------------------------------------------------------------- Mamba-2 hybrids (Nemotron-H)
# Geometry of NVIDIA's releases as NVIDIA-NeMo/Megatron-Bridge's nemotron_h_provider.py states it (commit 160ccccb),
# written with the config.json keys SGLang's NemotronHConfig reads; vocab 131,072 (docs/models/llm/nemotronh.md)

NEMOTRON_3_NANO = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "torch_dtype": "bfloat16",
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", "num_hidden_layers": 52,
    "hidden_size": 2688, "vocab_size": 131072, "tie_word_embeddings": False, "max_position_embeddings": 262144,
    "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "rope_theta": 10000,
    "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
    "intermediate_size": 1856, "mlp_hidden_act": "relu2", "n_routed_experts": 128, "moe_intermediate_size": 1856,
    "n_shared_experts": 1, "moe_shared_expert_intermediate_size": 3712, "num_experts_per_tok": 6,
}
NEMOTRON_H_8B = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "torch_dtype": "bfloat16",
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", "hidden_size": 4096,
    "vocab_size": 131072, "tie_word_embeddings": False, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
    "conv_kernel": 4, "intermediate_size": 21504,
}


def test_nemotron_h_layers_are_read_from_the_pattern():
    nano = read_config(NEMOTRON_3_NANO, "nemotron-3-nano")
    # 23 M (Mamba-2), 6 * (attention), 23 E (MoE): only the 6 attention layers hold KV, the 23 Mamba ones state
    assert (nano.layers, nano.full_layers, nano.linear_layers, nano.layer_kinds.count("ffn")) == (52, 6, 23, 23)
    assert nano.linear is not None and nano.linear.kind == "mamba2" and nano.mlp_matrices == 2
    assert nano.moe is not None and (nano.moe.shared_intermediate, nano.moe.dense_layers) == (3712, frozenset())
    assert nano.rope_tables == ()  # NemotronHAttention builds no rotary embedding
    # the deprecated num_hidden_layers is not needed: the pattern counts the layers, as in SGLang
    assert read_config({k: v for k, v in NEMOTRON_3_NANO.items() if k != "num_hidden_layers"}).layers == 52
    with pytest.raises(ModelConfigError, match="X"):
        read_config(dict(NEMOTRON_3_NANO, hybrid_override_pattern="M*EX"))


def test_nemotron_3_nano_weights_by_hand():
    parts = {p.name: p.params for p in weight_parts(read_config(NEMOTRON_3_NANO))}
    # embeddings and lm_head: 2 x 131,072 x 2,688
    assert parts["embeddings"] + parts["lm_head"] == 704_643_072
    # 6 attention layers: q 2688x4096 + o 4096x2688 + k,v 2x2688x256 = 23,396,352 each
    assert parts["attention"] + parts["attention kv"] == 6 * 23_396_352
    # 23 Mamba-2 layers: in_proj 2688 x (4096 z + 6144 xBC + 64 dt) = 27,697,152; out_proj 4096x2688 = 11,010,048;
    # conv1d 6144 x (4 + 1 bias) = 30,720; A_log, D, dt_bias 3 x 64; gated norm 4096: 38,742,208 a layer
    assert parts["linear attention"] + parts["linear attention conv and gates"] == 23 * 38_742_208
    # 23 MoE layers, ungated (relu2): 128 experts x 2 x 2688 x 1856; shared expert 2 x 2688 x 3712
    assert parts["experts"] == 23 * 128 * 2 * 2688 * 1856
    assert parts["mlp"] == 23 * 2 * 2688 * 3712
    # routers 23 x 128 x 2688, one norm per layer (52 x 2688) and the final norm
    assert parts["norms and routers"] == 23 * 128 * 2688 + 53 * 2688
    assert sum(parts.values()) == 31_577_937_344  # NVIDIA: "31.6B total parameters"


def test_nemotron_3_nano_kv_and_mamba_state_by_hand():
    nano = read_config(NEMOTRON_3_NANO)
    # tp 4: the 2 KV heads are copied (1 a rank) x (128 + 128) x 6 attention layers x 2 B
    assert kv_bytes_per_token(nano, 4, 2.0) == (3_072, 0.0)
    # conv: (64 x 64 + 2 x 8 x 128) / 4 x (4 - 1) x 2 B = 9,216 B a layer;
    # ssm: 64 / 4 heads x 64 x 128 x 4 B (fp32) = 524,288 B a layer; x 23 Mamba layers
    assert mamba_bytes_per_request(nano, 4) == (23 * 9_216, 23 * 524_288)


def test_nemotron_3_nano_at_a_logged_launch():
    """SGLang's own log of this model at tp 4 (page 64, radix cache off, --max-running-requests 8, 8K context,
    --mem-fraction-static 0.85), from a public test-failure report: `Load weight end ... avail mem=7.95 GB,
    mem usage=14.76 GB`, `Mamba Cache is allocated. max_mamba_cache_size: 8`, `KV Cache is allocated.
    #tokens: 1557504`. The prediction starts from its free memory before the load (7.95 + 14.76 GiB)."""
    b = run(read_config(NEMOTRON_3_NANO), ["--tp", "4", "--mem-fraction-static", "0.85", "--context-length", "8192",
                                           "--disable-radix-cache", "--max-running-requests", "8", "--page-size", "64",
                                           "--chunked-prefill-size", "1024", "--cuda-graph-max-bs", "8"],
            version="0.5.9", total_mib=24576, count=4, pre=7.95 + 14.76)
    assert abs(b.weights_gib - 14.76) / 14.76 < 0.01
    assert b.mamba_slots == 8
    assert abs(b.kv_tokens - 1_557_504) / 1_557_504 < 0.02
    assert b.verdict is VerdictKind.FITS


def test_nemotron_h_mlp_layers_are_ungated_and_separate():
    h8 = read_config(NEMOTRON_H_8B)
    assert (h8.full_layers, h8.linear_layers, h8.layer_kinds.count("ffn"), h8.moe) == (4, 24, 24, None)
    parts = {p.name: p.params for p in weight_parts(h8)}
    # 24 "-" layers of up 4096x21504 and down 21504x4096 (relu2, no gate), and nothing else runs an MLP
    assert parts["mlp"] == 24 * 2 * 4096 * 21504
    # the ungated model types (GPT-NeoX, StarCoder2, Falcon, Phi-2 ...) count two matrices, Phi-3 and Llama three
    assert read_config({**LLAMA_LIKE, "model_type": "starcoder2"}).mlp_matrices == 2
    assert read_config({**LLAMA_LIKE, "model_type": "phi3"}).mlp_matrices == 3


def test_a_config_that_leaves_the_tie_out_takes_its_classes_default():
    # CohereConfig ties by default (Command-R's checkpoints hold no lm_head); LlamaConfig does not
    assert read_config({**LLAMA_LIKE, "model_type": "cohere"}).tied_embeddings
    assert not read_config({**LLAMA_LIKE, "model_type": "llama"}).tied_embeddings
    assert not read_config({**LLAMA_LIKE, "model_type": "cohere", "tie_word_embeddings": False}).tied_embeddings


LLAMA_LIKE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
              "intermediate_size": 128}


def test_nemotron_3_super_latent_experts_are_narrow_and_their_projections_whole():
    # Nemotron 3 Super (same provider): 88 layers, 512 experts of 2688 working in a 1024-wide latent space
    pattern = "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME"
    sup = read_config(dict(NEMOTRON_3_NANO, hybrid_override_pattern=pattern, hidden_size=4096, mamba_num_heads=128,
                           n_routed_experts=512, moe_intermediate_size=2688, moe_shared_expert_intermediate_size=5376,
                           moe_latent_size=1024, num_nextn_predict_layers=2))
    assert (sup.layers, sup.full_layers, sup.linear_layers) == (88, 8, 40)
    parts = {p.name: p for p in weight_parts(sup)}
    assert parts["experts"].params == 40 * 512 * 2 * 1024 * 2688
    # fc1/fc2_latent_proj are ReplicatedLinear in SGLang: on every rank whole
    assert parts["latent projections"].params == 40 * 2 * 4096 * 1024 and not parts["latent projections"].sharded
    assert round(sum(p.params for p in parts.values()) / 1e9, 1) == 120.7  # NVIDIA: "120B parameters in total"


def test_mamba_heads_that_do_not_split_over_tp_fail_before_loading():
    from bot.core.budget import SPLIT_ASSERT_TEXT

    odd = read_config(dict(NEMOTRON_3_NANO, mamba_num_heads=60))  # 32 heads and 2 KV heads split over 8; 60 do not
    b = run(odd, ["--tp", "8"], count=8)
    assert b.error_text == SPLIT_ASSERT_TEXT
    assert next(x for x in b.lines if x.label == "layers over tp").why == \
        "the 60 Mamba-2 heads do not split over tp 8"


# SGLang's GraniteMoeHybridConfig defaults (configs/granitemoehybrid.py): 40 layers, attention every sixth,
# Mamba-2 of 64 heads x 64 with a 128 state and one group, no experts (each layer's MLP is its shared_mlp), NoPE
GRANITE_4_H_DEFAULTS = {
    "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "vocab_size": 100352,
    "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 40, "num_attention_heads": 32,
    "num_key_value_heads": 8, "position_embedding_type": "nope", "max_position_embeddings": 131072,
    "mamba_d_state": 128, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_d_head": 64, "mamba_n_heads": 64,
    "mamba_n_groups": 1, "num_local_experts": 0, "shared_intermediate_size": 8192,
}


def test_granite_4_h_mamba_layers_state_and_weights_by_hand():
    g = read_config(GRANITE_4_H_DEFAULTS)
    # no layer_types: SGLang's default pattern, attention where (i + 1) % 6 == 0
    assert (g.full_layers, g.linear_layers) == (6, 34) and g.layer_kinds[5] == "full"
    assert g.tied_embeddings and g.rope_tables == () and g.linear is not None and g.linear.kind == "mamba2"
    # KV: 8 heads x (64 + 64) x 6 layers x 2 B; conv (4096 + 2 x 1 x 128) x 3 x 2 B and ssm 64 x 64 x 128 x 4 B a layer
    assert kv_bytes_per_token(g, 1, 2.0)[0] == 12_288
    assert mamba_bytes_per_request(g, 1) == (34 * 26_112, 34 * 2_097_152)
    parts = {p.name: p.params for p in weight_parts(g)}
    # tied embeddings 100,352 x 2,048; attention (q, o 2048x2048; k, v 2048x512) 10,485,760 a layer;
    # Mamba-2: in_proj 2048 x 8512 + out_proj 4096x2048 + conv 4352 x 5 + 3 x 64 + norm 4096 = 25,847,232 a layer;
    # the shared_mlp (gated: 3 x 2048 x 8192) in all 40 layers; two norms a layer and the final one
    assert parts == {"embeddings": 205_520_896, "attention": 6 * 8_388_608, "attention kv": 6 * 2_097_152,
                     "linear attention": 34 * 25_821_184, "linear attention conv and gates": 34 * 26_048,
                     "mlp": 40 * 50_331_648, "norms and routers": 81 * 2048}
    assert sum(parts.values()) == 3_160_673_152


# Falcon-H1-0.5B as NVIDIA-NeMo/Megatron-Bridge's test_falcon_h1_bridge.py quotes its config (commit acc8ca4b)
FALCON_H1_05B = {
    "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "torch_dtype": "bfloat16",
    "hidden_size": 1024, "intermediate_size": 2048, "num_hidden_layers": 36, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 32784, "tie_word_embeddings": False,
    "max_position_embeddings": 16384, "rope_theta": 100000000000.0, "mamba_d_conv": 4, "mamba_d_head": 64,
    "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 24, "mamba_rms_norm": False,
    "mamba_conv_bias": True,
}


def test_falcon_h1_runs_attention_and_mamba_side_by_side_in_every_layer():
    f = read_config(FALCON_H1_05B)
    # SGLang's FalconH1Config: full_attention_layer_ids and linear_layer_ids are both every layer
    assert (f.full_layers, f.linear_layers, f.parallel_hybrid, f.is_hybrid_linear) == (36, 36, True, True)
    # KV: 2 heads x (64 + 64) x 36 x 2 B; state: conv (24 x 64 + 2 x 1 x 128) x 3 x 2 B, ssm 24 x 64 x 128 x 4 B
    assert kv_bytes_per_token(f, 1, 2.0)[0] == 18_432
    assert mamba_bytes_per_request(f, 1) == (36 * 10_752, 36 * 786_432)
    parts = {p.name: p.params for p in weight_parts(f)}
    # per layer: attention q, o 1024x512 and k, v 1024x128; Mamba-2 in_proj 1024 x (1536 + 1792 + 24) and out_proj
    # 1536x1024, conv 1792 x 5, A_log/D/dt_bias 3 x 24, no mixer norm (mamba_rms_norm false); gated MLP 3x1024x2048
    assert parts["attention"] + parts["attention kv"] == 36 * 1_310_720
    assert parts["linear attention"] + parts["linear attention conv and gates"] == 36 * (5_005_312 + 9_032)
    assert parts["mlp"] == 36 * 6_291_456
    assert sum(parts.values()) == 521_411_104  # "Falcon-H1-0.5B"


# Kimi-Linear-48B-A3B's geometry as several public copies of its config.json quote it (see tests/fixtures/SOURCES.md)
KIMI_LINEAR_48B = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "torch_dtype": "bfloat16",
    "vocab_size": 163840, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 27,
    "num_attention_heads": 32, "num_key_value_heads": 32, "tie_word_embeddings": False, "first_k_dense_replace": 1,
    "moe_intermediate_size": 1024, "moe_layer_freq": 1, "num_experts": 256, "num_experts_per_token": 8,
    "num_shared_experts": 1, "q_lora_rank": None, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "mla_use_nope": True, "num_nextn_predict_layers": 0,
    "linear_attn_config": {"full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128, "num_heads": 32,
                           "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
                           "short_conv_kernel_size": 4},
}


def test_kimi_linear_kda_layers_state_and_weights_by_hand():
    k = read_config(KIMI_LINEAR_48B)
    # kda_layers count from 1 (KimiLinearConfig.is_kda_layer): 20 KDA layers, the other 7 MLA
    assert (k.linear_layers, k.full_layers, k.layer_kinds[3], k.layer_kinds[0]) == (20, 7, "full", "linear")
    assert k.linear is not None and k.linear.kind == "kda" and k.mla is not None
    # KV: MLA (512 + 64) x 7 layers x 2 B; state: conv 3 x 4096 x (4 - 1) x 2 B, ssm 32 x 128 x 128 x 4 B a layer
    assert kv_bytes_per_token(k, 1, 2.0)[0] == 8_064
    assert mamba_bytes_per_request(k, 1) == (20 * 73_728, 20 * 2_097_152)
    parts = {p.name: p.params for p in weight_parts(k)}
    # a KDA layer: q, k, v 3 x 2304 x 4096, beta 2304 x 32, f_b and g_b 2 x 128 x 4096, o 4096 x 2304 (split over tp);
    # f_a and g_a 2 x 2304 x 128 (whole on every rank); dt_bias 4096, convolutions 3 x 4096 x 4, A_log 32, norm 128
    assert parts["linear attention"] == 20 * 38_871_040
    assert parts["linear attention conv and gates"] == 20 * 53_408
    # MLA without a q LoRA: q 2304 x 32 x 192, kv_b 512 x 32 x 256, o 4096 x 2304; kv_a 2304 x 576 (+ its norm) whole
    assert parts["attention"] == 7 * 27_787_264
    assert parts["attention down-projections"] == 20 * 589_824 + 7 * 1_327_616
    # one dense layer (3 x 2304 x 9216), 26 MoE layers of 256 experts and one shared expert (3 x 2304 x 1024 each)
    assert parts["mlp"] == 63_700_992 + 26 * 7_077_888 and parts["experts"] == 26 * 256 * 7_077_888
    assert sum(parts.values()) == 49_122_675_072


def test_kda_heads_that_do_not_split_over_tp_fail_with_kimi_linears_own_error():
    # 32 KDA heads over tp 3: KimiDeltaAttention's constructor raises before any weight loads
    b = run(read_config(KIMI_LINEAR_48B), ["--tp", "3"], count=3)
    assert b.verdict is VerdictKind.FAILS
    assert b.error_text == "ValueError: KDA num_heads (32) must be divisible by global tp_size (3)"
    assert b.remedies and b.remedies[0].change.startswith("--tp-size")


def test_lfm2_short_convolutions_state_and_weights_by_hand():
    lfm = spec("LiquidAI__LFM2-700M")
    # full_attn_idxs [2, 5, 8, 10, 12, 14]: six attention layers, the other ten gated short convolutions
    assert (lfm.full_layers, lfm.linear_layers, lfm.layer_kinds[2], lfm.layer_kinds[0]) == (6, 10, "full", "linear")
    assert lfm.linear is not None and lfm.linear.kind == "shortconv" and not lfm.linear.sharded
    # Lfm2MLP: block_ff_dim 10240 -> int(2 x 10240 / 3) = 6826, rounded up to a multiple of 256 = 6912
    assert lfm.intermediate == 6912 and lfm.tied_embeddings and lfm.lm_head_copy
    # KV: 8 heads x (64 + 64) x 6 layers x 2 B; state: the last 2 inputs of 1536 channels x 2 B, no SSM, a conv layer
    assert kv_bytes_per_token(lfm, 1, 2.0)[0] == 12_288
    assert mamba_bytes_per_request(lfm, 1) == (10 * 6_144, 0.0)
    assert mamba_bytes_per_request(lfm, 2) == (10 * 3_072, 0.0)
    parts = {p.name: p for p in weight_parts(lfm)}
    # embeddings 65,536 x 1,536, and SGLang's own lm_head filled from them; q and o 1536 x 1536 + q/k norms 2 x 64,
    # k and v 1536 x 512; in_proj 1536 x 4608 + out_proj 1536 x 1536 + 1536 x 3 taps (nn.Linear: whole on every
    # rank); gated MLP 3 x 1536 x 6912 in all 16 layers; two norms a layer and the final one
    assert {n: p.params for n, p in parts.items()} == {
        "embeddings": 100_663_296, "lm_head": 100_663_296, "attention": 6 * 4_718_720, "attention kv": 6 * 1_572_864,
        "short convolutions": 10 * 9_441_792, "mlp": 16 * 31_850_496, "norms and routers": 33 * 1536}
    assert not parts["short convolutions"].sharded and not parts["short convolutions"].quantizable
    # the checkpoint stores the tied table once: 742,489,344 parameters in bf16
    assert checkpoint_bytes(lfm) == 2 * 742_489_344
    # at tp 2 every rank holds half of what splits, and all of the short convolutions
    halves = 2 * (100_663_296 * 2 + 6 * 4_718_720 + 6 * 1_572_864 + 16 * 31_850_496) / 2
    assert weight_bytes_per_gpu(lfm, 2) == halves + 2 * (10 * 9_441_792 + 33 * 1536)


def test_lfm2_budget_counts_the_lm_head_copy_from_the_checkpoint_size_too():
    lfm = spec("LiquidAI__LFM2-700M")
    argv = ["--tp", "2", "--context-length", "32768"]
    estimated = run(lfm, argv)
    from_file = run(lfm, argv, weights_bytes_total=int(checkpoint_bytes(lfm)))
    # the file holds the table once; the GPU holds it twice (embeddings and SGLang's lm_head), either way
    assert abs(from_file.weights_gib - estimated.weights_gib) < 0.01
    assert "lm_head that SGLang builds" in next(x for x in from_file.lines if x.label == "target weights").why
    assert "short convolutions whole on every rank" in next(x for x in estimated.lines
                                                            if x.label == "target weights").why
    state = next(x for x in estimated.lines if x.label == "hybrid state per request")
    assert "no SSM state" in state.why and "10 short-convolution layers" in state.why
    assert estimated.verdict is VerdictKind.FITS and (estimated.mamba_slots or 0) > 0
    assert not any("state-space" in n for n in lfm.notes)


def test_lfm2_channels_that_do_not_split_over_tp_fail_before_loading():
    odd = read_config({"model_type": "lfm2", "hidden_size": 1540, "num_hidden_layers": 4, "num_attention_heads": 8,
                       "num_key_value_heads": 8, "vocab_size": 1000, "layer_types": ["conv", "full_attention"] * 2})
    b = run(odd, ["--tp", "8"], count=8)
    assert b.verdict is VerdictKind.FAILS
    assert next(x for x in b.lines if x.label == "layers over tp").why == \
        "the 1540 short-convolution channels do not split over tp 8"


# LFM2-8B-A1B's geometry (see tests/fixtures/SOURCES.md)
LFM2_8B_A1B = {
    "architectures": ["Lfm2MoeForCausalLM"], "model_type": "lfm2_moe", "dtype": "bfloat16", "vocab_size": 65536,
    "hidden_size": 2048, "intermediate_size": 7168, "moe_intermediate_size": 1792, "num_hidden_layers": 24,
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_dense_layers": 2, "num_experts": 32,
    "num_experts_per_tok": 4, "conv_L_cache": 3, "conv_bias": False, "tie_word_embeddings": True,
    "max_position_embeddings": 128000, "use_expert_bias": True,
    "layer_types": ["full_attention" if i in (2, 6, 10, 14, 18, 21) else "conv" for i in range(24)],
}


def test_lfm2_moe_splits_its_short_convolutions_and_counts_its_experts_by_hand():
    moe = read_config(LFM2_8B_A1B)
    assert (moe.full_layers, moe.linear_layers, moe.head_dim) == (6, 18, 64)
    assert moe.linear is not None and moe.linear.sharded and moe.moe is not None
    assert moe.moe.dense_layers == frozenset({0, 1}) and moe.lm_head_copy
    parts = {p.name: p.params for p in weight_parts(moe)}
    # Lfm2MoeShortConv: in_proj (merged column-parallel, 3 x 2048) and out_proj (row-parallel) split over tp and
    # quantized with the checkpoint; the 2048 x 3 filter split along its channels
    assert parts["linear attention"] == 18 * 4 * 2048 * 2048
    assert parts["linear attention conv and gates"] == 18 * 2048 * 3
    # two dense layers (3 x 2048 x 7168), then 22 layers of 32 experts of 3 x 2048 x 1792 and a 2048 x 32 router
    assert parts["mlp"] == 2 * 44_040_192 and parts["experts"] == 22 * 32 * 11_010_048
    assert parts["norms and routers"] == 22 * 2048 * 32 + 49 * 2048
    # what the checkpoint holds (the tied table once): the transformers docs' "8.3B total parameters"
    assert checkpoint_bytes(moe) / 2 == 8_339_929_856
    # state at tp 2: 1024 channels a rank x the last 2 inputs x 2 B, a conv layer
    assert mamba_bytes_per_request(moe, 2) == (18 * 1024 * 2 * 2, 0.0)


# ERNIE-4.5-21B-A3B's geometry as several public copies of its config.json quote it (see tests/fixtures/SOURCES.md)
ERNIE_45_21B_A3B = {
    "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "hidden_size": 2560,
    "intermediate_size": 12288, "max_position_embeddings": 131072, "num_attention_heads": 20, "num_key_value_heads": 4,
    "head_dim": None, "num_hidden_layers": 28, "rms_norm_eps": 1e-05, "vocab_size": 103424, "rope_theta": 500000,
    "use_bias": False, "tie_word_embeddings": True, "moe_num_experts": 64, "moe_layer_start_index": 1,
    "moe_intermediate_size": 1536, "moe_k": 6, "moe_layer_interval": 1, "moe_num_shared_experts": 2,
    "moe_layer_end_index": None,
}


def test_ernie_4_5_moe_experts_are_read_from_their_own_keys():
    ernie = read_config(ERNIE_45_21B_A3B)
    # Ernie4DecoderLayer: experts from moe_layer_start_index to the last layer, every moe_layer_interval-th
    assert ernie.moe is not None and ernie.moe.dense_layers == frozenset({0})
    parts = {p.name: p.params for p in weight_parts(ernie)}
    # one dense layer 3 x 2560 x 12288; 27 layers of 64 experts of 3 x 2560 x 1536 and the shared experts
    # (moe_intermediate_size x moe_num_shared_experts = 3072 wide), each with a 64 x 2560 router
    assert parts["mlp"] == 94_371_840 + 27 * 3 * 2560 * 3072
    assert parts["experts"] == 27 * 64 * 3 * 2560 * 1536
    assert parts["norms and routers"] == 27 * 64 * 2560 + 57 * 2560
    # tied embeddings 103,424 x 2,560; q and o 2560 x 2560, k and v 2560 x 512 in 28 layers: 21.8B in all ("21B")
    assert sum(parts.values()) == 21_825_436_160
    assert not any("not read" in n for n in ernie.notes)


def test_experts_the_engine_cannot_read_are_named_not_counted_as_dense_in_silence():
    # a key naming experts that no reader here knows: the model would be counted as dense, far too small
    odd = read_config({**LLAMA_LIKE, "model_type": "some_moe", "routed_expert_count": 64})
    assert any("experts (routed_expert_count) that are not read here" in n for n in odd.notes)
    # per-layer lists (Hunyuan's form) are read at their largest entry, and a difference is said
    listed = read_config({**LLAMA_LIKE, "num_experts": 8, "moe_intermediate_size": [96, 128],
                          "num_shared_expert": [1, 1]})
    assert listed.moe is not None and (listed.moe.intermediate, listed.moe.shared_intermediate) == (128, 128)
    assert any("the experts' width differs by layer or expert group (96, 128)" in n for n in listed.notes)
    assert not any("not read" in n for n in listed.notes)


def test_a_config_with_state_layers_not_modelled_says_so():
    # Jamba's Mamba (v1) layers are not modelled, and the answer says so (keys as transformers' JambaConfig names them)
    jamba = {"architectures": ["JambaForCausalLM"], "model_type": "jamba", **LLAMA_LIKE,
             "attn_layer_period": 8, "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_expand": 2}
    notes = read_config(jamba).notes
    assert any("state-space or linear-attention layers (attn_layer_period, mamba_d_state, mamba_expand)" in n
               for n in notes)
    # MiniMax-Text-01 / M1: attn_type_list marks its lightning-attention layers 0 (SGLang's MiniMaxText01Config)
    minimax = {**LLAMA_LIKE, "model_type": "minimax", "attn_type_list": [0, 0, 0, 1]}
    assert any("linear-attention layers (attn_type_list)" in n for n in read_config(minimax).notes)
    assert not any("state-space" in n for n in read_config({**minimax, "attn_type_list": [1, 1]}).notes)
    assert not any("state-space" in n for n in read_config(FALCON_H1_05B).notes)
    assert not any("state-space" in n for n in read_config(GRANITE_4_H_DEFAULTS).notes)
    assert not any("state-space" in n for n in spec("Qwen__Qwen3.6-27B").notes)


def test_qwen3_next_layer_pattern_from_interval():
    nxt = spec("Qwen__Qwen3-Next-80B-A3B-Instruct")
    assert nxt.layer_kinds[3] == "full" and nxt.layer_kinds[0] == "linear"
    assert (nxt.full_layers, nxt.linear_layers) == (12, 36)


def test_qwen3_next_gates_attention_and_its_nextn_draft_is_one_moe_layer():
    nxt = spec("Qwen__Qwen3-Next-80B-A3B-Instruct")
    assert nxt.attn_output_gate and nxt.mtp_layers == 0  # neither stated in its config
    # the MTP layer: q+gate 2048 x 8192, k and v 2048 x 512, o 4096 x 2048, q/k norms 2 x 256, 512 experts of
    # 3 x 2048 x 512, the shared expert 3 x 2048 x 512 (split over tp), and the 4096 -> 2048 input projection
    # (an nn.Linear every rank holds whole)
    layer = 2048 * 8192 + 2 * 2048 * 512 + 4096 * 2048 + 512 + 512 * 3 * 2048 * 512 + 3 * 2048 * 512
    fc = 2 * 2048**2
    assert layer + fc == 1_649_410_560
    b = run(nxt, ["--tp", "4", "--speculative-algorithm", "NEXTN", "--speculative-num-draft-tokens", "4"],
            version="0.5.9", total_mib=143771, count=4)
    assert b.draft_weights_gib == pytest.approx((layer / 4 + fc) * 2 / 2**30)  # 0.78 GiB, not a dense EAGLE layer
    # while it loads it also holds its own embeddings and lm_head (151936 x 2048 each, vocab-parallel)
    assert b.draft_load_gib - b.draft_weights_gib == pytest.approx(2 * 151936 * 2048 * 2 / 4 / 2**30)
    assert "one assumed" in next(x.why for x in b.lines if x.label == "draft weights")
    one = layer + fc
    # with it the checkpoint holds the published 81.3 B parameters
    assert 81.2e9 < sum(p.params for p in weight_parts(nxt)) + one < 81.4e9


def test_era_d_folds_the_mtp_draft_into_the_cell():
    q = spec("Qwen__Qwen3.6-27B")
    b = run(q, ["--tp", "2", "--speculative-algorithm", "NEXTN", "--speculative-num-draft-tokens", "4"], pre=47.0)
    assert b.era == "D" and b.kv_cell_bytes == 32_768 * (1 + 1 / 16)  # 34,816 B


# --------------------------------------------------------------------------- MoE and multimodal

def test_moe_expert_parameters_by_hand():
    moe = spec("Qwen__Qwen3-235B-A22B-Instruct-2507")
    experts = next(p for p in weight_parts(moe) if p.name == "experts")
    assert experts.params == 94 * 128 * 3 * 4096 * 1536
    assert 234e9 < sum(p.params for p in weight_parts(moe)) < 236e9  # the model's name says 235B


def test_llama4_moe_layers_carry_a_shared_expert_and_interleave_with_dense_ones():
    # Llama-4-Scout's text config as a public vLLM report quotes it (moe_layers 0..47, intermediate_size 8192 for
    # the experts, intermediate_size_mlp 16384 for dense layers); 40 heads, 8 KV heads, vocab 202048, 16 experts
    text = {"model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "interleave_moe_layer_step": 1, "moe_layers": list(range(48)), "num_local_experts": 16,
            "num_experts_per_tok": 1, "vocab_size": 202048, "attention_chunk_size": 8192, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16"}
    scout = read_config({"architectures": ["Llama4ForCausalLM"], **text})
    parts = {p.name: p.params for p in weight_parts(scout)}
    # every MoE layer runs 16 routed experts and one shared expert (Llama4TextMoe.shared_expert), each
    # 3 x 5120 x 8192; the shared one is a dense part of the layer, split over tp like an MLP
    assert parts["experts"] == 48 * 16 * 3 * 5120 * 8192
    assert parts["mlp"] == 48 * 3 * 5120 * 8192
    attention = 48 * (5120 * 5120 * 2 + 5120 * 1024 * 2)  # q and o (40 x 128), k and v (8 x 128)
    whole = 2 * 202048 * 5120 + attention + parts["experts"] + parts["mlp"] + 48 * (5120 * 16 + 2 * 5120) + 5120
    assert sum(parts.values()) == whole and 107.7e9 < whole < 107.8e9  # + a 0.9B vision tower: "109B total"
    # Maverick's step 2: layers 1, 3, ... are MoE (128 experts), the others dense MLPs 16384 wide
    stepped = {k: v for k, v in text.items() if k != "moe_layers"}
    maverick = read_config({"architectures": ["Llama4ForCausalLM"], **stepped, "num_local_experts": 128,
                            "interleave_moe_layer_step": 2})
    assert maverick.moe is not None and maverick.moe.dense_layers == frozenset(range(0, 48, 2))
    parts = {p.name: p.params for p in weight_parts(maverick)}
    assert parts["experts"] == 24 * 128 * 3 * 5120 * 8192
    assert parts["mlp"] == 24 * 3 * 5120 * 16384 + 24 * 3 * 5120 * 8192  # dense layers + shared experts
    assert 400e9 < sum(parts.values()) < 401.5e9  # the text model alone; its 0.9B vision tower makes "400B total"


def test_multimodal_wrapper_reads_the_nested_text_config():
    vl = spec("Qwen__Qwen3-VL-32B-Instruct")
    assert (vl.layers, vl.kv_heads, vl.head_dim, vl.multimodal) == (64, 8, 128, True)
    # 27 ViT blocks x (4 x 1152^2 + 2 x 1152 x 4304) + the merger and one per deep-stacked layer [8, 16, 24]:
    # 4 x (4608^2 + 4608 x 5120), 4608 = 1152 x spatial_merge_size 2 squared
    assert vl.vision_params == 27 * (4 * 1152**2 + 2 * 1152 * 4304) + 4 * (4608**2 + 4608 * 5120) == 590_376_960
    # Gemma 4: a gated MLP (gate_up + down) in each of 27 blocks, a 2 x 10240 x 1152 position table and the
    # 1152 -> 5376 projection into the LM
    gemma = spec("google__gemma-4-31b-it")
    assert gemma.vision_params == 27 * (4 * 1152**2 + 3 * 1152 * 4304) + 2 * 10240 * 1152 + 1152 * 5376
    # SGLang reads the vision config's num_hidden_layers (24 when absent: Qwen names it "depth") and hidden_size:
    # 0.95 x clamp(1 - 0.1 x (24 x 1152^2 / (24 x 1024^2) - 1)) = 0.95 x 0.97344 = 0.9248
    assert vlm_factor(spec("Qwen__Qwen3.6-27B")) == pytest.approx(0.9248, abs=1e-4)
    # Gemma 4 states num_hidden_layers 27: 0.95 x (1 - 0.1 x (27 x 1152^2 / (24 x 1024^2) - 1)) = 0.9097
    assert vlm_factor(spec("google__gemma-4-31b-it")) == pytest.approx(0.9097, abs=1e-4)


def test_kimi_k25_moonvit_tower_and_its_replicated_projector():
    kimi = spec("moonshotai__Kimi-K2.5")
    # 27 blocks x (4 x 1152^2 + 2 x 1152 x 4304) + the learned 64 x 64 x 1152 position table, split over tp
    assert kimi.vision_params == 27 * (4 * 1152**2 + 2 * 1152 * 4304) + 64 * 64 * 1152
    # the patch merger's projector: 2 x 2 patches of 1152 = 4608 -> 4608 -> 7168, ReplicatedLinear in SGLang
    assert kimi.vision_projector_params == 4608 * 4608 + 4608 * 7168
    projector = next(p for p in weight_parts(kimi) if p.name == "vision projector")
    assert not projector.sharded
    # SGLang's KimiK25VisionConfig defaults (27 layers, 1152 wide) are the checkpoint's vt_* values
    assert vlm_factor(kimi) == pytest.approx(0.9097, abs=1e-4)
    assert not any("vision tower" in note for note in kimi.notes)


def test_awq_moe_on_rocm_materialises_experts_unquantized():
    moe = spec("nvidia__Qwen3.6-35B-A3B-NVFP4")
    argv = ["--tp", "2", "--quantization", "awq"]
    from bot.core.model import quantization_from

    rocm = compute_budget(BudgetInput(moe, parse_sglang_flags(argv), GpuPlan("AMD Radeon AI PRO R9700", 32624, 2,
                                                                             pre_gib=31.46), parse_version("0.5.11"),
                                      quant=quantization_from("awq")))
    cuda = compute_budget(BudgetInput(moe, parse_sglang_flags(argv), GpuPlan("NVIDIA RTX A6000", 49140, 2,
                                                                             pre_gib=31.46), parse_version("0.5.11"),
                                      quant=quantization_from("awq")))
    assert rocm.verdict is VerdictKind.FAILS and "OutOfMemoryError" in rocm.error_text
    assert cuda.weights_gib < 12 and rocm.weights_gib > 30


# --------------------------------------------------------------------------- what a checkpoint leaves unquantized

# openai/gpt-oss-120b config.json quantization_config.modules_to_not_convert, as published
GPT_OSS_EXCLUDED = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]


def test_exclusion_entries_name_weight_parts_routers_and_tiny_projections_aside():
    kimi = json.loads((CONFIGS / "moonshotai__Kimi-K2.5" / "config.json").read_text())
    ignore = kimi["quantization_config"]["ignore"]
    assert [exclusion_part(p) for p in ignore] == ["lm_head", "attention", "mlp", "mlp"]
    assert [exclusion_part(p) for p in GPT_OSS_EXCLUDED] == ["attention", None, "embeddings", "lm_head"]
    # Qwen3.x NVFP4 exports name GDN projections and routers one by one; the gates are routers
    assert exclusion_part("model.language_model.layers.0.linear_attn.out_proj") == "linear attention"
    assert exclusion_part("model.language_model.layers.0.linear_attn.in_proj_a") is None
    assert exclusion_part("model.language_model.layers.0.mlp.shared_expert_gate") is None
    assert exclusion_part("model.language_model.layers.0.mlp.gate") is None
    assert exclusion_part("model.language_model.layers.0.mlp.gate_proj") == "mlp"
    assert exclusion_part("mtp*") == "mtp head"


def test_per_layer_exclusions_keep_that_layers_share():
    qwen = spec("Qwen__Qwen3.6-27B")  # 16 full-attention layers: 3, 7, ..., 63
    kept = dict(kept_parts([f"model.language_model.layers.{i}.self_attn.q_proj" for i in (3, 7)]
                           + ["model.language_model.layers.*.mlp"], qwen.layer_kinds))
    assert kept == {"attention": 2 / 16, "mlp": 1.0}


def test_kimi_keeps_attention_shared_experts_and_dense_mlp_in_bf16():
    kimi = spec("moonshotai__Kimi-K2.5")
    assert dict(kimi.quant.kept) == {"attention": 1.0, "lm_head": 1.0, "mlp": 1.0}
    # by hand: routed experts at 4 bits + one bf16 scale per 32 weights, everything else bf16
    expected = sum(p.params / (8 if p.sharded else 1) * (0.5 + 2 / 32 if p.expert else 2.0)
                   for p in weight_parts(kimi))
    assert weight_bytes_per_gpu(kimi, 8) == pytest.approx(expected)
    budget = run(kimi, ["--tp", "8"], total_mib=143771, count=8)
    assert "checkpoint keeps attention, mlp in bfloat16" in next(line.why for line in budget.lines
                                                                 if line.label == "target weights")


def test_nvfp4_export_keeps_its_mtp_head_out_of_the_quantized_groups():
    assert dict(spec("nvidia__Qwen3.6-35B-A3B-NVFP4").quant.kept) == {"mtp head": 1.0}


# --------------------------------------------------------------------------- versions, defaults, errors

def test_error_text_by_version():
    assert not_enough_memory_text(parse_version("0.5.2"), 0.85) == \
        "Not enough memory. Please try to increase --mem-fraction-static."
    assert not_enough_memory_text(parse_version("0.5.9"), 0.85).endswith(
        "Current value: self.server_args.mem_fraction_static=0.85")
    assert not_enough_memory_text(parse_version("0.5.11"), 0.88).endswith("Current value: mem_fraction_static=0.88")


@pytest.mark.parametrize("version, speculative, expected", [
    ("0.5.8", False, 0.858), ("0.5.8", True, 0.816), ("0.5.9", True, 0.775), ("0.5.13", True, 0.858),
])
def test_default_mem_fraction_for_an_a6000_pair(version, speculative, expected):
    # reserved = 512 + 4096 x 1.5 + 32 x 2 + 2/8 x 1024 = 6,976 MiB (+2 or +4 GiB speculative);
    # (49140 - reserved) / 49140, torch.compile on so no piecewise graphs
    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    flags = LaunchFlags(tp=2, enable_torch_compile=True, speculative_algorithm="EAGLE" if speculative else None)
    mfs, _ = default_mem_fraction_static(llama, flags, 49140, parse_version(version), 4096, 32)
    assert mfs == pytest.approx(expected, abs=0.0015)


def test_weights_larger_than_the_gpu_fail_before_any_pool():
    b = run(spec("meta-llama__Llama-3.1-70B-Instruct"), ["--tp", "1"], count=1, pre=47.0)
    assert b.verdict is VerdictKind.FAILS and b.error_text.startswith("torch.OutOfMemoryError")
    assert any(r.change.startswith("tp 2") or r.change.startswith("--tp-size") for r in b.remedies)


def test_pool_smaller_than_context_is_degraded_with_a_context_remedy():
    # 22.9 - 15.26 GiB weights - 22.9 x 0.1 = 5.35 GiB / 147,456 B (8 x 256 x 36 x 2) = ~38,950 tokens
    b = run(spec("Qwen__Qwen3-8B"), ["--context-length", "40960", "--mem-fraction-static", "0.9"], count=1,
            total_mib=24576, pre=22.9)
    assert b.verdict is VerdictKind.DEGRADED and b.kv_tokens < 40960
    assert any("smaller than the context length" in r for r in b.reasons)


def test_a_context_longer_than_the_config_allows_is_refused_as_sglang_refuses_it():
    # Qwen3-8B's config: max_position_embeddings 40960, no rope scaling; SGLang's ModelConfig raises before loading
    b = run(spec("Qwen__Qwen3-8B"), ["--context-length", "131072"], count=1, total_mib=24576)
    assert b.verdict is VerdictKind.FAILS
    assert b.error_text.startswith("ValueError: User-specified context_length (131072) is greater than the derived "
                                   "context_length (40960).")
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in next(x for x in b.lines if x.label == "context length").why
    assert b.remedies[0].change == "--context-length 40960"
    # a config overridden on the command line may allow it: not refused on the file's figure
    overridden = run(spec("Qwen__Qwen3-8B"), ["--context-length", "131072", "--json-model-override-args",
                                              '{"max_position_embeddings": 131072}'], count=1, total_mib=24576)
    assert not (overridden.error_text or "").startswith("ValueError: User-specified context_length")
    # SGLang's get_context_length: a rope scaling factor multiplies, unless it is YaRN's (it names its original
    # length) or Llama 3's; the first of its keys wins
    assert derived_context_length({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4}}) \
        == 16384
    assert derived_context_length({"max_position_embeddings": 131072, "rope_scaling": {
        "rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}}) == 131072
    assert derived_context_length({"max_position_embeddings": 131072, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0}}) == 131072
    assert derived_context_length({"seq_length": 8192, "max_position_embeddings": 32768}) == 8192
    assert derived_context_length({}) is None


# --------------------------------------------------------------------------- flags

def test_flags_parse_aliases_prefixes_and_passthrough():
    f = parse_sglang_flags(["--tp", "2", "--mem-fraction-static=0.88", "--speculative-algo", "NEXTN",
                            "--model-path", "/models/q", "--trust-remote-code", "--frobnicate", "7"])
    assert (f.tp, f.mem_fraction_static, f.speculative_algorithm) == (2, 0.88, "EAGLE")
    assert f.passthrough == ("--model-path", "/models/q", "--trust-remote-code")
    assert f.unknown == ("--frobnicate", "7")
    # a flag outside the table keeps all its values (SGLang's list flags take several; its launch has no positional)
    listed = parse_sglang_flags(["--cuda-graph-bs", "1", "2", "4", "8", "--tp", "2", "--enable-hierarchical-cache"])
    assert listed.unknown == ("--cuda-graph-bs", "1", "2", "4", "8", "--enable-hierarchical-cache") and listed.tp == 2


@pytest.mark.parametrize("argv, message", [
    (["--mem-fraction-static", "1.5"], "--mem-fraction-static 1.5"),
    (["--tp-size", "two"], "`--tp-size two`: needs a whole number"),
    (["--context-length", "abc"], "`--context-length abc`: needs a whole number"),
    (["--mem-fraction-static", "most"], "`--mem-fraction-static most`: needs a number"),
    (["--kv-cache-dtype", "int3"], "must be one of"),
    (["--context-length"], "needs a value"),
    (["positional"], "start with --"),
    (["--port", "99999"], "`--port 99999`: must be a TCP port, 1 to 65535"),  # not a pre-flight that finds it free
    (["--port=0"], "`--port 0`: must be a TCP port, 1 to 65535"),
    (["--tp", "2;"], "`--tp 2;` (SGLang's `--tp-size`): needs a whole number"),  # named as typed
    (["--context-len", "64k"], "`--context-len 64k` (SGLang's `--context-length`): needs a whole number"),
    (["--disable-cuda-graph=1"], "`--disable-cuda-graph` is a switch and takes no value"),
])
def test_bad_flag_values_name_the_flag(argv, message):
    with pytest.raises(UsageError) as err:
        parse_sglang_flags(argv)
    assert message in err.value.user_message


# --------------------------------------------------------------------------- the seed case

SEED = ["--tp", "2", "--enable-torch-compile", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--mamba-full-memory-ratio", "0.5"]


def seed(version, mfs, context):
    gpus = GpuPlan("NVIDIA RTX A6000", 49140, 2, free_mib=(49139, 49139))  # two clean A6000s as nvidia-smi shows
    flags = parse_sglang_flags([*SEED, "--mem-fraction-static", mfs, "--context-length", str(context)])
    return compute_budget(BudgetInput(spec("Qwen__Qwen3.6-27B"), flags, gpus, parse_version(version)))


@pytest.mark.parametrize("context", [65536, 32768])
@pytest.mark.parametrize("mfs", ["0.85", "0.88"])
def test_seed_on_sglang_059_fails_like_the_real_launch(mfs, context):
    b = seed("0.5.9", mfs, context)
    # 0.5.9 turns the radix cache off silently for MTP on a hybrid model, so the state pool is
    # 48 slots (the implicit max_running_requests) + the MTP intermediate state for 48 x 4 draft tokens:
    # 73.41 MiB x 48 x (1 + 4) = 17.2 GiB, more than the ~14 GiB left after 25.5 GiB of weights
    assert b.verdict is VerdictKind.FAILS
    assert b.error_text == f"Not enough memory. Please try to increase --mem-fraction-static. " \
                           f"Current value: self.server_args.mem_fraction_static={mfs}"
    assert b.mamba_slots == 48 and b.spec_state_gib == pytest.approx(76_972_032 * 48 * 4 / GIB)
    assert 25.3 < b.weights_gib < 25.7
    changes = [r.change for r in b.remedies]
    assert "--mamba-ssm-dtype bfloat16" in changes
    assert any(c.startswith("--max-running-requests") for c in changes)
    assert any("below 0.5.10" in r for r in b.reasons)
    # the MTP draft loads into the reserve with its own embeddings and lm_head (248320 x 5120 each, split over
    # tp 2) and holds them while its KV pool is made: no --mem-fraction-static leaves room for that and a
    # 32K-token pool at once, so raising it is not offered
    assert b.draft_load_gib - b.draft_weights_gib == pytest.approx(2 * 248320 * 5120 * 2 / 2 / GIB)
    assert not any(c.startswith("--mem-fraction-static") for c in changes)
    assert seed("0.5.9", "0.94", context).headroom_gib < 0


def test_seed_remedies_are_computed_thresholds():
    b = seed("0.5.9", "0.85", 65536)
    mrr = next(r for r in b.remedies if r.change.startswith("--max-running-requests"))
    assert mrr.change == "--max-running-requests 32"  # 24 fits too; 32 is the largest that does
    assert seed_with(b, mrr).verdict is not VerdictKind.FAILS
    bf16 = next(r for r in b.remedies if r.change == "--mamba-ssm-dtype bfloat16")
    assert seed_with(b, bf16).verdict is not VerdictKind.FAILS and seed_with(b, bf16).headroom_gib > 0
    # the version and radix-cache warnings were there before the change: a remedy is not blamed for them
    assert bf16.effect.endswith("(the warnings above remain)") and "degraded" not in bf16.effect


def test_the_preflight_summary_says_what_memory_allows_not_the_version_warning_said_elsewhere():
    """The pre-flight shows SGLang's support for the model on its own line: the memory line gives the memory
    degradations and the numbers, and a launch degraded only by the version is not a memory warning."""
    gpus = GpuPlan("NVIDIA RTX A6000", 49140, 2, free_mib=(49139, 49139))
    flags = parse_sglang_flags(["--tp", "2"])  # the config's 262,144 context, more than the automatic pool holds
    b = compute_budget(BudgetInput(spec("Qwen__Qwen3.6-27B"), flags, gpus, parse_version("0.5.9")))
    assert b.verdict is VerdictKind.DEGRADED and b.reason_kinds[0] == "support"
    assert "below 0.5.10" not in b.summary and b.memory_degraded
    assert b.summary.startswith("KV pool (") and "smaller than the context length (262,144)" in b.summary
    assert b.summary.endswith(f"; {b.kv_tokens:,} KV tokens, {b.mamba_slots} state slots, "
                              f"{b.headroom_gib:.1f} GiB headroom")
    short = parse_sglang_flags(["--tp", "2", "--context-length", "32768", "--mamba-ssm-dtype", "bfloat16"])
    only_version = compute_budget(BudgetInput(spec("Qwen__Qwen3.6-27B"), short, gpus, parse_version("0.5.9")))
    assert only_version.verdict is VerdictKind.DEGRADED and set(only_version.reason_kinds) == {"support"}
    assert not only_version.memory_degraded and only_version.summary.startswith(f"{only_version.kv_tokens:,} KV")


def test_a_remedy_that_brings_its_own_degradation_names_it():
    b = run(spec("Qwen__Qwen3-8B"), ["--context-length", "40960", "--mem-fraction-static", "0.62"], count=1,
            total_mib=24576, pre=22.9)
    assert b.verdict is VerdictKind.FAILS
    mfs = next(r for r in b.remedies if r.change.startswith("--mem-fraction-static"))
    assert "; starts degraded: KV pool (" in mfs.effect and "smaller than the context length (40,960)" in mfs.effect


def test_held_gpus_that_would_still_fail_clean_get_the_clean_gpu_remedies():
    # seed step 2: 44877 MiB held on each A6000 (the lab's orphaned memory); freeing it is needed but not enough
    held = GpuPlan("NVIDIA RTX A6000", 49140, 2, free_mib=(4263, 4263))
    flags = parse_sglang_flags([*SEED, "--mem-fraction-static", "0.85", "--context-length", "65536"])
    b = compute_budget(BudgetInput(spec("Qwen__Qwen3.6-27B"), flags, held, parse_version("0.5.9")))
    assert b.verdict is VerdictKind.FAILS and b.remedies[0].change.startswith("free the GPUs first")
    assert "even on clean GPUs this launch fails (`Not enough memory" in b.remedies[0].effect
    clean = seed("0.5.9", "0.85", 65536)
    # the rest are exactly the clean-GPU remedies, marked as applying after the GPUs are freed
    assert [r.change for r in b.remedies[1:]] == [r.change for r in clean.remedies]
    assert all(r.effect.startswith("after freeing the GPUs: ") for r in b.remedies[1:])
    assert "--mamba-ssm-dtype bfloat16" in [r.change for r in b.remedies]


def test_held_gpus_that_would_fit_clean_name_freeing_as_the_remedy():
    held = GpuPlan("NVIDIA RTX A6000", 49140, 2, free_mib=(4263, 4263))
    flags = parse_sglang_flags([*SEED, "--mem-fraction-static", "0.85", "--context-length", "65536",
                                "--mamba-ssm-dtype", "bfloat16"])
    b = compute_budget(BudgetInput(spec("Qwen__Qwen3.6-27B"), flags, held, parse_version("0.5.9")))
    assert b.verdict is VerdictKind.FAILS
    free = b.remedies[0]
    assert free.change.startswith("free the GPUs first") and "on clean GPUs: " in free.effect
    assert free.frees_gpus and not any(r.frees_gpus for r in b.remedies[1:])
    assert "(fails)" not in free.effect and "after freeing" not in " ".join(r.effect for r in b.remedies)


def test_held_gpus_name_the_recorded_launches_that_hold_them_as_what_to_stop():
    held = GpuPlan("NVIDIA RTX A6000", 49140, 2, free_mib=(4263, 4263))
    flags = parse_sglang_flags([*SEED, "--mem-fraction-static", "0.85", "--context-length", "65536"])
    b = compute_budget(BudgetInput(spec("Qwen__Qwen3.6-27B"), flags, held, parse_version("0.5.9")))
    one = stop_launches_first(b, [("a1", "a1 (ready, port 30001)")], others=False)
    assert one.remedies[0].change == "stop a1 (ready, port 30001) first: /sglang stop a1"
    assert one.remedies[0].effect == b.remedies[0].effect and one.remedies[1:] == b.remedies[1:]
    two = stop_launches_first(b, [("a1", "a1 (ready, port 30001)"), ("a2", "a2 (failed, left running, port 30000)")],
                              others=True)
    assert two.remedies[0].change == ("stop a1 (ready, port 30001) and a2 (failed, left running, port 30000) first: "
                                      "/sglang stop <attempt> for each; then /gpu free lists by PID what else holds "
                                      "them")
    # held by no recorded launch: freeing by PID stays the remedy; a budget without it is left as it was
    assert stop_launches_first(b, [], others=True) == b
    clean = seed("0.5.9", "0.85", 65536)
    assert stop_launches_first(clean, [("a1", "a1 (ready, port 30001)")], others=False) == clean


def seed_with(budget, remedy):
    gpus = GpuPlan("NVIDIA RTX A6000", 49140, 2, free_mib=(49139, 49139))
    return compute_budget(BudgetInput(spec("Qwen__Qwen3.6-27B"), remedy.flags, gpus, budget.version))


@pytest.mark.parametrize("mfs, low, high", [("0.85", 280_000, 305_000), ("0.88", 310_000, 335_000)])
def test_seed_on_current_sglang_starts_but_caps_concurrency(mfs, low, high):
    b = seed("current", mfs, 65536)
    # era D: draft weights counted, KV cell 34,816 B, state slots ~rest x 0.5/1.5 / (73.4 MiB x (1 + 4/5))
    assert b.verdict is VerdictKind.DEGRADED and b.error_text is None
    assert low < b.kv_tokens < high
    assert b.max_running_requests in (6, 7, 8)
    assert any("capped" in r for r in b.reasons)


def test_remedies_change_one_flag_of_the_original_argv():
    from bot.core.flags import with_flag

    b = seed("0.5.9", "0.85", 65536)
    changes = [r.flag_change for r in b.remedies if r.flag_change]
    assert ("--mamba-ssm-dtype", "bfloat16") in changes
    argv = ("--tp", "2", "--mem-fraction-static=0.85", "--enable-torch-compile")
    assert with_flag(argv, "--mem-fraction-static", "0.94") == ("--tp", "2", "--enable-torch-compile",
                                                                "--mem-fraction-static", "0.94")
    assert with_flag(argv, "--tp-size", "4") == ("--mem-fraction-static=0.85", "--enable-torch-compile",
                                                 "--tp-size", "4")


def test_a_remedy_relaunches_the_launchs_own_flags_with_its_one_change():
    """What a remedy button (and the terminal's relaunch command) launches: the flags as typed, in their order and
    spelling (NEXTN stays NEXTN, though SGLang reads it as EAGLE), with one flag set (and the environment word it
    needs) or dropped; nothing for a remedy that is no flag change."""
    from bot.core.budget import Remedy

    b = seed("0.5.9", "0.85", 65536)
    argv = ("--tp", "2", "--speculative-algorithm", "NEXTN", "--mem-fraction-static=0.85", "--enable-torch-compile")
    ssm = next(r for r in b.remedies if r.change == "--mamba-ssm-dtype bfloat16")
    assert ssm.launch_flags(argv) == (*argv, "--mamba-ssm-dtype", "bfloat16")
    flags = b.remedies[0].flags
    assert flags is not None
    drop = Remedy.of(FlagEdit("--speculative-algorithm", "NEXTN", drop=True), flags, "no speculative decoding", 2)
    assert drop.change == "drop --speculative-algorithm NEXTN" and drop.flag_change is None
    assert drop.launch_flags(argv) == ("--tp", "2", "--mem-fraction-static=0.85", "--enable-torch-compile")
    switch = Remedy.of(FlagEdit("--disable-radix-cache"), flags, "", 1)
    assert switch.flag_change == ("--disable-radix-cache", None)
    assert switch.launch_flags(argv) == (*argv, "--disable-radix-cache")
    needs_env = Remedy.of(FlagEdit("--mamba-scheduler-strategy", "extra_buffer", env=("SGLANG_ENABLE_SPEC_V2=1",)),
                          flags, "", 0)
    assert needs_env.change == "--mamba-scheduler-strategy extra_buffer (env SGLANG_ENABLE_SPEC_V2=1)"
    assert needs_env.flag_change is None  # one flag, but not alone: the button must set the variable too
    assert needs_env.launch_flags(("NCCL_P2P_DISABLE=1", *argv)) == (
        "NCCL_P2P_DISABLE=1", "SGLANG_ENABLE_SPEC_V2=1", *argv, "--mamba-scheduler-strategy", "extra_buffer")
    # what is shown is never parsed: a remedy without an edit launches nothing, whatever its words
    for other in ("free the GPUs first (/gpu free lists by PID what holds them)", "tp 4 (needs 4 GPUs; 2 available)",
                  "an AWQ/GPTQ int4 build of this model", "--context-length 156672"):
        assert Remedy(other, None, "", 5).launch_flags(argv) is None
        assert Remedy(other, flags, "", 5).launch_flags(argv) is None


# --------------------------------------------------------------------------- what every rank holds whole

def test_gemma_embedding_table_is_whole_on_every_rank_other_models_split_it():
    gemma = spec("google__gemma-4-31b-it")
    table = 262_144 * 5_376 * 2  # vocab x hidden x bf16, also the tied lm_head
    embeddings = next(p for p in weight_parts(gemma) if p.name == "embeddings")
    assert not embeddings.sharded
    one, two = weight_bytes_per_gpu(gemma, 1), weight_bytes_per_gpu(gemma, 2)
    assert two == pytest.approx((one - table) / 2 + table, rel=1e-4)  # norms are replicated too: tiny
    qwen = spec("Qwen__QwQ-32B")
    assert next(p for p in weight_parts(qwen) if p.name == "embeddings").sharded
    b = run(gemma, ["--tp", "2"], version="0.5.12", total_mib=24576)
    assert "embeddings on every rank" in b.lines[1].why


def test_rope_tables_by_hand_family_by_family():
    # one fp32 cos/sin table per distinct rope, max positions x rotary width x 4 B, on every rank
    gemma = spec("google__gemma-4-31b-it")
    # sliding layers: 256-wide heads; global layers: "proportional" rope spans the whole 512-wide head even
    # with partial_rotary_factor 0.25 (unrotated dims get zero frequencies)
    assert gemma.rope_tables == ((262_144, 256), (262_144, 512))
    assert rope_table_bytes(gemma) == 262_144 * (256 + 512) * 4 == 805_306_368  # 0.75 GiB
    assert rope_table_bytes(gemma, fp32=False) == 262_144 * (256 + 512) * 2  # a ROCm 0.5.x build: bf16
    # Qwen3.6: 256 x partial_rotary_factor 0.25 = 64 wide (the mrope shares one table); GDN layers have none
    assert spec("Qwen__Qwen3.6-27B").rope_tables == ((262_144, 64),)
    # DeepSeek-R1: MLA rotates qk_rope_head_dim 64; YaRN spans original 4,096 x factor 40 = 163,840 positions
    assert spec("deepseek-ai__DeepSeek-R1").rope_tables == ((163_840, 64),)
    # DeepSeek-V4: a 512-wide shared latent head of which qk_rope_head_dim 64 rotate; YaRN 65,536 x 16
    assert spec("deepseek-ai__DeepSeek-V4-Pro").rope_tables == ((1_048_576, 64),)
    # Llama 3.x scaling keeps max_position_embeddings
    assert spec("meta-llama__Llama-3.2-1B-Instruct").rope_tables == ((131_072, 64),)
    # in the budget it is part of the weights line, and AMD GPUs get the model dtype
    amd = compute_budget(BudgetInput(gemma, parse_sglang_flags(["--tp", "2"]),
                                     GpuPlan("AMD Radeon AI PRO R9700", 32624, 2), parse_version("0.5.11")))
    nvidia = run(gemma, ["--tp", "2"], version="0.5.11", total_mib=32624)
    assert nvidia.weights_gib - amd.weights_gib == pytest.approx(262_144 * 768 * 2 / GIB)
    assert "+ 0.75 GiB RoPE cos/sin tables (262,144 positions x 256 + 262,144 positions x 512, fp32" \
        in nvidia.lines[1].why


def test_unstated_awq_group_is_the_largest_that_splits_over_tp():
    from bot.core.model import loadable_group, quantization_from, quantized_inputs

    moe = spec("google__gemma-4-26B-A4B")
    awq = quantization_from("awq")  # an AWQ build whose quantization_config we do not have: group not stated
    # the experts down-project from moe_intermediate 704 = 2^6 x 11 and the dense MLP from 2112 = 2^6 x 33:
    # tp 1 takes groups of 64, tp 2 leaves 352 and 1056 rows a rank (32 x 11, 32 x 33), tp 4 176 (no Marlin group)
    assert quantized_inputs(moe, 2, awq)["experts' down projection"] == 352
    assert (loadable_group(moe, 1, awq), loadable_group(moe, 2, awq), loadable_group(moe, 4, awq)) == (64, 32, None)
    assert loadable_group(spec("Qwen__Qwen3-8B"), 2, awq) == 128  # 12288 / 2 = 6144 = 48 x 128
    guessed = run(moe, ["--tp", "2"], version="0.5.12", total_mib=24576, quant=awq)
    stated = run(moe, ["--tp", "2"], version="0.5.12", total_mib=24576,
                 quant=quantization_from("awq", group_size=32))
    # 4 bits + an fp16 scale and a 4-bit zero per 32 weights = 0.5 + 2/32 + 0.5/32 = 0.578125 B a weight
    assert quantization_from("awq", group_size=32).bytes_per_param == 0.578125
    assert guessed.weights_gib == stated.weights_gib
    assert "group size not stated: 32, the largest that divides every quantized layer's input on a rank " \
           "(experts' down projection 352 at tp 2)" in guessed.lines[1].why
    # a group the checkpoint states is its own: 128 is sized as 128, and cannot be split over tp 2
    stated128 = run(moe, ["--tp", "2"], version="0.5.12", total_mib=24576,
                    quant=quantization_from("awq", group_size=128))
    weights_line = next(x for x in stated128.lines if x.label == "target weights")
    assert stated128.weights_gib < guessed.weights_gib and "group size not stated" not in weights_line.why
    assert stated128.error_text is not None and "not aligned with the quantized weight shape" in stated128.error_text
    # per-channel (group_size -1) carries no per-group scales
    assert quantization_from("gptq", bits=4, group_size=-1).bytes_per_param == 0.5


def test_a_stated_group_that_does_not_split_over_tp_fails_before_loading():
    from bot.core.budget import AWQ_SPLIT_TEXT
    from bot.core.model import quantization_from

    qwen = spec("Qwen__Qwen2.5-72B-Instruct")  # intermediate_size 29568 = 231 x 128
    awq = quantization_from("awq", group_size=128)
    # tp 2 leaves 14784 = 115.5 x 128 down-projection inputs a rank: SGLang's AWQ create_weights refuses
    b = run(qwen, ["--tp", "2"], total_mib=81920, quant=awq)
    assert (b.verdict, b.error_text) == (VerdictKind.FAILS, AWQ_SPLIT_TEXT)
    line = next(x for x in b.lines if x.label == "quantized layers over tp")
    assert line.why == "the MLP down projection takes 14784 inputs a rank at tp 2, not a multiple of the " \
                       "checkpoint's group size 128"
    assert b.remedies[0].change == "--tp-size 1" and b.remedies[0].flags is not None
    # tp 4 (7392 a rank) skips tp 3, which does not divide the 64 attention heads
    four = run(qwen, ["--tp", "4"], total_mib=81920, count=4, quant=awq)
    assert four.error_text == AWQ_SPLIT_TEXT and four.remedies[0].change == "--tp-size 1"
    # the same checkpoint at tp 1 splits nothing
    assert run(qwen, ["--tp", "1"], total_mib=81920, count=1, quant=awq).error_text != AWQ_SPLIT_TEXT


def test_a_tp_the_heads_do_not_divide_fails_before_loading():
    from bot.core.budget import SPLIT_ASSERT_TEXT

    qwen = spec("Qwen__Qwen3-8B")  # 32 attention heads, 8 KV heads, intermediate 12288
    b = run(qwen, ["--tp", "3"], count=3)
    assert (b.verdict, b.error_text) == (VerdictKind.FAILS, SPLIT_ASSERT_TEXT)
    assert next(x for x in b.lines if x.label == "layers over tp").why == "32 attention heads do not split over tp 3"
    assert b.remedies[0].change == "--tp-size 2"
    assert b.summary == "32 attention heads do not split over tp 3: SGLang stops with AssertionError"
    # Qwen3.6-27B: 24 heads split over 6, but its 4 KV heads can neither be split nor copied evenly
    q36 = run(spec("Qwen__Qwen3.6-27B"), ["--tp", "6"], count=6)
    assert q36.error_text == SPLIT_ASSERT_TEXT
    assert "tp 6 is not a multiple of the 4 KV heads" in next(x for x in q36.lines if x.label == "layers over tp").why
    assert q36.remedies[0].change == "--tp-size 4"
    # more ranks than KV heads is fine when they copy evenly: tp 8 over 4 KV heads, and MLA has no KV heads
    assert run(spec("Qwen__Qwen3.6-27B"), ["--tp", "8"], count=8).error_text != SPLIT_ASSERT_TEXT
    assert run(spec("deepseek-ai__DeepSeek-R1"), ["--tp", "8"], count=8, total_mib=143771).error_text \
        != SPLIT_ASSERT_TEXT


def test_fp8_blocks_that_do_not_split_over_tp_fail_with_sglangs_text_and_expert_parallelism_is_the_remedy():
    from dataclasses import replace

    from bot.core.model import quantization_from

    moe = spec("Qwen__Qwen3-235B-A22B-Instruct-2507")  # the FP8 release's geometry: experts 1536 wide
    fp8 = replace(quantization_from("fp8"), block=(128, 128))  # its weight_block_size [128, 128]
    b = run(moe, ["--tp", "8"], count=8, total_mib=143771, gpu="NVIDIA H200", quant=fp8)
    # 1536 / 8 = 192 a rank: the exact line of the real failure (tests/fixtures/other-logs/fp8-block-not-divisible.txt)
    real = (FIXTURES / "other-logs" / "fp8-block-not-divisible.txt").read_text().splitlines()[1]
    assert (b.verdict, b.error_text) == (VerdictKind.FAILS, real)
    assert b.summary.startswith("the experts' 1536 split over 8 ranks leaves 192 a rank, not whole 128x128 blocks")
    assert [r.change for r in b.remedies][:2] == ["--ep-size 8", "--tp-size 4"]
    # expert parallelism keeps experts whole (1536 = 12 x 128), as does tp 4 (384 = 3 x 128)
    for argv in (["--tp", "8", "--ep-size", "8"], ["--tp", "8", "--enable-ep-moe"], ["--tp", "4"]):
        assert run(moe, argv, count=8, total_mib=143771, gpu="NVIDIA H200", quant=fp8).error_text is None, argv
    # a dense MLP has its own wording: Qwen2.5-72B's 29568 over tp 2 = 14784 = 115.5 x 128 (its heads split fine)
    dense = run(spec("Qwen__Qwen2.5-72B-Instruct"), ["--tp", "2"], total_mib=81920, quant=fp8)
    assert dense.error_text == ("ValueError: Weight output_partition_size = 14784 is not divisible by weight "
                                "quantization block_n = 128.")
    assert dense.remedies[0].change == "--tp-size 1"  # no experts: no expert parallelism to offer
    assert run(spec("Qwen__Qwen3-8B"), ["--tp", "2"], quant=fp8).error_text is None  # 6144 = 48 x 128
    # an AWQ build (group 128) of the same experts misfits the same way, and expert parallelism fixes it too
    from bot.core.budget import AWQ_SPLIT_TEXT

    awq = run(moe, ["--tp", "8"], count=8, total_mib=143771, quant=quantization_from("awq", group_size=128))
    assert awq.error_text == AWQ_SPLIT_TEXT and awq.remedies[0].change == "--ep-size 8"
    assert "experts' down projection takes 192 inputs a rank at tp 8" in awq.summary
    # and per-tensor FP8 (no weight_block_size) has no blocks to misfit
    assert run(moe, ["--tp", "8"], count=8, total_mib=143771, gpu="NVIDIA H200",
               quant=quantization_from("fp8")).error_text is None


def test_online_fp8_quantization_of_a_16_bit_checkpoint():
    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    plain = run(llama, ["--tp", "1"])
    fp8 = run(llama, ["--tp", "1", "--quantization", "fp8"])
    # linear layers go from 2 B to ~1 B per weight; embeddings and lm_head (2 x 128,256 x 4,096) stay bf16
    head = 2 * 128_256 * 4_096 * 2 / GIB
    assert fp8.weights_gib == pytest.approx((plain.weights_gib - head) / 2 + head, rel=0.01)
    assert "--quantization fp8 quantizes the bfloat16 checkpoint as it loads" in fp8.lines[1].why


def test_what_the_config_cannot_size_is_said_not_hidden():
    twelve = spec("google__gemma-4-12B")
    assert any("vision tower" in n and "not counted" in n for n in twelve.notes)
    assert any("audio tower" in n for n in twelve.notes)
    b = run(twelve, ["--tp", "2"], version="0.5.12", total_mib=24576)
    assert len(b.model_notes) == 2
    # with the checkpoint's real size the towers are inside the byte count: no caveat (7,814,927,456 B is
    # the gemma-4-12B-it-AWQ directory in github.com/mattbucci/2x-3090-GA102-300-A1-sglang-inference
    # benchmarks/models-manifest-letsrtfm-amd-2026-07-19.json @ 09dac25a)
    sized = run(twelve, ["--tp", "2"], version="0.5.12", total_mib=24576, weights_bytes_total=7_814_927_456)
    assert sized.model_notes == ()
    assert "+ 0.97 GiB every rank holds whole (embeddings)" in sized.lines[1].why  # and the global K/V head


# --------------------------------------------------------------------------- pipeline parallelism

def test_pipeline_stages_split_layers_like_sglang_and_place_embeddings_and_head():
    from bot.core.model import pipeline_stages

    llama = spec("meta-llama__Llama-3.1-70B-Instruct")  # 80 layers, untied
    stages = pipeline_stages(llama, 3)
    # 80 = 3 x 26 + 2: the last two ranks take one layer more
    assert [s.layers for s in stages] == [26, 27, 27]
    assert [s.stage[2] for s in stages] == [0, 26, 53]
    names = [{p.name for p in weight_parts(s)} for s in stages]
    assert "embeddings" in names[0] and "lm_head" not in names[0]
    assert "embeddings" not in names[1] and "lm_head" not in names[1]
    assert "lm_head" in names[2] and "embeddings" not in names[2]
    assert sum(weight_bytes_per_gpu(s, 1) for s in stages) == pytest.approx(weight_bytes_per_gpu(llama, 1))
    # a tied model gets a real lm_head on the last rank: the tie cannot cross ranks
    small = spec("Qwen__Qwen3-4B")
    two = pipeline_stages(small, 2)
    extra = sum(weight_bytes_per_gpu(s, 1) for s in two) - weight_bytes_per_gpu(small, 1)
    assert extra == 151_936 * 2_560 * 2
    # DeepSeek's dense prefix stays on the rank that holds those layers
    r1 = spec("deepseek-ai__DeepSeek-R1")
    first, second = pipeline_stages(r1, 2)
    assert first.moe.dense_layers == frozenset({0, 1, 2}) and second.moe.dense_layers == frozenset()
    assert (first.mtp_layers, second.mtp_layers) == (0, 1)


def test_pipeline_budget_is_bound_by_the_rank_with_fewest_kv_tokens():
    llama = spec("meta-llama__Llama-3.1-70B-Instruct")
    b = run(llama, ["--tp", "2", "--pp", "2", "--mem-fraction-static", "0.88"], count=4)
    # each rank holds 40 layers: 4 KV heads/GPU x (128 + 128) x 2 B x 40 = 81,920 B per token
    assert b.kv_cell_bytes == 81_920
    assert b.lines[0].label == "pipeline rank" and "layers 0-39 + embeddings" in b.lines[0].why
    # rank 0 holds 40 layers and the embeddings, counted by the engine's own parts
    from bot.core.model import pipeline_stages

    rank0 = pipeline_stages(llama, 2)[0]
    rope = 131_072 * 128 * 4  # the fp32 RoPE table every stage builds
    assert b.weights_gib == pytest.approx((weight_bytes_per_gpu(rank0, 2) + rope) / GIB)
    rest = b.pre_gib - b.weights_gib - b.pre_gib * 0.12
    assert b.kv_tokens == math.floor(rest * GIB / 81_920)
    assert parse_sglang_flags(["--tp", "2", "--pp", "2"]).gpus_needed == 4
    assert parse_sglang_flags(["--tp", "2", "--dp", "2"]).gpus_needed == 4
    assert parse_sglang_flags(["--tp", "2", "--dp", "2", "--enable-dp-attention"]).gpus_needed == 2


def test_base_gpu_id_and_gpu_id_step_place_the_ranks_as_sglang_does():
    """SGLang's engine puts rank (pp, tp) on base + pp*tp_size + tp*step, and its data-parallel controller moves each
    next replica's base by tp*pp*step (hand-worked here for each shape)."""
    def placed(*argv: str) -> tuple[int, ...]:
        return parse_sglang_flags(list(argv)).gpu_indices

    assert placed("--tp", "2") == (0, 1)
    assert placed("--tp", "1", "--base-gpu-id", "1") == (1,)
    assert placed("--tp", "2", "--base-gpu-id=2") == (2, 3)
    assert placed("--tp", "2", "--gpu-id-step", "2") == (0, 2)
    assert placed("--tp", "2", "--dp", "2", "--base-gpu-id", "1") == (1, 2, 3, 4)
    assert placed("--tp", "2", "--dp", "2", "--gpu-id-step", "2") == (0, 2, 4, 6)
    assert placed("--tp", "2", "--pp", "2", "--base-gpu-id", "4") == (4, 5, 6, 7)
    assert placed("--tp", "2", "--dp", "2", "--enable-dp-attention", "--base-gpu-id", "2") == (2, 3)
    # the stage offset is not stepped: with a step the stages overlap (the budget refuses that launch)
    assert placed("--tp", "2", "--pp", "2", "--gpu-id-step", "2") == (0, 2, 2, 4)
    flags = parse_sglang_flags(["--tp", "2", "--base-gpu-id", "1"])
    assert flags.gpus_spanned == 3 and flags.gpus_placed
    assert flags.gpus_described() == "GPUs 1..2 (tp 2 x pp 1 x dp 1, --base-gpu-id 1)"
    assert parse_sglang_flags(["--tp", "4"]).gpus_described() == "4 GPUs (tp 4 x pp 1 x dp 1)"
    assert parse_sglang_flags(["--gpu-id-step", "2", "--tp", "2"]).gpus_described() == \
        "GPUs 0, 2 (tp 2 x pp 1 x dp 1, --gpu-id-step 2)"
    with pytest.raises(UsageError, match="GPU index, 0 or more"):
        parse_sglang_flags(["--base-gpu-id", "-1"])
    with pytest.raises(UsageError, match="positive integer"):
        parse_sglang_flags(["--gpu-id-step", "0"])


def test_dtype_flag_sizes_weights_and_an_auto_kv_cache():
    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")  # bfloat16 checkpoint
    plain = run(llama, ["--tp", "1"])
    wide = run(llama, ["--tp", "1", "--dtype", "float32"])
    rope = 131_072 * 128 * 4 / GIB  # fp32 whatever the dtype
    assert wide.weights_gib - rope == pytest.approx(2 * (plain.weights_gib - rope))
    # 32 layers x 8 KV heads x (128 + 128) x 4 B
    assert wide.kv_cell_bytes == 32 * 8 * 256 * 4 == 2 * plain.kv_cell_bytes
    sized = run(llama, ["--tp", "1", "--dtype", "float32"], weights_bytes_total=16_060_522_496)
    assert sized.weights_gib == pytest.approx(2 * 16_060_522_496 / GIB + rope, rel=1e-3)
    assert run(llama, ["--tp", "1", "--dtype", "half"]).weights_gib == pytest.approx(plain.weights_gib)


# --------------------------------------------------------------------------- measured weights

GEMMA12_AWQ = ["--tp", "2", "--mem-fraction-static", "0.85", "--context-length", "262144",
               "--disable-cuda-graph", "--swa-full-tokens-ratio", "0.8", "--max-running-requests", "1"]


def test_measured_weights_replace_the_estimate_and_the_pools_follow_by_hand():
    # sglang-startup-004 (gemma-4-12B-it-AWQ, 2x RTX 3090, patched 0.5.12): the estimate misses the
    # weights (5.27 vs 5.42 GiB logged); with the logged figure the pools are SGLang's own:
    # slack = 22.91 x 0.15 = 3.4365; rest = 22.91 - 5.42 - 3.4365 = 14.0535 GiB
    # cell = full 8 layers x 1 kv head x 512 x (K+V) x 2 B = 16,384 + 0.8 x sliding 40 x 4 x 256 x 2 x 2 = 131,072
    #      = 147,456 B; tokens = 14.0535 x 2^30 // 147,456 = 102,334 (logged 102,094: SGLang's 0.2% of rounding)
    from bot.core.budget import MeasuredLoad
    from bot.core.model import quantization_from

    gemma = spec("google__gemma-4-12B")
    flags = parse_sglang_flags(GEMMA12_AWQ)
    awq = quantization_from("awq")
    guessed = run(gemma, GEMMA12_AWQ, version="0.5.12", pre=22.91, quant=awq)
    measured = MeasuredLoad(5.42, flags.weight_layout, "attempt a1's log", "quant=awq")
    b = run(gemma, GEMMA12_AWQ, version="0.5.12", pre=22.91, quant=awq, measured_load=measured)
    assert b.weights_gib == 5.42 and round(guessed.weights_gib, 2) == 5.27
    assert (b.weights_source, guessed.weights_source) == ("measured", "estimate")
    assert b.kv_cell_bytes == 147_456
    assert b.kv_tokens == int((22.91 - 5.42 - 22.91 * 0.15) * GIB // 147_456) == 102_334
    assert abs(b.kv_tokens - 102_094) / 102_094 < 0.003
    line = next(x for x in b.lines if x.label == "target weights")
    assert line.why.startswith("measured: attempt a1's log logged 5.42 GiB") and "estimate was 5.27 GiB" in line.why


def test_measured_weights_of_another_layout_or_checkpoint_are_not_used():
    from bot.core.budget import MeasuredLoad, load_format_conflict
    from bot.core.model import NO_QUANT, quantization_from

    gemma = spec("google__gemma-4-12B")
    awq = quantization_from("awq")
    guessed = run(gemma, GEMMA12_AWQ, version="0.5.12", pre=22.91, quant=awq)
    tp1 = MeasuredLoad(9.9, parse_sglang_flags([]).weight_layout, "attempt a0's log", "quant=awq")
    b = run(gemma, GEMMA12_AWQ, version="0.5.12", pre=22.91, quant=awq, measured_load=tp1)
    assert b.weights_gib == guessed.weights_gib  # measured at tp 1: says nothing about tp 2
    layout = parse_sglang_flags(GEMMA12_AWQ).weight_layout
    fp8 = MeasuredLoad(11.3, layout, "attempt a0's log", "quant=fp8")
    b = run(gemma, GEMMA12_AWQ, version="0.5.12", pre=22.91, quant=awq, measured_load=fp8)
    assert b.weights_gib == guessed.weights_gib
    why = next(x for x in b.lines if x.label == "target weights").why
    assert "11.30 GiB, not used: that load was fp8, this launch loads awq" in why
    # the load's own words decide: AWQ repacked for Marlin is still AWQ; fp8 is not bf16; 16-bit dtypes weigh the same
    assert load_format_conflict("quant=awq_marlin", awq, "bfloat16") is None
    assert load_format_conflict("quant=fp8", NO_QUANT, "bfloat16") == \
        "that load was fp8, this launch loads unquantized bfloat16"
    assert load_format_conflict("dtype=float16", NO_QUANT, "bfloat16") is None
    # older SGLang prints the model dtype for a quantized load too: sglang-startup-007 loaded GLM-5-FP8
    # (89.58 GiB per GPU at tp 8: one byte per parameter) and printed dtype=torch.bfloat16
    glm = next(c for c in STARTUP if c["id"] == "sglang-startup-007")
    shown = advance(Progress(), glm["log_excerpt"]).weights_format
    assert shown == "dtype=bfloat16"
    assert load_format_conflict(shown, quantization_from("fp8"), "bfloat16") is None
    assert load_format_conflict("dtype=float32", NO_QUANT, "bfloat16") == "that load was float32, this launch " \
        "loads bfloat16"
    assert load_format_conflict(None, awq, "bfloat16") is None  # SGLang before 0.5 does not print it


def test_weight_layout_names_what_decides_the_bytes_per_gpu():
    assert parse_sglang_flags(["--tp", "2", "--mem-fraction-static", "0.8"]).weight_layout == \
        parse_sglang_flags(["--tp-size", "2", "--context-length", "4096"]).weight_layout
    assert parse_sglang_flags(["--tp", "2"]).weight_layout != parse_sglang_flags(["--tp", "2", "--quantization",
                                                                                   "fp8"]).weight_layout


def test_gpu_names_match_whole_words_only():
    from bot.core.gpus import gpu_total_mib

    assert gpu_total_mib("H200") == 143771 and gpu_total_mib("NVIDIA GeForce RTX 3090") == 24576
    assert gpu_total_mib("A6000") == 49140 and gpu_total_mib("rtx 4090") == 24564
    assert gpu_total_mib("H20") == 97871  # a 96 GB card, not the H200
    assert gpu_total_mib("A100") is None  # 40 GB or 80 GB: ambiguous
    assert gpu_total_mib("H100") is None  # the SXM and PCIe have 81559 MiB, the NVL 95830
    assert gpu_total_mib("H100 PCIe") == 81559 and gpu_total_mib("NVIDIA H100 80GB HBM3") == 81559
    assert gpu_total_mib("A10") == 23028 and gpu_total_mib("NVIDIA A10G") == 23028  # the A10 is not the A10G
    assert gpu_total_mib("L40") == 46068 and gpu_total_mib("NVIDIA L20") == 46068
    assert gpu_total_mib("NVIDIA A800-SXM4-80GB") == 81920
    assert gpu_total_mib("V100") is None  # 16 GB or 32 GB


def test_a_gpu_count_written_with_the_model_is_read_apart_from_it():
    from bot.core.gpus import split_gpu_count

    assert split_gpu_count("2x RTX A6000") == (2, "RTX A6000") == split_gpu_count("RTX A6000 x2")
    assert split_gpu_count("8 × NVIDIA H20") == (8, "NVIDIA H20") == split_gpu_count("NVIDIA H20*8")
    assert split_gpu_count("NVIDIA H100 80GB HBM3 ×8") == (8, "NVIDIA H100 80GB HBM3")
    # a model whose name ends in an X and a number is not a count; nor is a count with no model
    assert split_gpu_count("NVIDIA GeForce RTX 3090") == (None, "NVIDIA GeForce RTX 3090")
    assert split_gpu_count("RTX 6000 Ada Generation") == (None, "RTX 6000 Ada Generation")
    assert split_gpu_count("2x") == (None, "2x")


def test_gated_deltanet_projections_are_quantized_with_the_checkpoint():
    # SGLang builds in_proj_qkvz and out_proj with the checkpoint's quant_config; conv1d and the gates stay 16-bit.
    # Qwen3.6-27B: 48 linear layers x (5120 x (2x2048 + 2x6144) + 6144 x 5120) = 5,536,481,280 projection params
    from bot.core.model import quantization_from

    q36 = spec("Qwen__Qwen3.6-27B")
    parts = {p.name: p for p in weight_parts(q36)}
    assert parts["linear attention"].params == 48 * (5120 * (2 * 2048 + 2 * 6144) + 6144 * 5120) == 5_536_481_280
    assert parts["linear attention"].quantizable and not parts["linear attention conv and gates"].quantizable
    awq = quantization_from("awq")
    bf16 = weight_bytes_per_gpu(q36, 2)
    int4 = weight_bytes_per_gpu(q36, 2, awq)
    # the projections shrink from 2 B to AWQ's 0.5195 B per param, half of them on each of 2 GPUs
    saved = 5_536_481_280 * (2 - awq.bytes_per_param) / 2
    others = [p for p in weight_parts(q36) if p.quantizable and p.name != "linear attention"]
    assert int4 == pytest.approx(bf16 - saved - sum(p.params for p in others) * (2 - awq.bytes_per_param) / 2)


def test_dp_attention_keeps_attention_and_the_embedding_whole_on_each_rank():
    # Qwen3-8B at tp 2 with --enable-dp-attention --dp 2: attention TP size is tp/dp = 1 and SGLang builds the
    # token embedding unsharded; the lm_head and the MLP stay split over tp 2. By hand, in params:
    # attention 36 x (4096x4096 + 4096x2048 + 4096x4096 + 2x128) = 1,509,958,656 (whole on each rank)
    # embedding 151936 x 4096 = 622,329,856 (whole); lm_head 622,329,856 / 2; MLP 36 x 3 x 4096 x 12288 / 2;
    # norms 36 x 2 x 4096 + 4096 = 299,008 (whole)
    qwen = spec("Qwen__Qwen3-8B")
    with_dp = 1_509_958_656 + 622_329_856 + 622_329_856 // 2 + 36 * 3 * 4096 * 12288 // 2 + 299_008
    without = 1_509_958_656 // 2 + 622_329_856 + 36 * 3 * 4096 * 12288 // 2 + 299_008
    assert weight_bytes_per_gpu(qwen, 2, attn_tp=1) == 2 * with_dp == 10_323_322_880
    assert weight_bytes_per_gpu(qwen, 2) == 2 * without == 8_191_034_368
    b = run(qwen, ["--tp", "2", "--dp", "2", "--enable-dp-attention", "--mem-fraction-static", "0.85"], count=2)
    assert b.weights_gib == pytest.approx((10_323_322_880 + 40_960 * 128 * 4) / GIB)  # + the fp32 RoPE table
    assert "DP attention: attention over 1 GPU(s), embeddings on every rank" in \
        next(x for x in b.lines if x.label == "target weights").why


def test_mla_down_projections_are_whole_on_every_rank():
    # SGLang builds MLA's fused q_a + kv_a projection as a ReplicatedLinear. DeepSeek-R1, per layer:
    # 7168 x (1536 + 512 + 64) + the q_a and kv_a norms (1536 + 512) = 15,140,864; x 61 layers
    r1 = spec("deepseek-ai__DeepSeek-R1")
    parts = {p.name: p for p in weight_parts(r1)}
    down = parts["attention down-projections"]
    assert down.params == 61 * (7168 * (1536 + 512 + 64) + 1536 + 512) == 923_592_704
    assert not down.sharded and down.quantizable
    # q_b 1536 x 128 x 192 + kv_b 512 x 128 x (128 + 128) + o 128 x 128 x 7168, split over TP
    assert parts["attention"].params == 61 * (1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168)


def test_kv_heads_fewer_than_tp_ranks_are_replicated():
    # SGLang's QKVParallelLinear gives each rank at least one K/V head: Qwen3-235B has 4, so at tp 8 each
    # head sits on two ranks. K/V per layer: 4096 x 4 heads x (128 + 128) = 4,194,304; x 94 layers
    from bot.core.model import part_divisor

    q235 = spec("Qwen__Qwen3-235B-A22B-Instruct-2507")
    kv = next(p for p in weight_parts(q235) if p.name == "attention kv")
    assert kv.params == 94 * 4096 * 4 * 256 == 394_264_576 and kv.max_split == 4
    assert (part_divisor(kv, 8), part_divisor(kv, 2), part_divisor(kv, 8, attn_tp=1)) == (4, 2, 1)
    gemma = spec("google__gemma-4-12B")  # sliding layers 8 K/V heads, global layers 1 (K shipped, V copied)
    heads = {p.name: p.max_split for p in weight_parts(gemma) if p.name.startswith("attention kv")}
    assert heads == {"attention kv (8 heads)": 8, "attention kv (1 heads)": 1}


def test_multimodal_models_hold_back_the_image_cache_from_0_5_16():
    # SGLang after 2026-07-20 reserves SGLANG_VLM_CACHE_SIZE_MB (100 MB) of a multimodal model's budget
    vl = spec("Qwen__Qwen3-VL-32B-Instruct")
    before = run(vl, ["--tp", "2", "--mem-fraction-static", "0.85"], version="0.5.15")
    after = run(vl, ["--tp", "2", "--mem-fraction-static", "0.85"], version="0.5.16")
    assert after.rest_gib == pytest.approx(before.rest_gib - 100 / 1024)
    assert [x.gib for x in after.lines if x.label == "multimodal cache reservation"] == [100 / 1024]
    assert not any(x.label == "multimodal cache reservation" for x in before.lines)
    text_only = run(spec("Qwen__Qwen3-8B"), ["--tp", "2"], version="0.5.16")
    assert not any(x.label == "multimodal cache reservation" for x in text_only.lines)


# --------------------------------------------------------------------------- quantization formats

def test_gpt_oss_mxfp4_experts_and_bf16_attention():
    # openai/gpt-oss-20b's config (tests/fixtures/SOURCES.md): quant_method mxfp4, with self_attn, the router,
    # the embedding and lm_head left unconverted. SGLang's Mxfp4Config quantizes only the fused MoE: uint8
    # pairs of 4-bit values plus a uint8 exponent per 32 -> 0.5 + 1/32 B per expert weight.
    oss = spec("openai__gpt-oss-20b")
    assert (oss.quant.method, oss.quant.bytes_per_param, oss.quant.experts_only) == ("mxfp4", 0.53125, True)
    parts = {p.name: p for p in weight_parts(oss)}
    experts = parts["experts"]
    assert experts.params == 24 * 32 * 3 * 2880 * 2880 == 19_110_297_600
    by_hand = sum(p.params * (0.53125 if p.expert else 2.0) for p in weight_parts(oss))
    assert weight_bytes_per_gpu(oss, 1) == pytest.approx(by_hand)
    b = run(oss, ["--tp", "1", "--mem-fraction-static", "0.85"], count=1)
    assert b.verdict is not VerdictKind.FAILS and oss.notes == ()


def test_a_quantization_not_sized_here_is_counted_at_16_bits_and_said():
    config = json.loads((CONFIGS / "openai__gpt-oss-20b" / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "some_new_format"}
    model = read_config(config, "x")
    assert model.quant.method == "unknown"
    assert any("quantization 'some_new_format' is not sized here" in n for n in model.notes)
    bf16 = dict(config)
    del bf16["quantization_config"]
    assert weight_bytes_per_gpu(model, 1) == pytest.approx(weight_bytes_per_gpu(read_config(bf16, "y"), 1))


def test_compressed_tensors_per_channel_fp8_weighs_a_byte_a_weight():
    # the group layout llm-compressor writes for an FP8-dynamic build: per-channel scales, no groups
    from bot.core.model import _scheme

    fp8 = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                                           "group_size": None, "symmetric": True}}}}
    assert (_scheme(fp8).method, _scheme(fp8).bytes_per_param) == ("fp8", 1.0)
    w4 = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}}
    assert _scheme(w4).bytes_per_param == 0.5 + 2 / 128
    nvfp4 = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                           "group_size": 16}}}}
    assert (_scheme(nvfp4).method, _scheme(nvfp4).bytes_per_param) == ("nvfp4", 0.5 + 1 / 16)


def test_a_separate_sliding_pool_only_where_sglang_builds_one():
    # gpt-oss is in SGLang's is_hybrid_swa_model list: 12 full + 12 sliding layers, 8 KV heads x (64 + 64) x 2 B
    # = 2,048 B a layer; with --swa-full-tokens-ratio 0.8: 12 x 2,048 + 0.8 x 12 x 2,048 = 44,236.8 B a token
    oss = spec("openai__gpt-oss-20b")
    assert (oss.full_layers, oss.sliding_layers, oss.is_hybrid_swa) == (12, 12, True)
    b = run(oss, ["--tp", "1", "--mem-fraction-static", "0.85"], count=1)
    assert b.kv_cell_bytes == pytest.approx(12 * 2048 + 0.8 * 12 * 2048)
    # the same geometry under an architecture SGLang gives no sliding pool (Gemma 3's, which applies the window
    # at attention time): every layer holds a full KV cache
    config = json.loads((CONFIGS / "openai__gpt-oss-20b" / "config.json").read_text())
    config["architectures"] = ["Gemma3ForCausalLM"]
    plain = read_config(config, "windowed")
    assert not plain.is_hybrid_swa
    b = run(plain, ["--tp", "1", "--mem-fraction-static", "0.85"], count=1)
    assert b.kv_cell_bytes == 24 * 2048 and b.swa_tokens is None


def test_deepseek_v4_expert_dtype_fp4_sizes_the_routed_experts_apart():
    # DeepSeek-V4's published configs declare "expert_dtype": "fp4" next to an fp8 quantization_config; the
    # corpus copy of V4-Pro predates that key, and the loaders default a missing key to "fp4" (vLLM's
    # DeepseekV4FP8Config, SGLang's V4 weight loader): routed experts weigh 0.5 + 1/32 B, the rest stays fp8.
    # "fp8" (V4-Flash-Base) keeps them in block fp8.
    config = json.loads((CONFIGS / "deepseek-ai__DeepSeek-V4-Pro" / "config.json").read_text())
    unstated = read_config(config, "v4")
    config["expert_dtype"] = "fp4"
    mixed = read_config(config, "v4")
    config["expert_dtype"] = "fp8"
    fp8_only = read_config(config, "v4")
    assert unstated.quant == mixed.quant and mixed.quant.expert_bytes_per_param == 0.5 + 1 / 32
    assert fp8_only.quant.expert_bytes_per_param is None
    experts = next(p for p in weight_parts(mixed) if p.expert)
    saved = experts.params * (fp8_only.quant.bytes_per_param - (0.5 + 1 / 32)) / 8
    assert weight_bytes_per_gpu(mixed, 8) == pytest.approx(weight_bytes_per_gpu(fp8_only, 8) - saved)


def test_an_earlier_loads_cuda_context_replaces_the_assumed_one():
    # live free memory 48,633 MiB per GPU; an earlier load of this layout began with 46.58 GiB free after
    # 47.49 GiB free at its pre-flight: CUDA context + NCCL took 0.91 GiB, not the 1.10 GiB assumed for tp 2
    from bot.core.budget import MeasuredLoad

    qwen = spec("Qwen__Qwen3-8B")
    argv = ["--tp", "2", "--mem-fraction-static", "0.85"]
    flags = parse_sglang_flags(argv)
    plan = GpuPlan("NVIDIA RTX A6000", 49140, 2, (48_633, 48_700))
    assumed = compute_budget(BudgetInput(qwen, flags, plan, parse_version("current")))
    assert assumed.pre_gib == pytest.approx(48_633 / 1024 - 1.10)
    earlier = MeasuredLoad(8.2, flags.weight_layout, "attempt a1's log", "dtype=bfloat16", context_gib=0.91)
    measured = compute_budget(BudgetInput(qwen, flags, plan, parse_version("current"), measured_load=earlier))
    assert measured.pre_gib == pytest.approx(48_633 / 1024 - 0.91) and measured.weights_gib == 8.2
    other_layout = MeasuredLoad(8.2, parse_sglang_flags(["--tp", "1"]).weight_layout, "a0", None, context_gib=0.5)
    kept = compute_budget(BudgetInput(qwen, flags, plan, parse_version("current"), measured_load=other_layout))
    assert kept.pre_gib == assumed.pre_gib
    # a "context" of 16.5 GiB means that load's free memory was read elsewhere (another host's log): not used
    odd = MeasuredLoad(8.2, flags.weight_layout, "attempt a2's log", "dtype=bfloat16", context_gib=16.5)
    assert compute_budget(BudgetInput(qwen, flags, plan, parse_version("current"),
                                      measured_load=odd)).pre_gib == assumed.pre_gib


# --------------------------------------------------------------------------- speculative drafts

def _startup_case(case_id):
    lines = (FIXTURES / "sglang-startup" / "cases.jsonl").read_text().splitlines()
    return next(json.loads(x) for x in lines if json.loads(x)["id"] == case_id)


def test_an_eagle_draft_counts_its_own_embeddings_and_lm_head_as_the_log_shows():
    # Llama-2-7B's EAGLE draft: one layer (qkv 4096 x 3 x 4096, o 4096^2, MLP 3 x 4096 x 11008) = 202,375,168,
    # its own embeddings and lm_head 2 x 32000 x 4096 = 262,144,000, and the fc 2 x 4096 x 4096 = 33,554,432
    # (plus 4 x 4096 of norms): 498,089,984 params x 2 B = 0.928 GiB
    llama2 = spec("meta-llama__Llama-2-7b-chat-hf")
    case = _startup_case("sglang-startup-035")
    b = run(llama2, ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path",
                     "lmzheng/sglang-EAGLE-llama2-chat-7B", "--speculative-num-steps", "5",
                     "--speculative-eagle-topk", "8", "--speculative-num-draft-tokens", "64",
                     "--mem-fraction-static", "0.7"], version="0.4.2", count=1, pre=78.81)
    assert b.draft_load_gib == pytest.approx((202_375_168 + 262_144_000 + 33_554_432 + 4 * 4096) * 2 / 2**30)
    # the draft's own load in that log: `Load weight begin. avail mem=11.13 GB` ... `Load weight end. ... 10.20 GB`
    logged = case["logged"]["draft_pre_load_avail_mem_gb"] - case["logged"]["draft_avail_mem_after_weights_gb"]
    assert abs(b.draft_load_gib - logged) / logged < 0.01
    # the target's embeddings and lm_head replace the draft's after its KV pool is made: it keeps the rest
    assert b.draft_weights_gib == pytest.approx((202_375_168 + 33_554_432 + 4 * 4096) * 2 / 2**30)
    assert "EAGLE draft config not read" in next(x.why for x in b.lines if x.label == "draft weights")


def test_an_mtp_draft_loads_with_its_own_embeddings_and_lm_head_as_the_log_shows():
    # MiMo-7B's MTP layer (GQA 32/8 heads of 128, MLP 3 x 4096 x 11008) + fc 2 x 4096^2 + embeddings and lm_head
    # 2 x 151680 x 4096: 1,453,326,336 params x 2 B = 2.707 GiB; the log's draft load took 60.54 - 57.83 = 2.71 GB
    case = _startup_case("sglang-startup-045")
    mimo = read_config(json.loads((FIXTURES / "model-configs" / "XiaomiMiMo__MiMo-7B-Base" / "config.json")
                                  .read_text()), "mimo")
    b = run(mimo, ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
                   "--speculative-num-draft-tokens", "2", "--mem-fraction-static", "0.5"], version="0.4.6", count=1)
    layer = 4096 * (32 + 2 * 8) * 128 + 32 * 128 * 4096 + 3 * 4096 * 11008
    assert layer + 2 * 4096**2 + 2 * 151680 * 4096 == 1_453_326_336
    logged = case["logged"]["draft_pre_load_avail_mem_gb"] - case["logged"]["draft_avail_mem_after_weights_gb"]
    assert abs(b.draft_load_gib - logged) / logged < 0.01


def test_an_eagle3_draft_config_decides_its_size():
    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    draft = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096, "intermediate_size": 14336,
             "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 1, "vocab_size": 128256,
             "draft_vocab_size": 32000, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    argv = ["--tp", "2", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/eagle3"]
    b = run(llama, argv, version="0.5.9", draft_config=draft)
    # q/k/v from 2 x 4096 inputs: 8192 x (32 + 2 x 8) x 128 = 50,331,648; o 4096^2; MLP 3 x 4096 x 14336;
    # embeddings 128256 x 4096 and a lm_head over the 32000 draft tokens, split over tp 2; the fc 3 x 4096 x 4096
    # and 4 x 4096 of norms on each rank
    # (the embeddings are replaced by the target's once loaded; the draft keeps its own lm_head)
    own = 50_331_648 + 4096**2 + 3 * 4096 * 14336 + 32000 * 4096
    whole = 3 * 4096 * 4096 + 4 * 4096
    assert b.draft_weights_gib == pytest.approx((own / 2 + whole) * 2 / 2**30)
    assert b.draft_load_gib == pytest.approx(((own + 128256 * 4096) / 2 + whole) * 2 / 2**30)
    assert "its own lm_head over 32000 draft tokens" in next(x.why for x in b.lines if x.label == "draft weights")
    # without the config: the target's shape, whose lm_head (no draft vocabulary named) is the target's
    estimated = run(llama, argv, version="0.5.9")
    assert "EAGLE3 draft config not read" in next(x.why for x in estimated.lines if x.label == "draft weights")


def test_eagle3_without_a_draft_path_loads_the_target_again_and_fails_building_the_draft():
    from bot.core.budget import EAGLE3_WITHOUT_DRAFT_TEXT

    qwen = spec("Qwen__Qwen3-8B")  # no MTP layers: nothing in the checkpoint can be the EAGLE3 draft
    b = run(qwen, ["--speculative-algorithm", "EAGLE3"], version="0.5.12", count=1)
    # SGLang takes the target checkpoint as the draft (sglang#36528): its weights a second time
    assert b.verdict is VerdictKind.FAILS and b.error_text == EAGLE3_WITHOUT_DRAFT_TEXT
    assert not b.error_verbatim  # the AttributeError's own words are not public: the text is gpuops' account
    assert b.draft_weights_gib == pytest.approx(b.weights_gib)
    # no memory change helps: name the draft, or launch without speculation (which fits)
    assert [r.change for r in b.remedies] == ["--speculative-draft-model-path <an EAGLE3 draft trained for this "
                                              "model>", "drop --speculative-algorithm EAGLE3"]
    plain = b.remedies[1].flags
    assert plain is not None and not plain.speculative
    with_draft = run(qwen, ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/m/eagle3"],
                     version="0.5.12", count=1)
    assert with_draft.error_text is None and with_draft.draft_weights_gib < 1
    # a checkpoint with its own draft layers (Qwen3.6's MTP) is the case SGLang's fallback is for
    bundled = run(spec("Qwen__Qwen3.6-27B"), ["--tp", "2", "--speculative-algorithm", "EAGLE3",
                                              "--disable-radix-cache"], version="0.5.12")
    assert bundled.error_text != EAGLE3_WITHOUT_DRAFT_TEXT and bundled.draft_weights_gib < 1


def test_only_sglang_s_own_refusals_are_marked_verbatim():
    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    # 14.96 GiB of weights on a 12 GiB card: torch's OOM text names an allocation gpuops cannot know, so the
    # verdict is gpuops' account of the failure, not a line SGLang prints
    too_big = run(llama, [], total_mib=12288, count=1, gpu="NVIDIA GeForce RTX 3060")
    assert too_big.verdict is VerdictKind.FAILS and "while loading weights" in (too_big.error_text or "")
    assert not too_big.error_verbatim
    # the KV pool refusal is SGLang's own text with its numbers filled in
    short = run(llama, ["--mem-fraction-static", "0.3"], count=1, version="0.5.9")
    assert short.error_text == ("Not enough memory. Please try to increase --mem-fraction-static. Current value: "
                                "self.server_args.mem_fraction_static=0.3")
    assert short.error_verbatim
    # a launch that fits has no error, and nothing to mark
    assert run(llama, [], count=1).error_text is None


def test_a_standalone_draft_is_sized_as_the_whole_small_model():
    target = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    small = json.loads((FIXTURES / "model-configs" / "meta-llama__Llama-3.2-1B-Instruct" / "config.json").read_text())
    b = run(target, ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "/models/l1b"],
            version="0.5.9", count=1, draft_config=small)
    assert b.draft_weights_gib == pytest.approx(weight_bytes_per_gpu(read_config(small, "draft"), 1) / 2**30)
    assert "standalone draft" in next(x.why for x in b.lines if x.label == "draft weights")


# --------------------------------------------------------------------------- kernels the GPU cannot run

def test_fp8_experts_below_compute_capability_89_fail_after_loading_with_tritons_words():
    from bot.core.budget import FP8_MOE_TEXT
    from bot.core.model import quantization_from

    moe = spec("Qwen__Qwen3-235B-A22B-Instruct-2507")
    flags = parse_sglang_flags(["--tp", "4", "--context-length", "32768"])

    def on(gpu, mib):
        return compute_budget(BudgetInput(moe, flags, GpuPlan(gpu, mib, 4), parse_version("0.5.9"),
                                          quant=quantization_from("fp8")))

    ampere = on("NVIDIA A100-SXM4-80GB", 81920)
    # the weights fit (about 55 GiB a GPU): the failure is the kernel, as the corpus's A100/A800 launches show
    assert ampere.weights_gib < ampere.pre_gib and ampere.error_text == FP8_MOE_TEXT
    assert "8.0" in next(x.why for x in ampere.lines if x.label == "FP8 MoE kernel")
    changes = [r.change for r in ampere.remedies]
    assert changes == ["an AWQ/GPTQ int4 build of this model", "a bfloat16 build of this model"]
    assert ampere.remedies[0].flags is None  # a checkpoint to fetch, not a flag: no launch button
    hopper = on("NVIDIA H100 80GB HBM3", 81559)
    assert hopper.error_text is None and not any(x.label == "FP8 MoE kernel" for x in hopper.lines)


def test_online_fp8_of_a_moe_on_ampere_is_undone_by_dropping_the_flag_and_dense_fp8_is_not_flagged():
    nxt = spec("Qwen__Qwen3-Next-80B-A3B-Instruct")
    b = run(nxt, ["--tp", "4", "--quantization", "fp8", "--context-length", "32768"], version="0.5.9", count=4)
    assert b.error_text is not None and "fp8e4nv" in b.error_text
    assert [r.change for r in b.remedies] == ["drop --quantization fp8"] and b.remedies[0].flags.quantization is None
    dense = run(spec("meta-llama__Meta-Llama-3.1-8B-Instruct"), ["--quantization", "fp8"], version="0.5.9", count=1)
    assert dense.error_text is None  # dense FP8 linears fall back to Marlin W8A16 on Ampere


def test_deepseeks_nextn_layer_is_fp8_like_the_checkpoint_and_dp_attention_keeps_its_copies_whole():
    r1 = spec("deepseek-ai__DeepSeek-R1")  # FP8 block-quantized, one NextN layer of 256 experts
    argv = ["--tp", "8", "--speculative-algorithm", "NEXTN", "--speculative-num-draft-tokens", "2"]
    b = run(r1, argv, version="0.5.9", total_mib=143771, count=8, gpu="NVIDIA H200")
    experts = 256 * 3 * 7168 * 2048  # 11,274,289,152 in FP8 (1 B + a fp32 scale per 128x128 block)
    fc = 2 * 7168 * 7168  # the eh_proj, an nn.Linear in bf16 on every rank
    low = (experts * (1 + 4 / 128**2) / 8 + fc * 2) / GIB
    assert low < b.draft_weights_gib < low + 0.1  # + the MLA attention and the shared expert, also FP8
    # its own embeddings and lm_head while loading: vocab-parallel, or whole on every rank under DP attention
    copies = 2 * 129280 * 7168 * 2
    assert b.draft_load_gib - b.draft_weights_gib == pytest.approx(copies / 8 / GIB)
    dp = run(r1, [*argv, "--enable-dp-attention", "--dp", "8"], version="0.5.9", total_mib=143771, count=8,
             gpu="NVIDIA H200")
    assert dp.draft_load_gib - dp.draft_weights_gib == pytest.approx(copies / GIB)


def test_an_mtp_layer_the_checkpoint_keeps_unquantized_is_sized_in_16_bits():
    from bot.core.model import NO_QUANT, mtp_draft_size

    nvfp4 = spec("nvidia__Qwen3.6-35B-A3B-NVFP4")  # its exclusion list names mtp.*: the MTP layer stays bf16
    assert dict(nvfp4.quant.kept)["mtp head"] == 1.0
    b = run(nvfp4, ["--tp", "2", "--speculative-algorithm", "NEXTN", "--speculative-num-draft-tokens", "4"],
            version="0.5.9", total_mib=97887, gpu="NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition")
    bf16 = mtp_draft_size(nvfp4, 1, NO_QUANT).bytes_per_gpu(2, with_shared=False) / GIB
    assert b.draft_weights_gib == pytest.approx(bf16)
    assert mtp_draft_size(nvfp4, 1, replace(nvfp4.quant, kept=())).bytes_per_gpu(2, with_shared=False) / GIB < bf16


def test_an_unusable_standalone_draft_config_is_counted_as_unread_not_raised():
    target = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    b = run(target, ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "/models/d"],
            version="0.5.9", count=1, draft_config={"architectures": ["LlamaForCausalLM"]})  # no geometry in it
    assert "standalone draft's config was not read" in next(x.why for x in b.lines if x.label == "draft weights")


def test_nextn_on_a_checkpoint_whose_config_states_no_mtp_layer_is_flagged():
    # Kimi-K2.5 states num_nextn_predict_layers 0; Qwen3-Next does not say (its checkpoint has one); R1 states 1
    nextn = ["--tp", "8", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    kimi, qwen_next, r1 = (spec(n) for n in ("moonshotai__Kimi-K2.5", "Qwen__Qwen3-Next-80B-A3B-Instruct",
                                             "deepseek-ai__DeepSeek-R1"))
    assert (kimi.no_mtp, qwen_next.no_mtp, r1.no_mtp) == (True, False, False)
    flagged = run(kimi, nextn, total_mib=143771, count=8)
    assert any("states no MTP layer" in r and "--speculative-draft-model-path" in r for r in flagged.reasons)
    assert flagged.verdict is not VerdictKind.FITS
    # with a draft model path the draft is the EAGLE model's, and nothing is flagged
    eagle = run(kimi, [*nextn, "--speculative-draft-model-path", "/models/kimi-eagle"], total_mib=143771, count=8)
    assert not any("states no MTP layer" in r for r in eagle.reasons)
    assert not any("states no MTP layer" in r for r in run(r1, nextn, total_mib=143771, count=8).reasons)


def test_nextn_on_a_checkpoint_saved_without_its_mtp_layers_is_flagged_before_the_load():
    # the seed launch (NEXTN, 3 steps, 4 draft tokens) on a Qwen3.6 checkpoint whose index holds no mtp.* tensor:
    # the config still names one MTP layer, so nothing but the index shows the draft head is missing
    gpus = GpuPlan("NVIDIA RTX A6000", 49140, 2, free_mib=(49139, 49139))
    flags = parse_sglang_flags([*SEED, "--mem-fraction-static", "0.88", "--context-length", "32768"])
    model = spec("Qwen__Qwen3.6-27B")
    missing = compute_budget(BudgetInput(model, flags, gpus, parse_version("current"), mtp_in_checkpoint=False))
    reason = next(r for r in missing.reasons if "holds no MTP tensor" in r)
    assert "names 1 MTP layer(s)" in reason and "launch without --speculative-algorithm" in reason
    assert missing.verdict is not VerdictKind.FITS
    present = compute_budget(BudgetInput(model, flags, gpus, parse_version("current"), mtp_in_checkpoint=True))
    unknown = compute_budget(BudgetInput(model, flags, gpus, parse_version("current")))
    assert not any("holds no MTP tensor" in r for r in present.reasons + unknown.reasons)
    # without speculative decoding the missing head does not matter
    plain = parse_sglang_flags(["--tp", "2", "--mem-fraction-static", "0.88", "--context-length", "32768"])
    assert not any("MTP" in r for r in compute_budget(BudgetInput(model, plain, gpus, parse_version("current"),
                                                                   mtp_in_checkpoint=False)).reasons)


def test_memory_held_on_one_launch_gpu_fails_sglangs_balance_check_before_anything_loads():
    flags = parse_sglang_flags([*SEED, "--mem-fraction-static", "0.85", "--context-length", "65536",
                                "--mamba-ssm-dtype", "bfloat16"])

    def on(free):
        return compute_budget(BudgetInput(spec("Qwen__Qwen3.6-27B"), flags, GpuPlan("NVIDIA RTX A6000", 49140, 2,
                                                                                    free_mib=free),
                                          parse_version("0.5.9")))

    # after the ~1.10 GiB CUDA context/NCCL: 44000 MiB -> 41.87 GiB, 49139 MiB -> 46.89 GiB; 0.9 x 46.89 = 42.20
    b = on((49139, 44000))
    assert b.verdict is VerdictKind.FAILS
    assert b.error_text == ("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                            "min_per_gpu_memory=41.87, local_gpu_memory=46.89, local_gpu_memory * 0.9=42.20")
    assert any(x.label == "GPU balance" and "49139, 44000 MiB" in x.why for x in b.lines)
    free = b.remedies[0]
    assert free.change.startswith("free the GPUs first") and "on clean GPUs: " in free.effect
    assert free.effect.startswith("5.0 GiB of the fullest GPU is in use before the launch")  # 49140 - 44000 MiB
    # 44500 MiB -> 42.36 GiB: within 90 % of the other, SGLang starts (and the launch fits)
    assert on((49139, 44500)).error_text is None


def test_a_remedy_computed_at_the_configs_context_limit_relaunches_at_that_limit():
    """A context beyond the config's is refused; when the launch still fails at the limit, the next remedies are
    computed there, so each button launches with the limit too (before, they kept the refused 1,048,576 and would
    have been refused again). Every remedy's relaunch reads back to exactly the flags it was sized with."""
    qwq = spec("Qwen__QwQ-32B")
    argv = ["--tp", "2", "--context-length", "1048576", "--mem-fraction-static", "0.5"]
    b = run(qwq, argv, version="0.5.9")
    limit, *rest = b.remedies
    assert limit.change == "--context-length 131072" and "still fails" in limit.effect
    assert rest and all(r.change.startswith("--context-length 131072 + ") and r.effect.startswith(
        "with --context-length 131072: ") for r in rest if r.flags is not None)
    for remedy in b.remedies:
        if (relaunch := remedy.launch_flags(argv)) is not None:
            assert parse_sglang_flags(relaunch) == remedy.flags, remedy.change
            assert relaunch[relaunch.index("--context-length") + 1] == "131072"
    assert all(r.flag_change is None for r in rest)  # two changes: no single flag to show


def test_the_environment_lets_a_context_beyond_the_configs_through_as_sglang_does():
    """SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in the launch's environment: no refusal, a warning instead."""
    gpus = GpuPlan("NVIDIA RTX A6000", 49140, 2, free_mib=(49139, 49139))
    base = [*SEED, "--mem-fraction-static", "0.88", "--mamba-ssm-dtype", "bfloat16", "--context-length", "524288"]
    refused = compute_budget(BudgetInput(spec("Qwen__Qwen3.6-27B"), parse_sglang_flags(base), gpus,
                                         parse_version("0.5.9")))
    assert refused.verdict is VerdictKind.FAILS and "is greater than the derived context_length" in refused.error_text
    for word, allowed in (("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", True),
                          ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=true", True),
                          ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=0", False)):
        b = compute_budget(BudgetInput(spec("Qwen__Qwen3.6-27B"), parse_sglang_flags([word, *base]), gpus,
                                       parse_version("0.5.9")))
        assert (b.error_text is None or "derived context_length" not in b.error_text) is allowed, word
        assert any("let through by SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in r for r in b.reasons) is allowed


def test_the_automatic_fraction_keeps_room_for_piecewise_graphs_unless_they_are_turned_off():
    # a text model on a release with piecewise (prefill) graphs on by default: SGLang's automatic fraction keeps
    # 512 MiB more for them; --disable-piecewise-cuda-graph (the triage's experiment for that runner) gives it back
    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    version = parse_version("0.5.11")
    on, why = default_mem_fraction_static(llama, LaunchFlags(tp=2), 49140, version, 4096, 32)
    turned_off = parse_sglang_flags(["--tp", "2", "--disable-piecewise-cuda-graph"])
    off, why_off = default_mem_fraction_static(llama, turned_off, 49140, version, 4096, 32)
    # (49140 - 6976 - 512) / 49140 against (49140 - 6976) / 49140
    assert (on, off) == (pytest.approx(0.848, abs=0.0005), pytest.approx(0.858, abs=0.0005))
    assert "piecewise" in why and "piecewise" not in why_off


def test_speculative_parameters_given_in_part_are_refused_before_anything_loads():
    """server_args: with no --speculative-num-steps SGLang chooses steps, top-k and draft tokens for the model and
    asserts the other two were not given; the remedies give the steps of a chain, or leave the choice to SGLang."""
    from bot.core.budget import PARTIAL_SPEC_PARAMS_TEXT

    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    eagle = ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "/m/eagle"]
    chain = run(llama, [*eagle, "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"], count=1)
    assert chain.verdict is VerdictKind.FAILS and chain.error_text == PARTIAL_SPEC_PARAMS_TEXT
    assert not chain.error_verbatim  # SGLang's own output is a bare AssertionError
    # a chain of 4 draft tokens is 3 steps: the one missing flag, and that launch fits
    assert [r.change for r in chain.remedies] == ["--speculative-num-steps 3"]
    fixed = chain.remedies[0].flags
    assert fixed is not None and fixed.speculative_num_steps == 3
    assert run(llama, [*eagle, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                       "--speculative-num-draft-tokens", "4"], count=1).error_text is None
    # one of the two given: drop it, and SGLang chooses all three
    draft_only = run(llama, [*eagle, "--speculative-num-draft-tokens", "8"], count=1)
    assert draft_only.error_text == PARTIAL_SPEC_PARAMS_TEXT
    assert [r.change for r in draft_only.remedies] == ["drop --speculative-num-draft-tokens 8"]
    assert draft_only.remedies[0].launch_flags([*eagle, "--speculative-num-draft-tokens", "8"]) == tuple(eagle)
    # a tree (top-k 4) with its draft tokens: no steps follow from them, so the remedy has no button
    tree = run(llama, [*eagle, "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"], count=1)
    assert tree.error_text == PARTIAL_SPEC_PARAMS_TEXT and [r.flags for r in tree.remedies] == [None]
    # NGRAM sizes its own draft tokens, and adaptive speculation picks the steps: neither asserts
    ngram = run(llama, ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"], count=1)
    adaptive = run(llama, [*eagle, "--speculative-adaptive", "--speculative-eagle-topk", "1"], count=1)
    assert PARTIAL_SPEC_PARAMS_TEXT not in (ngram.error_text, adaptive.error_text)


def test_steps_without_a_top_k_stop_sglang_from_0_5_9_on_a_none_it_compares():
    """--speculative-num-steps without --speculative-eagle-topk: SGLang fills in top-k only when the steps are missing
    too, and server_args compares the None it left with 1 (a TypeError in Python's words, reported for Qwen3.5 with
    NEXTN, sglang#22895). The remedies name top-k 1, or drop the steps when no draft tokens were given either."""
    from bot.core.budget import TOPK_MISSING_TEXT

    qwen = spec("Qwen__Qwen3.6-27B")
    base = ["--tp", "2", "--context-length", "32768", "--mem-fraction-static", "0.88", "--speculative-algorithm",
            "NEXTN", "--mamba-scheduler-strategy", "extra_buffer"]
    steps = [*base, "--speculative-num-steps", "3"]
    with_draft = run(qwen, [*steps, "--speculative-num-draft-tokens", "4"], version="0.5.10")
    assert with_draft.verdict is VerdictKind.FAILS and with_draft.error_text == TOPK_MISSING_TEXT
    assert with_draft.error_verbatim  # the TypeError is what SGLang's traceback ends with
    assert with_draft.summary == ("--speculative-num-steps 3 without --speculative-eagle-topk: SGLang fills in top-k "
                                  "only with the steps, so it stays None, and SGLang 0.5.10's server_args compares "
                                  f"that None with 1: SGLang stops with {TOPK_MISSING_TEXT}")
    assert [r.change for r in with_draft.remedies] == ["--speculative-eagle-topk 1"]
    fixed = with_draft.remedies[0].flags
    assert fixed is not None and fixed.speculative_eagle_topk == 1
    chain = run(qwen, [*steps, "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"],
                version="0.5.10")
    assert chain.error_text is None and f"{chain.kv_tokens:,} KV tokens" in with_draft.remedies[0].effect
    # only the steps: the top-k, or no steps at all (SGLang's own choice of the three)
    alone = run(qwen, steps, version="0.5.10")
    assert [r.change for r in alone.remedies] == ["--speculative-eagle-topk 1", "drop --speculative-num-steps 3"]
    assert alone.remedies[1].launch_flags(steps) == tuple(base)
    # before 0.5.9 (which Qwen3.5/3.6 need) it is not known to stop there: sized as top-k 1, the line saying so
    eagle = ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "/m/eagle",
             "--speculative-num-steps", "3"]
    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    older = run(llama, eagle, version="0.5.8", count=1)
    assert older.error_text is None and run(llama, eagle, version="0.5.9", count=1).error_text == TOPK_MISSING_TEXT
    assert "sized here as top-k 1" in next(x.why for x in older.lines if x.label == "speculative parameters")
    # a top-k given, NGRAM (no top-k of its own) and adaptive speculation are not this
    for flags in ([*steps, "--speculative-eagle-topk", "1"], ["--speculative-algorithm", "NGRAM"],
                  [*steps, "--speculative-adaptive"]):
        assert run(qwen, flags, version="0.5.10").error_text != TOPK_MISSING_TEXT, flags


def test_a_chain_verifies_steps_plus_one_draft_tokens_whatever_was_given():
    """With top-k 1 SGLang sets --speculative-num-draft-tokens to steps + 1 (and warns): 8 given with 3 steps
    sizes the hybrid model's speculative state for 4 tokens per request, the same launch as 4 given."""
    qwen = spec("Qwen__Qwen3.6-27B")
    base = ["--tp", "2", "--context-length", "32768", "--mem-fraction-static", "0.88", "--speculative-algorithm",
            "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--mamba-scheduler-strategy",
            "extra_buffer"]
    asked_8 = run(qwen, [*base, "--speculative-num-draft-tokens", "8"], version="0.5.10")
    asked_4 = run(qwen, [*base, "--speculative-num-draft-tokens", "4"], version="0.5.10")
    assert (asked_8.kv_tokens, asked_8.mamba_slots) == (asked_4.kv_tokens, asked_4.mamba_slots)
    note = next(x for x in asked_8.lines if x.label == "speculative draft tokens")
    assert note.value == "4" and "--speculative-num-draft-tokens 8 is replaced by 4" in note.why
    assert not any(x.label == "speculative draft tokens" for x in asked_4.lines)
    spec_state = next(x for x in asked_8.lines if x.label == "speculative state")
    assert "for 4 draft tokens per request" in spec_state.why


def test_with_no_steps_given_sglang_chooses_the_three_for_the_model():
    """server_args' auto_choose_speculative_params: a tree (5 steps, top-k 4, 8 draft tokens) for Llama, a chain
    (3, 1, 4) for the MTP families, STANDALONE and, in current releases, the rest. The verify graphs of a Llama
    launch are sized for 8 tokens per request, and a hybrid model's speculative state for 4."""
    eagle = ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "/m/eagle"]
    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    chosen = run(llama, eagle, count=1)
    line = next(x for x in chosen.lines if x.label == "speculative parameters")
    assert line.value == "8 verified" and "5 steps, top-k 4, 8 draft tokens for LlamaForCausalLM" in line.why
    graphs = next(x for x in chosen.lines if x.label == "CUDA graphs (estimate)")
    assert graphs.why.endswith("x 8 verify tokens")
    # the same tree named on the command line is the same launch, with no line about SGLang's choice
    named = run(llama, [*eagle, "--speculative-num-steps", "5", "--speculative-eagle-topk", "4",
                        "--speculative-num-draft-tokens", "8"], count=1)
    assert (named.kv_tokens, named.headroom_gib) == (chosen.kv_tokens, chosen.headroom_gib)
    assert not any(x.label == "speculative parameters" for x in named.lines)
    # a standalone draft is a chain whatever the target
    standalone = run(llama, ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "/m/d"],
                     count=1)
    assert "3 steps, top-k 1, 4 draft tokens" in next(x.why for x in standalone.lines
                                                      if x.label == "speculative parameters")
    # the seed model's MTP: a chain of 4, the speculative state sized for it
    qwen = spec("Qwen__Qwen3.6-27B")
    mtp = run(qwen, ["--tp", "2", "--context-length", "32768", "--mem-fraction-static", "0.88",
                     "--speculative-algorithm", "NEXTN", "--mamba-scheduler-strategy", "extra_buffer"],
              version="0.5.10")
    assert next(x.value for x in mtp.lines if x.label == "speculative parameters") == "4 verified"
    assert "for 4 draft tokens per request" in next(x.why for x in mtp.lines if x.label == "speculative state")
    # adaptive speculation is a chain whose steps move as it serves: not the Llama tree
    adaptive = run(llama, [*eagle, "--speculative-adaptive"], count=1)
    line = next(x for x in adaptive.lines if x.label == "speculative parameters")
    assert line.value == "4 verified" and line.why.startswith("--speculative-adaptive: ")
    assert next(x.why for x in adaptive.lines if x.label == "CUDA graphs (estimate)").endswith("x 4 verify tokens")
    five = run(llama, [*eagle, "--speculative-adaptive", "--speculative-num-steps", "5"], count=1)
    assert next(x.value for x in five.lines if x.label == "speculative parameters") == "6 verified"


def test_ngram_verifies_its_window_and_runs_at_most_48_requests():
    """NGRAM has no draft model (no draft weights or KV, no speculative reserve in the automatic fraction), but
    server_args still sets max_running_requests to 48 when unset and verifies 12 draft tokens per request unless
    --speculative-num-draft-tokens says otherwise: the verify graphs are sized for them, up to bs 48."""
    llama = spec("meta-llama__Meta-Llama-3.1-8B-Instruct")
    plain = run(llama, [], count=1)
    ngram = run(llama, ["--speculative-algorithm", "NGRAM"], count=1)
    line = next(x for x in ngram.lines if x.label == "speculative parameters")
    assert line.value == "12 verified" and "(SGLang's default)" in line.why and "at most 48 requests" in line.why
    assert ngram.max_running_requests == 48 and plain.max_running_requests != 48
    graphs = next(x.why for x in ngram.lines if x.label == "CUDA graphs (estimate)")
    assert graphs.endswith("x 12 verify tokens")
    assert not any(x.label.startswith("draft") for x in ngram.lines)  # nothing loaded for it
    assert ngram.mem_fraction_static == plain.mem_fraction_static  # no speculative reserve for NGRAM
    given = run(llama, ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8",
                        "--max-running-requests", "16"], count=1)
    assert next(x.value for x in given.lines if x.label == "speculative parameters") == "8 verified"
    assert given.max_running_requests == 16


def test_a_startup_memory_failure_whose_budget_says_the_launch_starts_is_offered_the_same_launch_again():
    """The log says the KV pool did not fit; the same launch's budget on the GPUs as they are now says it starts:
    the triage's experiment is that launch again, which tells memory held then from a budget that misjudges it,
    instead of no next step at all."""
    from bot.core.experiments import unsized_experiment

    argv = (*SEED, "--mem-fraction-static", "0.88", "--context-length", "32768", "--mamba-ssm-dtype", "bfloat16")
    fits = compute_budget(BudgetInput(spec("Qwen__Qwen3.6-27B"), parse_sglang_flags(argv),
                                      GpuPlan("NVIDIA RTX A6000", 49140, 2, free_mib=(49139, 49139)),
                                      parse_version("0.5.9")))
    assert not fits.remedies and fits.verdict is not VerdictKind.FAILS
    again = unsized_experiment("kv_pool_oom", fits, argv)
    assert again is not None and (again.change, again.argv) == ("the same flags", argv)
    assert again.why.startswith(f"the budget of this launch on the GPUs as they are now says it starts "
                                f"({fits.summary}), so it computes no change")
    fails = seed("0.5.9", "0.85", 65536)
    assert fails.remedies and unsized_experiment("kv_pool_oom", fails, argv) is None  # its remedies come first
    assert unsized_experiment("runtime_oom", fits, argv) is None  # serving ran out: a budget that starts says nothing
    assert unsized_experiment("kv_pool_oom", None, argv) is None
