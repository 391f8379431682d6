import pytest

from bot.config import parse_inventory
from bot.core.commands import GpuHelpRequest, GpuStatusRequest, parse_gpu_command
from bot.core.inventory import Target, resolve_targets
from bot.errors import ConfigError, TargetError, UsageError

INVENTORY = {
    "nodes": {
        "pve5": {"host": "10.0.0.5", "known_hosts": "kh", "key": "k"},
        "pve6": {"host": "pve6.lan", "port": 2222, "known_hosts": "kh", "key": "k"},
    },
    "containers": {"sglang-a6000": {"node": "pve5", "vmid": 129, "python": "/opt/sglang/bin/python",
                                    "log_dir": "/srv/logs", "port": 30010}},
}


def inventory():
    return parse_inventory(INVENTORY, "inventory.yml")


@pytest.mark.parametrize("spec, expected", [
    ("all", [Target("node", "pve5"), Target("node", "pve6")]),
    ("", [Target("node", "pve5"), Target("node", "pve6")]),
    ("pve6", [Target("node", "pve6")]),
    ("sglang-a6000", [Target("container", "pve5", 129, "sglang-a6000")]),
    ("pve5:129", [Target("container", "pve5", 129, "sglang-a6000")]),
    ("pve6:4242", [Target("container", "pve6", 4242, None)]),
    # another case, as a phone's keyboard types it: the one name it can be, spelled as the inventory spells it
    ("PVE6", [Target("node", "pve6")]),
    ("Sglang-A6000", [Target("container", "pve5", 129, "sglang-a6000")]),
    ("Pve5:129", [Target("container", "pve5", 129, "sglang-a6000")]),
    ("ALL", [Target("node", "pve5"), Target("node", "pve6")]),
])
def test_resolve_targets(spec, expected):
    assert resolve_targets(spec, inventory()) == expected


@pytest.mark.parametrize("spec", ["pve9", "pve5:12", "pve5:abc", "$(id)", "pve5;reboot", "pve9:129", "a" * 500])
def test_unknown_or_malformed_targets_are_refused(spec):
    with pytest.raises(TargetError) as err:
        resolve_targets(spec, inventory())
    assert "Known: pve5, pve6, sglang-a6000" in err.value.user_message
    assert len(err.value.user_message) < 300
    # a VMID below Proxmox's first (100) on a node the inventory has: said why
    assert ("VMID is 100 or more" in err.value.user_message) == (spec == "pve5:12")


def test_a_case_blind_match_is_taken_only_when_it_is_the_one_name_it_could_be():
    both = parse_inventory({**INVENTORY, "nodes": {**INVENTORY["nodes"], "PVE6": {"host": "10.0.0.9",
                                                                                 "known_hosts": "kh", "key": "k"}}},
                           "inventory.yml")
    assert resolve_targets("PVE6", both) == [Target("node", "PVE6")] and resolve_targets("pve6", both) == [
        Target("node", "pve6")]
    with pytest.raises(TargetError, match="unknown target `Pve6`"):
        resolve_targets("Pve6", both)


def test_help_is_help_in_any_case():
    from bot.core.commands import SglangHelpRequest, parse_sglang_command

    assert parse_gpu_command("Help") == GpuHelpRequest() and parse_sglang_command("HELP") == SglangHelpRequest()


def test_a_command_in_one_container_lists_the_containers_when_it_names_none():
    from bot.core.inventory import resolve_container

    assert resolve_container("pve5:129", inventory()) == Target("container", "pve5", 129, "sglang-a6000")
    assert resolve_container(" sglang-a6000 ", inventory()) == Target("container", "pve5", 129, "sglang-a6000")
    ways = "(containers: sglang-a6000; or `<node>:<vmid>` on pve5, pve6)"
    for spec, said in (("sglang-a600", f"unknown container `sglang-a600` {ways}"),
                       ("pve5", f"`pve5` is not one container {ways}"), ("all", f"`all` is not one container {ways}"),
                       ("a" * 500, f"unknown container `{'a' * 40}…` {ways}")):
        with pytest.raises(TargetError) as err:
            resolve_container(spec, inventory())
        assert err.value.user_message == said  # never `all`, which a command in one container cannot take


