"""Evidence a label calls for: the port a launch could not bind and its holder; transformers versions."""

import json
from dataclasses import replace

from bot.core.diagnosis import diagnose
from bot.core.label_evidence import (
    PortHolder,
    parse_port_holders,
    port_evidence,
    ports_named,
    transformers_evidence,
)
from bot.core.shm import DfRow, parse_df, shm_evidence, shm_health
from tests.conftest import FIXTURES

CASES = {c["id"]: c for c in (json.loads(x) for x in (FIXTURES / "sglang-failures/cases.jsonl").read_text()
                              .splitlines() if x)}


def test_the_port_each_binder_names_is_read_from_its_own_words():
    # torch's TCPStore (a real case, wrapped mid-word), pyzmq, uvicorn on macOS (errno 48) and Linux (98)
    lines = CASES["ascend-sglang-625"]["log_excerpt"].splitlines()
    lines += (FIXTURES / "other-logs" / "port-in-use-lines.txt").read_text().splitlines()
    assert ports_named(lines) == (42173, 30235, 8888, 8765)
    for line in lines[2:]:
        assert diagnose(line).label == "port_in_use", line
    assert ports_named(["OSError: [Errno 98] Address already in use", "listening on 0.0.0.0:30000"]) == ()


def test_the_holder_is_named_by_pid_and_whose_port_it_is():
    holders = (PortHolder(42173, 4242, "python3 -m sglang.launch_server --port 30000"),)
    lines = port_evidence((42173,), 30000, True, frozenset({42173}), holders)
    assert lines == ("port 42173 (not this launch's --port 30000: a port SGLang opened for its ranks or workers "
                     "(torch dist-init, NCCL, ZMQ)) is held by PID 4242: python3 -m sglang.launch_server --port 30000",)
    # a holder in the process group of a recorded launch names that attempt and how to stop it
    grouped = (PortHolder(30000, 4243, "python3 -m sglang.launch_server", group=4240),)
    assert port_evidence((30000,), 30000, True, frozenset({30000}), grouped, {4240: "a20261203-101500-1a2b"})[0] \
        .endswith("- attempt a20261203-101500-1a2b's process group: `/sglang stop a20261203-101500-1a2b`")
    own = port_evidence((30000,), 30000, False, frozenset({30000}), ())
    assert own == ("the log names no port; checked this launch's --port",
                   "port 30000 (this launch's --port) is listened on by a process this container cannot see")
    assert port_evidence((30000,), 30000, True, frozenset(), ())[0].endswith("is free now: whatever held it has exited")


def test_an_answer_that_is_not_the_scripts_is_not_read():
    assert parse_port_holders("") is None and parse_port_holders('{"listening": [1]}') is None
    assert parse_port_holders('{"listening": [80], "holders": [{"port": 80, "pid": 7, "cmd": "nginx"}]}') == (
        frozenset({80}), (PortHolder(80, 7, "nginx"),))
    assert parse_port_holders('{"listening": [80], "holders": [{"port": 80, "pid": 7, "pgid": 5, "cmd": ""}]}') == (
        frozenset({80}), (PortHolder(80, 7, "", 5),))


def test_transformers_installed_against_the_version_that_wrote_the_config():
    config = json.loads((FIXTURES / "model-configs" / "Qwen__Qwen3.6-27B" / "config.json").read_text())
    written = config.get("transformers_version") or config["text_config"]["transformers_version"]
    older = transformers_evidence("4.51.3", written)
    assert older == (f"transformers 4.51.3 in the container; the checkpoint's config.json was written by "
                     f"transformers {written} - older: upgrade to at least that")
    assert "not older" in (transformers_evidence(written, written) or "")
    assert transformers_evidence(None, None) is None
    assert "does not say which version" in (transformers_evidence("4.57.1", None) or "")


