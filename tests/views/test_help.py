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
