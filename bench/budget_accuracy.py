"""Score the memory-budget engine against real SGLang startup logs.

    python bench/budget_accuracy.py CASES.jsonl --configs DIR [-v]

CASES.jsonl is in the corpus format (../shared/corpus/sglang-startup); DIR is laid out like
../shared/corpus/model-configs (``index.jsonl`` maps case model names to config folders).
Each case is predicted from its inputs only: model config, flags, version, and the logged
free memory before load. Logged results are used only to score. Prints one line per case,
then ``budget: kv_tokens within 2%: P/N, weights within 3%: P/N, verdicts: P/N``.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.core.budget import (  # noqa: E402
    Budget,
    BudgetInput,
    GpuPlan,
    MeasuredLoad,
    compute_budget,
    parse_version,
)
from bot.core.flags import LaunchFlags, command_flags, parse_sglang_flags  # noqa: E402
from bot.core.gpus import gpu_total_mib, split_gpu_count  # noqa: E402
from bot.core.model import ModelConfigError, Quantization, quantization_from, read_config  # noqa: E402
from bot.errors import UsageError  # noqa: E402

# when a case names no version, the release current at the log's date (research notes §0)
RELEASES_BY_MONTH = [
    ("2024-12", "0.4.0"), ("2025-03", "0.4.3"), ("2025-05", "0.4.6"), ("2025-06", "0.4.7"),
    ("2025-08", "0.4.10"), ("2025-10", "0.5.3"), ("2025-12", "0.5.6"), ("2026-01", "0.5.8"),
    ("2026-02", "0.5.9"), ("2026-04", "0.5.10"), ("2026-05", "0.5.11"), ("2026-06", "0.5.13"),
    ("2026-07", "0.5.15"),
]


_NUMBER = re.compile(r"^\s*(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)\s*(?:GB|GiB|MB|MiB|tokens)?\s*(?:\([^()]*\))?\s*$",
                     re.I)


def _number(value: Any) -> Any:
    """A number the corpus may write as text ("76.3", "76.3 GB", "12345", "1,557,504 tokens", "0.88 (default)");
    anything else unchanged."""
    if isinstance(value, str) and (m := _NUMBER.match(value)):
        digits = m.group(1).replace(",", "")
        return float(digits) if "." in digits else int(digits)
    return value


def normalized_case(case: dict[str, Any]) -> dict[str, Any]:
    """A case as the bench reads it, whatever spelling its collector used: numbers written as text,
    a tp written with a note ("8 (EP)"), missing or non-dict ``logged`` / ``other_flags``."""
    c = dict(case)
    for key in ("gpu_mem_mib", "mem_fraction_static", "context_length"):
        c[key] = _number(c.get(key))
        if not isinstance(c[key], int | float) or isinstance(c[key], bool):
            c[key] = None
    tp = c.get("tp")
    if isinstance(tp, str):
        lead = re.match(r"\s*(\d+)", tp)
        tp = int(lead.group(1)) if lead else None
    c["tp"] = tp if isinstance(tp, int) and not isinstance(tp, bool) and tp > 0 else None
    logged, other = c.get("logged"), c.get("other_flags")
    c["logged"] = {k: _number(v) for k, v in logged.items()} if isinstance(logged, dict) else {}
    c["other_flags"] = {k: _number(v) for k, v in other.items()} if isinstance(other, dict) else {}
    for key in ("model", "gpu_name", "sglang_version", "dtype_or_quant", "completeness"):
        if c.get(key) is not None and not isinstance(c[key], str):
            c[key] = str(c[key])
    return c


def case_version(text: str | None) -> str:
    text = text or ""
    current = re.search(r"v?(\d+\.\d+\.\d+)(?:\.post\d+)? was current", text)
    if current:
        return current.group(1)
    for pattern in (r"=\s*v?(\d+\.\d+\.\d+)", r"v(\d+\.\d+\.\d+)", r"\b(\d+\.\d+\.\d+)\b"):
        found = re.search(pattern, text)
        if found:
            return found.group(1)
    dated = re.search(r"(20\d\d-\d\d)", text)
    if dated:
        month = dated.group(1)
        chosen = RELEASES_BY_MONTH[0][1]
        for start, release in RELEASES_BY_MONTH:
            if month >= start:
                chosen = release
        return chosen
    return "current"


def launch_command_flags(other: dict[str, Any]) -> LaunchFlags:
    """The flags of the case's launch command, when it records one (``launch_command``/``launch``),
    read by the product's own parser (argparse abbreviations such as ``--mem-fraction`` included).
    Reporters' elisions ("...", "(script name)") are dropped one at a time until the rest parses."""
    text = next((v for k, v in other.items() if k in ("launch_command", "launch") and isinstance(v, str)), "")
    try:
        tokens = shlex.split(text)
    except ValueError:
        tokens = text.split()
    argv = list(command_flags(tokens))
    for _ in range(len(argv) + 1):
        try:
            return parse_sglang_flags(argv)
        except UsageError as exc:
            bad = re.search(r"`([^`]*)`", str(exc))
            drop = next((i for i, t in enumerate(argv) if bad and t.startswith(bad.group(1)[:40])
                         and not t.startswith("--")), None)
            if drop is None:
                break
            del argv[drop]
    return LaunchFlags()