def test_processes_torch_named_at_an_oom_that_still_hold_memory_are_the_uncounted_ones():
    from bot.core.diagnosis import diagnose
    from bot.core.gpu import GpuProcess
    from bot.core.label_evidence import oom_holders_evidence

    shared, container_like, small = (FIXTURES / "other-logs" / "torch-oom-reports.txt").read_text().splitlines()
    oom = diagnose(small).oom
    assert oom is not None and oom.this_process == "12.90 GiB" and oom.others_uncounted
    assert oom.holders == ((244271, "26.06 MiB"), (238746, "1.08 GiB"), (244515, "468.00 MiB"))
    # the node now: one of them still holds memory, in container 131; the others are gone
    now = (GpuProcess(238746, "python3 serve.py", 1106, gpu_index=0, vmid=131), GpuProcess(9, "Xorg", 4, gpu_index=0))
    lines = oom_holders_evidence(oom, "pve5", now)
    assert lines[1] == ("PID 238746 (CT 131: python3 serve.py) held 1.08 GiB when the launch ran out and still "
                        "holds 1106 MiB")
    assert lines[0].startswith("PID 244271 held 26.06 MiB when the launch ran out; it holds no GPU memory now")
    assert lines[-1].startswith("memory the launch's budget did not count: `/gpu free pve5`")
    # nobody left holding memory: no call to free anything
    assert not any("/gpu free" in x for x in oom_holders_evidence(oom, "pve5", now[1:]))
    # a report listing a process with no memory does not name it
    listed = diagnose(shared).oom
    assert listed is not None and 796037 not in dict(listed.holders) and len(listed.holders) == 6
    assert not any("796037" in x for x in oom_holders_evidence(listed, "pve5", ()))
    # torch could not find its own PID in the container: the holders include the failed launch, none is blamed
    container = diagnose(container_like).oom
    assert container is not None and container.this_process is None and not container.others_uncounted


def test_memory_on_the_node_for_a_balance_refusal_names_pids_to_free_or_says_none_holds_it():
    from bot.core.gpu import Gpu, GpuProcess, SmiSnapshot
    from bot.core.label_evidence import occupied_evidence

    gpus = (Gpu(0, "NVIDIA RTX A6000", 30001, 49140), Gpu(1, "NVIDIA RTX A6000", 1, 49140))
    held = SmiSnapshot("query", gpus, processes=(GpuProcess(4242, "python3", 30000, gpu_index=0, vmid=129),))
    (line,) = occupied_evidence("pve5", 129, held)
    assert line == ("GPU 0: 30001 MiB in use, held by PID 4242 (CT 129) 30000 MiB: `/gpu free pve5:129` (this "
                    "container) or `/gpu free pve5` (every container on the node) stops them by PID after a "
                    "confirmation")
    # the same memory with no process listed: /gpu free looks for what keeps it, a process holding the GPU open
    (line,) = occupied_evidence("pve5", 129, SmiSnapshot("query", gpus))
    assert "no listed process holds (orphaned" in line
    assert ("`/gpu free pve5:129` (this container) or `/gpu free pve5` (every container on the node) finds the CUDA "
            "processes that hold the GPU open and stops them by PID after a confirmation") in line
    # nothing held any more, or the node not readable
    clean = SmiSnapshot("query", (Gpu(0, "NVIDIA RTX A6000", 1, 49140),))
    assert occupied_evidence("pve5", 129, clean)[0].startswith("no GPU of the node holds memory now")
    assert "could not be read" in occupied_evidence("pve5", 129, None)[0]


def test_a_gpu_that_refuses_a_context_shows_its_compute_mode_and_holder():
    from bot.core.diagnosis import diagnose
    from bot.core.gpu import Gpu, GpuProcess, SmiSnapshot
    from bot.core.label_evidence import busy_evidence

    line = next(x.split("\t")[1] for x in (FIXTURES / "other-logs" / "newer-first-cause-lines.tsv").read_text()
                .splitlines() if x.startswith("gpu_busy\t"))
    finding = diagnose(line)
    assert (finding.label, finding.confidence) == ("gpu_busy", "high") and "nvidia-smi -c DEFAULT" in finding.next_step
    exclusive = SmiSnapshot("query", (Gpu(0, "NVIDIA RTX A6000", 1200, 49140, compute_mode="Exclusive_Process"),
                                      Gpu(1, "NVIDIA RTX A6000", 1, 49140, compute_mode="Default")),
                            processes=(GpuProcess(5150, "python3", 1198, gpu_index=0, vmid=131),))
    lines = busy_evidence(exclusive)
    assert lines == ("GPU 0: compute mode Exclusive_Process, held by PID 5150 (CT 131) - one process at a time: "
                     "the holder keeps the launch out", "GPU 1: compute mode Default, held by no process")
    idle = SmiSnapshot("query", (Gpu(0, "NVIDIA RTX A6000", 1, 49140, compute_mode="Default"),))
    assert busy_evidence(idle)[-1].startswith("no GPU is in an exclusive mode with a holder: a device state then")
    assert "could not be read" in busy_evidence(None)[0]


