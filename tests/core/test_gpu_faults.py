"""ECC counters, retired pages, remapped rows and Xid events: parsed from real outputs."""

import re
from dataclasses import replace
from datetime import UTC, datetime

from bot.core.gpu_faults import (
    CHAR_DEVICE,
    MEMORY_ERROR_FIELDS,
    DeviceNode,
    GpuMemoryErrors,
    NodeFaults,
    ecc_evidence,
    gpus_by_bus,
    invalid_query_field,
    memory_error_findings,
    memory_errors_from_csv,
    oom_kill_findings,
    oom_kill_text,
    oom_kills,
    summarise_faults,
    xid_events,
    xid_findings,
)
from tests.conftest import FIXTURES

CSV = FIXTURES / "nvidia-smi" / "csv-gpu"
XID_LINES = (FIXTURES / "kernel-log" / "xid-lines.txt").read_text()


def ts(text):
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_ecc_counters_read_by_header_name_from_a_real_full_query():
    # the exporter's capture asks for every field; ours is a subset, found by name in the header
    h100 = memory_errors_from_csv((CSV / "ugx-h100-mig-590-load-query-gpu.csv").read_text())
    assert len(h100) == 1
    g = h100[0]
    assert (g.ecc_mode, g.corrected_volatile, g.uncorrected_volatile, g.uncorrected_aggregate) == ("Enabled", 0, 0, 0)
    assert g.pci_bus_id == "00000000:00:09.0"
    # this VM's H100 prints [N/A] for retired pages and remapped rows: not exposed, not "zero"
    assert (g.retired_single_bit, g.remapped_pending, g.remapped_failure) == (None, None, None)
    assert memory_error_findings("pve9", h100) == []


def test_a_geforce_card_exposes_no_ecc_and_that_is_not_read_as_clean():
    rtx = memory_errors_from_csv((CSV / "ugx-rtx2080s-595-idle-query-gpu.csv").read_text())[0]
    assert rtx.ecc_mode is None  # [N/A]: not exposed
    assert rtx.uncorrected_volatile is None and rtx.counts() == {}
    summary = summarise_faults((NodeFaults("pve2", memory=(rtx,), xid_source="journalctl"),))
    assert summary.coverage == ("pve2: 1 GPU(s) expose no ECC counters; no Xid in 24 h (journalctl)",)
    assert summary.findings == ()


def test_the_field_an_older_driver_refuses_is_named():
    # texts as nvidia-smi prints them (quoted in public issue threads and tools' fixtures)
    assert invalid_query_field('Field "remapped_rows.pending" is not a valid field to query.\n') == \
        "remapped_rows.pending"
    assert invalid_query_field('Field "retired_pages.double_bit_ecc.count" is not a valid field to query.') == \
        "retired_pages.double_bit_ecc.count"
    assert invalid_query_field("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.") is None
    assert set(MEMORY_ERROR_FIELDS) >= {"remapped_rows.pending", "retired_pages.pending", "ecc.mode.current"}


def a100_row_remap():
    """The A100 of stas00/ml-engineering's debug guide (`nvidia-smi -q` after Xid 63): DRAM
    correctable 177, remapped rows correctable 1, pending Yes, no failure."""
    return GpuMemoryErrors(0, "GPU-a100", "00000000:10:1C.0", "Enabled", 177, 0, 0, None, None, None,
                           1, 0, True, False)


def test_pending_remap_failed_remap_pending_retirement_and_uncorrectable_errors_are_findings():
    remap = a100_row_remap()
    assert memory_error_findings("dgx1", [remap]) == [
        "dgx1 GPU 0: a remapped row is pending — reset the GPU (stop its processes first) to activate it"]
    failed = replace(remap, remapped_pending=False, remapped_failure=True, uncorrected_volatile=1)
    found = memory_error_findings("dgx1", [failed])
    assert found[0].startswith("dgx1 GPU 0: row remapping FAILED")
    assert "dgx1 GPU 0: 1 uncorrectable ECC error(s) since the driver loaded" in found
    retired = GpuMemoryErrors(1, "GPU-v100", None, "Enabled", 2, 0, 0, 2, 0, True, None, None, None, None)
    assert memory_error_findings("dgx1", [retired]) == [
        "dgx1 GPU 1: a retired page is pending — reload the driver or reset the GPU to retire it"]