def case_flags(case: dict[str, Any]) -> LaunchFlags:
    """The launch as the case records it: its launch command's flags, with the collector's explicit
    fields (often read from the logged server_args, which include what SGLang set itself) on top."""
    other = case.get("other_flags") or {}
    base = launch_command_flags(other)
    quant_text = (case.get("dtype_or_quant") or "").lower()
    kv = base.kv_cache_dtype
    if "fp8_e5m2" in quant_text:
        kv = "fp8_e5m2"
    elif "kv_cache_dtype=fp8" in quant_text or "kv-cache-dtype fp8" in quant_text or "kv cache dtype: torch.float8" in \
            quant_text:
        kv = "fp8_e4m3"
    tp = int(case.get("tp") or base.tp or 1)
    dp_attention = re.search(r"DP\d+\.\.DP(\d+)", str(other.get("dp_attention") or ""))
    dp = int(dp_attention.group(1)) + 1 if dp_attention else int(other.get("dp") or base.dp or 1)
    spec = other.get("speculative_algorithm")
    if isinstance(spec, str):
        spec = spec.split()[0].upper()
        spec = "EAGLE" if spec in ("NEXTN", "MTP") else spec
    explicit: dict[str, Any] = {
        "mem_fraction_static": case.get("mem_fraction_static"),
        "context_length": case.get("context_length"),
        "speculative_algorithm": spec,
        **{name: other.get(name) for name in (
            "max_running_requests", "max_total_tokens", "chunked_prefill_size", "cuda_graph_max_bs", "page_size",
            "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
            "speculative_draft_model_path", "mamba_full_memory_ratio", "max_mamba_cache_size",
            "mamba_scheduler_strategy", "swa_full_tokens_ratio")},
        **{name: True for name in ("disable_cuda_graph", "disable_radix_cache") if other.get(name)},
    }
    return replace(base, tp=tp, dp=dp, kv_cache_dtype=kv,
                   enable_dp_attention=base.enable_dp_attention or dp_attention is not None
                   or bool(other.get("enable_dp_attention")),
                   **{name: value for name, value in explicit.items() if value is not None})


_QUANT_NAMED = re.compile(r"\b(?:quantization|quant)\s*[=:]\s*([\w-]+)|--quantization[ =]([\w-]+)", re.I)
_QUANT_WORD = re.compile(r"\b(awq|gptq|auto-?round|fp8|nvfp4|mxfp4|w4a16|w8a8|int8|int4)\b", re.I)
_KV_DTYPE = re.compile(r"(?:--)?kv[_-]cache[_-]dtype\s*[=: ]\s*\S+|KV cache dtype:?\s*\S+", re.I)
_QUANT_ALIASES = {"w8a8": "w8a8_int8", "autoround": "auto_round"}  # as quantization_from names them
_NAME_QUANT = re.compile(r"[-_.](awq|gptq|autoround|fp8|nvfp4|mxfp4|w4a16|int4|int8|w8a8)(?![a-z])", re.I)


def case_quant(case: dict[str, Any]) -> Quantization | None:
    """The checkpoint's weight format, from what the case shows: its dtype/quant text (`quantization=gptq`,
    `quant=fp8`, `--quantization awq_marlin`, "weights AWQ int4 per Load weight end line", "FP8 checkpoint")
    or the checkpoint name (`-AWQ`, `-GPTQ-Int4`, `-FP8`); SGLang reads it from the checkpoint's own config,
    which the corpus may lack. A format the budget does not know is left to the config."""
    text = case.get("dtype_or_quant") or ""
    stated = re.search(r"\bbits\s*=\s*(\d+)|\bint(4|8)\b", text, re.I)
    nbits = int(stated.group(1) or stated.group(2)) if stated else None
    bits = nbits if nbits in (2, 3, 4, 8) else None
    named = [m.group(1) or m.group(2) for m in _QUANT_NAMED.finditer(text)]
    methods = [m for m in named if m.lower() not in ("none", "null", "auto")]
    if not methods:  # `quantization=None` is SGLang's "read it from the checkpoint": the notes may say what it read
        methods = _QUANT_WORD.findall(_KV_DTYPE.sub("", text))
    if not methods:
        methods = _NAME_QUANT.findall(case.get("model") or "")
    for method in methods:
        try:
            return quantization_from(_QUANT_ALIASES.get(method.lower(), method), bits)
        except ModelConfigError:
            continue
    return None


