"""The status use case over real SSH to lab nodes: deadlines, banners, concurrency."""

import asyncio
import os
import signal
import time

from bot.config import parse_inventory
from bot.core.gpu import SmiErrorKind
from bot.core.inventory import resolve_targets
from bot.core.status import ProcessView, TargetState
from bot.lab.nodes import seed_node_state, start_node
from bot.ssh import SshTransport
from bot.status import read_status
from tests.conftest import FIXTURES
from tests.services import SSH_KIND


async def _nodes(tmp_path, states):
    nodes = []
    for name, state in states.items():
        nodes.append(await start_node(tmp_path / name, name, state=state, prefer=SSH_KIND))
    inventory = parse_inventory(
        {"nodes": {n.name: n.inventory_entry() for n in nodes},
         "containers": {"sglang-a6000": {"node": nodes[0].name, "vmid": 129}}}, "test")
    return nodes, inventory, SshTransport(inventory, connect_timeout_s=3)


async def _stop(nodes, transport):
    await transport.close()
    for node in nodes:
        await node.stop()


async def test_hanging_node_is_unreachable_at_the_deadline_and_others_answer(tmp_path):
    hung = seed_node_state("pve6")
    hung["smi"] = {"sleep": 30}
    nodes, inventory, transport = await _nodes(tmp_path, {"pve5": seed_node_state("pve5"), "pve6": hung})
    try:
        started = time.monotonic()
        report = await read_status(transport, inventory, resolve_targets("all", inventory), deadline_s=2.5)
        elapsed = time.monotonic() - started
    finally:
        await _stop(nodes, transport)
    by_node = {s.target.node: s for s in report.statuses}
    assert by_node["pve5"].state is TargetState.OK and len(by_node["pve5"].rows) == 2
    assert by_node["pve6"].state is TargetState.UNREACHABLE and "no answer within 2.5s" in by_node["pve6"].problem
    assert elapsed < 2.5 + 1.0


async def test_error_banner_node_is_an_smi_error_not_idle(tmp_path):
    broken = seed_node_state("pve6")
    broken["smi"] = {"error": (FIXTURES / "nvidia-smi/error/no-driver-comm-shine50.txt").read_text(), "exit": 9}
    nodes, inventory, transport = await _nodes(tmp_path, {"pve6": broken})
    try:
        report = await read_status(transport, inventory, resolve_targets("pve6", inventory))
    finally:
        await _stop(nodes, transport)
    (status,) = report.statuses
    assert status.state is TargetState.SMI_ERROR and status.rows == ()
    assert status.snapshot.error.kind is SmiErrorKind.DRIVER_COMMUNICATION_FAILURE


async def test_all_across_nodes_costs_about_one_node(tmp_path):
    states = {}
    for name in ("pve5", "pve6", "pve7"):
        slow = seed_node_state(name)
        slow["smi"] = {"sleep": 1.0}
        states[name] = slow
    nodes, inventory, transport = await _nodes(tmp_path, states)
    try:
        one = await read_status(transport, inventory, resolve_targets("pve5", inventory))
        await transport.close()
        every = await read_status(transport, inventory, resolve_targets("all", inventory))
    finally:
        await _stop(nodes, transport)
    assert [s.state for s in every.statuses] == [TargetState.OK] * 3
    # the nodes are read side by side, not one after another: the whole read takes well under the sum of
    # each node's own time (one after another it would take at least that sum), however slow the machine
    per_node = [s.elapsed_s for s in every.statuses]
    assert all(t >= 1.0 for t in per_node) and one.elapsed_s >= 1.0  # each waited for its slow nvidia-smi
    assert every.elapsed_s < 0.75 * sum(per_node), (every.elapsed_s, per_node)


