"""The help texts name every subcommand the parsers accept, and nothing they refuse."""

import re

import pytest

from bot.config import parse_inventory
from bot.core.commands import GPU_USAGE, parse_gpu_command
from bot.errors import UsageError
from bot.views import help_text

INVENTORY = parse_inventory({"nodes": {"pve5": {"host": "10.0.0.5", "known_hosts": "known_hosts"}},
                             "containers": {"sglang-a6000": {"node": "pve5", "vmid": 129}}}, "test")


def test_gpu_help_lists_every_accepted_subcommand_and_each_listed_one_parses():
    text = help_text(INVENTORY)
    listed = set(re.findall(r"`/gpu (\w+)", text))
    usage = set(re.findall(r"`/gpu (\w+)", GPU_USAGE))
    assert listed == usage == {"status", "health", "free", "help"}
    for verb in listed:
        parse_gpu_command(f"{verb} pve5" if verb in ("free", "health", "status") else verb)
    with pytest.raises(UsageError):
        parse_gpu_command("restart pve5")
    assert "`/sglang help`" in text


def test_sglang_help_lists_every_accepted_subcommand_the_thread_mentions_and_the_profiles():
    from bot.core.commands import SGLANG_USAGE, parse_sglang_command
    from bot.core.incident import MENTION_VERBS
    from bot.views import sglang_help_text

    inventory = parse_inventory({
        "nodes": {"pve5": {"host": "10.0.0.5", "known_hosts": "known_hosts"}},
        "containers": {"sglang-a6000": {"node": "pve5", "vmid": 129}},
        "profiles": {"qwen36": {"container": "sglang-a6000", "model_path": "/models/Qwen3.6-27B",
                                "flags": ["--tp", "2"]}}}, "test")
    text = sglang_help_text(inventory)
    listed = set(re.findall(r"`/sglang (\w+)", text))
    assert listed == set(re.findall(r"`/sglang (\w+)", SGLANG_USAGE)) == {
        "budget", "launch", "triage", "log", "history", "stop", "help"}
    for verb in listed:  # each listed form parses
        parse_sglang_command({"budget": "budget sglang-a6000 /models/q", "launch": "launch qwen36",
                              "stop": "stop sglang-a6000"}.get(verb, verb), inventory.profiles)
    mentioned = set(re.findall(r"`@gpuops (\w+)", text))
    assert mentioned == set(MENTION_VERBS) - {"help"}
    assert "`qwen36` (sglang-a6000)" in text and "Containers: `sglang-a6000`" in text


def test_sglang_log_takes_a_container_or_attempt_and_a_line_count_in_either_order():
    from bot.core.commands import DEFAULT_LOG_LINES, SglangLogRequest, parse_sglang_command
    from bot.errors import UsageError

    assert parse_sglang_command("log") == SglangLogRequest(None, DEFAULT_LOG_LINES)
    assert parse_sglang_command("log sglang-a6000") == SglangLogRequest("sglang-a6000", DEFAULT_LOG_LINES)
    assert parse_sglang_command("log 80") == SglangLogRequest(None, 80)
    assert parse_sglang_command("log a20261204-153451-e8f9 120") == SglangLogRequest("a20261204-153451-e8f9", 120)
    assert parse_sglang_command("log 10 sglang-a6000") == SglangLogRequest("sglang-a6000", 10)
    # the count as tail and `gpuops log` take it
    for typed in ("log sglang-a6000 -n 50", "log -n50 sglang-a6000", "log sglang-a6000 --lines 50",
                  "log sglang-a6000 --lines=50", "log sglang-a6000 -50"):
        assert parse_sglang_command(typed) == SglangLogRequest("sglang-a6000", 50), typed
    for bad, why in (("log 500", "from 1 to 200 lines"), ("log 0", "from 1 to 200 lines"),
                     ("log a b", "at most a container"), ("log 5 6", "at most a container"),
                     ("log sglang-a6000 -n", "needs a line count after it"), ("log -n 5 -7", "at most a container"),
                     ("log sglang-a6000 -f", "takes no option `-f`"), ("log sglang-a6000 -500", "from 1 to 200")):
        with pytest.raises(UsageError, match=why):
            parse_sglang_command(bad)
