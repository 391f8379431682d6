"""The accuracy benches read any file in the corpus formats, as collectors spell them: the held-out
sets are scored by these same scripts, so a case spelled differently must not change a score or end
the run."""

import json
import re
import subprocess
import sys

from tests.conftest import FIXTURES, ROOT


def bench(script, *args):
    out = subprocess.run([sys.executable, str(ROOT / "bench" / script), *map(str, args)], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_triage_bench_scores_log_lines_given_as_a_list_the_same(tmp_path):
    cases = [json.loads(x) for x in (FIXTURES / "sglang-failures/cases.jsonl").read_text().splitlines() if x]
    as_lists = tmp_path / "cases.jsonl"
    as_lists.write_text("\n".join(json.dumps({**c, "log_excerpt": (c.get("log_excerpt") or "").split("\n")})
                                  for c in cases) + "\n{not json\n")
    *_, card, original = bench("triage_accuracy.py", FIXTURES / "sglang-failures/cases.jsonl").splitlines()
    shown, alone = (int(n) for n in re.findall(r"(\d+)/\d+", card))  # a launch card's first error, against evidence
    assert card.startswith("launch card's first error: the case's evidence line in ") and shown > alone
    listed = bench("triage_accuracy.py", as_lists)
    assert re.fullmatch(r"triage: top-1 \d+/\d+ \(full\+error_line\), partial \d+/\d+, echoes avoided \d+/\d+",
                        original)
    assert listed.splitlines()[-1] == original and "skip line" in listed
    # cases whose label or secondary labels are not text are skipped or read as far as they go, never the end of
    # the run: the other cases keep their score
    odd = tmp_path / "odd.jsonl"
    odd.write_text((FIXTURES / "sglang-failures/cases.jsonl").read_text() + "\n".join(json.dumps(
        {**cases[0], "id": f"odd-{n}", **change}) for n, change in enumerate(
            [{"label": ["kv_pool_oom"]}, {"label": 5}, {"secondary_labels": 7}, {"secondary_labels": "x"},
             {"secondary_labels": [None, "child_process_died"]}])) + "\n")
    scored = bench("triage_accuracy.py", odd)
    assert "skip odd-0: no label to score against" in scored and "skip odd-1: no label to score against" in scored
    counts = [int(n) for pair in re.findall(r"(\d+)/(\d+)", scored.splitlines()[-1]) for n in pair]
    before = [int(n) for pair in re.findall(r"(\d+)/(\d+)", original) for n in pair]
    assert counts[5] == before[5] + 2  # echo cases: the text "x" and the list holding one label; 7 is none


def test_budget_bench_reads_numbers_written_as_text_the_same(tmp_path):
    cases = [json.loads(x) for x in (FIXTURES / "sglang-startup/cases.jsonl").read_text().splitlines() if x]

    def as_text(case):
        # "76.3 GB", token counts with thousands separators ("1,557,504"), a figure with a note ("0.88 (as logged)")
        logged = {k: (f"{v} GB" if k.endswith("_gb") else f"{v:,}") if isinstance(v, int | float)
                  and not isinstance(v, bool) else v for k, v in (case.get("logged") or {}).items()}
        mfs = case.get("mem_fraction_static")
        return {**case, "logged": logged, "tp": f"{case['tp']} (as reported)" if case.get("tp") else case.get("tp"),
                "mem_fraction_static": f"{mfs} (as logged)" if isinstance(mfs, float) else mfs}

    texts = tmp_path / "cases.jsonl"
    texts.write_text("\n".join(json.dumps(as_text(c)) for c in cases) + "\n")
    configs = FIXTURES / "model-configs"
    original = bench("budget_accuracy.py", FIXTURES / "sglang-startup/cases.jsonl", "--configs", configs)
    spelled = bench("budget_accuracy.py", texts, "--configs", configs)
    summary = original.splitlines()[-1]
    assert re.fullmatch(r"budget: kv_tokens within 2%: \d+/\d+, weights within 3%: \d+/\d+, verdicts: \d+/\d+",
                        summary)
    assert spelled.splitlines()[-1] == summary and "ERROR" not in spelled


def test_budget_bench_reads_a_gpu_count_and_a_weight_format_however_the_case_spells_them(tmp_path):
    cases = {c["id"]: c for c in map(json.loads, (FIXTURES / "sglang-startup/cases.jsonl").read_text().splitlines())}
    # a case that logs no free memory is planned from the GPU it names: the count may lead or trail the model
    base = cases["sglang-startup-016"]
    logged = {k: v for k, v in base["logged"].items() if k != "pre_load_avail_mem_gb"}
    named = ["NVIDIA GeForce RTX 3090 x2", "2x NVIDIA GeForce RTX 3090", "2 × RTX 3090 (24 GB each)", "RTX 3090*2"]
    spelled = tmp_path / "gpus.jsonl"
    spelled.write_text("\n".join(json.dumps({**base, "id": f"gpu-{n}", "gpu_name": name, "logged": logged})
                                 for n, name in enumerate(named)) + "\n")
    rows = [line.split(" ", 1)[1] for line in bench("budget_accuracy.py", spelled, "--configs",
                                                    FIXTURES / "model-configs").splitlines() if line.startswith("gpu-")]
    assert len(rows) == 4 and len(set(rows)) == 1 and "verdict fits" in rows[0], rows
    # the weight format stated in the case's text or the checkpoint's name, for a config that states none
    plain = cases["sglang-startup-022"]  # Llama-3.1-8B in BF16 on one GPU
    forms = [("dtype=auto, quantization=None", plain["model"]), ("dtype=auto, quantization=gptq", plain["model"]),
             ("--quantization gptq_marlin", plain["model"]),
             ("dtype=auto, quantization=None", plain["model"] + "-GPTQ-Int4"),
             ("dtype=auto, quantization=None, kv_cache_dtype=fp8", plain["model"])]
    quant = tmp_path / "quant.jsonl"
    quant.write_text("\n".join(json.dumps({**plain, "id": f"q{n}", "dtype_or_quant": text, "model": model})
                               for n, (text, model) in enumerate(forms)) + "\n")
    index = [json.loads(x) for x in (FIXTURES / "model-configs/index.jsonl").read_text().splitlines() if x]
    configs = tmp_path / "configs"
    for entry in index:
        names = entry.get("case_model_names", [])
        if plain["model"] in names:
            (configs / entry["dir"]).mkdir(parents=True)
            (configs / entry["dir"] / "config.json").write_text(
                (FIXTURES / "model-configs" / entry["dir"] / "config.json").read_text())
            (configs / "index.jsonl").write_text(json.dumps(
                {**entry, "case_model_names": [plain["model"], plain["model"] + "-GPTQ-Int4"]}) + "\n")
    out = bench("budget_accuracy.py", quant, "--configs", configs, "-v")
    kv = {line.split()[0]: int(re.search(r"kv ([\d,]+)/", line).group(1).replace(",", ""))
          for line in out.splitlines() if line.startswith("q")}
    # 4-bit weights leave more of the GPU to the KV cache than BF16 ones; an FP8 KV cache is not FP8 weights: the
    # BF16 weights' pool holds twice the tokens
    assert kv["q0"] < kv["q1"] == kv["q2"] == kv["q3"] and abs(kv["q4"] - 2 * kv["q0"]) <= 2 * 64, kv