async def test_container_shows_its_own_processes_from_the_host_view(tmp_path):
    nodes, inventory, transport = await _nodes(tmp_path, {"pve5": seed_node_state("pve5")})
    node = nodes[0]
    node.add_process(48211, 0, "python3 -m sglang.launch_server", 44000, 129)
    node.add_process(5100, 1, "python3 train.py", 20000, 131)
    try:
        report = await read_status(transport, inventory, resolve_targets("sglang-a6000", inventory))
        host = await read_status(transport, inventory, resolve_targets("pve5", inventory))
    finally:
        await _stop(nodes, transport)
    (ct,) = report.statuses
    assert ct.process_view is ProcessView.FROM_HOST
    assert [(p.pid, p.vmid) for p in ct.rows[0].processes] == [(48211, 129)]
    assert ct.rows[1].processes == () and ct.rows[1].other_containers_mib == {131: 20000}
    (pve5,) = host.statuses
    assert {(p.pid, p.vmid) for r in pve5.rows for p in r.processes} == {(48211, 129), (5100, 131)}


async def test_a_stopped_holder_leaves_the_node_listing_with_its_memory(tmp_path):
    """The lab's holders are real processes: once one ends (stopped by PID, as /gpu free does) nvidia-smi no longer
    lists it nor counts its memory, and it leaves no zombie for `kill -0` to find alive."""
    nodes, inventory, transport = await _nodes(tmp_path, {"pve5": seed_node_state("pve5")})
    node = nodes[0]
    held = node.spawn_holder(0, "python3 -m sglang.launch_server", 44000, 129)
    try:
        before = await read_status(transport, inventory, resolve_targets("pve5", inventory))
        os.kill(held, signal.SIGTERM)
        for _ in range(100):
            if not os.path.exists(f"/proc/{held}"):
                break
            await asyncio.sleep(0.05)
        after = await read_status(transport, inventory, resolve_targets("pve5", inventory))
    finally:
        await _stop(nodes, transport)
    assert [p.pid for p in before.statuses[0].rows[0].processes] == [held]
    assert before.statuses[0].rows[0].gpu.memory_used_mib == 44001
    assert not os.path.exists(f"/proc/{held}")  # reaped, not a zombie
    assert after.statuses[0].rows[0].processes == () and after.statuses[0].rows[0].gpu.memory_used_mib == 1
    assert after.statuses[0].rows[0].flags == ()  # nothing orphaned: the memory went with the process


async def test_orphaned_memory_is_flagged(tmp_path):
    state = seed_node_state("pve5")
    state["gpus"][1]["orphaned_mib"] = 30000
    nodes, inventory, transport = await _nodes(tmp_path, {"pve5": state})
    try:
        report = await read_status(transport, inventory, resolve_targets("pve5", inventory))
    finally:
        await _stop(nodes, transport)
    rows = report.statuses[0].rows
    assert rows[0].flags == ()
    assert rows[1].flags == ("orphaned memory: 30001 MiB held, no process listed",)


async def test_stopped_container_is_stopped_with_pct_message(tmp_path):
    state = seed_node_state("pve5")
    state["containers"]["129"]["status"] = "stopped"
    nodes, inventory, transport = await _nodes(tmp_path, {"pve5": state})
    try:
        report = await read_status(transport, inventory, resolve_targets("pve5:129", inventory))
    finally:
        await _stop(nodes, transport)
    (status,) = report.statuses
    assert status.state is TargetState.STOPPED and "CT 129 not running" in status.problem
    assert status.problem.startswith("container 129 on pve5 is not running, so nothing in it holds a GPU")


