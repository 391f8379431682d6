"""Compare the budget engine's weights, computed from a model's config.json alone, with the real
size of its checkpoint.

    python bench/checkpoint_sizes.py [DIR]        (DIR defaults to tests/fixtures/checkpoints)

DIR holds ``index.jsonl``: one checkpoint per line with ``dir`` (a folder under DIR holding its
config.json), ``total_size`` (its model.safetensors.index.json's metadata.total_size) and, where the
weight map was read, ``mtp_in_checkpoint``. The held-out budget cases are predicted from configs
alone, so this is where a misread geometry shows first. One line per checkpoint, then
``checkpoints: within 1%: P/N``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.core.model import ModelConfigError, checkpoint_bytes, read_config  # noqa: E402

GIB = 1024 ** 3
TOLERANCE = 0.01


def predict(directory: Path, case: dict[str, Any]) -> tuple[float, int]:
    """(predicted bytes, real bytes) for one index line."""
    config = json.loads((directory / str(case["dir"]) / "config.json").read_text())
    if case.get("quantization_config"):  # one of several builds in the folder (bits and group from its file name)
        config["quantization_config"] = {**config.get("quantization_config", {}), **case["quantization_config"]}
    spec = read_config(config, str(case["dir"]))
    return checkpoint_bytes(spec, case.get("mtp_in_checkpoint")), int(case["total_size"])


def main(argv: list[str]) -> int:
    directory = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "tests/fixtures/checkpoints"
    passed = total = 0
    errors: list[str] = []
    for number, line in enumerate((directory / "index.jsonl").read_text().splitlines(), 1):
        if not line.strip():
            continue
        total += 1
        try:
            case = json.loads(line)
            predicted, real = predict(directory, case)
        except (OSError, ValueError, KeyError, TypeError, ModelConfigError) as e:
            errors.append(f"line {number}: {e}")
            print(f"line {number}: cannot be read: {e}")
            continue
        error = (predicted - real) / real
        ok = abs(error) <= TOLERANCE
        passed += ok
        quant = case.get("quantization_config")
        name = str(case["dir"]) + (f" {quant['bits']}-bit g{quant['group_size']}" if quant else "")
        print(f"{name:<62} predicted {predicted / GIB:8.2f} GiB  checkpoint {real / GIB:8.2f} GiB  "
              f"{error:+7.2%}{'' if ok else '  MISS'}")
    if errors:
        print(f"unreadable {len(errors)}: " + "; ".join(errors))
    print(f"checkpoints: within 1%: {passed}/{total}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