def test_lifetime_counters_that_grew_since_the_last_report_are_named():
    remap = replace(a100_row_remap(), remapped_pending=False)
    assert memory_error_findings("dgx1", [remap], {"GPU-a100": remap.counts()}) == []
    grown = replace(remap, remapped_correctable=2)
    assert memory_error_findings("dgx1", [grown], {"GPU-a100": remap.counts()}) == [
        "dgx1 GPU 0: remapped correctable grew 1 -> 2"]
    summary = summarise_faults((NodeFaults("dgx1", memory=(grown,), xid_source="journalctl"),),
                               {"dgx1": {"GPU-a100": remap.counts()}})
    assert summary.counts == {"dgx1": {"GPU-a100": {"uncorrected_aggregate": 0, "remapped_correctable": 2,
                                                    "remapped_uncorrectable": 0}}}
    assert "dgx1 GPU 0: remapped correctable grew 1 -> 2" in summary.findings


def test_xid_lines_in_every_printed_form_and_nothing_else():
    events = xid_events(XID_LINES)
    # syslog, journal, bare driver line, the pre-"PCI:" form, a health-check tool's prefix
    assert [(e.code, e.pci_bus_id) for e in events] == [
        (63, "0000:10:1c"), (79, "0000:01:00"), (3, "0000:01:00"), (120, "0000:23:00"), (31, "0000:00:06")]
    assert events[1].detail == "pid=1122, GPU has fallen off the bus."
    assert events[0].meaning == "page retirement / row remapping recorded"
    assert all(e.at is None for e in events)  # syslog times carry no year: not guessed


def test_iso_times_from_journalctl_and_dmesg_bound_the_window():
    line = XID_LINES.splitlines()[1].split("kernel: ", 1)[1]
    log = "\n".join([
        f"2026-12-02T05:00:00+0000 pve5 kernel: {line}",  # journalctl -o short-iso (older systemd)
        f"2026-12-03T06:10:00+00:00 pve5 kernel: {line}",  # newer systemd prints the colon
        f"2026-12-03T07:00:00,123456+01:00 {line}",  # dmesg --time-format=iso
    ])
    events = xid_events(log, since=ts("2026-12-02 08:30"))
    assert [e.at for e in events] == [ts("2026-12-03 06:10"), ts("2026-12-03 06:00")]


def test_xid_findings_name_the_gpu_by_bus_and_put_application_codes_last():
    gpus = [GpuMemoryErrors(0, "GPU-0", "00000000:01:00.0", None, *([None] * 10)),
            GpuMemoryErrors(1, "GPU-1", "00000000:00:06.0", None, *([None] * 10))]
    events = xid_events(XID_LINES)
    events = [events[4], events[1], events[1]]  # an MMU fault on GPU 1, the bus loss twice on GPU 0
    found = xid_findings("pve5", events, gpus_by_bus((g.index, g.pci_bus_id) for g in gpus))
    assert found[0] == ("pve5 GPU 0: Xid 79 2x, GPU has fallen off the bus: the GPU is gone until a reboot; "
                        "check power, riser and seating — last: pid=1122, GPU has fallen off the bus.")
    assert found[1].startswith("pve5 GPU 1: Xid 31 once, GPU memory page fault (MMU fault) (application-caused)")
    unknown = xid_findings("pve5", [xid_events(XID_LINES)[2]])
    assert unknown == ["pve5 GPU at 0000:01:00: Xid 3 once, Xid 3: look the code up in NVIDIA's Xid catalog"
                       " — last: C 00000005 SC 00000007 M 00001ffc Data ffffffff"]


def test_coverage_says_what_each_node_exposes_and_what_could_not_be_read():
    remap = a100_row_remap()
    off = GpuMemoryErrors(1, "GPU-off", None, "Disabled", *([None] * 10))
    summary = summarise_faults((
        NodeFaults("pve5", memory=(off,), xid=tuple(xid_events(XID_LINES))[:1], xid_source="dmesg"),
        NodeFaults("dgx1", memory=(remap,), xid_problem="kernel log not readable: Operation not permitted"),
        NodeFaults("pve6", memory_problem="ECC counters not readable: Failed to initialize NVML",
                   xid_source="journalctl"),
    ))
    assert summary.coverage == (
        "dgx1: ECC on for 1 GPU(s), 0 uncorrectable since driver load; kernel log not readable: "
        "Operation not permitted",
        "pve5: ECC off on GPU 1; 1 Xid event(s) in 24 h (dmesg)",
        "pve6: ECC counters not readable: Failed to initialize NVML; no Xid in 24 h (journalctl)",
    )


