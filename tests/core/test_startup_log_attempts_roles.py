import json

import pytest

from bot.core.attempts import GAVE_UP_RUNNING, Attempt, AttemptStatus, TransitionError, changes_between, flag_pairs
from bot.core.roles import Role, RoleConfig, decide, role_of
from bot.core.startup_log import Progress, Stage, advance
from tests.conftest import FIXTURES

CASES = [json.loads(line) for line in (FIXTURES / "sglang-startup/cases.jsonl").read_text().splitlines() if line]


@pytest.mark.parametrize("case", [c for c in CASES if c["completeness"].startswith("full")], ids=lambda c: c["id"])
def test_progress_reads_the_numbers_sglang_logged(case):
    progress = advance(Progress(), case["log_excerpt"])
    logged = case["logged"]
    if "weight_load_mem_usage_gb" in logged and any("Load weight end" in x and "mem usage" in x
                                                    for x in case["log_excerpt"]):
        assert progress.weights_gib == logged["weight_load_mem_usage_gb"]
    if "kv_tokens" in logged and any("#tokens" in x for x in case["log_excerpt"]):
        assert progress.kv_tokens == logged["kv_tokens"]
    if any("fired up" in x for x in case["log_excerpt"]):
        assert progress.stage is Stage.READY
    assert progress.error_line is None