async def test_a_container_status_runs_the_cuda_devices_check_inside_it(tmp_path):
    """GPUs that answer in a container whose nvidia-uvm bind found no device: the status says CUDA cannot start
    there; a container with its nodes in place shows no such flag; a stopped one shows what its config passes."""
    from bot.core.report import target_view

    state = seed_node_state("pve5")
    state["containers"]["129"]["dev_nodes"]["/dev/nvidia-uvm"] = ["regular empty file", 0, 0]
    nodes, inventory, transport = await _nodes(tmp_path, {"pve5": state})
    try:
        (broken,) = (await read_status(transport, inventory, resolve_targets("sglang-a6000", inventory))).statuses
        state["containers"]["129"]["dev_nodes"]["/dev/nvidia-uvm"] = ["character special file", 511, 0]
        nodes[0].write_state(state)
        (fine,) = (await read_status(transport, inventory, resolve_targets("sglang-a6000", inventory))).statuses
        state["containers"]["129"]["status"] = "stopped"
        nodes[0].write_state(state)
        (stopped,) = (await read_status(transport, inventory, resolve_targets("sglang-a6000", inventory))).statuses
    finally:
        await _stop(nodes, transport)
    assert broken.state is TargetState.OK and broken.devices is not None and broken.devices[0] == "fail"
    view = target_view(broken)
    assert view.state == "attention"
    assert view.flag_lines[-1].startswith("CUDA devices: inside CT 129, /dev/nvidia-uvm (regular empty file)")
    assert fine.devices is not None and fine.devices[0] == "ok" and target_view(fine).flag_lines == ()
    assert stopped.state is TargetState.STOPPED
    assert target_view(stopped).detail_lines == ("CUDA devices: CT 129 passes /dev/nvidia-uvm and 4 other NVIDIA "
                                                 "device node(s)",)


async def test_concurrent_status_requests_share_one_connection(tmp_path):
    nodes, inventory, transport = await _nodes(tmp_path, {"pve5": seed_node_state("pve5")})
    try:
        reports = await asyncio.gather(*(read_status(transport, inventory, resolve_targets("sglang-a6000", inventory))
                                         for _ in range(6)))
    finally:
        await _stop(nodes, transport)
    assert all(r.statuses[0].state is TargetState.OK for r in reports)


async def test_device_nodes_are_read_with_real_stat_and_inside_the_container(tmp_path):
    """The stat argv run by GNU stat over real SSH on the node (a device, an empty file, a missing path: exit 1), and
    `read_device_nodes` through `pct exec`, whose stand-in answers from the container's /dev."""
    from bot.core.argv import stat_device_nodes
    from bot.core.gpu_faults import device_nodes_from_stat
    from bot.status import read_device_nodes

    placeholder = tmp_path / "nvidia-uvm"
    placeholder.write_text("")
    state = seed_node_state("pve5")
    state["containers"]["129"]["dev_nodes"]["/dev/nvidia-uvm"] = ["regular empty file", 0, 0]
    nodes, _, transport = await _nodes(tmp_path, {"pve5": state})
    try:
        out = await transport.run("pve5", stat_device_nodes(["/dev/null", str(placeholder), "/dev/nvidia-none"]),
                                  ok_exit=(0, 1))
        assert out.exit_status == 1 and "No such file or directory" in out.stderr
        found = device_nodes_from_stat(out.stdout)
        assert [str(node) for node in found.values()] == ["/dev/null (device 1:3)",
                                                         f"{placeholder} (regular empty file)"]
        config = (await transport.run("pve5", ("pct", "config", "129"))).stdout
        inside = await read_device_nodes(transport, "pve5", 129, config)
        assert inside is not None and str(inside["/dev/nvidia1"]) == "/dev/nvidia1 (device 195:1)"
        assert str(inside["/dev/nvidia-uvm"]) == "/dev/nvidia-uvm (regular empty file)"
        assert nodes[0].calls()[-1][:6] == ["pct", "exec", "129", "--keep-env", "0", "--"]
        # a stopped container, or a config that passes no NVIDIA node: not read
        assert await read_device_nodes(transport, "pve5", 129, "arch: amd64\n") is None
        state["containers"]["129"]["status"] = "stopped"
        nodes[0].write_state(state)
        assert await read_device_nodes(transport, "pve5", 129, config) is None
    finally:
        await _stop(nodes, transport)