def test_a_driver_finding_shows_the_driver_and_cuda_the_node_runs():
    from bot.core.gpu import Gpu, SmiSnapshot
    from bot.core.label_evidence import driver_evidence

    snap = SmiSnapshot("query", (Gpu(0, "NVIDIA RTX A6000", 1, 49140),), driver_version="580.126.09",
                       cuda_version="13.0")
    (line,) = driver_evidence("pve5", snap)
    assert line.startswith("pve5 runs NVIDIA driver 580.126.09, which runs CUDA up to 13.0: the container needs that "
                           "driver's own user-space libraries")
    assert "could not be read" in driver_evidence("pve5", None)[0]
    assert "could not be read" in driver_evidence("pve5", SmiSnapshot("query", ()))[0]


def test_an_out_of_range_gpu_index_shows_the_indices_used_against_the_nodes_gpus():
    from bot.core.gpu import Gpu, SmiSnapshot
    from bot.core.label_evidence import ordinal_evidence

    snap = SmiSnapshot("query", (Gpu(0, "NVIDIA RTX A6000", 1, 49140), Gpu(1, "NVIDIA RTX A6000", 1, 49140)))
    uses, node, where = ordinal_evidence("pve5", 129, snap, ("--tp", "2", "--dp", "2"))
    assert uses == "the launch uses 4 GPU(s) (tp x pp x dp), indices 0..3: the process must see at least 4"
    assert node == "pve5 has 2 GPU(s) (nvidia-smi on the node)" and where.startswith("`pct config 129` on pve5")
    # --base-gpu-id shifts the indices, in either spelling
    for flags in (("--tp", "2", "--base-gpu-id", "1"), ("--tp", "2", "--base-gpu-id=1")):
        assert ordinal_evidence("pve5", 129, snap, flags)[0].endswith("indices 1..2: the process must see at least 3")
    # flags it could not read, a node it could not read: only where to look
    (only,) = ordinal_evidence("pve5", None, None, ("--tp", "two"))
    assert only.startswith("the container's configuration lists the /dev/nvidia* devices")
    # the container's config read: the GPU devices it passes in (a real Proxmox config's entries, one GPU)
    config = (FIXTURES / "proxmox" / "lxc-gpu-configs.txt").read_text().split("\n====\n")[1]
    where = ordinal_evidence("pve5", 129, snap, ("--tp", "2"), config)[-1]
    assert where.startswith("`pct config 129` on pve5 passes 1 GPU device(s) into the container (/dev/nvidia0); ")


def test_the_oom_killer_killing_a_process_in_the_launchs_container_is_the_first_cause_of_a_silent_death():
    from bot.core.gpu_faults import oom_kills
    from bot.core.label_evidence import killed_by_the_oom_killer

    # a real journal of an LXC container at its own limit (the Pulse node's line, its limit the container's, the
    # victim a Python process) beside the launcher's real words for a scheduler that died (its code made -9)
    journal = (FIXTURES / "kernel-log" / "oom-kill-lines.txt").read_text().replace(
        "oom_memcg=/lxc/703/ns/system.slice/pulse.service", "oom_memcg=/lxc/703").replace("(pulse)", "(python3)")
    kills = oom_kills(journal)
    death = (FIXTURES / "other-logs" / "child-exit-lines.txt").read_text().split("\n\n")[0]
    echo = diagnose(death.replace("Exit code: 1", "Exit code: -9"))
    killed = killed_by_the_oom_killer(echo, kills, 703)
    assert (killed.label, killed.confidence, killed.phase) == ("host_oom_kill", "high", "startup")
    assert killed.explanation.startswith("the kernel's OOM killer killed PID 3783517 (python3) in CT 703 while this "
                                         "launch ran: CT 703 reached its memory limit")
    assert killed.next_step.startswith("raise CT 703's memory limit on the node (`pct set 703 -memory <MiB>`")
    assert killed.evidence == echo.evidence and killed.also_seen == ("child_process_died",)
    assert killed.notes[-1].startswith("the log alone: child_process_died: ")
    # another container's kill, or a log that names its own cause, leaves the log's reading alone
    assert killed_by_the_oom_killer(echo, kills, 129) == echo
    cause = diagnose(next(c for c in CASES.values() if c["label"] == "kv_pool_oom" and c["quality"] == "full")[
        "log_excerpt"])
    assert killed_by_the_oom_killer(cause, kills, 703) == cause
    # the survivors' view of a rank that vanished (a real NCCL failure) beside the kill: the kill came first
    peer = diagnose(next(c for c in CASES.values() if c["label"] == "nccl_error" and c["quality"] == "full")[
        "log_excerpt"])
    assert peer.label == "nccl_error" and peer.confidence == "high"
    lost = killed_by_the_oom_killer(peer, kills, 703)
    assert lost.label == "host_oom_kill" and lost.also_seen[0] == "nccl_error"
    # a log that just stops (a hang, or a kill without a word) is read as the kill too
    stopped = diagnose("[2026-05-25 17:30:01 TP0] Load weight begin. avail mem=31.49 GB", stalled_minutes=12)
    assert killed_by_the_oom_killer(stopped, kills, 703).label == "host_oom_kill"