def test_container_settings_are_the_listed_ones_or_the_defaults():
    listed = inventory().container_settings("pve5", 129)
    assert (listed.python, listed.log_dir, listed.port) == ("/opt/sglang/bin/python", "/srv/logs", 30010)
    unlisted = inventory().container_settings("pve6", 4242)  # addressed as <node>:<vmid>
    assert (unlisted.node, unlisted.vmid, unlisted.python, unlisted.log_dir, unlisted.port) == (
        "pve6", 4242, "python3", "/var/log/gpuops", 30000)


def test_target_labels():
    assert Target("container", "pve5", 129, "sglang-a6000").label == "pve5:129 (sglang-a6000)"
    assert Target("container", "pve5", 130).label == "pve5:130"


@pytest.mark.parametrize("data, where", [
    ({"nodes": {"pve5": {"host": "h", "known_hosts": "kh", "port": 70000}}}, "nodes.pve5.port"),
    ({"nodes": {"pve5": {"host": "h; rm -rf /", "known_hosts": "kh"}}}, "nodes.pve5.host"),
    ({"nodes": {"pve5": {"host": "h", "known_hosts": "kh", "user": "root;x"}}}, "nodes.pve5.user"),
    ({"nodes": {"pve5": {"host": "h", "known_hosts": "kh", "colour": "red"}}}, "nodes.pve5.colour"),
    ({"nodes": {"pve5": {"host": "h"}}}, "nodes.pve5.known_hosts"),
    ({"nodes": {"pve5": {"host": "h", "known_hosts": "kh"}}, "containers": {"x": {"node": "pve9", "vmid": 129}}},
     "container 'x' is on node 'pve9'"),
    ({"nodes": {"pve5": {"host": "h", "known_hosts": "kh"}}, "containers": {"x": {"node": "pve5", "vmid": 42}}},
     "containers.x.vmid"),
    ({"nodes": {"pve5": {"host": "h", "known_hosts": "kh", "proc_root": "../etc"}}}, "nodes.pve5.proc_root"),
    ({"nodes": {"pve5": {"host": "h", "known_hosts": "kh"}},
      "containers": {"x": {"node": "pve5", "vmid": 129, "hf_cache": "hub; rm -rf /"}}}, "containers.x.hf_cache"),
    (["not", "a", "mapping"], "expected a mapping"),
])
def test_bad_inventory_names_file_key_and_problem(data, where):
    with pytest.raises(ConfigError) as err:
        parse_inventory(data, "inventory.yml")
    assert err.value.user_message.startswith("inventory.yml: ")
    assert where in err.value.user_message


@pytest.mark.parametrize("text, expected", [
    ("", GpuHelpRequest()),
    ("help", GpuHelpRequest()),
    ("status", GpuStatusRequest("all")),
    ("STATUS pve5", GpuStatusRequest("pve5")),
    ("status 'pve5:129'", GpuStatusRequest("pve5:129")),
])
def test_parse_gpu_command(text, expected):
    assert parse_gpu_command(text) == expected


@pytest.mark.parametrize("text, message", [
    ("status a b", "takes one target"),
    ("reboot", "unknown subcommand `reboot`"),
    ('status "open', "could not read the command"),
])
def test_malformed_gpu_command_is_a_usage_error(text, message):
    with pytest.raises(UsageError) as err:
        parse_gpu_command(text)
    assert message in err.value.user_message and "/gpu status" in err.value.user_message


@pytest.mark.parametrize("typed", [
    # iOS/macOS smart punctuation: `--` became an em or en dash, straight quotes became curly ones
    "launch sglang-a6000 /m/Qwen3.6-27B \u2014tp 2 \u2013context-length 65536 --served-model-name \u201cqwen 27b\u201d",
    # a paste from a web page: non-breaking and narrow no-break spaces between the words
    "launch\u00a0sglang-a6000 /m/Qwen3.6-27B --tp\u00a02 --context-length\u202f65536 --served-model-name 'qwen 27b'",
    "launch sglang-a6000 /m/Qwen3.6-27B --tp 2 --context-length 65536 --served-model-name \u2018qwen 27b\u2019",
])
def test_a_command_is_read_as_the_ascii_it_was_typed_as(typed):
    from bot.core.commands import SglangLaunchRequest, parse_sglang_command

    assert parse_sglang_command(typed) == SglangLaunchRequest(
        "sglang-a6000", "/m/Qwen3.6-27B", ("--tp", "2", "--context-length", "65536", "--served-model-name",
                                                "qwen 27b"), False)