def test_an_ecc_mode_change_waiting_for_a_reboot_is_a_finding():
    h100 = memory_errors_from_csv((CSV / "ugx-h100-mig-590-load-query-gpu.csv").read_text())[0]
    assert (h100.ecc_mode, h100.ecc_mode_pending) == ("Enabled", "Enabled")  # real: no change pending
    assert memory_error_findings("pve9", [h100]) == []
    switching = replace(h100, ecc_mode="Disabled", ecc_mode_pending="Enabled")
    assert memory_error_findings("pve5", [switching]) == [
        "pve5 GPU 0: ECC turns on at the next reboot — usable memory changes with it (budgets made now are for "
        "the current mode)"]


def test_the_preflight_word_on_the_launch_gpus():
    from bot.core.gpu_faults import launch_gpu_health

    remap = a100_row_remap()  # GPU 0 at 10:1c, a row remap pending (real A100 report)
    other = GpuMemoryErrors(1, "GPU-b", "00000000:20:00.0", "Enabled", 0, 0, 0, None, None, None, 0, 0, False, False)
    events = tuple(xid_events(XID_LINES))  # Xid 63 at 10:1c (hardware), Xid 31 at 00:06 (an application's)
    node = NodeFaults("dgx1", memory=(remap, other), xid=events, xid_source="journalctl")
    status, why = launch_gpu_health(node, ("GPU-a100",))
    assert status == "warn"
    assert "GPU 0: a remapped row is pending" in why and "GPU 0: Xid 63 once" in why and "Xid 31" not in why
    assert launch_gpu_health(node, ("GPU-b",)) == ("ok", "no ECC or Xid problem on these GPUs in 24 h")
    broken = NodeFaults("dgx1", memory=(replace(remap, remapped_failure=True),),
                        xid_problem="kernel log not readable: x")
    assert launch_gpu_health(broken, ("GPU-a100",))[0] == "fail"
    quiet = NodeFaults("pve5", memory=(other,), xid_problem="kernel log not readable: denied")
    assert launch_gpu_health(quiet, ()) == ("ok", "no ECC or Xid problem on these GPUs in 24 h "
                                                  "(kernel log not readable: denied)")


OOM_LINES = (FIXTURES / "kernel-log" / "oom-kill-lines.txt").read_text()


def test_the_oom_killers_kills_are_read_with_the_limit_that_was_reached():
    kills = oom_kills(OOM_LINES)
    assert [(k.pid, k.command, k.anon_rss_kib) for k in kills] == [
        (3777481, "pulse", 10461592), (3783517, "pulse", 10461428), (6154, "python", 14095848),
        (15617, "python3", 4292)]
    early, service, node, docker = kills
    # a kill whose summary line was cut away: its own words say a cgroup's limit, not which
    assert (early.node_ran_out, early.limit_cgroup, early.vmid) == (False, None, None)
    # a limit set inside the container (a service's), not the container's own: no `pct set` for it
    assert service.vmid == 703 and service.container_limit is None and service.node_ran_out is False
    assert service.limit_cgroup == "/lxc/703/ns/system.slice/pulse.service"
    assert "reached its limit (one set inside the container" in oom_kill_text(service)
    assert "pct set" not in oom_kill_text(service)
    assert node.node_ran_out is True and node.limit_cgroup is None and node.vmid is None
    assert oom_kill_text(node) == ("the kernel's OOM killer killed PID 6154 (python), holding 13.4 GiB of its own "
                                   "memory: the node ran out of RAM (guests, containers and the page cache "
                                   "competing): give the node room, or lower what the others hold")
    assert docker.node_ran_out is False and docker.at is None  # syslog's time has no year: kept, not placed
    # the container's own limit (the same real line, its cgroup the container's): the fix is the container's limit
    own = oom_kills(OOM_LINES.replace("oom_memcg=/lxc/703/ns/system.slice/pulse.service", "oom_memcg=/lxc/703"))[1]
    assert own.container_limit == 703
    assert oom_kill_text(own).endswith("CT 703 reached its memory limit: raise it above what loading the model needs "
                                       "(`pct set 703 -memory <MiB>` on the node)")


