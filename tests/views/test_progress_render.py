"""The launch progress message: what the attempt's own log showed, against what was predicted."""

import json

from bot.core.attempts import Attempt, AttemptStatus
from bot.core.startup_log import Progress, advance
from bot.views import progress_message
from tests.conftest import FIXTURES

CASES = {c["id"]: c for c in (json.loads(x) for x in (FIXTURES / "sglang-startup/cases.jsonl").read_text()
                              .splitlines() if x)}


def _attempt(predicted):
    a = Attempt("a20261202-120000-abcd", "U1", "C1", "pve5", 129, "sglang-a6000", "/models/q", ("--tp", "2"),
                30000, 1.0, predicted=predicted, pid=4242, log_path="/var/log/gpuops/a.log")
    return a.moved(AttemptStatus.PLANNED, 1.0).moved(AttemptStatus.LAUNCHING, 2.0)


def _text(message):
    return "\n".join(b["text"]["text"] for b in message.blocks if b["type"] == "section")


def test_observed_weights_say_how_the_load_held_them_when_it_was_quantized():
    # sglang-startup-032 loaded an AWQ checkpoint ("quant=awq, bits=4" in its Load weight end line)
    progress = advance(Progress(), CASES["sglang-startup-032"]["log_excerpt"])
    text = _text(progress_message(_attempt({"weights_gib": 25.47, "kv_tokens": 183_928}), progress))
    assert "weights 14.45 GiB/GPU observed (loaded as awq) vs 25.47 predicted" in text
    assert "KV pool 422,310 tokens observed vs 183,928 predicted" in text


def test_an_unquantized_load_is_not_labelled():
    progress = advance(Progress(), CASES["sglang-startup-045"]["log_excerpt"])  # `dtype=torch.bfloat16`
    assert progress.weights_format == "dtype=bfloat16"
    text = _text(progress_message(_attempt({"weights_gib": 14.2}), progress))
    assert "weights 14.30 GiB/GPU observed vs 14.2 predicted" in text and "loaded as" not in text


def test_a_load_in_another_format_than_the_budget_planned_is_called_out():
    # the log shows AWQ int4 while the pre-flight sized bfloat16 weights: another checkpoint than the config read
    progress = advance(Progress(), CASES["sglang-startup-032"]["log_excerpt"])
    text = _text(progress_message(_attempt({"weights_gib": 25.47, "weights_format": "dtype=bfloat16"}), progress))
    assert ":warning: not the weights the pre-flight sized (that load was awq" in text
    assert "this launch loads unquantized bfloat16" in text
    same = _text(progress_message(_attempt({"weights_gib": 14.2, "weights_format": "quant=awq"}), progress))
    assert "not the weights the pre-flight sized" not in same
    # a bfloat16 load planned as bfloat16 (045), and an attempt stored before the format was recorded
    plain = advance(Progress(), CASES["sglang-startup-045"]["log_excerpt"])
    assert "pre-flight sized" not in _text(progress_message(_attempt({"weights_format": "dtype=bfloat16"}), plain))
    assert "pre-flight sized" not in _text(progress_message(_attempt({"weights_gib": 25.47}), progress))


def test_a_launch_in_progress_says_how_to_see_its_last_lines_and_a_finished_one_does_not():
    from bot.views import blocks_to_text

    progress = advance(Progress(), CASES["sglang-startup-032"]["log_excerpt"][:4])
    launching = _attempt({})
    assert f"`/sglang log {launching.id}` shows its last lines" in blocks_to_text(
        progress_message(launching, progress).blocks)
    failed = launching.moved(AttemptStatus.FAILED, 3.0)
    assert "/sglang log" not in blocks_to_text(progress_message(failed, progress).blocks)


def test_the_preflight_shows_its_command_line_as_one_code_span():
    from bot.core.attempts import Check
    from bot.views import preflight_message

    command = "python3 -m sglang.launch_server --model-path /m --chat-template 'a`b' --port 30000"
    message = preflight_message("m on pve5:129", (Check("port free", "ok", "free"),), None, False, False,
                                command=command)
    line = _text(message).splitlines()[1]
    assert line == "`python3 -m sglang.launch_server --model-path /m --chat-template 'a\u02cbb' --port 30000`"


def test_a_first_error_that_quotes_a_command_stays_one_code_span():
    from dataclasses import replace

    said = ("the server ended with its container during loading weights: container 129 on pve5 is not running, so "
            "nothing in it holds a GPU (`pct start 129` on pve5 starts it; pct: CT 129 not running)")
    failed = replace(_attempt({}).moved(AttemptStatus.FAILED, 60.0, said[:300]), error_line=said)
    (line,) = [x for x in _text(progress_message(failed, Progress())).splitlines() if "first error" in x]
    assert line == f":x: first error: `{said.replace('`', chr(0x2CB))}`" and line.count("`") == 2


def test_a_launch_given_up_on_says_until_when_its_log_is_read_and_once_up_how_late_it_came():
    from dataclasses import replace

    from bot.core.attempts import GAVE_UP_RUNNING, WATCHED_UNTIL

    progress = advance(Progress(), CASES["sglang-startup-032"]["log_excerpt"][:4])
    given_up = replace(_attempt({}).moved(AttemptStatus.FAILED, 600.0, "no output for 10 min"),
                       error_line="no output for 10 min after loading weights began - a hang at loading weights",
                       observed={"stage": "loading weights", GAVE_UP_RUNNING: True, WATCHED_UNTIL: 2400})
    text = _text(progress_message(given_up, progress))
    assert "its server (PID 4242) was left running" in text
    assert "gpuops reads its log on until 00:40 UTC: should it come up after all, it is recorded ready" in text
    # watched by no one (a terminal gave up on it, no bot took it over): nothing promised
    unwatched = replace(given_up, observed={"stage": "loading weights", GAVE_UP_RUNNING: True})
    assert "reads its log on" not in _text(progress_message(unwatched, progress))
    up = given_up.came_up(780.0, "came up 3 min after gpuops gave up on it; healthy: /health 200")
    text = _text(progress_message(up, advance(Progress(), CASES["sglang-startup-032"]["log_excerpt"])))
    assert "— *ready*" in text and "came up 3 min after gpuops gave up on it" in text
    assert "first error" not in text and "left running" not in text and "reads its log on" not in text
