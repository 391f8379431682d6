"""The engine's weights from a config alone, against real checkpoints' safetensors totals
(tests/fixtures/checkpoints, sources in SOURCES.md). The held-out budget cases are predicted from
configs alone, so a misread geometry would show here first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.core.model import CheckpointIndex, _vision_params, checkpoint_bytes, read_config, read_index

CHECKPOINTS = Path(__file__).resolve().parent.parent / "fixtures" / "checkpoints"
CASES = [json.loads(line) for line in (CHECKPOINTS / "index.jsonl").read_text().splitlines() if line.strip()]


def _name(case: dict) -> str:
    quant = case.get("quantization_config")
    return case["dir"] + (f" {quant['bits']}-bit g{quant['group_size']}" if quant else "")


@pytest.mark.parametrize("case", CASES, ids=[_name(c) for c in CASES])
def test_a_checkpoint_is_sized_from_its_config_within_one_percent(case: dict) -> None:
    config = json.loads((CHECKPOINTS / case["dir"] / "config.json").read_text())
    if case.get("quantization_config"):  # one of several builds in the folder (bits and group from its file name)
        config["quantization_config"] = {**config.get("quantization_config", {}), **case["quantization_config"]}
    spec = read_config(config, case["dir"])
    predicted = checkpoint_bytes(spec, case.get("mtp_in_checkpoint"))
    assert abs(predicted - case["total_size"]) / case["total_size"] <= 0.01, (predicted, case["total_size"])


def _medgemma() -> dict:
    return json.loads((CHECKPOINTS / "Ibtasam-98__medgemma-27b-it" / "config.json").read_text())


def test_a_gemma_config_that_leaves_tying_out_ties_as_its_config_class_does() -> None:
    config = _medgemma()
    assert "tie_word_embeddings" not in config and "tie_word_embeddings" not in config["text_config"]
    assert read_config(config).tied_embeddings
    config["text_config"]["tie_word_embeddings"] = False  # a config that says so is believed
    untied = read_config(config)
    assert not untied.tied_embeddings
    # the untied reading stores a second 262,208 x 5,376 table: 2.63 GiB more at 2 bytes
    assert checkpoint_bytes(untied) - checkpoint_bytes(read_config(_medgemma())) == 262_208 * 5_376 * 2


def test_a_llama_config_that_leaves_tying_out_does_not_tie() -> None:
    config = json.loads((CHECKPOINTS / "tbressers__WizardLM-2-8x22B" / "config.json").read_text())
    del config["tie_word_embeddings"]
    assert not read_config(config).tied_embeddings


def test_qwen2_vl_names_its_vit_width_embed_dim_and_its_output_width_hidden_size() -> None:
    vision = json.loads((CHECKPOINTS / "BrianYAU-NTEC__olmOCR" / "config.json").read_text())["vision_config"]
    # 32 blocks of qkv + proj (4 x 1280^2) and fc1/fc2 at mlp_ratio 4 (2 x 1280 x 5120); the merger
    # joins 2 x 2 patches (5120 wide) and projects 5120 -> 5120 -> 3584
    blocks = 32 * (4 * 1280 * 1280 + 2 * 1280 * 5120)
    merger = 5120 * 5120 + 5120 * 3584
    assert _vision_params(vision, 3584) == (blocks + merger, 0) == (673_710_080, 0)


MAPS = [json.loads(line) for line in (CHECKPOINTS / "weight-maps.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("case", MAPS, ids=[c["checkpoint"].split(" ")[0] for c in MAPS])
def test_an_index_says_whether_it_holds_the_mtp_layers_its_config_names(case: dict) -> None:
    spec = read_config(json.loads((CHECKPOINTS.parent / case["config"]).read_text()))
    assert (spec.layers, spec.mtp_layers) == (case["num_hidden_layers"], case["mtp_layers"])
    stated = case.get("total_size_stated", case["total_size"])
    text = json.dumps({"metadata": {"total_size": stated}, "weight_map": {k: "x.safetensors" for k in case["keys"]}})
    index = read_index(text, spec)
    assert index.mtp_tensors is case["mtp_tensors"]
    assert index.total_size == case["total_size"]  # a stated 0 is no size: the estimate stands


def test_deepseeks_nextn_layer_is_one_more_decoder_layer_and_a_vision_towers_layers_are_not_text_layers() -> None:
    r1 = read_config(json.loads((CHECKPOINTS.parent / "model-configs/deepseek-ai__DeepSeek-R1/config.json")
                                .read_text()))
    assert (r1.layers, r1.mtp_layers) == (61, 1)

    def index(*keys: str) -> str:
        return json.dumps({"metadata": {"total_size": 1}, "weight_map": dict.fromkeys(keys, "x.safetensors")})

    # DeepseekV3ForCausalLMNextN loads `model.layers.61.*` (eh_proj, enorm, hnorm, shared_head) as its MTP layer
    assert read_index(index("model.layers.60.mlp.gate.weight", "model.layers.61.eh_proj.weight"), r1).mtp_tensors
    assert read_index(index("model.layers.60.mlp.gate.weight", "lm_head.weight"), r1).mtp_tensors is False
    # a vision encoder deeper than the text stack does not count as MTP layers
    tower = index("model.layers.60.mlp.gate.weight", "vision_tower.vision_model.encoder.layers.63.mlp.fc1.weight",
                  "model.visual.blocks.70.attn.qkv.weight")
    assert read_index(tower, r1).mtp_tensors is False
    # a config without MTP layers asks nothing of the index; an index without a weight map cannot tell
    llama = read_config(json.loads((CHECKPOINTS / "tbressers__WizardLM-2-8x22B" / "config.json").read_text()))
    assert read_index(index("model.layers.0.mlp.gate.weight"), llama).mtp_tensors is None
    assert read_index(json.dumps({"metadata": {"total_size": 5}}), r1) == CheckpointIndex(5, None)
    assert read_index("not json", r1) == CheckpointIndex(None, None)