def test_oom_kills_before_the_window_are_dropped_and_the_containers_own_come_first():
    journal = "\n".join(f"2026-12-03T0{h}:00:00+0000 {line.split(' kernel: ', 1)[1]}" if " kernel: " in line else line
                        for h, line in zip((1, 2, 2, 2, 3, 3), OOM_LINES.splitlines()[:6], strict=True))
    assert [k.pid for k in oom_kills(journal, since=ts("2026-12-03 02:30"))] == [3783517]
    kills = oom_kills(OOM_LINES)
    lines = oom_kill_findings("pve5", kills, first_vmid=703, limit=2)
    assert lines[0].startswith("pve5: the kernel's OOM killer killed PID 3783517 (pulse) in CT 703")
    assert lines[-1] == "pve5: 2 more OOM kill(s)" and len(lines) == 3
    summary = summarise_faults((NodeFaults("pve5", xid_source="journalctl", oom_kills=tuple(kills[2:3])),))
    assert summary.findings == ("pve5: " + oom_kill_text(kills[2]),)
    assert summary.coverage[0].endswith("no Xid in 24 h (journalctl); 1 OOM kill(s)")


def test_the_preflight_reads_the_containers_memory_limit_and_warns_after_an_oom_kill_at_it():
    from bot.core.gpu_faults import container_memory_mib, launch_memory_health

    # `pct config` prints the container's configuration as pct.conf(5) stores it (`key: value`; memory and swap in
    # MB, 512 each by default); the device lines are as public Proxmox GPU guides quote them
    config = "arch: amd64\ncores: 16\ndev0: /dev/nvidia0,gid=44\nmemory: 65536\nswap: 4096\nunprivileged: 1\n"
    assert container_memory_mib(config) == (65536, 4096)
    assert container_memory_mib("arch: amd64\n") == (512, 512)
    status, detail = launch_memory_health(703, config, ())
    assert (status, detail) == ("ok", "CT 703: RAM limit 64.0 GiB (+4.0 GiB swap); no OOM kill in it in 24 h")
    # the real Pulse kill with the container's own cgroup as the limit reached
    kills = oom_kills(OOM_LINES.replace("oom_memcg=/lxc/703/ns/system.slice/pulse.service", "oom_memcg=/lxc/703"))
    status, detail = launch_memory_health(703, config, kills)
    assert status == "warn" and "killed PID 3783517 (pulse) in it in the last 24 h, at this container's limit" in detail
    assert detail.endswith("raise the limit (`pct set 703 -memory <MiB>`) unless it was raised since")
    # a limit set inside the container (a service's), or another container's kill, is not this limit's business
    assert launch_memory_health(703, config, oom_kills(OOM_LINES))[0] == "ok"
    assert launch_memory_health(129, config, kills)[0] == "ok"
    assert launch_memory_health(703, None, kills) == ("warn", "CT 703: its memory limit could not be read "
                                                              "(`pct config 703`)")


def test_the_kill_that_ended_a_launch_and_how_its_failure_says_so():
    """The real kernel lines: a Proxmox journal's kills of a monitoring service (PID 3777481 without its summary
    line, so its container is not known; PID 3783517 in CT 703), and a bare host's kill of `python`."""
    from bot.core.gpu_faults import server_kill, silent_death_note

    lines = (FIXTURES / "kernel-log" / "oom-kill-lines.txt").read_text().splitlines()
    proxmox = oom_kills("\n".join(lines[:6]))
    bare = oom_kills("\n".join(lines[6:8]))
    # in the launch's container, any process there (the server's own first); in another container, none
    assert server_kill(proxmox, 703).pid == 3783517 and server_kill(proxmox, 129) is None
    as_python = oom_kills("\n".join(lines[:6]).replace("(pulse)", "(python3)"))
    assert [k.is_server for k in as_python] == [True, True] and server_kill(as_python, 703).pid == 3783517
    assert server_kill(as_python, None).pid == 3777481  # container unknown: the first Python process anywhere
    # container unknown: only a Python/SGLang process counts
    assert server_kill(proxmox, None) is None and server_kill(bare, None).pid == 6154
    note = silent_death_note(server_kill(bare, None), "[06-09 13:32:34] Rank 0 scheduler is dead.")
    assert note == ("killed by the kernel's OOM killer: the node ran out of RAM (PID 6154, python); the log's last "
                    "word: [06-09 13:32:34] Rank 0 scheduler is dead.")
    assert silent_death_note(server_kill(as_python, 703), None).endswith("; the log says nothing of it")