def test_only_a_dash_that_starts_a_flag_becomes_two_hyphens():
    from bot.core.commands import SglangBudgetRequest, parse_sglang_command

    request = parse_sglang_command("budget ct /m --served-model-name \u2014 --chat-template a\u2014b")
    assert request == SglangBudgetRequest("ct", "/m", ("--served-model-name", "\u2014", "--chat-template", "a\u2014b"))
    assert parse_gpu_command("status\u00a0pve5") == GpuStatusRequest("pve5")
    with pytest.raises(UsageError, match="could not read the command"):
        parse_gpu_command("status it\u2019s")  # an apostrophe reads as a quote, as it would typed straight


def test_slack_markup_is_read_as_what_was_typed():
    from bot.core.commands import SglangBudgetRequest, parse_sglang_command, typed_text

    # Slack escapes &, < and > in every text it sends, and links what looks like a URL or a domain
    assert typed_text("pool &lt; context &amp;&amp; draft &gt; 2") == "pool < context && draft > 2"
    assert typed_text("see <http://server_args.py|server_args.py> and <https://hf.co/Qwen>") == (
        "see server_args.py and https://hf.co/Qwen")
    assert typed_text("ask <#C0LAB|gpu-ops> or <@U0ALICE> <!here>") == "ask #gpu-ops or <@U0ALICE> <!here>"
    request = parse_sglang_command("budget ct /m --json-model-override-args '{\"a\": \"x&amp;y\"}' "
                                   "--chat-template <http://tmpl.py|tmpl.py>")
    assert request == SglangBudgetRequest("ct", "/m", ("--json-model-override-args", '{"a": "x&y"}',
                                                        "--chat-template", "tmpl.py"))


def test_a_node_the_inventory_does_not_have_is_a_target_error():
    from bot.core.inventory import Inventory
    from bot.errors import TargetError

    inventory = Inventory.model_validate({"nodes": {"pve5": {"host": "127.0.0.1", "known_hosts": "/etc/ssh/kh"}}})
    assert inventory.node("pve5").host == "127.0.0.1"
    with pytest.raises(TargetError) as err:
        inventory.node("pve-gone")
    assert err.value.user_message == "node `pve-gone` is not in this inventory"


@pytest.mark.parametrize("path, said", [
    ("/models/Qwen3.6-27B/../Qwen3.6-27B", "the model path `/models/Qwen3.6-27B/../Qwen3.6-27B` has a `..` in it"),
    ("/models/..", "the model path `/models/..` has a `..` in it"),
    ("/" + "m" * 4100, f"the model path `/{'m' * 39}…{'m' * 39}` is 4101 characters long, more than 4096"),
])
def test_a_model_path_a_command_cannot_use_is_refused_saying_why(path, said):
    """Said of the path as typed, where the budget said "not an absolute path" of its config.json, cut mid-name."""
    from bot.core.commands import parse_sglang_command

    for verb in ("budget", "launch"):
        with pytest.raises(UsageError) as err:
            parse_sglang_command(f"{verb} sglang-a6000 {path} --tp 2")
        assert err.value.user_message.startswith(said), err.value.user_message


def test_a_checked_path_says_which_rule_it_breaks_and_keeps_the_paths_end_in_view():
    from bot.core.argv import checked_path

    assert checked_path("/models/Qwen3.6-27B/config.json") == "/models/Qwen3.6-27B/config.json"
    with pytest.raises(ValueError, match=r"^`models/x` is not an absolute path \(one that starts with /\)$"):
        checked_path("models/x")
    with pytest.raises(ValueError, match=r"^`/m/x\\nrm` has a line break or NUL in it$"):
        checked_path("/m/x\nrm")
    long = "/" + "d" * 60 + "/Qwen3.6-27B/../config.json"
    with pytest.raises(ValueError) as err:
        checked_path(long)
    assert str(err.value).startswith(f"`{long[:40]}…{long[-39:]}` has a `..` in it")
