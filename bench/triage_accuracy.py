"""Score the triage rules against labelled SGLang failure logs.

    python bench/triage_accuracy.py CASES.jsonl [-v]

CASES.jsonl is in the format of ../shared/corpus/sglang-failures. One line per case (expected
vs got); how many keep their label when copied out of a terminal that cut long lines, and when handed
over by a log collector (docker, containerd, journald, syslog; colour codes whose ESC a copy lost); whether a
failed launch's card would show the line the case's evidence quotes as its first error; then
``triage: top-1 P/N (full+error_line), partial P/N, echoes avoided P/N``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from difflib import SequenceMatcher
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.core.diagnosis import Finding, LaunchContext, cause_line, diagnose  # noqa: E402
from bot.core.startup_log import Progress, advance  # noqa: E402


def as_text(value: object, joiner: str = "\n") -> str:
    """A log excerpt or command as the corpus may give it: text, a list of lines, or nothing."""
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return joiner.join(str(v) for v in value)
    return str(value)


WRAP_COLUMNS = (80, 120, 200)


def terminal_copy(text: str, columns: int) -> str:
    """``text`` as copied out of a terminal ``columns`` wide that hard-wraps its long lines (one line per row)."""
    rows: list[str] = []
    for line in text.split("\n"):
        rows += [line[i:i + columns] for i in range(0, len(line), columns)] or [""]
    return "\n".join(rows)


def _json_file_line(i: int, line: str) -> str:
    return json.dumps({"log": line + "\n", "stream": "stderr", "time": f"2026-12-04T12:00:{i % 60:02d}.123456789Z"})


PIECE_CHARS = 120  # both cut at 16 KiB; the corpus's lines are shorter, so its long lines are cut at this instead


def _pieces(line: str) -> list[str]:
    return [line[i:i + PIECE_CHARS] for i in range(0, len(line), PIECE_CHARS)] or [""]


def _containerd_pieces(i: int, line: str) -> str:
    pieces = _pieces(line)
    return "\n".join(f"2026-12-04T12:00:{i % 60:02d}.123456789Z stderr {'F' if n == len(pieces) - 1 else 'P'} {piece}"
                     for n, piece in enumerate(pieces))


def _json_file_pieces(i: int, line: str) -> str:
    pieces = _pieces(line)
    time = f"2026-12-04T12:00:{i % 60:02d}.123456789Z"
    return "\n".join(json.dumps({"log": piece + ("\n" if n == len(pieces) - 1 else ""), "stream": "stderr",
                                 "time": time}) for n, piece in enumerate(pieces))


# how collectors hand a log over (each a prefix or a wrapping per line, or the line's pieces when the collector cuts
# long lines; see bot/core/log_lines.py)
COLLECTORS = {
    "docker compose": lambda i, line: f"sglang-1  | {line}",
    "docker logs -t": lambda i, line: f"2026-12-04T12:00:{i % 60:02d}.123456789Z {line}",
    "containerd": lambda i, line: f"2026-12-04T12:00:{i % 60:02d}.123456789Z stderr F {line}",
    "journalctl": lambda i, line: f"Dec 04 12:00:{i % 60:02d} ct129 python3[4242]: {line}",
    "syslog": lambda i, line: f"2026-12-04T12:00:{i % 60:02d}.523607+00:00 ct129 python3[4242]: {line}",
    "docker json-file": _json_file_line,
    "colours without ESC": lambda i, line: f"[1m{line}[0m" if line.strip() else line,
    f"containerd pieces of {PIECE_CHARS}": _containerd_pieces,
    f"json-file pieces of {PIECE_CHARS}": _json_file_pieces,
}


def quotes(evidence: str, line: str | None) -> bool:
    """``line`` is the one the case's evidence quotes: 30 characters in common, or all of the shorter (the evidence
    drops a line's prefixes and may add a note after it)."""
    if not line or not evidence.strip():
        return False
    match = SequenceMatcher(None, evidence, line, autojunk=False).find_longest_match(0, len(evidence), 0, len(line))
    return match.size >= min(30, len(evidence.strip()), len(line.strip()))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    if not Path(args.cases).is_file():
        parser.error(f"no cases file {args.cases}")
    cases = []
    for number, line in enumerate(Path(args.cases).read_text().splitlines(), 1):
        if line.strip():
            try:
                case = json.loads(line)
            except json.JSONDecodeError as exc:
                print(f"skip line {number}: not JSON ({exc})")
                continue
            if isinstance(case, dict):
                cases.append(case)
    top = top_n = partial = partial_n = echo_ok = echo_n = phase_ok = phase_n = 0
    card_ok = first_ok = card_n = 0  # a failed launch's card: its first error line against the case's evidence
    read: list[tuple[str, LaunchContext, str]] = []  # each log, its launch, and the label it got
    started = time.perf_counter()
    for case in cases:
        cid = str(case.get("id", "?"))
        quality = str(case.get("quality") or "partial")  # a case that does not say is scored with the partial ones
        if quality == "prose":
            print(f"skip {cid}: prose only (no log lines)")
            continue
        if not isinstance(case.get("label"), str) or not case["label"]:
            print(f"skip {cid}: no label to score against")
            continue
        try:
            context = LaunchContext.from_argv([as_text(case.get("launch_command"), " ")])
            finding = diagnose(as_text(case.get("log_excerpt")), context=context)
        except Exception as exc:  # scored as a miss, and named, never the end of the run
            print(f"ERROR {cid}: {type(exc).__name__}: {exc}")
            finding = Finding("unknown", "unknown", "low", f"error: {exc}", "", ())
        right = finding.label == case["label"]
        read.append((as_text(case.get("log_excerpt")), context, finding.label))
        mark = "ok  " if right else "MISS"
        if quality in ("full", "error_line"):
            top_n += 1
            top += right
            first = advance(Progress(), as_text(case.get("log_excerpt")).splitlines()).error_line
            card_n += 1
            first_ok += quotes(as_text(case.get("evidence")), first)
            card_ok += quotes(as_text(case.get("evidence")), cause_line(finding) or first)
        else:
            partial_n += 1
            partial += right
        if right and case.get("phase"):  # the phase a right finding gives: startup, runtime, import, request
            phase_n += 1
            phase_ok += finding.phase.split(":")[0] == case["phase"]
        given = case.get("secondary_labels") or []
        secondary = [given] if isinstance(given, str) else [x for x in given if isinstance(x, str)] \
            if isinstance(given, list) else []
        if secondary:
            echo_n += 1
            echo_ok += finding.label not in secondary
            if finding.label in secondary:
                mark = "ECHO"
        print(f"{mark} {cid:<22} {quality:<10} want {case['label']:<30} got {finding.label} "
              f"({finding.confidence}, {finding.phase})")
        if args.verbose and not right:
            for ev in finding.evidence:
                print(f"       L{ev.line_no}: {ev.text[:160]}")
    print(f"triaged {top_n + partial_n} cases in {(time.perf_counter() - started) * 1000:.0f} ms")
    print(f"phase: {phase_ok}/{phase_n} of the cases named right are placed in the labelled phase")
    # the same logs as copied out of a terminal that cut their long lines
    wrapped = [diagnose(terminal_copy(text, columns), context=context).label == label
               for text, context, label in read for columns in WRAP_COLUMNS]
    print(f"terminal copies (cut at {'/'.join(map(str, WRAP_COLUMNS))} columns): the same label as the log itself in "
          f"{sum(wrapped)}/{len(wrapped)}")
    # the same logs as collectors hand them over
    collected = [diagnose("\n".join(add(i, line) for i, line in enumerate(text.split("\n"))),
                          context=context).label == label
                 for text, context, label in read for add in COLLECTORS.values()]
    print(f"collected copies ({', '.join(COLLECTORS)}): the same label as the log itself in "
          f"{sum(collected)}/{len(collected)}")
    print(f"launch card's first error: the case's evidence line in {card_ok}/{card_n} (full+error_line; the log's "
          f"first error line alone: {first_ok}/{card_n})")
    print(f"triage: top-1 {top}/{top_n} (full+error_line), partial {partial}/{partial_n}, "
          f"echoes avoided {echo_ok}/{echo_n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
