"""The SSH transport against a real SSH server acting as a Proxmox node."""

import asyncio
import os
import signal
import time
from pathlib import Path

import asyncssh
import pytest

from bot.config import parse_inventory
from bot.core.argv import pct_exec
from bot.errors import CommandFailed, ConnectError, HostKeyError, RemoteTimeout
from bot.ssh import SshTransport

TRICKY = [
    "a b", "it's", '"dq"', "$(touch {canary})", "`touch {canary}`", "; touch {canary};", "x && y || z", "$HOME",
    "*", "line\nbreak", "", "--", "back\\slash", "tab\there", "ümlaut ✓", "-n", "'", '"', "$((1+1))", "a|b>c<d&",
    "{a,b}", "~root", "#hash",
]


def inventory_for(*nodes, **overrides):
    entries = {}
    for node in nodes:
        entry = node.inventory_entry()
        entry.update(overrides.get(node.name, {}))
        entries[node.name] = entry
    return parse_inventory({"nodes": entries, "containers": {"sglang-a6000": {"node": "pve5", "vmid": 129}}}, "test")


async def test_arguments_arrive_intact_and_are_never_executed(pve_node, tmp_path):
    canary = tmp_path / "pwned"
    args = [a.replace("{canary}", str(canary)) for a in TRICKY]
    transport = SshTransport(inventory_for(pve_node))
    try:
        result = await transport.run("pve5", pct_exec(129, ("printf", "%s\\0", *args)))
    finally:
        await transport.close()
    assert result.stdout.split("\0")[:-1] == args
    assert not canary.exists()
    # the node's pct received exactly the argv the bot built
    assert pve_node.calls()[-1] == ["pct", "exec", "129", "--keep-env", "0", "--", "printf", "%s\\0", *args]


async def test_unknown_host_key_is_refused(pve_node, tmp_path):
    other = asyncssh.generate_private_key("ssh-ed25519")
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"[{pve_node.host}]:{pve_node.port} " + other.export_public_key().decode())
    transport = SshTransport(inventory_for(pve_node, pve5={"known_hosts": str(wrong)}))
    with pytest.raises(HostKeyError) as err:
        await transport.run("pve5", ("true",))
    assert "unknown or has changed - refused" in err.value.user_message
    assert pve_node.calls() == []


async def test_empty_known_hosts_refuses_too(pve_node, tmp_path):
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    transport = SshTransport(inventory_for(pve_node, pve5={"known_hosts": str(empty)}))
    with pytest.raises(HostKeyError):
        await transport.run("pve5", ("true",))


async def test_remote_command_is_bounded_on_the_far_side(pve_node):
    transport = SshTransport(inventory_for(pve_node))
    started = time.monotonic()
    try:
        with pytest.raises(RemoteTimeout):
            await transport.run("pve5", ("sleep", "30"), timeout_s=1)
        elapsed = time.monotonic() - started
        # the far side's `timeout` ended it: the connection is still usable afterwards
        assert (await transport.run("pve5", ("echo", "still here"))).stdout == "still here\n"
    finally:
        await transport.close()
    assert elapsed < 4


async def test_more_concurrent_commands_than_maxsessions_all_succeed(pve_node):
    transport = SshTransport(inventory_for(pve_node), max_channels=8)
    try:
        results = await asyncio.gather(*(transport.run("pve5", ("echo", str(i))) for i in range(30)))
    finally:
        await transport.close()
    assert [r.stdout.strip() for r in results] == [str(i) for i in range(30)]


async def test_nonzero_exit_carries_status_and_stderr(pve_node):
    transport = SshTransport(inventory_for(pve_node))
    try:
        with pytest.raises(CommandFailed) as err:
            await transport.run("pve5", pct_exec(999, ("true",)))
    finally:
        await transport.close()
    assert err.value.exit_status == 255 and "999.conf' does not exist" in err.value.stderr_tail


async def test_connection_refused_is_a_connect_error(pve_node):
    await pve_node.stop()
    transport = SshTransport(inventory_for(pve_node), connect_timeout_s=2)
    with pytest.raises(ConnectError):
        await transport.run("pve5", ("true",))


async def test_dropped_connection_is_replaced_transparently(pve_node):
    """The pooled connection dies (its sshd session process is killed by PID): the next
    command reconnects instead of failing."""
    if pve_node.kind != "openssh":
        pytest.skip("needs the OpenSSH node's per-connection processes")
    transport = SshTransport(inventory_for(pve_node), connect_timeout_s=2)
    try:
        assert (await transport.run("pve5", ("echo", "one"))).stdout == "one\n"
        sessions = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _ppid(p) == pve_node.pid]
        assert sessions, "expected a per-connection sshd process"
        for pid in sessions:
            os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(0.3)
        assert (await transport.run("pve5", ("echo", "two"))).stdout == "two\n"
    finally:
        await transport.close()


def _ppid(proc_dir):
    try:
        return int((proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None