def test_a_kernel_log_without_a_known_container_names_a_killed_python_process():
    """`gpuops triage LOG --kernel-log FILE` off the node: a bare host's kill of `python` (the real `dmesg -T` lines
    of a host that ran out of RAM) explains the silent death, at medium confidence; another program's kill does not."""
    from bot.core.gpu_faults import oom_kills
    from bot.core.label_evidence import killed_by_the_oom_killer

    lines = (FIXTURES / "kernel-log" / "oom-kill-lines.txt").read_text().splitlines()
    kills = oom_kills("\n".join(lines[6:8]))
    echo = diagnose((FIXTURES / "other-logs" / "child-exit-lines.txt").read_text().split("\n\n")[0])
    killed = killed_by_the_oom_killer(echo, kills, None)
    assert (killed.label, killed.confidence) == ("host_oom_kill", "medium")
    assert killed.explanation.startswith("the kernel's OOM killer killed PID 6154 (python) while this launch ran: "
                                         "the node ran out of RAM; ")
    assert killed.next_step.startswith("free RAM on the node")
    pulse = oom_kills("\n".join(lines[:6]))  # a monitoring service's kills, not a server's
    assert killed_by_the_oom_killer(echo, pulse, None) == echo


def test_nccls_shared_memory_failure_shows_the_room_in_dev_shm_against_the_segment_it_could_not_make():
    docker_default, roomy, not_mounted = (FIXTURES / "proxmox" / "df-dev-shm.txt").read_text().split("====\n")
    assert parse_df(docker_default) == DfRow(65536, 4096, "/dev/shm")
    assert parse_df(not_mounted) == DfRow(12334792, 12334792, "/dev")
    assert parse_df("") is None and parse_df("df: /dev/shm: No such file or directory\n") is None
    extend = (FIXTURES / "other-logs" / "nccl-shm-extend.txt").read_text().splitlines()
    finding = diagnose("\n".join(extend))
    assert (finding.label, finding.evidence[0].line_no) == ("nccl_error", 1)  # "failed to extend" is the first line
    # the larger of the two sizes the log gives (9637892 bytes: the segment and its header)
    assert shm_evidence(docker_default, extend) == ("/dev/shm in the container: 4.0 MiB free of 64.0 MiB; NCCL could "
                                                    "not make a 9.2 MiB segment there, more than is free")
    assert shm_evidence(roomy, extend).startswith("/dev/shm in the container: 23.5 GiB free of 23.5 GiB; NCCL could "
                                                  "not make a 9.2 MiB segment there")
    assert "more than is free" not in shm_evidence(roomy, extend)
    # NCCL's other wording of it (posix_fallocate, then a segment with no /dev/shm prefix)
    no_space = (FIXTURES / "other-logs" / "nccl-shm-no-space.txt").read_text().splitlines()
    assert shm_evidence(docker_default, no_space).endswith("NCCL could not make a 9.2 MiB segment there, more than "
                                                           "is free")
    assert shm_evidence(not_mounted, ["NCCL error: unhandled system error"]) == (
        "/dev/shm in the container: 11.8 GiB free of 11.8 GiB (not its own mount: it is on /dev)")
    assert shm_evidence(None, extend) == "/dev/shm in the container: not readable"


def test_a_multi_gpu_launch_is_warned_of_a_dev_shm_with_less_free_than_nvidias_guide_gives_a_container():
    docker_default, roomy, not_mounted = (FIXTURES / "proxmox" / "df-dev-shm.txt").read_text().split("====\n")
    state, text = shm_health(docker_default, 2)
    assert state == "warn" and text.startswith("/dev/shm in the container: 4.0 MiB free of 64.0 MiB: NCCL makes its")
    assert "1 GiB" in text
    assert shm_health(roomy, 2) == ("ok", "/dev/shm in the container: 23.5 GiB free of 23.5 GiB")
    assert shm_health(not_mounted, 4)[1].endswith("(not its own mount: it is on /dev)")
    # one GPU: NCCL has no peer; df not read: nothing to say
    assert shm_health(docker_default, 1) is None and shm_health(None, 2) is None