def test_the_preflight_checks_the_container_passes_the_uvm_device_cuda_needs():
    from bot.core.gpu_faults import cuda_devices_health, nvidia_nodes_passed

    configs = (FIXTURES / "proxmox" / "lxc-gpu-configs.txt").read_text().split("\n====\n")
    for config in configs:  # device entries (with gid=, with other devices between) and raw LXC binds
        passed = nvidia_nodes_passed(config)
        assert passed[:2] == ("/dev/nvidia0", "/dev/nvidiactl") and "/dev/nvidia-uvm" in passed, config
        assert cuda_devices_health(129, config) == (
            "ok", f"CT 129 passes /dev/nvidia-uvm and {len(passed) - 1} other NVIDIA device node(s)")
    assert "/dev/dri/by-path/pci-0000:07:00.0-card" not in nvidia_nodes_passed(configs[1])
    # the raw binds without their two uvm lines (the mistake the check is for): nvidia-smi works, CUDA does not
    binds = "\n".join(line for line in configs[2].splitlines() if "nvidia-uvm" not in line)
    status, detail = cuda_devices_health(129, binds)
    assert status == "warn" and detail.startswith("CT 129 passes /dev/nvidia0, /dev/nvidiactl, /dev/nvidia-modeset")
    assert "but not /dev/nvidia-uvm: nvidia-smi works there, CUDA does not" in detail
    # commented out is not passed
    commented = configs[1].replace("dev2: /dev/nvidia-uvm\n", "#dev2: /dev/nvidia-uvm\n")
    assert cuda_devices_health(129, commented)[0] == "warn"
    # a config that passes no NVIDIA node itself (a hook, a bind of all /dev), or none read: nothing to judge
    assert cuda_devices_health(129, "arch: amd64\nmemory: 65536\nlxc.cgroup2.devices.allow: a\n") is None
    assert cuda_devices_health(129, None) is None


def _listed_nodes(listing: str) -> dict[str, DeviceNode]:
    """`ls -l /dev/nvidia*` lines as the device nodes stat would report (crw-... major, minor ... path)."""
    nodes = {}
    for line in listing.splitlines():
        match = re.match(r"c\S+\s+\d+\s+\S+\s+\S+\s+(\d+),\s+(\d+)\s.*\s(/dev/\S+)$", line)
        if match:
            nodes[match[3]] = DeviceNode(match[3], CHAR_DEVICE, int(match[1]), int(match[2]))
    return nodes


def test_stat_inside_the_container_is_read_by_path_with_type_and_device_numbers():
    from bot.core.gpu_faults import device_nodes_from_stat

    nodes = device_nodes_from_stat((FIXTURES / "proxmox" / "stat-device-nodes.txt").read_text())
    assert sorted(nodes) == ["/dev/null", "/dev/zero", "/tmp/ct129-dev/nvidia-uvm"]  # the missing path has no line
    assert (nodes["/dev/null"].is_device, nodes["/dev/null"].major, nodes["/dev/null"].minor) == (True, 1, 3)
    placeholder = nodes["/tmp/ct129-dev/nvidia-uvm"]
    assert not placeholder.is_device and str(placeholder) == "/tmp/ct129-dev/nvidia-uvm (regular empty file)"
    assert str(nodes["/dev/zero"]) == "/dev/zero (device 1:5)"
    assert device_nodes_from_stat("/dev/nvidia-uvm|character special file|1ff|0\n")["/dev/nvidia-uvm"].major == 511


def test_a_uvm_major_the_cgroup_rules_do_not_allow_is_named_with_the_rule_to_add():
    """A public guide's node lists nvidia-uvm at major 511 and tells the reader to allow 508 (its number elsewhere):
    the binds succeed, the cgroup refuses the open, and CUDA fails with error 999 while nvidia-smi works."""
    from bot.core.gpu_faults import cgroup_allow_rules, cuda_devices_health

    listing, config = (FIXTURES / "proxmox" / "uvm-major-mismatch.txt").read_text().split("\n====\n")
    inside = _listed_nodes(listing)
    assert len(inside) == 5 and inside["/dev/nvidia-uvm"].major == 511
    assert [str(r) for r in cgroup_allow_rules(config)] == ["c 195:*", "c 508:*"]
    status, detail = cuda_devices_health(129, config, inside)
    assert status == "warn"
    assert detail.startswith("inside CT 129, /dev/nvidia-uvm (device 511:0), /dev/nvidia-uvm-tools (device 511:1), "
                             "which its config binds but none of its cgroup rules allows (allowed: c 195:*, c 508:*)")
    assert "CUDA cannot initialise there (cuInit error 999" in detail
    assert "add `lxc.cgroup2.devices.allow: c 511:* rwm`" in detail and "508:* rwm" not in detail
    # with the rule it names: every node is a device the container may open
    fixed = config.replace("c 508:*", "c 511:*")
    assert cuda_devices_health(129, fixed, inside) == (
        "ok", "CT 129 passes /dev/nvidia-uvm and 4 other NVIDIA device node(s), each a device inside the container, "
              "allowed by its cgroup rules")
    assert cuda_devices_health(129, config + "\nlxc.cgroup2.devices.allow: a\n", inside)[0] == "ok"
    # not read inside: the config alone is judged, as before
    assert cuda_devices_health(129, config, None)[0] == "ok"


