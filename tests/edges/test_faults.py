"""Hardware fault signals read over real SSH from a lab node: an older driver's field list,
the journal, the ring-buffer fallback, and a node that shows neither."""

from datetime import UTC, datetime

from bot.config import parse_inventory
from bot.faults import read_faults
from bot.lab.nodes import seed_node_state, start_node
from bot.ssh import SshTransport
from tests.conftest import FIXTURES
from tests.services import SSH_KIND

NOW = datetime(2026, 12, 3, 8, 30, tzinfo=UTC).timestamp()
BUS_LOSS = (FIXTURES / "kernel-log" / "xid-lines.txt").read_text().splitlines()[1].split("kernel: ", 1)[1]


async def _read(tmp_path, state):
    node = await start_node(tmp_path / "pve5", "pve5", state=state, prefer=SSH_KIND)
    inventory = parse_inventory({"nodes": {"pve5": node.inventory_entry()}}, "test")
    transport = SshTransport(inventory, connect_timeout_s=3)
    try:
        return await read_faults(transport, "pve5", NOW), node.calls()
    finally:
        await transport.close()
        await node.stop()


def _state(**extra):
    state = seed_node_state("pve5")
    line = BUS_LOSS.replace("PCI:0000:01:00", "PCI:0000:4f:00")  # on the node's GPU 0
    state["kernel_log"] = [f"2026-12-01T22:00:00+0000 pve5 kernel: {line}",  # before the window
                           f"2026-12-03T06:10:00+0000 pve5 kernel: {line}"]
    state.update(extra)
    return state


async def test_an_older_drivers_refused_fields_are_dropped_and_the_rest_is_read(tmp_path):
    state = _state(smi={"invalid_fields": ["remapped_rows.pending", "remapped_rows.failure"]})
    state["gpus"][1].update(ecc_mode="Enabled", ecc_corrected_volatile=3, ecc_uncorrected_volatile=0,
                            ecc_uncorrected_aggregate=0, retired_sbe=1, retired_dbe=0, retired_pending="Yes")
    faults, _ = await _read(tmp_path, state)
    assert faults.dropped_fields == ("remapped_rows.pending", "remapped_rows.failure")
    assert [g.ecc_mode for g in faults.memory] == ["Disabled", "Enabled"]
    assert faults.memory[1].retired_pending is True and faults.memory[1].remapped_pending is None
    assert faults.xid_source == "journalctl"
    assert [(e.code, e.at) for e in faults.xid] == [(79, datetime(2026, 12, 3, 6, 10, tzinfo=UTC).timestamp())]


async def test_without_a_journal_the_ring_buffer_is_read(tmp_path):
    faults, _ = await _read(tmp_path, _state(kernel_log_source="ring"))
    assert faults.xid_source == "dmesg" and [e.code for e in faults.xid] == [79]


async def test_a_node_that_shows_neither_is_named_not_read_as_clean(tmp_path):
    faults, _ = await _read(tmp_path, _state(kernel_log_source="none",
                                             smi={"error": "Failed to initialize NVML: Unknown Error", "exit": 255}))
    assert faults.memory == () and faults.xid == ()
    assert faults.memory_problem == "ECC counters not readable: Failed to initialize NVML: Unknown Error"
    assert faults.xid_problem is not None and "Operation not permitted" in faults.xid_problem


async def test_the_oom_killers_kills_are_read_from_the_same_kernel_log(tmp_path):
    # the real Pulse node's summary and kill lines (an LXC container's service at its limit), placed in the window
    oom = [line.split(" kernel: ", 1)[1] for line in
           (FIXTURES / "kernel-log" / "oom-kill-lines.txt").read_text().splitlines()[4:6]]
    for source in ("journal", "ring"):
        state = _state(kernel_log_source=source)
        state["kernel_log"] += [f"2026-12-01T23:00:00+0000 pve5 kernel: {line}" for line in oom]  # before the window
        state["kernel_log"] += [f"2026-12-03T07:00:00+0000 pve5 kernel: {line}" for line in oom]
        faults, _ = await _read(tmp_path / source, state)
        assert [(k.pid, k.vmid, k.at) for k in faults.oom_kills] == [
            (3783517, 703, datetime(2026, 12, 3, 7, tzinfo=UTC).timestamp())], source
        assert [e.code for e in faults.xid] == [79]


def test_a_failed_reads_own_words_come_before_a_login_shells_noise():
    """A node whose root `.bashrc` writes to stderr (this machine's runs `pyenv init`, whose rehash can race): the
    failure names the command's own last line, not the shell's first."""
    from bot.errors import CommandFailed

    failed = CommandFailed("pve5", ("dmesg", "--time-format", "iso"), 1,
                           "rm: cannot remove '/root/.pyenv/shims/tmp.IbbaukyRvx': No such file or directory\n"
                           "dmesg: read kernel buffer failed: Operation not permitted\n")
    assert failed.last_word == ("`dmesg` on pve5 exited with 1: dmesg: read kernel buffer failed: Operation not "
                                "permitted")
    assert CommandFailed("pve5", ("dmesg",), 1, "").last_word == "`dmesg` on pve5 exited with 1: (no stderr)"
