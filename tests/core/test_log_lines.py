"""Collector prefixes (docker compose, docker/kubectl timestamps, journalctl, worker tags, a wrapper's Python
logging) come off real collected lines, and the triage of a real failure log reads the same through them."""

import json

import pytest

from bot.core.diagnosis import LaunchContext, diagnose
from bot.core.log_lines import collector_forms, plain_lines
from tests.conftest import FIXTURES

COLLECTED = FIXTURES / "collected-logs"
CASES = [json.loads(line) for line in (FIXTURES / "sglang-failures/cases.jsonl").read_text().splitlines() if line]


def lines_of(name: str) -> list[str]:
    return (COLLECTED / name).read_text().splitlines()


def test_compose_service_names_come_off_and_a_worker_tag_inside_them_too():
    lines = lines_of("compose-sglang-vllm.txt")
    assert collector_forms(lines) == ["docker compose", "worker tag"]
    plain = plain_lines(lines)
    assert plain[0] == 'INFO:     172.18.0.1:33818 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    assert plain[5].startswith("[2026-04-18 23:02:14] Prefill batch, #new-seq: 1, #new-token: 2048")
    assert plain[9].endswith("gen throughput (token/s): 55.54, #queue-req: 0")


def test_a_wrapper_programs_logging_comes_off_and_lines_it_did_not_write_stay():
    lines = lines_of("olmocr-python-logging.txt")
    assert collector_forms(lines) == ["python logging"]
    plain = plain_lines(lines)
    assert plain[4] == "[2025-03-07 23:50:27 TP0] Load weight begin. avail mem=22.46 GB"
    assert plain[3] == "Attempt 13: Please wait for sglang server to become ready..."
    assert plain[7] == lines[7] == "Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]"


def test_a_traceback_under_compose_keeps_its_indentation():
    plain = plain_lines(lines_of("compose-traceback.txt"))
    assert plain[0] == '  File "/app/dbgpt/app/base.py", line 82, in startup_event'
    assert plain[1] == "    conn_manage = ConnectManager(system_app)"
    assert plain[10] == "ValueError: No component found with name dbgpt_worker_manager_factory"


def test_worker_tags_come_off_for_every_worker():
    plain = plain_lines(lines_of("worker-pid-prefix.txt"))
    assert collector_forms(lines_of("worker-pid-prefix.txt")) == ["worker tag"]
    assert plain[3].startswith("Exception: WorkerProc initialization failed")
    assert plain[4] == "Traceback (most recent call last):"
    assert plain[5] == '  File "/usr/local/bin/vllm", line 10, in <module>'


def test_journal_lines_in_any_month_spelling_come_off():
    lines = (FIXTURES / "kernel-log/xid-lines.txt").read_text().splitlines()[1:3]  # "Okt 06 ... balrog kernel: "
    assert collector_forms(lines) == ["journalctl"]
    assert plain_lines(lines)[0] == "NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus."


def test_colour_codes_and_carriage_returns_come_off():
    assert plain_lines(["\x1b[32m[2025-03-07 23:50:27 TP0] Load weight begin.\x1b[0m\r"]) == [
        "[2025-03-07 23:50:27 TP0] Load weight begin."]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_a_log_collected_without_a_prefix_is_left_as_it_was(case):
    lines = case["log_excerpt"].split("\n")
    if collector_forms(lines):
        pytest.skip("this excerpt carries a collector's prefix")
    assert plain_lines(lines) == [line.rstrip("\r") for line in lines]


COLLECTORS = {
    "docker compose": lambda i, line: f"sglang-1  | {line}",
    "kubectl --timestamps": lambda i, line: f"2026-12-04T12:{i // 60 % 60:02d}:{i % 60:02d}.123456789Z {line}",
    "journalctl": lambda i, line: f"Dec 04 12:{i // 60 % 60:02d}:{i % 60:02d} ct129 python3[4242]: {line}",
    "compose around docker -t": lambda i, line: f"sglang-1  | 2026-12-04T12:00:{i % 60:02d}.5Z {line}",
}


@pytest.mark.parametrize("collector", COLLECTORS)
def test_every_corpus_failure_is_read_the_same_through_a_collector(collector):
    """The corpus logs as `docker compose logs`, `kubectl logs --timestamps` or `journalctl -u` would hand them
    over: each names the same cause from the same lines."""
    add = COLLECTORS[collector]
    changed = []
    for case in CASES:
        context = LaunchContext.from_argv([case.get("launch_command") or ""])
        lines = case["log_excerpt"].split("\n")
        direct = diagnose("\n".join(lines), context=context)
        collected = diagnose("\n".join(add(i, line) for i, line in enumerate(lines)), context=context)
        if (collected.label, [e.line_no for e in collected.evidence]) != (direct.label,
                                                                           [e.line_no for e in direct.evidence]):
            changed.append((case["id"], direct.label, collected.label))
    assert not changed


def test_collector_timestamps_show_a_newest_first_export():
    """A traceback's lines carry no time of their own; a collector's do, and tell a newest-first export."""
    case = next(c for c in CASES if c["id"] == "sglang-764")  # a traceback with no SGLang timestamp on any line
    lines = case["log_excerpt"].split("\n")
    stamped = [f"2026-12-04T12:00:{i:02d}.000000001Z {line}" for i, line in enumerate(lines)]
    assert "newest-first" not in " ".join(diagnose("\n".join(stamped)).notes)
    newest_first = diagnose("\n".join(reversed(stamped)))
    assert "log was exported newest-first; read in time order" in newest_first.notes
    assert newest_first.label == diagnose("\n".join(lines)).label == case["label"]