@pytest.mark.parametrize("case", [c for c in CASES if c["completeness"].startswith("full")][:6], ids=lambda c: c["id"])
def test_the_progress_an_attempt_records_is_read_back_as_it_was(case):
    from bot.core.startup_log import observed_of, progress_recorded

    lines = case["log_excerpt"]
    for progress in (advance(Progress(), lines), advance(Progress(), lines[: len(lines) // 2])):
        again = progress_recorded(json.loads(json.dumps(observed_of(progress))))  # as Redis keeps it
        assert (again.stage, again.label) == (progress.stage, progress.label.split(" (")[0].rstrip(" 0123456789%"))
        assert (again.weights_gib, again.weights_format, again.kv_tokens, again.mamba_slots) == (
            progress.weights_gib, progress.weights_format, progress.kv_tokens, progress.mamba_slots)
        assert (again.max_running_requests, again.context_len, again.avail_before_load_gib) == (
            progress.max_running_requests, progress.context_len, progress.avail_before_load_gib)
    assert progress_recorded({}).stage is Stage.STARTING
    assert progress_recorded({"stage": "capturing CUDA graphs (12/52)"}).stage is Stage.CAPTURING_GRAPHS
    assert progress_recorded({"stage": "loading weights 40%"}).stage is Stage.LOADING_WEIGHTS


def test_progress_stages_and_first_error_in_order():
    lines = [
        "[x TP0] Init torch distributed ends. mem usage=0.30 GB",
        "Loading safetensors checkpoint shards:  50% Completed | 2/4 [02:56<02:57, 88.81s/it]",
        "[x TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=3.64 GB, mem usage=18.82 GB.",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "[x] Received sigquit from a child process. It usually means the child failed.",
    ]
    p = advance(Progress(), lines[:2])
    assert p.stage is Stage.LOADING_WEIGHTS and p.weights_percent == 50 and p.label == "loading weights 50%"
    p = advance(p, lines[2:])
    assert p.stage is Stage.WEIGHTS_LOADED and p.weights_gib == 18.82
    assert p.error_line.startswith("RuntimeError: Not enough memory") and p.error_line_no == 4  # not the echo


def test_changes_between_attempts():
    before = ("--model-path", "/m", "--tp", "2", "--mem-fraction-static", "0.85", "--context-length", "65536")
    after = ("--model-path", "/m", "--tp", "2", "--mem-fraction-static", "0.88", "--mamba-full-memory-ratio", "0.5",
             "--context-length", "65536")
    assert changes_between(before, after) == ("+ --mamba-full-memory-ratio 0.5", "--mem-fraction-static 0.85 -> 0.88")
    assert changes_between(None, after) == ("first attempt on this container",)
    assert changes_between(after, after) == ("same flags as the previous attempt",)
    assert flag_pairs(("--enable-torch-compile", "--tp=2")) == {"--enable-torch-compile": "(on)", "--tp": "2"}


def test_the_model_path_and_port_are_read_as_sglangs_argparse_reads_them():
    """The last value wins, in any spelling: an alias, a unique prefix, ``--flag=value``."""
    from dataclasses import replace

    from bot.core.attempts import relaunch_flags, user_flags
    from bot.core.flags import check_model_flag, flag_value
    from bot.errors import UsageError

    flags = ("NCCL_DEBUG=INFO", "--port=31000", "--tp", "2", "--por", "31001", "--model", "/m")
    assert flag_value(flags, "--port") == "31001" and flag_value(flags, "--model-path") == "/m"
    assert flag_value(("--tp", "2"), "--port") is None and flag_value(("--port",), "--port") is None
    check_model_flag(flags, "/m")  # the same model: taken once
    check_model_flag(("--model-path", "/models/q/"), "/models//q")  # spelled otherwise, the same folder
    with pytest.raises(UsageError, match="`--model-path /other` in the flags names another model than `/m`"):
        check_model_flag(("--model-path=/other",), "/m")
    assert user_flags(flags) == ("NCCL_DEBUG=INFO", "--tp", "2")
    attempt = replace(_attempt("a20261101-000000-0001", "/m", ()),
                      argv=("--model-path", "/m", "--tp", "2", "--port", "31000"), port=31000)
    assert relaunch_flags(attempt, 31000) == ("--tp", "2")  # the container's own port: given by the launcher
    assert relaunch_flags(attempt, 30000) == ("--tp", "2", "--port", "31000")  # a port the person chose


def test_a_server_is_asked_on_the_address_it_binds():
    from bot.core.flags import server_host

    assert server_host(("--tp", "2")) == "127.0.0.1"  # SGLang's default --host
    assert server_host(("--host", "0.0.0.0")) == server_host(("--host=::",)) == "127.0.0.1"  # noqa: S104
    assert server_host(("--host", "10.0.0.5", "--tp", "2")) == "10.0.0.5"
    assert server_host(("--host", "[fd00::5]")) == "fd00::5"


def test_a_server_is_checked_on_the_address_it_binds_a_wildcard_included():
    from bot.core.argv import port_bind
    from bot.core.flags import bind_host

    assert bind_host(("--tp", "2")) == "127.0.0.1"  # SGLang's default --host
    assert bind_host(("--host", "0.0.0.0")) == "0.0.0.0"  # noqa: S104 - the bind covers every address
    assert bind_host(("--host=::",)) == "::" and bind_host(("--host", "[fd00::5]")) == "fd00::5"
    assert port_bind("/usr/bin/python3", "0.0.0.0", 30000)[-2:] == ("0.0.0.0", "30000")  # noqa: S104
    with pytest.raises(ValueError, match="is not an address or host name"):
        port_bind("/usr/bin/python3", "127.0.0.1;id", 30000)


def test_a_secret_flag_value_is_never_shown_but_is_passed_on():
    from bot.core.budget import BudgetInput, GpuPlan, compute_budget, parse_version
    from bot.core.flags import parse_sglang_flags, redacted, secret_value
    from bot.errors import UsageError
    from tests.core.test_budget import spec

    launch = ("--model-path", "/m", "--tp", "2", "--api-key", "sk-lab-123", "--admin-api-key=adm-456")
    assert redacted(launch) == ("--model-path", "/m", "--tp", "2", "--api-key", "<redacted>",
                                "--admin-api-key=<redacted>")
    assert secret_value(launch, "--api-key") == "sk-lab-123" and secret_value(("--tp", "2"), "--api-key") is None
    assert secret_value(("--api-k", "abbrev"), "--api-key") == "abbrev"  # argparse's unique prefix
    changed = changes_between(launch[:4], launch)
    assert changed == ("+ --admin-api-key <redacted>", "+ --api-key <redacted>")
    assert "sk-lab-123" not in repr(changes_between(launch, launch[:4]))
    with pytest.raises(UsageError) as err:  # a bad value is named without being shown
        parse_sglang_flags(["--api-key", "sk-lab-123\nmore"])
    assert "sk-lab-123" not in err.value.user_message and "<redacted>" in err.value.user_message
    flags = parse_sglang_flags(list(launch[2:]))
    budget = compute_budget(BudgetInput(spec("Qwen__Qwen3-8B"), flags, GpuPlan("NVIDIA A10", 23028, 2),
                                        parse_version("0.5.9")))
    assert "adm-456" not in " ".join(budget.not_modelled) and "--admin-api-key=<redacted>" in budget.not_modelled


def test_a_secret_the_servers_own_log_prints_is_redacted_in_what_is_quoted():
    from bot.core.diagnosis import diagnose
    from bot.core.flags import scrub_secrets

    # SGLang prints its ServerArgs at start (this fragment is from a public log, with api_key=None), so a
    # launch with --api-key puts the key in its own log; whatever quotes that line must not show it
    fragment = ("export_metrics_to_file_dir=None, api_key=None, admin_api_key=None, "
                "served_model_name='qwen/qwen2.5-0.5b-instruct', weight_version='default'")
    line = "server_args=ServerArgs(" + fragment.replace("api_key=None, admin", "api_key='sk-lab-789', admin") + ")"
    assert "sk-lab-789" not in scrub_secrets(line) and "api_key=<redacted>, admin_api_key=None" in scrub_secrets(line)
    assert scrub_secrets("curl -H 'Authorization: Bearer sk-lab-789' --api-key=sk-lab-789") == \
        "curl -H 'Authorization: Bearer <redacted>' --api-key=<redacted>"
    finding = diagnose(line)  # a log cut right after its ServerArgs: the last lines are what it quotes
    assert finding.evidence and all("sk-lab-789" not in e.text for e in finding.evidence)
    progress = advance(Progress(), [line.replace("server_args", "ValueError: bad server_args")])
    assert progress.error_line and "sk-lab-789" not in progress.error_line


def test_attempt_transitions_and_round_trip():
    a = Attempt("a20261202-120000-abcd", "U1", "C1", "pve5", 129, "sglang-a6000", "/m", ("--tp", "2"), 30000, 1.0)
    a = a.moved(AttemptStatus.PLANNED, 1.0).moved(AttemptStatus.LAUNCHING, 2.0, "PID 7")
    assert a.status is AttemptStatus.LAUNCHING
    with pytest.raises(TransitionError):
        a.moved(AttemptStatus.PLANNED, 3.0)
    done = a.moved(AttemptStatus.FAILED, 3.0, "oom")
    with pytest.raises(TransitionError):
        done.moved(AttemptStatus.READY, 4.0)
    assert Attempt.from_dict(json.loads(json.dumps(done.to_dict()))) == done


def test_a_launch_that_failed_after_its_log_said_ready_left_its_server_running():
    from dataclasses import replace

    a = Attempt("a20261202-120000-abcd", "U1", "C1", "pve5", 129, "sglang-a6000", "/m", ("--tp", "2"), 30000, 1.0)
    launching = a.moved(AttemptStatus.PLANNED, 1.0).moved(AttemptStatus.LAUNCHING, 2.0, "PID 7")
    unhealthy = replace(launching.moved(AttemptStatus.FAILED, 3.0, "health check failed"), observed={"stage": "ready"})
    assert unhealthy.left_running
    assert not replace(unhealthy, observed={"stage": "loading weights"}).left_running  # it died loading
    exited = replace(launching.moved(AttemptStatus.READY, 3.0).moved(AttemptStatus.FAILED, 4.0, "exited while serving"),
                     observed={"stage": "ready"})
    assert not exited.left_running  # it served, then its process went
    stopped = unhealthy.with_server_ended({"by": "U0ALICE", "signal": "SIGTERM", "memory": "memory returned"})
    assert not stopped.left_running and stopped.status is AttemptStatus.FAILED  # a stop ended it; it still failed
    # given up on as hung while loading: failed, its server left running until a stop ends it
    hung = replace(launching.moved(AttemptStatus.FAILED, 3.0, "no output for 10 min after loading weights began"),
                   observed={"stage": "loading weights", GAVE_UP_RUNNING: True})
    assert hung.left_running
    assert not hung.with_server_ended({"by": "U0ALICE", "signal": "SIGTERM", "memory": "memory returned"}).left_running


def test_only_a_launch_given_up_on_with_its_server_still_running_may_come_up_after_all():
    from dataclasses import replace

    a = Attempt("a20261202-120000-abcd", "U1", "C1", "pve5", 129, "sglang-a6000", "/m", ("--tp", "2"), 30000, 1.0)
    launching = a.moved(AttemptStatus.PLANNED, 1.0).moved(AttemptStatus.LAUNCHING, 2.0, "PID 7")
    hung = replace(launching.moved(AttemptStatus.FAILED, 600.0, "no output for 10 min"), error_line="no output",
                   observed={"stage": "loading weights", GAVE_UP_RUNNING: True})
    assert hung.given_up_at == 600.0 and launching.given_up_at is None
    up = hung.came_up(780.0, "came up 3 min after gpuops gave up on it")
    assert [t.status for t in up.transitions] == [AttemptStatus.PLANNED, AttemptStatus.LAUNCHING,
                                                  AttemptStatus.FAILED, AttemptStatus.READY]
    assert up.status is AttemptStatus.READY and up.error_line is None and up.observed["came_up_late_s"] == 180
    assert not up.left_running and up.given_up_at is None
    assert Attempt.from_dict(json.loads(json.dumps(up.to_dict()))) == up
    # a server that failed its health check (in time, or once its log said ready after the give-up), or whose hung
    # server was stopped, does not come up
    unhealthy = replace(launching.moved(AttemptStatus.FAILED, 3.0, "health check failed"), observed={"stage": "ready"})
    late_unhealthy = replace(hung, observed={**hung.observed, "stage": "ready"})
    assert late_unhealthy.left_running
    stopped = hung.with_server_ended({"by": "U0ALICE", "signal": "SIGTERM", "memory": "memory returned"})
    for failed in (unhealthy, late_unhealthy, stopped, launching.moved(AttemptStatus.FAILED, 3.0, "oom")):
        assert failed.given_up_at is None
        with pytest.raises(TransitionError):
            failed.came_up(900.0, "came up")


def test_roles_from_users_groups_and_channel_caps():
    config = RoleConfig(admins=("U0ADMIN",), operators=("S0INFRA", "U0OPS"), viewers=("*",),
                        channel_caps={"C0ANNOUNCE": "viewer"})
    assert role_of("U0ADMIN", (), config) is Role.ADMIN
    assert role_of("U0BOB", ("S0INFRA",), config) is Role.OPERATOR
    assert role_of("U0EVE", (), config) is Role.VIEWER
    assert decide("sglang.launch", "U0OPS", (), "C0LAB", config).allowed
    refused = decide("sglang.launch", "U0EVE", (), "C0LAB", config)
    assert not refused.allowed and "needs the operator role; you have viewer" in refused.reason
    capped = decide("gpu.free", "U0ADMIN", (), "C0ANNOUNCE", config)
    assert not capped.allowed and "capped at viewer" in capped.reason
    assert not decide("sglang.launch.force", "U0OPS", (), "C0LAB", config).allowed
    nobody = RoleConfig(viewers=())
    assert not decide("gpu.status", "U0X", (), "C", nobody).allowed


def test_progress_keeps_how_the_load_held_the_weights():
    by_id = {c["id"]: c for c in CASES}
    assert advance(Progress(), by_id["sglang-startup-004"]["log_excerpt"]).weights_format == "quant=awq"
    bf16 = [c for c in CASES if any("Load weight end. type=" in x and "dtype=torch.bfloat16" in x and "mem usage" in x
                                    for x in c["log_excerpt"])]
    assert bf16 and all(advance(Progress(), c["log_excerpt"]).weights_format == "dtype=bfloat16" for c in bf16)


def _attempt(aid, model, argv, weights=None, sglang=None, fmt=None, free_mib=None, avail=None):
    observed = {} if weights is None else {"weights_gib": weights, "weights_format": fmt,
                                           "avail_before_load_gib": avail}
    predicted = {"sglang": sglang, "free_mib": free_mib} if sglang else {}
    return Attempt(aid, "U1", "C1", "pve5", 129, "ct", model, ("--model-path", model, *argv, "--port", "30000"),
                   30000, 1.0, predicted=predicted, observed=observed)


def test_measured_weights_come_from_the_newest_load_of_the_same_checkpoint_and_layout():
    from bot.core.attempts import earlier_load
    from bot.core.flags import parse_sglang_flags

    layout = parse_sglang_flags(["--tp", "2", "--mem-fraction-static", "0.88"]).weight_layout
    history = [  # newest first, as the store lists them
        _attempt("a5", "/models/other", ("--tp", "2"), weights=7.0),
        _attempt("a4", "/models/q27", ("--tp", "1"), weights=51.0),
        _attempt("a3", "/models/q27/", ("--tp", "2", "--mem-fraction-static", "0.85")),  # refused: nothing logged
        _attempt("a2", "/models/q27", ("--tp", "2", "--mem-fraction-static", "0.85"), weights=25.9, sglang="0.5.9",
                 fmt="dtype=bfloat16", free_mib=48_633, avail=46.58),
        _attempt("a1", "/models/q27", ("--tp", "2"), weights=25.8, sglang="0.5.9"),
    ]
    found = earlier_load(history, "/models/q27", layout, "0.5.9")
    assert found is not None and (found.weights_gib, found.source, found.load_format) == \
        (25.9, "attempt a2's log", "dtype=bfloat16")
    # what CUDA context and NCCL took before that load: free at its pre-flight minus `Load weight begin. avail`
    assert found.context_gib == pytest.approx(48_633 / 1024 - 46.58)
    assert earlier_load(history, "/models/q27", layout, "0.5.10") is None  # an upgrade can change the load
    assert earlier_load(history, "/models/none", layout, "0.5.9") is None


def test_progress_shows_the_graph_bars_while_graphs_are_compiled_and_captured():
    from dataclasses import replace

    # real tqdm lines: a piecewise-graph compile (with torch's warning on the same line), then its capture
    bars = (FIXTURES / "other-logs" / "piecewise-graph-progress.txt").read_text().splitlines()
    loaded = replace(Progress(), stage=Stage.WEIGHTS_LOADED)
    assert advance(loaded, bars[:1]).label == "weights loaded (compiling 0/58)"
    assert advance(loaded, bars).label == "weights loaded (capturing 0/58)"
    # a real capture that hung at its first batch (sglang-pr11275): the bar is shown with the stage
    hung = next(c for c in (json.loads(x) for x in (FIXTURES / "sglang-failures/cases.jsonl").read_text()
                            .splitlines()) if c["id"] == "sglang-pr11275")
    progress = advance(Progress(), hung["log_excerpt"].splitlines())
    assert progress.label == "capturing CUDA graphs (0/52)"


def test_a_childs_death_the_parent_reports_is_the_launchs_first_error_when_nothing_came_before_it():
    # real lines: the launcher finding rank 0 dead, and newer releases' watchdog
    blocks = (FIXTURES / "other-logs" / "child-exit-lines.txt").read_text().split("\n\n")
    launcher = advance(Progress(), blocks[0].splitlines())
    assert launcher.error_line == blocks[0].splitlines()[0] and launcher.error_line_no == 1
    watchdog = advance(Progress(), blocks[1].splitlines())
    assert watchdog.error_line is not None and "crashed with exit code -11" in watchdog.error_line


FAILURES = {c["id"]: c for c in (json.loads(x) for x in (FIXTURES / "sglang-failures/cases.jsonl").read_text()
                                 .splitlines() if x)}


@pytest.mark.parametrize(("case", "raised"), [
    ("sglang-5285", "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB."),
    ("sglang-4205", "Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:534]"),
    ("flashinfer-2203", "subprocess.CalledProcessError: Command '['ninja', "),
])
def test_a_tracebacks_first_error_is_the_exception_it_raised_not_its_header(case, raised):
    """Real logs whose first error is a traceback: the line a launch's card and history show is the exception the
    traceback ends in (what failed), not `Traceback (most recent call last):`, which says only that something did."""
    lines = FAILURES[case]["log_excerpt"].splitlines()
    progress = advance(Progress(), lines)
    assert progress.error_line.startswith(raised)
    assert lines[progress.error_line_no - 1].strip() == progress.error_line[:500]
    header = next(n for n, line in enumerate(lines) if "Traceback (most recent call last)" in line)
    streamed = advance(advance(Progress(), lines[:header + 2]), lines[header + 2:])  # read as it was written
    assert streamed.error_line == progress.error_line


def test_an_exception_with_no_message_is_shown_with_the_code_line_that_raised_it():
    """A failed `assert` raises an AssertionError that says nothing (real: torch.compile's, sglang-1923): the first
    error shows the code line its traceback printed above it, where it was a bare `AssertionError:`. An exception
    with words of its own is shown as said."""
    lines = FAILURES["sglang-1923"]["log_excerpt"].splitlines()
    progress = advance(Progress(), lines)
    assert progress.error_line == "AssertionError: (raised by: assert isinstance(index, (int, torch.SymInt)))"
    assert lines[progress.error_line_no - 1] == "AssertionError:"
    at = progress.error_line_no - 1
    assert advance(advance(Progress(), lines[:at]), lines[at:]).error_line == progress.error_line  # streamed
    # Python 3.11 marks the expression under the code line; a frame line above is no code line
    marked = ["Traceback (most recent call last):", '  File "x.py", line 3, in f', "    assert n % d == 0",
              "           ^^^^^^^^^^", "AssertionError"]
    assert advance(Progress(), marked).error_line == "AssertionError: (raised by: assert n % d == 0)"
    assert advance(Progress(), marked[:2] + ["AssertionError"]).error_line == "AssertionError"
    assert advance(Progress(), marked[:3] + ["ValueError: 48 is not divisible by 8"]).error_line == \
        "ValueError: 48 is not divisible by 8"


def test_a_traceback_cut_before_its_exception_keeps_its_header_as_the_first_error():
    # real: a capture whose traceback the excerpt cuts in its frames (sglang-2384); and the frames' own
    # code lines (indented) are never taken for the exception
    lines = FAILURES["sglang-2384"]["log_excerpt"].splitlines()
    progress = advance(Progress(), lines)
    assert "Traceback (most recent call last)" in progress.error_line
    assert advance(Progress(), ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
                                "    RuntimeError('not raised: a line of code')",
                                'INFO:     127.0.0.1:53910 - "GET /health HTTP/1.1" 503']).error_line_no == 1


def test_the_first_error_a_card_shows_is_the_cause_the_whole_log_names_not_its_echo():
    """Real: a prompt longer than the KV pool, whose scheduler then raised a TypeError (sglang-4048): the log's first
    `...Error:` line is that echo; the reading of the whole log names the cause's own line. A reading with no cause,
    or a low-confidence one, leaves the first error line standing."""
    from bot.core.diagnosis import Evidence, Finding, cause_line, diagnose

    text = FAILURES["sglang-4048"]["log_excerpt"]
    assert advance(Progress(), text.splitlines()).error_line.startswith("TypeError: '>' not supported")
    assert cause_line(diagnose(text)).endswith("Input length (160062 tokens) exceeds the maximum allowed length "
                                               "(59862 tokens). Use a shorter input or enable --allow-auto-truncate.")
    # real: NCCL's failure quoted with the code that raised it (sglang-4289): the card shows what was raised
    assert cause_line(diagnose(FAILURES["sglang-4289"]["log_excerpt"])) == \
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
    quoted = (Evidence(3, "AssertionError:"),)
    assert cause_line(Finding("torch_compile_error", "startup", "low", "", "", quoted)) is None
    assert cause_line(Finding("unknown", "startup", "medium", "", "", quoted)) is None
    assert cause_line(Finding("child_process_died", "startup", "high", "", "", quoted)) is None
