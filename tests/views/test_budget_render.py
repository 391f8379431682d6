"""The budget's verdict, as people read it: SGLang's own refusal is quoted as the line it prints; gpuops' account of a
failure whose message SGLang does not fix (torch's OOM names an allocation no one can predict) is never shown as one."""

import json
from pathlib import Path

from bot.core.budget import BudgetInput, GpuPlan, compute_budget, parse_version
from bot.core.flags import parse_sglang_flags
from bot.core.model import read_config
from bot.views import budget_messages, budget_text

CONFIG = Path(__file__).resolve().parent.parent / "fixtures/model-configs/meta-llama__Meta-Llama-3.1-8B-Instruct"
LLAMA = read_config(json.loads((CONFIG / "config.json").read_text()), "llama")


def budget(argv, total_mib, gpu):
    return compute_budget(BudgetInput(LLAMA, parse_sglang_flags(argv), GpuPlan(gpu, total_mib, 1),
                                      parse_version("0.5.9")))


def verdict_lines(b):
    """The terminal's lines and the Slack sections' lines that carry the error text."""
    sections = [block["text"]["text"] for m in budget_messages(b, "t") for block in m.blocks
                if block.get("type") == "section"]
    return ([line for line in budget_text(b, "t").splitlines() if (b.error_text or "\0") in line],
            [line for s in sections for line in s.splitlines() if (b.error_text or "\0") in line])


def test_sglang_s_own_refusal_is_quoted_as_what_it_prints():
    b = budget(["--mem-fraction-static", "0.3"], 49140, "NVIDIA RTX A6000")
    (line,), (slack,) = verdict_lines(b)
    assert line.strip() == f"SGLang would print: {b.error_text}"
    assert slack == f":x: SGLang would print: `{b.error_text}`"


def test_gpuops_account_of_a_failure_is_not_shown_as_sglang_s_line():
    b = budget([], 12288, "NVIDIA GeForce RTX 3060")  # 14.96 GiB of weights on 12 GiB
    (line,), (slack,) = verdict_lines(b)
    assert line.strip() == f"SGLang would fail (gpuops' words, not its message): {b.error_text}"
    assert slack == f":x: SGLang would fail (gpuops' words, not its message): `{b.error_text}`"
    assert "SGLang would print" not in budget_text(b, "t")


def test_a_remedy_button_cut_to_slacks_limit_says_it_is_cut():
    """A remedy computed on top of the config's context limit names both changes and the variable it needs, longer
    than Slack's 75 characters for a button: the button ends in an ellipsis; a short one is shown whole."""
    from bot.views import BUTTON_TEXT_LIMIT, remedy_buttons

    lfm = read_config(json.loads((CONFIG.parent / "LiquidAI__LFM2-700M/config.json").read_text()), "lfm2")
    argv = ["--tp", "2", "--context-length", "131072", "--mem-fraction-static", "0.6", "--speculative-algorithm",
            "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
            "4"]
    b = compute_budget(BudgetInput(lfm, parse_sglang_flags(argv), GpuPlan("NVIDIA GeForce RTX 3090", 24576, 2),
                                   parse_version("0.5.10")))
    long = next(r for r in b.remedies if " + " in r.change and "(env " in r.change)
    labels = [f"launch with {b.remedies[0].change}", f"launch with {long.change}"]
    actions = remedy_buttons([(label, str(i)) for i, label in enumerate(labels)])[1].to_dict()
    short, cut = (e["text"]["text"] for e in actions["elements"])
    assert short == labels[0] and len(labels[1]) > BUTTON_TEXT_LIMIT
    assert len(cut) == BUTTON_TEXT_LIMIT and cut.endswith("…") and labels[1].startswith(cut[:-1])
