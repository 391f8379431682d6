"""Collector prefixes (docker compose, docker/kubectl timestamps, journalctl and syslog, docker json-file, worker
tags, a wrapper's Python logging) come off real collected lines, and the triage of a real failure log reads the same
through them."""

import json

import pytest

from bot.core.diagnosis import LaunchContext, diagnose
from bot.core.log_lines import collected_lines, collector_forms, plain_lines, unwrapped
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
    # pasted from a coloured terminal into GitHub: the ESC bytes are gone, the codes stay as text; under them, a
    # wrapper's logging (time, level, logger) that comes off like journalctl's time, host and unit
    assert plain_lines(["[2m2026-08-31T19:41:52.922414Z[0m [31mERROR[0m [2mengine.launch_phase_sigquit_handler[0m"
                        "[2m:[0m Received sigquit from a child process. It usually means the child failed."]) == [
        "Received sigquit from a child process. It usually means the child failed."]
    # a line without an orphaned reset keeps its brackets
    assert plain_lines(["[2025-03-07 23:50:27 TP0] max_running_requests=[4m]"]) == [
        "[2025-03-07 23:50:27 TP0] max_running_requests=[4m]"]


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
    # a coloured terminal's copy pasted where the ESC bytes were lost (GitHub, a chat): the codes stay as text
    "colours without their ESC": lambda i, line: f"[1m{line}[0m" if line.strip() else line,
    # /var/log/syslog as rsyslog writes it on Ubuntu 24.04 (an RFC 3339 time, then the host and the tag)
    "syslog": lambda i, line: f"2026-12-04T12:00:{i % 60:02d}.523607+00:00 ct129 python3[4242]: {line}",
    # the file docker's json-file driver writes (one JSON object per line; docs.docker.com, JSON File logging driver)
    "docker json-file": lambda i, line: json.dumps({"log": line + "\n", "stream": "stderr",
                                                    "time": f"2026-12-04T12:00:{i % 60:02d}.123456789Z"}),
    # not a collector, but how a log is often pasted (a Markdown code block by indentation, a nested list item)
    "pasted as an indented block": lambda i, line: f"    {line}" if line.strip() else line,
    "pasted with a tab": lambda i, line: f"\t{line}",
}


@pytest.mark.parametrize("collector", COLLECTORS)
def test_every_corpus_failure_is_read_the_same_through_a_collector(collector):
    """The corpus logs as `docker compose logs`, `kubectl logs --timestamps` or `journalctl -u` would hand them
    over, or as pasted indented: each names the same cause from the same lines."""
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


@pytest.mark.parametrize("collector", ["syslog", "docker json-file"])
def test_other_real_logs_are_read_the_same_through_syslog_and_docker_json_file(collector):
    """Logs whose decisive line must start its line (argparse's usage error, a traceback's frames) keep their cause
    through rsyslog's RFC 3339 prefix and docker's JSON objects."""
    add = COLLECTORS[collector]
    changed = []
    for path in sorted((FIXTURES / "other-logs").glob("*.txt")) + sorted(COLLECTED.glob("*.txt")):
        lines = path.read_text().split("\n")
        direct = diagnose("\n".join(lines))
        collected = diagnose("\n".join(add(i, line) for i, line in enumerate(lines)))
        if (collected.label, [e.line_no for e in collected.evidence]) != (direct.label,
                                                                           [e.line_no for e in direct.evidence]):
            changed.append((path.name, direct.label, collected.label))
    assert not changed