def test_a_holder_that_is_a_recorded_launchs_server_is_named_as_that_launch_to_stop():
    """The memory SGLang's balance check or torch's OOM report found held is a server an earlier attempt brought up
    (its process group is that launch's): the evidence names the attempt and its `/sglang stop`, which `/gpu free`
    leaves a launch's processes to; `/gpu free` is named only for the other holders."""
    from bot.core.diagnosis import diagnose
    from bot.core.gpu import Gpu, GpuProcess, SmiSnapshot
    from bot.core.label_evidence import occupied_evidence, oom_holders_evidence
    from bot.core.report import LaunchRef

    ready = LaunchRef("a20261203-101500-1a2b", "ready", 30000)
    launches = {("pve5", 129, 4242): ready}
    gpus = (Gpu(0, "NVIDIA RTX A6000", 30001, 49140, uuid="GPU-0"), Gpu(1, "NVIDIA RTX A6000", 31001, 49140,
                                                                      uuid="GPU-1"))
    server = GpuProcess(4242, "python3", 30000, gpu_uuid="GPU-0", vmid=129, group=4242)
    other = GpuProcess(5100, "python3", 1000, gpu_uuid="GPU-1", vmid=129, group=5100)
    snapshot = SmiSnapshot("query", gpus, processes=(server, replace(server, gpu_uuid="GPU-1"), other))
    first, second = occupied_evidence("pve5", 129, snapshot, launches)
    assert first == ("GPU 0: 30001 MiB in use, held by PID 4242 (CT 129) 30000 MiB <- a20261203-101500-1a2b (ready, "
                     "port 30000): `/sglang stop a20261203-101500-1a2b` stops the launch holding it")
    assert second.endswith(": `/sglang stop a20261203-101500-1a2b` stops the launch holding it; `/gpu free pve5:129` "
                           "(this container) or `/gpu free pve5` (every container on the node) stops the others by "
                           "PID after a confirmation")
    # the same group number on another node is no launch of this one
    assert "<-" not in occupied_evidence("pve6", 129, snapshot, launches)[0]

    small = (FIXTURES / "other-logs" / "torch-oom-reports.txt").read_text().splitlines()[2]
    oom = diagnose(small).oom
    held = (GpuProcess(238746, "python3 -m sglang.launch_server", 1106, gpu_index=0, vmid=129, group=238746),)
    lines = oom_holders_evidence(oom, "pve5", held, {("pve5", 129, 238746): ready})
    assert lines[1].endswith("still holds 1106 MiB <- a20261203-101500-1a2b (ready, port 30000)")
    assert lines[-1] == ("memory the launch's budget did not count: `/sglang stop a20261203-101500-1a2b` stops the "
                         "launch holding it")
    assert not any("/gpu free" in x for x in lines)


def test_the_next_step_of_a_balance_refusal_stops_the_launches_holding_the_gpus_and_frees_only_the_rest():
    from bot.core.diagnosis import OCCUPIED_NEXT
    from bot.core.label_evidence import occupied_next_step
    from bot.core.report import MemoryHolders

    generic = OCCUPIED_NEXT.replace("<container>", "pve5:129")
    assert occupied_next_step(OCCUPIED_NEXT, "pve5", 129, None) == generic
    assert occupied_next_step(OCCUPIED_NEXT, "pve5", 129, MemoryHolders((), (), True)) == generic
    only = MemoryHolders(("x",), (("a1", "a1 (ready, port 30000)"),), False)
    assert occupied_next_step(OCCUPIED_NEXT, "pve5", 129, only) == ("`/sglang stop a1` stops the launch holding the "
                                                                    "GPUs; then relaunch unchanged")
    both = MemoryHolders(("x", "y"), (("a1", "a1 (ready, port 30000)"), ("a2", "a2 (failed, left running, port "
                                                                                 "30001)")), True)
    assert occupied_next_step(OCCUPIED_NEXT, "pve5", 129, both) == (
        "`/sglang stop a1` and `/sglang stop a2` stop the launches holding the GPUs; for the other holders: "
        + generic)
