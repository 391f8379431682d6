import shlex

import pytest

from bot.core.argv import (
    nvidia_device_holders,
    nvidia_smi_query_apps,
    nvidia_smi_query_gpu,
    pct_exec,
    read_proc_entries,
    to_command,
    with_timeout,
)
from bot.core.gpu import Gpu, GpuProcess, ProcessListing, SmiSnapshot
from bot.core.inventory import Target
from bot.core.report import bar, target_view
from bot.core.status import (
    NVIDIA_SERVICES,
    TargetState,
    Thresholds,
    assess_container,
    assess_node,
    attribute,
    gpu_device_holders,
    groups_from_status,
    is_clean,
    memory_evidence,
    names_from_stat,
    start_times_from_stat,
    unreachable,
    uptime_from,
    vmids_from_cgroups,
)


def test_pct_exec_and_timeout_build_argv_without_a_shell():
    argv = with_timeout(20, pct_exec(129, ("printf", "%s", "$(reboot); x")))
    assert argv == ("timeout", "-k", "5", "20", "pct", "exec", "129", "--keep-env", "0", "--", "printf", "%s",
                    "$(reboot); x")
    assert shlex.split(to_command(argv)) == list(argv)


def test_a_hub_model_id_maps_to_its_cache_folder_and_snapshot():
    from bot.core.argv import hub_repo_dir, hub_snapshot_dir, is_hub_id

    assert is_hub_id("Qwen/Qwen3.6-27B") and is_hub_id("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    # paths, shell text and traversal are not Hub ids
    for text in ("/models/q", "Qwen3.6-27B", "a/b/c", "../x", "a/..", "Qwen/Qwen;rm -rf /", "-a/b", "a/ b"):
        assert not is_hub_id(text), text
    repo = hub_repo_dir("/root/.cache/huggingface/hub/", "Qwen/Qwen3.6-27B")
    assert repo == "/root/.cache/huggingface/hub/models--Qwen--Qwen3.6-27B"
    assert hub_snapshot_dir(repo, "0123456789abcdef0123456789abcdef01234567\n") == repo + \
        "/snapshots/0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(ValueError, match="commit hash"):
        hub_snapshot_dir(repo, "main")  # refs/main holds the revision hash, nothing else
    with pytest.raises(ValueError):
        hub_repo_dir("/root/.cache/huggingface/hub", "../../etc")


def test_the_hub_cache_of_an_environment_in_huggingface_hubs_order():
    from bot.core.argv import hub_cache

    assert hub_cache({}, "/root") == "/root/.cache/huggingface/hub"
    assert hub_cache({"HF_HOME": "/data/hf"}, "/root") == "/data/hf/hub"
    assert hub_cache({"HF_HOME": "/data/hf", "HF_HUB_CACHE": "/fast/hub"}, "/root") == "/fast/hub"


@pytest.mark.parametrize("vmid", [99, -1, "129", True, 12.5])
def test_pct_exec_rejects_bad_vmids(vmid):
    with pytest.raises(ValueError):
        pct_exec(vmid, ("true",))


def test_read_proc_entries_validates_pids():
    assert read_proc_entries([7, 3, 7], "/proc") == (
        "grep", "-H", "-s", "-E", r"^([0-9]+:|NSpgid:|[0-9]+ \(|[0-9]+\.[0-9]+ [0-9])", "/proc/3/cgroup",
        "/proc/7/cgroup", "/proc/3/status", "/proc/7/status", "/proc/3/stat", "/proc/7/stat", "/proc/uptime")
    with pytest.raises(ValueError):
        read_proc_entries([0])


def test_a_processs_start_time_is_field_22_of_its_stat_counted_after_the_command_name():
    # /proc/<pid>/stat as the kernel prints it (proc(5); the first line read on this machine by `cat /proc/self/stat`):
    # a command name may hold spaces and ") (", so fields are counted after its last ") "
    text = "\n".join([
        "/proc/17985/stat:17985 (cat) R 17980 17980 17230 0 -1 4194304 97 0 0 0 0 0 0 0 20 0 1 0 2216885 3133440 349 "
        "18446744073709551615 94849889779712 94849889799593 140730006837680 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0",
        "/proc/4242/stat:4242 (python3 -m) (x) S 1 4242 4242 0 -1 4194560 0 0 0 0 9 3 0 0 20 0 61 0 918273 1 2 3",
        "/proc/4243/cgroup:0::/lxc/129/ns/system.slice/sglang.scope",
        "/proc/4244/stat:4244 (cut) S 1 2",  # cut short: no start time
        "/proc/4245/stat:9999 (other) S 1 4242 4242 0 -1 4194560 0 0 0 0 9 3 0 0 20 0 61 0 5 1 2 3",  # not its own
    ])
    assert start_times_from_stat(text) == {17985: 2216885, 4242: 918273}
    procs = (GpuProcess(4242, "python3", 100), GpuProcess(4244, "x", 5))
    assert [p.started for p in attribute(procs, {}, None, start_times_from_stat(text))] == [918273, None]
    # /proc/uptime (proc(5): seconds since boot, then idle seconds) makes a start time read as how long it has run
    text += "\n/proc/uptime:22168.85 43002.10"
    assert uptime_from(text) == 22168.85 and uptime_from("/proc/4242/stat:1 (x) S") is None
    attributed = attribute(procs, {}, None, start_times_from_stat(text), uptime_from(text))
    assert [p.running_s for p in attributed] == [pytest.approx(22168.85 - 9182.73), None]


def test_who_holds_a_gpu_open_is_read_from_proc_fd_and_map_files_links_without_a_shell():
    """`find` prints each /proc/<pid>/fd (or map_files) entry linking to an NVIDIA device node as `<dir> <target>`
    (checked on this machine's /proc with /dev/null: "/proc/9551/fd /dev/null"). A holder is a CUDA process: a GPU's
    own node and nvidia-uvm (nvidiactl and nvidia-uvm alone open no GPU; an NVML monitor opens no nvidia-uvm)."""
    argv = nvidia_device_holders("/proc/")
    assert argv == ("find", "/proc", "-mindepth", "3", "-maxdepth", "3", "-lname", "/dev/nvidia*", "-printf",
                    "%h %l\\n")
    assert shlex.split(to_command(argv)) == list(argv)
    with pytest.raises(ValueError):
        nvidia_device_holders("proc")
    text = "\n".join([
        "/proc/4242/fd /dev/nvidia0", "/proc/4242/fd /dev/nvidiactl", "/proc/4242/fd /dev/nvidia-uvm",
        "/proc/4242/map_files /dev/nvidia0", "/proc/4242/fd /dev/nvidia1",
        "/proc/77/fd /dev/nvidiactl", "/proc/77/fd /dev/nvidia-uvm",  # a CUDA import that opened no GPU: not one
        "/proc/10/fd /dev/nvidia10", "/proc/10/map_files /dev/nvidia-uvm", "/proc/10/fd /dev/nvidia2",
        "/proc/88/fd /dev/nvidiactl", "/proc/88/fd /dev/nvidia0",  # NVML (a monitor): no nvidia-uvm, no memory
        "/proc/4242/task /dev/nvidia0", "/other/5/fd /dev/nvidia0", "/proc/x/fd /dev/nvidia0",  # not a process's fd
        "/proc/6/fd /dev/nvidia0 (deleted)", "/proc/6/fd /dev/nvidia-uvm", "",
    ])
    assert gpu_device_holders(text, "/proc") == {10: ("/dev/nvidia2", "/dev/nvidia10"),
                                                  4242: ("/dev/nvidia0", "/dev/nvidia1")}
    # a lab's node reads a /proc laid out elsewhere, given as the inventory's proc_root
    assert gpu_device_holders("/tmp/l[1]/proc/5/fd /dev/nvidia0\n/tmp/l[1]/proc/5/fd /dev/nvidia-uvm",
                              "/tmp/l[1]/proc/") == {5: ("/dev/nvidia0",)}


def test_a_processs_command_name_is_read_from_its_stat_whatever_it_holds():
    text = "\n".join([
        "/proc/17985/stat:17985 (cat) R 17980 17980 17230 0 -1 4194304 97 0 0 0 0 0 0 0 20 0 1 0 2216885 3133440",
        "/proc/4242/stat:4242 (python3 -m) (x) S 1 4242 4242 0 -1 4194560 0 0 0 0 9 3 0 0 20 0 61 0 918273 1 2 3",
        "/proc/88/stat:88 (nvidia-persiste) S 1 88 88 0 -1 4194560 0 0 0 0 9 3 0 0 20 0 61 0 918273 1 2 3",
        "/proc/4245/stat:9999 (other) S 1 4242",  # not its own line
        "/proc/4243/cgroup:0::/lxc/129/ns/system.slice/sglang.scope",
    ])
    assert names_from_stat(text) == {17985: "cat", 4242: "python3 -m) (x", 88: "nvidia-persiste"}
    assert "nvidia-persiste" in NVIDIA_SERVICES  # the persistence daemon holds every GPU open by design


def test_a_container_pct_refuses_is_said_as_stopped_or_missing_in_proxmoxs_own_words():
    """`pct exec` dies with "CT <vmid> not running" for a stopped container (PVE's pct: `die "CT $vmid not
    running\n" if !PVE::LXC::check_running($vmid)`) and "Configuration file '...' does not exist" for one the node
    lacks (PVE::AbstractConfig's load_config): the node answered, so each is a state of its own, not unreachable;
    anything else is passed on as said."""
    from bot.core.report import status_data, target_view
    from bot.core.status import container_not_read

    stopped = container_not_read(Target("container", "pve5", 129, "sglang-a6000"), "CT 129 not running\n")
    assert (stopped.state, stopped.problem) == (TargetState.STOPPED, (
        "container 129 on pve5 is not running, so nothing in it holds a GPU (`pct start 129` on pve5 starts it; pct: "
        "CT 129 not running)"))
    missing = container_not_read(Target("container", "pve5", 999),
                                 "Configuration file 'nodes/pve5/lxc/999.conf' does not exist")
    assert (missing.state, missing.problem) == (TargetState.NO_CONTAINER, (
        "pve5 has no container 999 (pct: Configuration file 'nodes/pve5/lxc/999.conf' does not exist); `pct list` on "
        "pve5 lists its containers"))
    assert (target_view(stopped).state, target_view(stopped).summary) == ("stopped", stopped.problem)
    assert [t["state"] for t in status_data((stopped, missing))["targets"]] == ["stopped", "no-container"]
    # not read, so not clean: another container may hold the GPUs it would use
    assert not is_clean([stopped]) and memory_evidence([stopped]) == "pve5:129 (sglang-a6000): not read (stopped)"
    # another container's words are not this one's
    other = container_not_read(Target("container", "pve5", 12), "CT 129 not running")
    assert (other.state, other.problem) == (TargetState.UNREACHABLE, "container 12: CT 129 not running")
    assert container_not_read(Target("container", "pve5", 12), "").problem == "container 12: pct exec failed"


def test_queries_ask_for_structured_csv():
    assert nvidia_smi_query_gpu()[-1] == "--format=csv,noheader,nounits"
    assert nvidia_smi_query_apps()[1] == "--query-compute-apps=gpu_uuid,pid,process_name,used_memory"


def test_cgroup_attribution_v1_v2_and_host_processes():
    text = "\n".join([
        "/proc/4242/cgroup:0::/lxc/129/ns/user.slice/user-0.slice/session-c1.scope",
        "/proc/5100/cgroup:12:devices:/lxc/131/ns",
        "/proc/5100/cgroup:11:memory:/lxc/131/ns",
        "/proc/777/cgroup:0::/system.slice/ssh.service",
        "/proc/888/cgroup:0::/lxc.payload.140/init.scope",
    ])
    assert vmids_from_cgroups(text) == {4242: 129, 5100: 131, 888: 140}
    procs = (GpuProcess(4242, "python3", 100), GpuProcess(777, "Xorg", 5))
    assert [p.vmid for p in attribute(procs, vmids_from_cgroups(text))] == [129, None]


def test_a_processs_group_inside_its_container_is_the_last_nspgid():
    # /proc/<pid>/status as the kernel prints it (fs/proc/array.c: "NSpgid:" then "\t%d" for each PID namespace
    # level from the reader's to the process's own): read on the node, a container's process shows two IDs
    text = "\n".join([
        "/proc/4242/cgroup:0::/lxc/129/ns/system.slice/sglang.scope",
        "/proc/4242/status:NSpgid:\t4200\t61",
        "/proc/4250/status:NSpgid:\t4200\t61",  # a TP worker of the same launch: the same group
        "/proc/777/status:NSpgid:\t777",  # a host process: one level
        "/proc/888/status:NSpgid:",  # nothing after the key: not a group
    ])
    assert groups_from_status(text) == {4242: 61, 4250: 61, 777: 777}
    procs = (GpuProcess(4242, "python3", 100), GpuProcess(888, "x", 5), GpuProcess(None, "?", 1))
    attributed = attribute(procs, vmids_from_cgroups(text), groups_from_status(text))
    assert [(p.vmid, p.group) for p in attributed] == [(129, 61), (None, None), (None, None)]


def test_a_process_in_a_launchs_group_is_named_after_the_launch():
    from bot.core.report import LaunchRef, process_lines
    from bot.core.status import GpuRow

    row = GpuRow(gpu(0, used=40000), (GpuProcess(4242, "python3", 40000, vmid=129, group=61),
                                      GpuProcess(5100, "python3", 900, vmid=129, group=5100),
                                      GpuProcess(777, "Xorg", 5)), (), {})
    launches = {("pve5", 129, 61): LaunchRef("a20261203-101500-1a2b", "ready", 30000)}
    lines = process_lines((row,), "pve5", launches)
    assert lines[0].endswith("python3  <- a20261203-101500-1a2b (ready, port 30000)")
    assert lines[1].endswith("python3") and lines[2].endswith("Xorg")  # another group, a host process
    assert process_lines((row,), "pve6", launches)[0].endswith("python3")  # the same numbers on another node


def test_a_process_line_says_how_long_it_has_run_when_the_node_told():
    from bot.core.report import age_text, process_lines
    from bot.core.status import GpuRow

    row = GpuRow(gpu(0, used=40000), (GpuProcess(4242, "python3 -m sglang.launch_server", 40000, vmid=129,
                                                 running_s=3 * 86400 + 7200),
                                      GpuProcess(5100, "python3 train.py", 900, vmid=131, running_s=42.0),
                                      GpuProcess(777, "Xorg", 5)), (), {})
    assert [line.split("  ")[-1] for line in process_lines((row,), "pve5")] == ["(up 3.1 days)", "(up 42 s)", "Xorg"]
    assert [age_text(s) for s in (-3, 89, 90, 5399, 5400, 129599, 129600)] == [
        "0 s", "89 s", "2 min", "90 min", "1.5 h", "36.0 h", "1.5 days"]


def test_status_data_carries_the_tables_readings_flags_and_launches():
    from bot.core.inventory import Target
    from bot.core.report import LaunchRef, status_data
    from bot.core.status import GpuRow, TargetState, TargetStatus

    row = GpuRow(gpu(0, used=40000, raw={"power.draw": "[N/A]"}),
                 (GpuProcess(4242, "python3", 40000, vmid=129, group=61, running_s=7384.27),
                  GpuProcess(777, "Xorg", 5)),
                 ("hot: 91°C",), {131: 2048})
    ok = TargetStatus(Target("node", "pve5"), TargetState.OK, (row,))
    down = TargetStatus(Target("node", "pve7"), TargetState.UNREACHABLE, problem="connection refused")
    data = status_data((ok, down), {("pve5", 129, 61): LaunchRef("a20261203-101500-1a2b", "ready", 30000)})
    pve5, pve7 = data["targets"]
    assert pve5["state"] == "attention" and pve5["flags"] == ["GPU 0: hot: 91°C", "GPU 0: 2048 MiB held by CT 131"]
    (g,) = pve5["gpus"]
    assert (g["memory_used_mib"], g["memory_free_mib"], g["power_draw_w"], g["unreadable"]) == (
        40000, 9140, None, {"power.draw": "[N/A]"})
    assert g["held_by_other_containers_mib"] == {"131": 2048}
    assert g["processes"] == [
        {"pid": 4242, "name": "python3", "used_mib": 40000, "container_vmid": 129, "running_s": 7384.3,
         "launch": {"attempt": "a20261203-101500-1a2b", "status": "ready", "port": 30000}},
        {"pid": 777, "name": "Xorg", "used_mib": 5, "container_vmid": None, "running_s": None, "launch": None}]
    assert (pve7["state"], pve7["problem"], pve7["gpus"]) == ("unreachable", "connection refused", [])


def test_memory_holders_name_each_process_its_launch_and_memory_no_process_holds_on_the_gpus_asked_about():
    from bot.core.report import LaunchRef, memory_holders

    procs = (GpuProcess(4242, "python3", 40000, gpu_uuid="GPU-0", vmid=129, group=61),
             GpuProcess(4243, "python3", 40000, gpu_uuid="GPU-1", vmid=129, group=61),
             GpuProcess(777, "Xorg", 5, gpu_uuid="GPU-2"))
    host = node_snapshot([gpu(0, used=40001), gpu(1, used=40001), gpu(2, used=6), gpu(3, used=30000)], procs,
                         ProcessListing.LISTED)
    launches = {("pve5", 129, 61): LaunchRef("a20261203-101500-1a2b", "ready", 30000)}
    two = memory_holders(host, {"GPU-0", "GPU-1"}, "pve5", launches, 256)
    assert two.lines == ("GPU 0: PID 4242 (CT 129) python3 40000 MiB <- a20261203-101500-1a2b (ready, port 30000)",
                         "GPU 1: PID 4243 (CT 129) python3 40000 MiB <- a20261203-101500-1a2b (ready, port 30000)")
    assert two.launches == (("a20261203-101500-1a2b", "a20261203-101500-1a2b (ready, port 30000)"),)
    assert not two.others  # nothing else holds these two
    every = memory_holders(host, (), "pve6", launches, 256)  # all GPUs; the same group on another node is no launch
    assert every.launches == () and every.others
    assert every.lines[2:] == ("GPU 2: PID 777 (the host) Xorg 5 MiB",
                               "GPU 3: 30000 MiB held, no process listed (orphaned)")


def gpu(index=0, used=1, total=49140, **kw):
    return Gpu(index=index, name="NVIDIA RTX A6000", memory_used_mib=used, memory_total_mib=total,
               uuid=f"GPU-{index}", **kw)


def node_snapshot(gpus, procs=(), listing=ProcessListing.NONE_FOUND):
    return SmiSnapshot("query", tuple(gpus), "580.126.09", "13.0", process_listing=listing, processes=tuple(procs))


def test_orphaned_memory_needs_a_visible_process_list():
    target = Target("node", "pve5")
    held = node_snapshot([gpu(used=30000)])
    assert assess_node(target, held).rows[0].flags == ("orphaned memory: 30000 MiB held, no process listed",)
    hidden = node_snapshot([gpu(used=30000)], listing=ProcessListing.EMPTY)
    assert assess_node(target, hidden).rows[0].flags == ()
    small = node_snapshot([gpu(used=255)])
    assert assess_node(target, small).rows[0].flags == ()


def test_orphaned_memory_points_at_the_nodes_free_once():
    from bot.core.report import target_view

    held = node_snapshot([gpu(0, used=30000), gpu(1, used=30000)])
    pointer = ("orphaned memory: `/gpu free pve5` finds by PID what keeps a GPU open with no memory listed for it "
               "(as a killed server's child does) and stops it after a click")
    assert target_view(assess_node(Target("node", "pve5"), held)).flag_lines == (
        "GPU 0: orphaned memory: 30000 MiB held, no process listed",
        "GPU 1: orphaned memory: 30000 MiB held, no process listed", pointer)
    # a container's GPUs: the node's free, which finds the holder whichever container it runs in
    inside = node_snapshot([gpu(0, used=30000)], listing=ProcessListing.ABSENT)
    in_container = assess_container(Target("container", "pve5", 129), inside, node_snapshot([gpu(0, used=30000)]))
    assert target_view(in_container).flag_lines[-1] == pointer
    # the bot's own GPUs have no node to free; memory beyond listed processes is not what the scan looks for
    assert not any("/gpu free" in f for f in target_view(assess_node(Target("local", "local"), held)).flag_lines)
    unaccounted = node_snapshot([gpu(used=40000)], [GpuProcess(1, "python3", 10000, gpu_uuid="GPU-0")],
                                ProcessListing.LISTED)
    assert target_view(assess_node(Target("node", "pve5"), unaccounted)).flag_lines == (
        "GPU 0: unaccounted memory: 30000 MiB beyond listed processes",)


def test_clean_gpus_are_judged_and_quoted_from_the_readings():
    clean = assess_node(Target("node", "pve5"), node_snapshot([gpu(0), gpu(1)]))
    held = assess_node(Target("node", "pve5"), node_snapshot(
        [gpu(0, used=44877)], [GpuProcess(5879, "python3", 44876, gpu_uuid="GPU-0")], ProcessListing.LISTED))
    down = unreachable(Target("node", "pve7"), "connection refused")
    assert is_clean([clean]) and not is_clean([held]) and not is_clean([clean, down]) and not is_clean([])
    assert memory_evidence([clean]) == "pve5: GPU 0 1/49140 MiB, GPU 1 1/49140 MiB, no compute process"
    assert memory_evidence([held, down]) == "pve5: GPU 0 44877/49140 MiB, 1 compute process; pve7: not read " \
                                            "(unreachable)"


def test_unaccounted_memory_beyond_listed_processes():
    snap = node_snapshot([gpu(used=40000)], [GpuProcess(1, "python3", 10000, gpu_uuid="GPU-0")],
                         ProcessListing.LISTED)
    assert assess_node(Target("node", "n"), snap).rows[0].flags == (
        "unaccounted memory: 30000 MiB beyond listed processes",)


def test_hot_and_power_cap_flags():
    snap = node_snapshot([gpu(temperature_c=91, power_draw_w=299.5, power_limit_w=300.0)])
    assert assess_node(Target("node", "n"), snap, Thresholds(hot_c=85)).rows[0].flags == ("hot: 91°C", "power at cap")


def test_routine_na_is_not_flagged_but_err_is():
    quiet = gpu(raw={"fan": "N/A", "power_limit": "N/A"})
    loud = gpu(raw={"power_draw": "ERR!", "temperature": "N/A"})
    mig = gpu(raw={"utilization": "N/A"}, mig_mode="Enabled")
    rows = assess_node(Target("node", "n"), node_snapshot([quiet, loud, mig])).rows
    assert rows[0].flags == () and rows[2].flags == ()
    assert rows[1].flags == ("unreadable: power_draw=ERR!, temperature=N/A",)


def test_container_view_splits_own_and_other_processes():
    host = node_snapshot(
        [gpu(0, used=44000), gpu(1, used=20000)],
        [GpuProcess(1, "sglang", 44000, gpu_uuid="GPU-0", vmid=129),
         GpuProcess(2, "train", 20000, gpu_uuid="GPU-1", vmid=131)],
        ProcessListing.LISTED,
    )
    inside = node_snapshot([gpu(0, used=44000), gpu(1, used=20000)], listing=ProcessListing.ABSENT)
    status = assess_container(Target("container", "pve5", 129), inside, host)
    assert [len(r.processes) for r in status.rows] == [1, 0]
    assert status.rows[1].other_containers_mib == {131: 20000}
    view = target_view(status)
    assert "GPU 1: 20000 MiB held by CT 131" in view.flag_lines


def test_smi_error_without_gpus_is_its_own_state():
    from bot.core.smi import parse_error

    snap = parse_error("No devices were found\n")
    status = assess_node(Target("node", "n"), snap)
    assert status.state is TargetState.SMI_ERROR and status.rows == ()
    assert target_view(status).state == "smi-error"


def test_a_containers_cuda_devices_check_is_a_flag_when_it_warns_and_a_detail_when_its_gpus_do_not_answer():
    from dataclasses import replace

    from bot.core.report import status_data
    from bot.core.smi import parse_error

    inside = node_snapshot([gpu(0), gpu(1)], listing=ProcessListing.ABSENT)
    status = assess_container(Target("container", "pve5", 129), inside, None)
    missing = ("fail", "inside CT 129, /dev/nvidia-uvm (missing): not the device node(s) its config passes")
    assert target_view(replace(status, devices=("ok", "CT 129 passes /dev/nvidia-uvm and 3 other"))).flag_lines == ()
    view = target_view(replace(status, devices=missing))
    assert view.state == "attention" and view.flag_lines == (f"CUDA devices: {missing[1]}",)
    (data,) = status_data((replace(status, devices=missing),))["targets"]
    assert data["cuda_devices"] == {"state": "fail", "detail": missing[1]} and data["state"] == "attention"
    assert status_data((status,))["targets"][0]["cuda_devices"] is None
    # nvidia-smi in the container failing, or the container not answering: the check shows whatever it found
    banner = replace(assess_node(Target("container", "pve5", 129), parse_error("No devices were found\n")),
                     devices=missing)
    assert target_view(banner).detail_lines[-1] == f"CUDA devices: {missing[1]}"
    down = replace(unreachable(Target("container", "pve5", 129), "container 129: exit 1"), devices=missing)
    assert target_view(down).detail_lines == (f"CUDA devices: {missing[1]}",)


def test_bar():
    assert bar(0, 100) == "░" * 10
    assert bar(100, 100) == "█" * 10
    assert bar(44, 100) == "████░░░░░░"
    assert bar(None, 100) == "?" * 10


def test_stop_and_probe_commands_take_only_real_pids_and_the_allowed_signals():
    """The destructive builders: a PID or process group of 0 or 1 (every process, init) or below, a non-integer, and
    any signal but the few a stop uses are refused before anything is sent."""
    from bot.core.argv import kill_group, process_alive, signal_same_processes

    assert kill_group(4242, "TERM") == ("kill", "-TERM", "--", "-4242")
    assert signal_same_processes([(7, 50), (3, 40), (7, 50)], "KILL", "/proc")[3:] == (
        "gpuops-signal", "KILL", "/proc", "3:40", "7:50")
    assert process_alive(4242) == ("kill", "-0", "4242")
    with pytest.raises(ValueError, match="no processes"):
        signal_same_processes([], "TERM")
    for bad in (1, 0, -1, -4242, True, "4242", 4242.0):
        for build in (lambda v: kill_group(v, "TERM"), lambda v: signal_same_processes([(3, 1), (v, 1)], "TERM"),
                      process_alive):
            with pytest.raises(ValueError):
                build(bad)
    for started in (-1, None, "918273", 1.5):
        with pytest.raises(ValueError, match="start time"):
            signal_same_processes([(4242, started)], "TERM")
    with pytest.raises(ValueError, match="absolute path"):
        signal_same_processes([(4242, 1)], "TERM", "proc")
    for signal in ("HUP", "STOP", "9", "-KILL", "TERM; reboot"):
        with pytest.raises(ValueError, match="not allowed"):
            kill_group(4242, signal)
        with pytest.raises(ValueError, match="not allowed"):
            signal_same_processes([(4242, 1)], signal)
    with pytest.raises(ValueError, match="not allowed"):
        signal_same_processes([(4242, 1)], "INT")  # a process group may be interrupted; single PIDs are stopped


def test_a_confirmed_stop_signals_a_pid_only_while_it_is_the_process_that_was_listed(tmp_path):
    """SAME_PROCESS_SCRIPT run by bash as the node would, over a proc root laid out as the node's: a PID is signalled
    only when its start time is the one read when the stop was asked. One whose start differs (its process ended and
    the PID went to a later one), one with no process, and a zombie are left alone and not reported."""
    import subprocess
    import time
    from pathlib import Path

    from bot.core.argv import signal_same_processes

    root = tmp_path / "proc"
    listed = subprocess.Popen(["sleep", "60"], start_new_session=True)
    later = subprocess.Popen(["sleep", "60"], start_new_session=True)  # has the PID of a listed process that ended
    zombie = subprocess.Popen(["true"])  # ends at once and is not reaped until wait()
    try:
        for pid in (listed.pid, later.pid, zombie.pid):
            (root / str(pid)).mkdir(parents=True)
            (root / str(pid) / "stat").symlink_to(f"/proc/{pid}/stat")
        (root / "999999").mkdir()
        deadline = time.time() + 10
        while " Z " not in Path(f"/proc/{zombie.pid}/stat").read_text() and time.time() < deadline:
            time.sleep(0.01)

        def started(pid: int) -> int:
            return start_times_from_stat(f"/proc/{pid}/stat:" + Path(f"/proc/{pid}/stat").read_text())[pid]

        asked = [(listed.pid, started(listed.pid)), (later.pid, started(later.pid) - 1),
                 (zombie.pid, started(zombie.pid)), (999999, 7)]

        def run(signal: str) -> str:
            return subprocess.run(signal_same_processes(asked, signal, str(root)), capture_output=True, text=True,
                                  check=True).stdout

        assert run("0") == f"{listed.pid}\n"
        assert run("TERM") == f"{listed.pid}\n"
        assert listed.wait(10) == -15
        assert later.poll() is None  # never signalled
        assert run("KILL") == ""  # the listed one is gone; nothing else is taken for it
        assert later.poll() is None
    finally:
        for process in (listed, later, zombie):
            if process.poll() is None:
                process.kill()
            process.wait()


def test_the_stack_script_dumps_every_process_of_the_launchs_group_while_it_is_the_launchs(tmp_path):
    """STACK_DUMP_SCRIPT run by bash as the container would, with the py-spy installed beside this Python: the server
    and the rank it started (one process group) are each dumped, as long as the group's leader writes to the attempt's
    log (also once that log is deleted). A log the PID does not write to, a Python with no py-spy beside it (nor on
    PATH), and a PID with no process each end in their own exit status, with nothing dumped."""
    import os
    import subprocess
    import sys
    import time

    from bot.core.argv import LAUNCHED_GONE, LAUNCHED_PID_REUSED, STACKS_NO_PY_SPY, stack_dumps
    from bot.core.stacks import parse_stack_dumps

    server_code = ("import subprocess, sys, time\n"
                   "rank = subprocess.Popen([sys.executable, '-c', 'import time\\ndef rank_waits():\\n    "
                   "time.sleep(60)\\nrank_waits()'])\n"
                   "def server_waits():\n    time.sleep(60)\nserver_waits()\n")
    log = tmp_path / "a.log"
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, "-c", server_code], stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)

    def run(log_path: str, python: str = sys.executable, path: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PATH": path} if path else None
        return subprocess.run(stack_dumps(server.pid, log_path, python), capture_output=True, text=True, env=env,
                              timeout=60)

    try:
        deadline = time.time() + 20
        while True:  # until the rank has started and both sit in their waits
            done = run(str(log))
            processes = parse_stack_dumps(done.stdout)
            innermost = [t.frames[0].function for p in processes for t in p.threads if t.frames]
            if sorted(innermost) == ["rank_waits", "server_waits"] or time.time() > deadline:
                break
            time.sleep(0.2)
        assert done.returncode == 0 and sorted(innermost) == ["rank_waits", "server_waits"], done.stdout[-500:]
        assert processes[0].pid == server.pid and all(p.problem is None for p in processes)
        assert "-c import subprocess" in processes[0].command
        assert run(str(tmp_path / "other.log")).returncode == LAUNCHED_PID_REUSED
        assert run(str(log), str(tmp_path / "bare" / "python"), "/usr/bin:/bin").returncode == STACKS_NO_PY_SPY
        log.unlink()  # the log removed while the server runs: still the launch's
        assert run(str(log)).returncode == 0
    finally:
        os.killpg(server.pid, 9)
        server.wait()
    gone = run(str(log))
    assert (gone.returncode, gone.stdout) == (LAUNCHED_GONE, "")


def test_the_launch_script_starts_a_session_of_its_own_in_a_new_log_and_never_reuses_one(tmp_path):
    """LAUNCH_SCRIPT run by bash as the node would: the server starts detached as the leader of a new session (its
    PID is its process group, which a stop signals), its output goes to a log whose first line names the attempt,
    user flags and environment words arrive untouched by any shell, and an existing log is refused (an attempt reads
    only what it wrote)."""
    import json
    import os
    import subprocess
    import sys
    import time

    from bot.core.argv import sglang_launch

    fake = tmp_path / "site" / "sglang"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "launch_server.py").write_text(
        "import json, os, sys, time\n"
        f"go = {str(tmp_path / 'go')!r}\n"
        "deadline = time.time() + 20\n"
        "while not os.path.exists(go) and time.time() < deadline:\n"
        "    time.sleep(0.02)\n"
        "print(json.dumps([sys.argv[1:], os.environ.get('SGLANG_LAB_WORD')]))\n")
    log = tmp_path / "logs" / "a1.log"
    flags = ["--served-model-name", "$(touch pwned); x", "--api-key", "it's \"quoted\" `cmd`"]
    word = "it's $(touch pwned) a b"
    argv = sglang_launch(sys.executable, str(log), "a1", (f"SGLANG_LAB_WORD={word}", *flags))
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    started = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    pid = int(started.stdout.strip())
    try:
        deadline = time.monotonic() + 20  # bash prints the PID as it forks; setsid runs in the child just after
        while os.getsid(pid) != pid and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.getpgid(pid) == pid and os.getsid(pid) == pid
        first = log.read_text().splitlines()[0]
        assert first.startswith("gpuops attempt a1 started 20") and first.endswith("Z")
        again = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path)
        assert again.returncode == 4 and "refusing to reuse existing log" in again.stderr
    finally:
        (tmp_path / "go").write_text("")
    deadline = time.monotonic() + 20
    while len(log.read_text().splitlines()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    lines = log.read_text().splitlines()
    # one start line (the refused run wrote nothing); the environment word is the server's environment, not a flag
    assert lines[0] == first and json.loads(lines[1]) == [flags, word]
    assert not (tmp_path / "pwned").exists()