def test_a_docker_json_file_log_becomes_docker_logs_t_lines_one_for_one():
    lines = ['{"log":"[2026-12-04 12:00:00 TP0] Load weight begin. avail mem=47.27 GB\\n","stream":"stderr",'
             '"time":"2026-12-04T12:00:00.5Z"}',
             '{"log":"\\u001b[31mRuntimeError: Not enough memory.\\u001b[0m\\n","stream":"stderr","time":"bad"}',
             "a line cut by the file's rotation",
             ""]
    assert collected_lines("\n".join(lines)) == [
        "2026-12-04T12:00:00.5Z [2026-12-04 12:00:00 TP0] Load weight begin. avail mem=47.27 GB",
        "\x1b[31mRuntimeError: Not enough memory.\x1b[0m",  # a time that is not one is left out
        "a line cut by the file's rotation",
        ""]
    # SGLang's own log that prints one JSON object among its lines is left as it is
    own = ["[2026-12-04 12:00:00] Receive: obj=GenerateReqInput()", '{"log": "a request body"}', "x", "y"]
    assert collected_lines("\n".join(own)) == own


def _split(line: str, width: int) -> list[str]:
    return [line[i:i + width] for i in range(0, len(line), width)] or [""]


# how the two collectors that cut long lines write the pieces (16 KiB in both; 120 characters here, so that the
# corpus's long lines are cut): containerd's CRI tag P on each piece but the last (F), docker's json-file leaving the
# newline off each piece but the last
SPLITTERS = {
    "containerd": lambda i, line, width: [
        f"2026-12-04T12:00:{i % 60:02d}.123456789Z stderr {'F' if n == len(pieces) - 1 else 'P'} {piece}"
        for pieces in [_split(line, width)] for n, piece in enumerate(pieces)],
    "docker json-file": lambda i, line, width: [
        json.dumps({"log": piece + ("\n" if n == len(pieces) - 1 else ""), "stream": "stderr",
                    "time": f"2026-12-04T12:00:{i % 60:02d}.123456789Z"})
        for pieces in [_split(line, width)] for n, piece in enumerate(pieces)],
}


@pytest.mark.parametrize("newest_first", [False, True], ids=["in time order", "exported newest-first"])
@pytest.mark.parametrize("collector", SPLITTERS)
def test_a_line_a_collector_split_into_pieces_is_read_whole_on_the_line_it_starts_on(collector, newest_first):
    split, width = SPLITTERS[collector], 120
    changed, cut = [], 0
    for case in CASES:
        context = LaunchContext.from_argv([case.get("launch_command") or ""])
        lines = case["log_excerpt"].split("\n")
        direct = diagnose("\n".join(lines), context=context)
        written, starts = [], []
        for i, line in enumerate(lines):
            starts.append(len(written) + 1)  # the file's line number of this line's first piece
            written += split(i, line, width)
        cut += len(written) > len(lines)
        if newest_first:  # the collector's times tell the order; the line is kept where its first piece is
            if len(lines) < 2:
                continue  # one line's pieces share one time: nothing tells the order
            written.reverse()
            starts = [len(written) + 1 - start for start in starts]
        collected = diagnose("\n".join(written), context=context)
        want = (direct.label, sorted((starts[e.line_no - 1], e.text) for e in direct.evidence))
        if (collected.label, sorted((e.line_no, e.text) for e in collected.evidence)) != want:
            changed.append((case["id"], direct.label, collected.label))
    assert cut >= 30 and not changed


def test_pieces_of_two_streams_are_joined_each_to_its_own_line_and_an_export_without_newlines_is_not_joined():
    case = next(c for c in CASES if c["id"] == "qwen3-1368")  # a 1000-character error line
    error = case["log_excerpt"].split("\n")[-1]
    first, rest = error[:400], error[400:]
    cri = [f"2026-12-04T12:00:01.1Z stderr P {first}",
           "2026-12-04T12:00:01.2Z stdout F [2026-12-04 12:00:01] INFO:     127.0.0.1:5000 - \"GET /health HTTP/1.1\"",
           f"2026-12-04T12:00:01.3Z stderr F {rest}"]
    assert plain_lines(collected_lines("\n".join(cri))) == [
        error, '[2026-12-04 12:00:01] INFO:     127.0.0.1:5000 - "GET /health HTTP/1.1"', ""]
    # an export that dropped every line's newline is not a split line: one object stays one line
    lines = case["log_excerpt"].split("\n")
    bare = [json.dumps({"log": line, "stream": "stderr"}) for line in lines]
    assert collected_lines("\n".join(bare)) == lines