def test_a_bind_that_found_no_device_on_the_node_fails_the_check_when_cuda_needs_it():
    """`create=file` leaves an empty file where an optional bind found nothing (stat: 'regular empty file'); a
    config entry added without a restart leaves nothing at all. Proxmox `devN:` entries are allowed by Proxmox."""
    from bot.core.gpu_faults import cuda_devices_health, device_nodes_from_stat

    listing, config = (FIXTURES / "proxmox" / "uvm-major-mismatch.txt").read_text().split("\n====\n")
    config = config.replace("c 508:*", "c 511:*")
    placeholder = device_nodes_from_stat((FIXTURES / "proxmox" / "stat-device-nodes.txt").read_text())
    empty = next(node for node in placeholder.values() if not node.is_device)
    inside = _listed_nodes(listing)
    inside["/dev/nvidia-uvm"] = DeviceNode("/dev/nvidia-uvm", empty.kind, empty.major, empty.minor)
    del inside["/dev/nvidia-uvm-tools"]
    status, detail = cuda_devices_health(129, config, inside)
    assert status == "fail"
    assert detail.startswith("inside CT 129, /dev/nvidia-uvm (regular empty file), /dev/nvidia-uvm-tools (missing): "
                             "not the device node(s) its config passes")
    assert "CUDA cannot initialise there" in detail and "`nvidia-modprobe -u -c=0`" in detail
    # a node CUDA does not need (uvm-tools serves profilers) missing alone is a warning
    inside = _listed_nodes(listing)
    del inside["/dev/nvidia-uvm-tools"]
    status, detail = cuda_devices_health(129, config, inside)
    assert status == "warn" and "CUDA cannot" not in detail
    # Proxmox 8.1+ device entries need no cgroup rule of the config's own
    entries = (FIXTURES / "proxmox" / "lxc-gpu-configs.txt").read_text().split("\n====\n")[0]
    listed = _listed_nodes(listing)
    inside = {path: listed.get(path, DeviceNode(path, CHAR_DEVICE, 236, 1)) for path in
              ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
               "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2")}
    assert cuda_devices_health(129, entries, inside) == (
        "ok", "CT 129 passes /dev/nvidia-uvm and 6 other NVIDIA device node(s), each a device inside the container")


def test_the_ecc_counters_beside_an_ecc_finding_say_what_to_act_on_or_what_they_show():
    remap = replace(a100_row_remap(), uncorrected_volatile=2)
    assert ecc_evidence("dgx1", [remap]) == (
        "ECC counters now: dgx1 GPU 0: a remapped row is pending — reset the GPU (stop its processes first) to "
        "activate it; dgx1 GPU 0: 2 uncorrectable ECC error(s) since the driver loaded")
    h100 = memory_errors_from_csv((CSV / "ugx-h100-mig-590-load-query-gpu.csv").read_text())
    rtx = memory_errors_from_csv((CSV / "ugx-rtx2080s-595-idle-query-gpu.csv").read_text())
    assert ecc_evidence("pve9", h100 + [replace(rtx[0], index=1)]) == (
        "ECC counters on pve9 now: GPU 0: ECC on, no uncorrectable error since the driver loaded; GPU 1: no ECC "
        "counters exposed")
    assert ecc_evidence("pve9", [replace(h100[0], ecc_mode="Disabled", ecc_mode_pending="Disabled")]) == (
        "ECC counters on pve9 now: GPU 0: ECC off (no counters kept)")
    assert ecc_evidence("pve9", []) == "ECC counters on pve9: no GPU listed"
