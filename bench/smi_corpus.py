"""Check the nvidia-smi parsers against a corpus laid out like ../shared/corpus/nvidia-smi.

    python bench/smi_corpus.py DIR

DIR holds ``index.jsonl`` and the files it names. Each sample is parsed with format
detection (headerless CSV gets the ``query_fields`` its source showed) and every fact in
its ``expect`` is compared. One line per sample, then ``smi corpus: P/N passed``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.core.gpu import Gpu, GpuProcess, SmiSnapshot  # noqa: E402
from bot.core.smi import decode, detect_format, field, gpu_from_query_row, parse_any, read_csv  # noqa: E402
from bot.errors import ParseError  # noqa: E402


def _cmp(problems: list[str], what: str, got: Any, want: Any) -> None:
    if got != want:
        problems.append(f"{what}: got {got!r}, want {want!r}")


def _int_or_str(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


_GPU_FIELDS = ("name", "memory_used_mib", "memory_total_mib", "utilization_pct", "temperature_c",
               "uuid", "pci_bus_id", "minor_number", "name_truncated")


def _check_gpu(problems: list[str], label: str, gpu: Gpu, want: dict[str, Any]) -> None:
    for key in _GPU_FIELDS:
        if key in want:
            _cmp(problems, f"{label}.{key}", getattr(gpu, key), want[key])
    if "index" in want:
        _cmp(problems, f"{label}.index", gpu.index, want["index"])
    if "mig_mode_current" in want:
        _cmp(problems, f"{label}.mig_mode", gpu.mig_mode, want["mig_mode_current"])
    if "utilization_cell" in want:
        _cmp(problems, f"{label}.utilization raw", gpu.raw.get("utilization"), want["utilization_cell"])
    if "memory_cell" in want:
        _cmp(problems, f"{label}.memory raw", gpu.raw.get("memory"), want["memory_cell"])
    if "mig_devices" in want:
        got = [(m.gi, m.ci, m.mig_dev, m.memory_used_mib, m.memory_total_mib) for m in gpu.mig_devices]
        exp = [(_int_or_str(m["gi"]), _int_or_str(m["ci"]), _int_or_str(m.get("mig_dev", m.get("index"))),
                m["memory_used_mib"], m["memory_total_mib"]) for m in want["mig_devices"]]
        _cmp(problems, f"{label}.mig_devices", got, exp)


def _check_process(problems: list[str], label: str, proc: GpuProcess, want: dict[str, Any]) -> None:
    _cmp(problems, f"{label}.pid", proc.pid, want.get("pid", proc.pid))
    _cmp(problems, f"{label}.name", proc.name, want.get("process_name", proc.name))
    if "used_mib" in want:
        _cmp(problems, f"{label}.used_mib", proc.used_mib, want["used_mib"])
    for raw_key in ("used_gpu_memory_raw", "used_memory_raw", "used_mib_raw"):
        if raw_key in want and want.get("used_mib") is None:
            _cmp(problems, f"{label}.used_raw", proc.used_raw, want[raw_key])
    if "type" in want:
        _cmp(problems, f"{label}.type", proc.type, want["type"])
    if "gpu" in want:
        _cmp(problems, f"{label}.gpu", proc.gpu_index, want["gpu"])
    for key in ("gi", "ci"):
        if key in want:
            _cmp(problems, f"{label}.{key}", getattr(proc, key), want[key])
    if "gpu_uuid" in want:
        _cmp(problems, f"{label}.gpu_uuid", proc.gpu_uuid, want["gpu_uuid"])


def _check_processes(problems: list[str], snap: SmiSnapshot, want: list[dict[str, Any]]) -> None:
    _cmp(problems, "process count", len(snap.processes), len(want))
    for i, (proc, exp) in enumerate(zip(snap.processes, want, strict=False)):
        _check_process(problems, f"process[{i}]", proc, exp)


def check_sample(entry: dict[str, Any], data: bytes) -> list[str]:
    """Every mismatch between what the parser reads and the sample's ``expect`` facts."""
    problems: list[str] = []
    text = decode(data)
    fmt = entry["format"]
    expect = entry["expect"]
    fields = entry.get("query_fields")
    fields_list = fields.split(",") if isinstance(fields, str) else fields
    try:
        detected = detect_format(text)
        _cmp(problems, "detected format", detected, fmt)
        snap = parse_any(text, fields=fields_list)
    except ParseError as exc:
        return [f"ParseError({exc.kind}): {exc.user_message}"]
    if fmt == "error":
        assert snap.error is not None
        _cmp(problems, "error_kind", snap.error.kind.value, expect["error_kind"])
        if "pci_bus_id" in expect:
            _cmp(problems, "pci_bus_id", snap.error.pci_bus_id, expect["pci_bus_id"])
        if "nvml_library_version" in expect:
            _cmp(problems, "nvml_library_version", snap.error.nvml_library_version, expect["nvml_library_version"])
        _cmp(problems, "lines", list(snap.error.lines), expect["lines"])
        return problems
    if snap.error is not None:
        problems.append(f"unexpected error banner {snap.error.kind.value}")
    if fmt in ("table", "xml", "q-text"):
        header = expect.get("header") or {}
        for key in ("driver_version", "cuda_version"):
            want = header.get(key, expect.get(key, "absent"))
            if want != "absent":
                _cmp(problems, key, getattr(snap, key), want)
        if "nvidia_smi_version" in header:
            _cmp(problems, "nvidia_smi_version", snap.nvidia_smi_version, header["nvidia_smi_version"])
        if "attached_gpus" in expect:
            _cmp(problems, "attached_gpus", snap.attached_gpus, int(expect["attached_gpus"]))
        _cmp(problems, "gpu_count", len(snap.gpus), expect["gpu_count"])
        for i, (gpu, want) in enumerate(zip(snap.gpus, expect["gpus"], strict=False)):
            _check_gpu(problems, f"gpu[{i}]", gpu, want)
            if "processes" in want:  # xml / q-text nest processes under their GPU
                got = snap.processes_of(gpu)
                _cmp(problems, f"gpu[{i}] process count", len(got), len(want["processes"]))
                for j, (proc, exp) in enumerate(zip(got, want["processes"], strict=False)):
                    _check_process(problems, f"gpu[{i}].process[{j}]", proc, exp)
            if "processes_element" in want:
                present = snap.process_listing.value != "absent"
                _cmp(problems, f"gpu[{i}] processes element", "present" if present else "absent",
                     want["processes_element"])
        if fmt == "table":
            _cmp(problems, "processes_section", snap.process_listing.value, expect["processes_section"])
            if "processes" in expect:
                _check_processes(problems, snap, expect["processes"])
            if "mig_devices" in expect:
                mig_got = [(m.gpu, m.gi, m.ci, m.mig_dev, m.memory_used_mib, m.memory_total_mib)
                           for g in snap.gpus for m in g.mig_devices]
                mig_want = [(m["gpu"], m["gi"], m["ci"], m["mig_dev"], m["memory_used_mib"], m["memory_total_mib"])
                            for m in expect["mig_devices"]]
                _cmp(problems, "mig_devices", mig_got, mig_want)
            if "text_after_table" in expect:
                _cmp(problems, "text_after_table", list(snap.text_after), expect["text_after_table"])
    elif fmt == "csv-apps":
        table = read_csv(text, fields_list)
        _cmp(problems, "columns", list(table.columns), expect["columns"])
        _cmp(problems, "process_count", len(snap.processes), expect["process_count"])
        for i, (proc, want) in enumerate(zip(snap.processes, expect["processes"], strict=False)):
            _check_process(problems, f"process[{i}]", proc, want)
            for key in ("gpu_name", "gpu_bus_id"):
                if key in want:
                    row = table.rows[i]
                    _cmp(problems, f"process[{i}].{key}", field(row, "name" if key == "gpu_name" else "pci.bus_id"),
                         want[key])
    elif fmt == "csv-gpu":
        table = read_csv(text, fields_list)
        _cmp(problems, "columns", len(table.columns), expect["columns"])
        if "header_repeats" in expect:
            _cmp(problems, "header_repeats", table.header_repeats, expect["header_repeats"])
        if "row_count" in expect:
            _cmp(problems, "row_count", snap.sample_count, expect["row_count"])
            for label, row in (("first_row", table.rows[0]), ("last_row", table.rows[-1])):
                gpu = gpu_from_query_row(row, 0)
                want = expect[label]
                for key, value in want.items():
                    cell = row.get(key) if key in ("timestamp",) else getattr(gpu, key, row.get(key))
                    _cmp(problems, f"{label}.{key}", cell, value)
        if "gpu_count" in expect:
            _cmp(problems, "gpu_count", len(snap.gpus), expect["gpu_count"])
            for i, (gpu, want) in enumerate(zip(snap.gpus, expect["gpus"], strict=False)):
                _check_gpu(problems, f"gpu[{i}]", gpu, want)
                if "utilization_pct_raw" in want:
                    _cmp(problems, f"gpu[{i}].utilization raw", gpu.raw.get("utilization"), want["utilization_pct_raw"])
                gpu_row = table.rows[i] if "timestamp" not in table.fields else None
                for key in ("driver_version", "timestamp", "count"):
                    if key in want and gpu_row is not None:
                        _cmp(problems, f"gpu[{i}].{key}", gpu_row.get(key), want[key])
        if "na_fields_first_row_count" in expect:
            # the corpus counts the "[N/A]" cells of the first row
            markers = [v for v in table.rows[0].values() if v == "[N/A]"]
            _cmp(problems, "na cells in first row", len(markers), expect["na_fields_first_row_count"])
        missing = {"index": "index", "name": "name", "memory_used_mib": "memory.used",
                   "memory_total_mib": "memory.total", "utilization_pct": "utilization.gpu",
                   "temperature_c": "temperature.gpu"}
        for key in expect.get("fields_not_in_output", []):
            if missing.get(key) in table.fields:
                problems.append(f"{key} expected absent but column present")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    parser.add_argument("corpus", type=Path, help="a folder laid out like shared/corpus/nvidia-smi (index.jsonl and "
                                                  "the files it names)")
    root = parser.parse_args(argv).corpus
    if not (root / "index.jsonl").is_file():
        parser.error(f"no index.jsonl in {root}")
    entries = [json.loads(line) for line in (root / "index.jsonl").read_text().splitlines() if line.strip()]
    passed = 0
    started = time.perf_counter()
    for entry in entries:
        try:
            problems = check_sample(entry, (root / entry["file"]).read_bytes())
        except Exception as exc:  # a sample the checks cannot follow fails, named; the run goes on
            problems = [f"could not be checked: {type(exc).__name__}: {exc}"]
        passed += not problems
        status = "ok  " if not problems else "FAIL"
        print(f"{status} {str(entry.get('format')):<8} {entry.get('id')}"
              + ("" if not problems else "  " + "; ".join(problems[:4])))
    elapsed_ms = (time.perf_counter() - started) * 1000
    print(f"parsed {len(entries)} samples in {elapsed_ms:.0f} ms")
    print(f"smi corpus: {passed}/{len(entries)} passed")
    return 0 if passed == len(entries) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