def test_a_newest_first_docker_json_file_export_is_read_in_time_order():
    case = next(c for c in CASES if c["id"] == "sglang-764")
    lines = case["log_excerpt"].split("\n")
    entries = [COLLECTORS["docker json-file"](i, line) for i, line in enumerate(lines)]
    newest_first = diagnose("\n".join(reversed(entries)))
    assert "log was exported newest-first; read in time order" in newest_first.notes
    assert newest_first.label == case["label"]


def test_collector_timestamps_show_a_newest_first_export():
    """A traceback's lines carry no time of their own; a collector's do, and tell a newest-first export."""
    case = next(c for c in CASES if c["id"] == "sglang-764")  # a traceback with no SGLang timestamp on any line
    lines = case["log_excerpt"].split("\n")
    stamped = [f"2026-12-04T12:00:{i:02d}.000000001Z {line}" for i, line in enumerate(lines)]
    assert "newest-first" not in " ".join(diagnose("\n".join(stamped)).notes)
    newest_first = diagnose("\n".join(reversed(stamped)))
    assert "log was exported newest-first; read in time order" in newest_first.notes
    assert newest_first.label == diagnose("\n".join(lines)).label == case["label"]


# --- the last lines of a launch's own log (/sglang log): the real tail script, run here on real log text

def tail_of(path, lines, max_bytes=64 * 1024):
    import subprocess

    from bot.core.argv import log_tail
    from bot.core.log_lines import parse_log_tail

    # bytes, decoded as the SSH client does: no newline translation (a carriage return stays one)
    done = subprocess.run(log_tail(str(path), lines, max_bytes), capture_output=True, check=True)
    return parse_log_tail(done.stdout.decode(), max_bytes)


def startup_log(case_id: str) -> list[str]:
    cases = [json.loads(x) for x in (FIXTURES / "sglang-startup/cases.jsonl").read_text().splitlines() if x]
    excerpt = next(c for c in cases if c["id"] == case_id)["log_excerpt"]
    return excerpt if isinstance(excerpt, list) else excerpt.split("\n")


def test_the_tail_of_a_log_is_numbered_as_in_the_file(tmp_path):
    lines = startup_log("sglang-startup-032")
    log = tmp_path / "a.log"
    log.write_text("\n".join(lines) + "\n")
    tail = tail_of(log, 5)
    assert tail.lines == tuple(lines[-5:]) and tail.total_lines == len(lines)
    assert tail.first_line == len(lines) - 4 and not tail.cut
    assert abs(tail.modified_at - log.stat().st_mtime) < 1
    # a last line still being written (no newline yet) is shown, and numbered after the complete ones
    log.write_text("\n".join(lines))
    tail = tail_of(log, 3)
    assert tail.lines == tuple(lines[-3:]) and tail.total_lines == len(lines) and tail.first_line == len(lines) - 2
    # more lines asked for than the file has
    assert tail_of(log, 200).lines == tuple(lines) and tail_of(log, 200).first_line == 1
    log.write_text("")
    empty = tail_of(log, 10)
    assert empty.lines == () and empty.total_lines == 0


def test_the_tail_shows_what_a_terminal_would_and_no_secret(tmp_path):
    progress = [x for x in lines_of("olmocr-python-logging.txt") if "Completed |" in x]
    assert len(progress) >= 3
    states = [x.split(" - INFO - ", 1)[-1] for x in progress]
    # SGLang prints its ServerArgs (a public fragment, with a key put in as a launch with --api-key has it)
    server_args = ("server_args=ServerArgs(export_metrics_to_file_dir=None, api_key='sk-lab-789', "
                   "admin_api_key=None, served_model_name='qwen/qwen2.5-0.5b-instruct')")
    log = tmp_path / "a.log"
    # tqdm rewrites its line with carriage returns; a terminal recorded colour codes around a line
    log.write_text(server_args + "\n" + "\r".join(states) + "\n" + "\x1b[32m" + startup_log("sglang-startup-032")[-1]
                   + "\x1b[0m\n")
    tail = tail_of(log, 3)
    assert tail.lines[0] == server_args.replace("'sk-lab-789'", "<redacted>")
    assert tail.lines[1] == states[-1]  # the progress bar as a terminal last showed it
    assert tail.lines[2] == startup_log("sglang-startup-032")[-1]


