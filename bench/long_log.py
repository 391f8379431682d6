"""How long a triage of a long log takes: read at both ends (what /sglang triage and gpuops triage do)
against the whole file, the same log piped to `gpuops triage -` (both ends kept as it streams in; before, stdin was
read whole), the same log saved as UTF-16 by Windows PowerShell and piped (re-encoded as it streams), and the same log
rotated and gzip-compressed (read as it is decompressed, keeping both ends), side by side in one run.

    python bench/long_log.py [LINES]

The log is a server that started, served for LINES decode batches and then hung (real lines from
tests/fixtures: the lab's startup log, sglang-14972's decode-batch line, sglang-pr6555's watchdog).
Prints the median of 3 runs of each, the ratio, that all name the same cause, and the most Python memory the
compressed read held at once (tracemalloc).
"""

from __future__ import annotations

import gzip
import io
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.cli import _read_log  # noqa: E402
from bot.core import argv as remote  # noqa: E402
from bot.core.diagnosis import Finding, diagnose, diagnose_excerpt  # noqa: E402
from tests.edges.test_cli import long_serving_log  # noqa: E402


def piped_triage(path: Path) -> tuple[Finding, float]:
    """What `gpuops triage - < path` finds, and the seconds it took."""
    with path.open("rb") as file:
        stdin, sys.stdin = sys.stdin, io.TextIOWrapper(file)
        try:
            started = time.perf_counter()
            return diagnose_excerpt(_read_log("-")), time.perf_counter() - started
        finally:
            sys.stdin = stdin


def main(argv: list[str]) -> int:
    lines = int(argv[0]) if argv else 100_000
    text = long_serving_log(ROOT / "tests/fixtures/sglang-failures/cases.jsonl", ROOT / "bot/lab/data/logs", lines)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "serving.log"
        log.write_text(text)
        rotated = Path(tmp) / "serving.log.1.gz"
        rotated.write_bytes(gzip.compress(text.encode(), compresslevel=6))  # gzip's default, as logrotate runs it
        utf16 = Path(tmp) / "serving.utf16.log"
        utf16.write_bytes(text.encode("utf-16"))  # with its byte-order mark, as PowerShell's `>` writes it
        ends, whole, compressed, piped, piped16 = [], [], [], [], []
        peak = 0
        for run in range(4):  # the last run only measures memory: tracemalloc slows what it traces
            if run == 3:
                tracemalloc.start()
            started = time.perf_counter()
            with gzip.open(rotated) as stream:
                excerpt = remote.excerpt_of_chunks(iter(lambda: stream.read(1 << 20), b""))
            by_gz = diagnose_excerpt(remote.parse_log_excerpt(excerpt.decode("utf-8", errors="replace")))
            if run == 3:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                break
            compressed.append(time.perf_counter() - started)
            started = time.perf_counter()
            read = subprocess.run(remote.log_excerpt(str(log)), capture_output=True, check=True)
            by_ends = diagnose_excerpt(remote.parse_log_excerpt(read.stdout.decode("utf-8", errors="replace")))
            ends.append(time.perf_counter() - started)
            started = time.perf_counter()
            by_whole = diagnose(log.read_text())
            whole.append(time.perf_counter() - started)
            by_pipe, seconds = piped_triage(log)  # `gpuops triage - < serving.log`
            piped.append(seconds)
            by_pipe16, seconds = piped_triage(utf16)
            piped16.append(seconds)
        rotated_mb = rotated.stat().st_size / 1e6
    print(f"log: {len(text) / 1e6:.1f} MB, {text.count(chr(10)):,} lines")
    print(f"both ends (512 KiB + 1.5 MiB): median {statistics.median(ends):.2f} s -> {by_ends.label}")
    print(f"whole file:                    median {statistics.median(whole):.2f} s -> {by_whole.label}")
    print(f"piped to gpuops triage -:      median {statistics.median(piped):.2f} s -> {by_pipe.label}")
    print(f"piped, saved as UTF-16:        median {statistics.median(piped16):.2f} s -> {by_pipe16.label}")
    print(f"rotated .gz ({rotated_mb:.1f} MB), both ends as decompressed: "
          f"median {statistics.median(compressed):.2f} s, peak {peak / 2**20:.1f} MiB -> {by_gz.label}")
    print(f"long log: whole/ends = {statistics.median(whole) / statistics.median(ends):.1f}x, "
          f"piped/ends = {statistics.median(piped) / statistics.median(ends):.1f}x, "
          f"gz/ends = {statistics.median(compressed) / statistics.median(ends):.1f}x, "
          f"utf16/ends = {statistics.median(piped16) / statistics.median(ends):.1f}x, "
          f"same cause: {by_ends.label == by_whole.label == by_pipe.label == by_pipe16.label == by_gz.label}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