def load_configs(root: Path) -> dict[str, Path]:
    index: dict[str, Path] = {}
    for line in (root / "index.jsonl").read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            for name in entry.get("case_model_names", []):
                index[name] = root / entry["dir"] / "config.json"
    return index


def expected_tokens(logged: dict[str, Any]) -> int | None:
    for key in ("kv_tokens", "max_total_num_tokens", "full_layer_tokens"):
        if isinstance(logged.get(key), int):
            return int(logged[key])
    return None


def expected_weights(logged: dict[str, Any]) -> float | None:
    if logged.get("weight_load_mem_usage_gb") is not None:
        return float(logged["weight_load_mem_usage_gb"])
    return None


def expected_draft(logged: dict[str, Any]) -> float | None:
    """GiB the draft model's own load took: its log's second `Load weight begin/end` pair, or a figure the
    reporter transcribed (`draft_weight_mem_gb`)."""
    before, after = logged.get("draft_pre_load_avail_mem_gb"), logged.get("draft_avail_mem_after_weights_gb")
    if before is not None and after is not None:
        return float(before) - float(after)
    if logged.get("draft_weight_mem_gb") is not None:
        return float(logged["draft_weight_mem_gb"])
    return None


def expected_failure(logged: dict[str, Any]) -> str | None:
    if logged.get("error_text") and "exceeds the maximum allowed length" not in logged["error_text"]:
        return str(logged["error_text"])
    if logged.get("profiled_max_total_num_tokens") is not None and logged["profiled_max_total_num_tokens"] < 0:
        return "Not enough memory. Please try to increase --mem-fraction-static."
    return None


def error_family(text: str | None) -> str | None:
    if not text:
        return None
    for key, family in (("Not enough memory", "E1"), ("Loaded weights leave no GPU memory", "E2"),
                        ("hybrid (mamba/linear-attention) state cache", "E3/E4"),
                        ("OutOfMemoryError", "OOM"), ("not compatible with radix cache", "E5")):
        if key in text:
            return family
    return "other"


def case_gpu_name(case: dict[str, Any]) -> str:
    """The GPU model the case names, without its count or notes ("8x H100 80GB HBM3", "NVIDIA GeForce RTX 3090
    x2", "2× RTX A6000 (48 GB)", "8*H20", "H200 (issue: ...)")."""
    return split_gpu_count(re.split(r"\s*[(;,]", str(case.get("gpu_name") or ""))[0])[1]


def case_gpu_mib(case: dict[str, Any]) -> int | None:
    """The GPU's memory from the model the case names, when the log gives no free memory: the pools start from
    the GPUs assumed empty."""
    name = case_gpu_name(case)
    return gpu_total_mib(name) if name else None


NOMINAL_GPU_MIB = 1 << 20  # for a case that names no GPU: only its weights are scored