def test_a_tail_longer_than_its_byte_limit_says_its_first_line_is_cut(tmp_path):
    lines = startup_log("sglang-startup-032")
    log = tmp_path / "a.log"
    log.write_text("\n".join(lines) + "\n")
    limit = len(lines[-1]) + 1 + 20  # the last line and 20 bytes of the one before
    tail = tail_of(log, 5, max_bytes=limit)
    assert tail.cut and tail.lines[-1] == lines[-1] and lines[-2].endswith(tail.lines[0])
    assert tail.first_line == len(lines) - 1  # still numbered as in the file
    long_line = tmp_path / "b.log"
    long_line.write_text("x" * 2000 + "\n")
    assert tail_of(long_line, 1).lines[0] == "x" * 500 + " …"  # shown cut, not dropped


def test_the_tail_command_is_bounded_and_takes_only_absolute_paths():
    from bot.core.argv import LOG_TAIL_MAX_LINES, log_tail

    assert log_tail("/var/log/gpuops/a.log", 40)[:2] == ("bash", "-c")
    for bad in (0, LOG_TAIL_MAX_LINES + 1, -3):
        with pytest.raises(ValueError):
            log_tail("/var/log/gpuops/a.log", bad)
    with pytest.raises(ValueError):
        log_tail("../a.log", 10)


def terminal_copy(text: str, columns: int) -> str:
    """``text`` as copied out of a terminal ``columns`` wide that hard-wraps long lines (each row a line)."""
    rows = []
    for line in text.split("\n"):
        rows += [line[i:i + columns] for i in range(0, len(line), columns)] or [""]
    return "\n".join(rows)


@pytest.mark.parametrize("columns", [80, 120, 200])
def test_every_corpus_failure_is_read_the_same_from_a_terminals_hard_wrapped_copy(columns):
    """Cut at the terminal's width, 14 of the 61 corpus logs lost their cause at 80 columns (the cause's words
    spanned two rows). Read again with the rows rejoined, each names the same cause, its evidence numbered by the
    row the proving line starts on, and says how it was read."""
    changed = []
    rejoined = 0
    for case in CASES:
        context = LaunchContext.from_argv([case.get("launch_command") or ""])
        direct = diagnose(case["log_excerpt"], context=context)
        copied = terminal_copy(case["log_excerpt"], columns)
        wrapped = diagnose(copied, context=context)
        if wrapped.label != direct.label:
            changed.append((case["id"], direct.label, wrapped.label))
        rows = copied.split("\n")
        for evidence in wrapped.evidence:  # the row the proving line starts on
            assert evidence.text[:20] in rows[evidence.line_no - 1], (case["id"], evidence)
        rejoined += any(f"cut at {columns} columns" in n for n in wrapped.notes)
    assert not changed
    assert rejoined >= 2  # the cases whose cause the cut hid were read rejoined


def test_a_log_whose_lines_only_look_cut_is_read_as_given_when_it_names_its_cause():
    """Real logs whose structured lines share one length (three capture lines of 115 characters, then a traceback):
    the cause is named from the log as given, and nothing says it was rejoined."""
    case = next(c for c in CASES if c["id"] == "flashinfer-2203")
    finding = diagnose(case["log_excerpt"])
    assert finding.label == case["label"] and not any("columns" in n for n in finding.notes)
    lines = case["log_excerpt"].split("\n")
    joined, starts, width = unwrapped(lines)
    assert width == 115 and starts[:2] == [0, 4] and len(joined) < len(lines)  # it would join them: not used here
    assert unwrapped(["short line", "another"]) is None