def predict(case: dict[str, Any], config_path: Path, measured_gib: float | None = None,
            nominal_gpu: bool = False) -> Budget:
    """``measured_gib``: weights per GPU as a repeat launch would have them from the first one's log."""
    spec = read_config(json.loads(config_path.read_text()), case["model"])
    logged = case.get("logged") or {}
    pre = logged.get("pre_load_avail_mem_gb")
    total = case.get("gpu_mem_mib") or (round((pre + 1.0) * 1024) if pre else None) or case_gpu_mib(case) \
        or (NOMINAL_GPU_MIB if nominal_gpu else None)
    gpus = GpuPlan(case_gpu_name(case) or "?", total, int(case.get("tp") or 1), pre_gib=pre)
    flags = case_flags(case)
    measured = None if measured_gib is None else MeasuredLoad(measured_gib, flags.weight_layout, "an earlier load")
    shown = case_quant(case)
    if shown is not None and shown.method == spec.quant.method:
        shown = None  # the config states the same format, with its details (blocks, exclusions, expert format)
    inp = BudgetInput(spec, flags, gpus, parse_version(case_version(case.get("sglang_version"))),
                      quant=shown, measured_load=measured)
    return compute_budget(inp, with_remedies=False)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases")
    parser.add_argument("--configs", required=True)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    if not Path(args.cases).is_file():
        parser.error(f"no cases file {args.cases}")
    if not (Path(args.configs) / "index.jsonl").is_file():
        parser.error(f"no index.jsonl in {args.configs} (a folder laid out like shared/corpus/model-configs)")
    configs = load_configs(Path(args.configs))
    cases = []
    for number, row in enumerate(Path(args.cases).read_text().splitlines(), 1):
        if row.strip():
            try:
                cases.append(normalized_case(json.loads(row)))
            except (json.JSONDecodeError, AttributeError) as exc:
                print(f"skip line {number}: not a JSON case ({exc})")
    kv_ok = kv_n = w_ok = w_n = v_ok = v_n = 0
    draft_ok = draft_n = 0  # the draft model's own load, where the log shows it
    repeat_ok = repeat_n = 0  # KV tokens when the weights are measured (a repeat launch of the same load)
    repeat_misses: list[str] = []
    skipped: list[str] = []
    for case in cases:
        cid = str(case.get("id", "?"))
        config = configs.get(case.get("model") or "")
        logged = case.get("logged") or {}
        if config is None:
            skipped.append(f"{cid} (no config for model {case.get('model')!r})")
            print(f"skip {cid}: no config for {case.get('model')!r}")
            continue
        complete = str(case.get("completeness") or "").startswith("full")
        weights_only = False
        try:
            try:
                budget = predict(case, config)
            except ValueError as exc:
                pre_missing = logged.get("pre_load_avail_mem_gb") is None
                if expected_weights(logged) is None or not pre_missing:
                    skipped.append(f"{cid} ({'no pre-load free memory logged' if pre_missing else exc})")
                    print(f"skip {cid}: {exc}")
                    continue
                # no GPU memory anywhere in the case, but the weights it logged do not depend on it
                budget, weights_only = predict(case, config, nominal_gpu=True), True
        except Exception as exc:  # named and counted, never the end of the run
            skipped.append(f"{cid} (could not be predicted: {type(exc).__name__}: {exc})")
            print(f"ERROR {cid}: {type(exc).__name__}: {exc}")
            continue
        parts = [f"{cid} v{budget.version} {budget.era}" + (" (GPU not named: weights only)" if weights_only else "")]
        want_w = expected_weights(logged)
        if want_w is not None:  # weights are logged before any failure: scored on every case that shows them
            w_n += 1
            err = (budget.weights_gib - want_w) / want_w
            w_ok += abs(err) <= 0.03
            parts.append(f"weights {budget.weights_gib:.2f}/{want_w:.2f} GiB ({err:+.1%})")
        want_d = expected_draft(logged)
        if want_d is not None:
            draft_n += 1
            err = (budget.draft_load_gib - want_d) / want_d
            draft_ok += abs(err) <= 0.03
            parts.append(f"draft {budget.draft_load_gib:.2f}/{want_d:.2f} GiB ({err:+.1%})")
        if weights_only:
            print("  ".join(parts))
            continue
        failure = expected_failure(logged)
        want_t = expected_tokens(logged)
        if want_t is not None and failure is None and logged.get("pre_load_avail_mem_gb") is not None:
            kv_n += 1
            err = (budget.kv_tokens - want_t) / want_t
            kv_ok += abs(err) <= 0.02
            parts.append(f"kv {budget.kv_tokens:,}/{want_t:,} ({err:+.1%})")
            try:
                again = predict(case, config, measured_gib=want_w) if want_w is not None else None
            except Exception as exc:
                print(f"ERROR {cid} (repeat launch): {type(exc).__name__}: {exc}")
                again = None
            if want_w is not None and again is not None:
                repeat_n += 1
                repeat_err = (again.kv_tokens - want_t) / want_t
                repeat_ok += abs(repeat_err) <= 0.02
                if abs(repeat_err) > 0.02:
                    repeat_misses.append(f"{cid} {repeat_err:+.1%}")
                parts.append(f"kv@measured {again.kv_tokens:,} ({repeat_err:+.1%})")
        if logged.get("mamba_max_cache_size") is not None:
            parts.append(f"slots {budget.mamba_slots}/{logged['mamba_max_cache_size']}")
        started = failure is None
        predicted_started = budget.error_text is None
        if complete or failure is not None:
            v_n += 1
            predicted_family = error_family(budget.error_text)
            same = started == predicted_started and (started or predicted_family == error_family(failure))
            v_ok += same
            parts.append(f"verdict {budget.verdict.value}{'' if predicted_started else ' ' + str(predicted_family)}"
                         f" / {'started' if started else 'failed ' + str(error_family(failure))}"
                         f" {'ok' if same else 'WRONG'}")
        print("  ".join(parts))
        if args.verbose:
            for line in budget.lines:
                print(f"      {line.label}: {line.gib if line.gib is None else round(line.gib, 3)} {line.value or ''}")
    print(f"skipped {len(skipped)}: " + "; ".join(skipped))
    print(f"draft model loads (its own `Load weight end`, where logged): within 3%: {draft_ok}/{draft_n}")
    print(f"repeat launch (weights measured by the first load's log, pools still predicted): kv_tokens within 2%: "
          f"{repeat_ok}/{repeat_n}" + (f"; misses: {', '.join(repeat_misses)}" if repeat_misses else ""))
    print(f"budget: kv_tokens within 2%: {kv_ok}/{kv_n}, weights within 3%: {w_ok}/{w_n}, verdicts: {v_ok}/{v_n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
