"""`gpuops` in a terminal, run as a separate process like a person would."""

import json
import re
import subprocess
import sys

import pytest
import yaml

from bot.lab.nodes import seed_node_state, start_node
from tests.conftest import FIXTURES, ROOT
from tests.services import SSH_KIND


def gpuops(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=env)


def test_smi_parse_json_of_a_table():
    out = gpuops("smi", "parse", str(FIXTURES / "nvidia-smi/table/cz-580.126.09-l40s-one-proc.txt"), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["driver_version"] == "580.126.09" and data["cuda_version"] == "13.0" and data["error"] is None
    (gpu,) = data["gpus"]
    assert (gpu["memory_used_mib"], gpu["memory_total_mib"], gpu["utilization_pct"], gpu["temperature_c"]) == (
        803, 46068, 0, 39)
    assert gpu["processes"] == [{"pid": 5997, "name": "python", "used_mib": 794, "type": "C"}]


def test_smi_parse_error_banner_and_na():
    out = gpuops("smi", "parse", str(FIXTURES / "nvidia-smi/error/device-handle-gpu-lost.txt"), "--json")
    assert json.loads(out.stdout)["error"]["kind"] == "device-handle-gpu-lost"
    out = gpuops("smi", "parse", str(FIXTURES / "nvidia-smi/csv-gpu/i3py-noheader-nounits-fan-na.csv"), "--json",
                 "--fields", "memory.total,memory.free,memory.used,temperature.gpu,fan.speed,utilization.gpu,"
                 "utilization.memory")
    gpu = json.loads(out.stdout)["gpus"][0]
    assert gpu["memory_total_mib"] == 2004 and gpu["unreadable"] == {"fan": "[N/A]"}


def test_smi_parse_garbage_is_a_clear_error(tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("bash: nvidia-smi: command not found\n")
    out = gpuops("smi", "parse", str(junk))
    assert out.returncode == 2 and "not a recognised nvidia-smi output" in out.stderr and "Traceback" not in out.stderr


async def test_status_in_a_terminal(tmp_path):
    state = seed_node_state("pve5")
    state["gpus"][0]["orphaned_mib"] = 12000
    node = await start_node(tmp_path / "pve5", "pve5", state=state, prefer=SSH_KIND)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"nodes": {"pve5": node.inventory_entry()},
                                         "containers": {"sglang-a6000": {"node": "pve5", "vmid": 129}}}))
    env = {"PATH": "/usr/bin:/bin", "GPUOPS_DATA_DIR": str(tmp_path / "data"), "HOME": str(tmp_path)}
    try:
        import asyncio

        out = await asyncio.to_thread(gpuops, "status", "--inventory", str(inventory), env=env)
        as_json = await asyncio.to_thread(gpuops, "status", "pve5", "--json", "--inventory", str(inventory), env=env)
    finally:
        await node.stop()
    assert out.returncode == 3, out.stderr  # 3: a target needs attention
    assert "== pve5 [ATTENTION] driver 580.126.09 · CUDA 13.0 · 2 GPUs" in out.stdout
    assert "GPU 0: orphaned memory: 12001 MiB held, no process listed" in out.stdout
    assert "orphaned memory: `/gpu free pve5` finds by PID what keeps a GPU open" in out.stdout
    # the same reading as data: the exit code, the flags and the numbers the table shows
    assert as_json.returncode == 3, as_json.stderr
    (pve5,) = json.loads(as_json.stdout)["targets"]
    assert (pve5["target"], pve5["state"], pve5["driver_version"], pve5["cuda_version"]) == (
        "pve5", "attention", "580.126.09", "13.0")
    assert "GPU 0: orphaned memory: 12001 MiB held, no process listed" in pve5["flags"]
    gpu0, gpu1 = pve5["gpus"]
    assert (gpu0["memory_used_mib"], gpu0["memory_total_mib"], gpu0["memory_free_mib"]) == (12001, 49140, 37139)
    assert gpu0["processes"] == [] and gpu0["flags"] == ["orphaned memory: 12001 MiB held, no process listed"]
    assert gpu1["memory_used_mib"] == 1 and gpu1["flags"] == []


def test_lab_script_plays_the_skeleton_end_to_end():
    out = gpuops("lab", "--script", timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "> /gpu status sglang-a6000" in text and "python3 -m sglang.launch_server" in text
    assert "GPU 0: orphaned memory: 44877 MiB held, no process listed" in text
    # the server killed by name left a child holding the GPUs open: /gpu free finds it, and the click frees the memory
    assert re.search(r"PID (\d+) \(CT 129\): python3, holds /dev/nvidia0, /dev/nvidia1 open", text), text
    assert re.search(r"Stopped PIDs \d+ on pve5; memory returned: GPU 0: 1 MiB used; GPU 1: 1 MiB used", text)
    assert "nvidia-smi error (nvml-driver-library-mismatch)" in text and "*pve7*  unreachable" in text
    # the pre-flight first sees the held memory, then, on clean GPUs, the real shortfall (seed steps 2-5)
    assert "free the GPUs first" in text
    assert "SGLang would print: `Not enough memory. Please try to increase --mem-fraction-static. Current value: " \
           "self.server_args.mem_fraction_static=0.85`" in text
    assert "pve5 GPU 0: Xid 31 once, GPU memory page fault (MMU fault)" in text  # /gpu health reads the kernel log
    # the incident thread replays the hypothesis loop: H1 (leftover memory) refuted by a clean status and a repeat,
    # the triage's H2 (kv_pool_oom) confirmed by the budget change that started
    assert "refuted by gpuops: the GPUs were clean" in text
    assert "Also in the log, not the cause: child_process_died" in text
    assert "(a budget change) started: the memory budget was the cause" in text
    assert "seed arc: all steps happened as scripted" in text
    assert "Traceback" not in out.stderr


def test_quitting_the_lab_during_a_launch_leaves_no_traceback_and_no_server(tmp_path):
    """`quit` typed while a launch's pre-flight still runs: the console cancels what the app runs for the request
    before the lab's Redis, Slack stand-in and nodes stop, so nothing reports a vanished Redis, no stand-in server is
    left running, and the lab's directory is gone."""
    import os
    import re

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "GPUOPS_DATA_DIR": str(tmp_path / "data"), "HOME": str(tmp_path)}
    console = subprocess.Popen([sys.executable, "-m", "bot.cli", "lab"], cwd=ROOT, env=env, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert console.stdout is not None and console.stdin is not None
        lines = iter(console.stdout.readline, "")
        next(line for line in lines if "Container 129's model is at" in line)
        model = next(lines).strip()
        workdir = re.match(r"(/\S*?/gpuops-lab-[^/]+)/", model)
        assert workdir, model
        console.stdin.write(f"/sglang launch sglang-a6000 {model} --tp 2 --context-length 32768 "
                            "--mem-fraction-static 0.88 --mamba-ssm-dtype bfloat16\nquit\n")
        console.stdin.flush()
        _, stderr = console.communicate(timeout=120)
    finally:
        if console.poll() is None:
            console.kill()
    assert console.returncode == 0, stderr[-2000:]
    assert "Traceback" not in stderr and "ConnectionError" not in stderr, stderr[-2000:]
    left = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert not [row for row in left.splitlines() if workdir.group(1) in row], left
    assert not os.path.exists(workdir.group(1))


SEED_FLAGS = ["--tp", "2", "--context-length", "65536", "--enable-torch-compile", "--speculative-algorithm", "NEXTN",
              "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
              "--mamba-full-memory-ratio", "0.5"]


def test_budget_in_a_terminal_with_json_and_chart(tmp_path):
    chart = tmp_path / "budget.png"
    out = gpuops("budget", "--model", str(FIXTURES / "model-configs/Qwen__Qwen3.6-27B"), "--gpu", "RTX A6000",
                 "--gpus", "2", "--sglang", "0.5.9", "--json", "--chart", str(chart), "--",
                 *SEED_FLAGS, "--mem-fraction-static", "0.85", "--model-path", "/models/q", "--frobnicate")
    assert out.returncode == 4, out.stderr  # 4: the launch would fail
    data = json.loads(out.stdout)
    assert data["verdict"] == "fails" and data["error_text"].startswith("Not enough memory.")
    assert data["mamba_slots"] == 48 and data["not_modelled"] == ["--frobnicate"]
    # each remedy launches the flags as given with its one change, as the Slack answer's button does
    given = [*SEED_FLAGS, "--mem-fraction-static", "0.85", "--model-path", "/models/q", "--frobnicate"]
    ssm = next(r for r in data["remedies"] if r["change"] == "--mamba-ssm-dtype bfloat16")
    assert ssm["argv"] == [*given, "--mamba-ssm-dtype", "bfloat16"]
    assert chart.read_bytes().startswith(b"\x89PNG")


def test_budget_of_a_checkpoint_directory_uses_its_size(tmp_path):
    # Llama-3.1-8B's config with its checkpoint's real size, 16,060,522,496 B, as two sparse shard files
    (tmp_path / "config.json").write_text((FIXTURES / "model-configs/meta-llama__Meta-Llama-3.1-8B-Instruct"
                                           / "config.json").read_text())
    for name, size in (("model-00001-of-00002.safetensors", 10_000_000_000),
                       ("model-00002-of-00002.safetensors", 6_060_522_496)):
        with open(tmp_path / name, "wb") as shard:
            shard.truncate(size)
    args = ("budget", "--model", str(tmp_path), "--gpu", "RTX A6000", "--gpus", "1", "--json", "--", "--tp", "1")
    data = json.loads(gpuops(*args).stdout)
    assert data["weights_source"] == "checkpoint size"
    weights = next(x for x in data["lines"] if x["label"] == "target weights")
    assert weights["why"].startswith("checkpoint size 14.96 GiB / tp 1")
    # an index names the total itself (and wins over the files); a broken one falls back to the files
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 8_000_000_000}}))
    weights = next(x for x in json.loads(gpuops(*args).stdout)["lines"] if x["label"] == "target weights")
    assert weights["why"].startswith("checkpoint size 7.45 GiB / tp 1")
    (tmp_path / "model.safetensors.index.json").write_text("{not json")
    out = gpuops(*args)
    assert out.returncode in (0, 3) and "checkpoint size 14.96 GiB" in out.stdout


def test_budget_text_names_the_error_and_remedies():
    out = gpuops("budget", "--model", str(FIXTURES / "model-configs/Qwen__Qwen3.6-27B/config.json"), "--gpu",
                 "A6000", "--gpus", "2", "--sglang", "current", "--", *SEED_FLAGS, "--mem-fraction-static", "0.88")
    assert out.returncode == 3, out.stderr  # starts, degraded
    assert "VERDICT: STARTS, DEGRADED" in out.stdout and "capped to" in out.stdout
    assert "REMEDIES (cheapest first):" in out.stdout


def test_budget_takes_the_gpu_count_from_the_name_or_else_from_the_flags():
    config = str(FIXTURES / "model-configs/Qwen__Qwen3.6-27B/config.json")
    plan = ("--sglang", "0.5.9", "--json", "--", *SEED_FLAGS)
    stated = gpuops("budget", "--model", config, "--gpu", "RTX A6000", "--gpus", "2", *plan)
    # the seed launch on 0.5.9 fails
    assert stated.returncode == 4 and json.loads(stated.stdout)["verdict"] == "fails", stated.stderr
    # "2x RTX A6000" as nvidia-smi counts are often written, and no count at all for a tp 2 launch: the same plan
    for gpu in (("--gpu", "2x RTX A6000"), ("--gpu", "RTX A6000 x2"), ("--gpu", "RTX A6000")):
        assert gpuops("budget", "--model", config, *gpu, *plan).stdout == stated.stdout, gpu
    # a count stated twice, differently, is refused rather than one of them chosen
    out = gpuops("budget", "--model", config, "--gpu", "2x RTX A6000", "--gpus", "4", *plan)
    assert out.returncode == 2 and "--gpu names 2 GPUs and --gpus 4" in out.stderr
    out = gpuops("budget", "--model", config, "--gpu", "1x RTX A6000", *plan)
    assert out.returncode == 2 and "the launch needs 2 GPUs (tp 2 x pp 1 x dp 1), --gpus is 1" in out.stderr


def test_budget_passes_unknown_flags_through_and_notes_a_likely_typo():
    out = gpuops("budget", "--model", str(FIXTURES / "model-configs/Qwen__Qwen3-8B"), "--gpu", "A6000", "--",
                 "--tp", "1", "--context-lenght", "8192", "--cuda-graph-bs", "1", "2", "4")
    assert out.returncode in (0, 3), out.stderr
    assert "NOT MODELLED (passed through untouched): --context-lenght 8192 --cuda-graph-bs 1 2 4" in out.stdout
    assert "- `--context-lenght` is close to `--context-length`: if that was meant, this budget is without it" \
        in out.stdout
    assert "`--cuda-graph-bs` is close" not in out.stdout


def test_budget_with_the_weights_an_earlier_load_logged():
    args = ("budget", "--model", str(FIXTURES / "model-configs/Qwen__Qwen3-8B"), "--gpu", "A6000", "--json")
    estimated = json.loads(gpuops(*args, "--", "--tp", "1", "--mem-fraction-static", "0.88").stdout)
    out = gpuops(*args, "--weights-gib", "16.5", "--", "--tp", "1", "--mem-fraction-static", "0.88")
    assert out.returncode == 0, out.stderr
    measured = json.loads(out.stdout)
    line = next(x for x in measured["lines"] if x["label"] == "target weights")
    assert measured["weights_gib"] == 16.5 and line["why"].startswith("measured: --weights-gib (an earlier load)")
    assert abs(measured["rest_gib"] - (estimated["rest_gib"] - (16.5 - estimated["weights_gib"]))) < 1e-9
    bad = gpuops(*args, "--weights-gib", "0", "--", "--tp", "1")
    assert bad.returncode == 2 and "--weights-gib is the positive GiB per GPU" in bad.stderr


def test_budget_unknown_gpu_is_a_usage_error():
    out = gpuops("budget", "--model", str(FIXTURES / "model-configs/Qwen__Qwen3-8B"), "--gpu", "Voodoo 5", "--",
                 "--tp", "1")
    assert out.returncode == 2 and "unknown GPU 'Voodoo 5'" in out.stderr
    ambiguous = gpuops("budget", "--model", str(FIXTURES / "model-configs/Qwen__Qwen3-8B"), "--gpu", "H100", "--",
                       "--tp", "1")
    assert ambiguous.returncode == 2 and "H100 NVL (95830 MiB)" in ambiguous.stderr
    assert "H100 PCIe (81559 MiB)" in ambiguous.stderr


def test_a_local_budget_placed_by_base_gpu_id_reads_that_gpus_free_memory():
    """`--free-mib` gives every GPU's, in nvidia-smi's order: a launch on GPU 1 is budgeted on GPU 1's 47000 MiB,
    not on GPU 0's 2000 that another server holds; a placement past `--gpus` is a usage error."""
    qwen = str(FIXTURES / "model-configs/Qwen__Qwen3-8B")
    out = gpuops("budget", "--model", qwen, "--gpu", "RTX A6000", "--free-mib", "2000,47000", "--json", "--",
                 "--tp", "1", "--base-gpu-id", "1")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["verdict"] == "fits" and data["pre_gib"] == pytest.approx(47000 / 1024 - 0.75, abs=0.01)
    beyond = gpuops("budget", "--model", qwen, "--gpu", "RTX A6000", "--gpus", "1", "--", "--base-gpu-id", "1")
    assert beyond.returncode == 2
    assert "the launch needs GPU 1 (tp 1 x pp 1 x dp 1, --base-gpu-id 1), --gpus is 1" in beyond.stderr


def test_unreadable_inputs_are_usage_errors_not_tracebacks(tmp_path):
    partial = tmp_path / "config.json"  # a config that names no layer count
    partial.write_text(json.dumps({k: v for k, v in json.loads(
        (FIXTURES / "model-configs/Qwen__Qwen3-8B/config.json").read_text()).items() if k != "num_hidden_layers"}))
    out = gpuops("budget", "--model", str(partial), "--gpu", "RTX A6000", "--gpus", "1", "--", "--tp", "1")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "config.json: `num_hidden_layers` is missing" in out.stderr
    bad_free = gpuops("budget", "--model", str(FIXTURES / "model-configs/Qwen__Qwen3-8B"), "--gpu", "RTX A6000",
                      "--free-mib", "48000,lots", "--", "--tp", "1")
    assert bad_free.returncode == 2 and "--free-mib takes MiB per GPU" in bad_free.stderr
    missing = gpuops("triage", str(tmp_path / "no-such.log"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "cannot read log" in missing.stderr and "No such file or directory" in missing.stderr
    smi = gpuops("smi", "parse", str(tmp_path / "no-such.csv"))
    assert smi.returncode == 2 and "cannot read nvidia-smi output" in smi.stderr and "Traceback" not in smi.stderr


def test_seed_demo_plays_through_the_real_app():
    out = gpuops("demo", "--script", "seed", timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "seed demo: all steps happened as scripted" in out.stdout
    assert "first error: `RuntimeError: Not enough memory" in out.stdout  # the cause, not the sigquit echo
    assert "changes: + --mamba-ssm-dtype bfloat16" in out.stdout
    assert "(failed) — lines 8–11 of 11, last written" in out.stdout  # the failed attempt's own log, numbered
    assert "memory returned: GPU 0: 1 MiB used; GPU 1: 1 MiB used" in out.stdout


def test_triage_in_a_terminal(tmp_path):
    case = next(json.loads(x) for x in (FIXTURES / "sglang-failures/cases.jsonl").read_text().splitlines()
                if '"id": "sglang-4289"' in x)
    log = tmp_path / "attempt.log"
    log.write_text(case["log_excerpt"])
    out = gpuops("triage", str(log))
    assert out.returncode == 0 and out.stdout.startswith("nccl_error (high confidence, phase: startup)")
    assert "also in the log (not the cause): child_process_died" in out.stdout
    data = json.loads(gpuops("triage", str(log), "--json").stdout)
    assert data["label"] == "nccl_error" and data["evidence"][0]["line_no"] > 1
    # with the launch command, a finding that has a one-flag experiment prints it, ready to paste
    p2p = next(json.loads(x) for x in (FIXTURES / "sglang-failures/cases.jsonl").read_text().splitlines()
               if '"id": "sglang-4814"' in x)
    log.write_text("\n".join(p2p["log_excerpt"]) if isinstance(p2p["log_excerpt"], list) else p2p["log_excerpt"])
    out = gpuops("triage", str(log), "--launch", p2p["launch_command"])
    assert out.stdout.startswith("gpu_p2p_unsupported")
    assert "try: --disable-custom-all-reduce" in out.stdout and "--tensor-parallel-size=2 --disable-custom-all-reduce" \
        in out.stdout
    data = json.loads(gpuops("triage", str(log), "--json", "--launch", p2p["launch_command"]).stdout)
    assert data["experiments"][0]["change"] == "--disable-custom-all-reduce"


def test_triage_of_a_log_file_reads_a_saved_kernel_log_beside_it(tmp_path):
    """A scheduler that died without a word, and the host's `dmesg -T` of the time: the kernel's OOM kill of the
    Python process is named as the cause, and a kill in another container is not this launch's."""
    log = tmp_path / "attempt.log"
    log.write_text((FIXTURES / "other-logs/child-exit-lines.txt").read_text().split("\n\n")[0].replace(
        "Exit code: 1", "Exit code: -9"))
    kernel_lines = (FIXTURES / "kernel-log/oom-kill-lines.txt").read_text().splitlines()
    dmesg = tmp_path / "dmesg.txt"
    dmesg.write_text("\n".join(kernel_lines[6:8]))  # a bare host that ran out of RAM killing `python`
    alone = gpuops("triage", str(log))
    assert alone.stdout.startswith("child_process_died")
    out = gpuops("triage", str(log), "--kernel-log", str(dmesg))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("kernel: the kernel's OOM killer killed PID 6154 (python)")
    assert "host_oom_kill (medium confidence, phase: startup)" in out.stdout
    assert "why: the kernel's OOM killer killed PID 6154 (python) while this launch ran: the node ran out of RAM" \
        in out.stdout
    assert "note: the log alone: child_process_died" in out.stdout
    data = json.loads(gpuops("triage", str(log), "--kernel-log", str(dmesg), "--json").stdout)
    assert data["label"] == "host_oom_kill" and data["kernel"][0].startswith("kernel: the kernel's OOM killer")
    # the Proxmox journal of a kill in CT 703: this launch's container (129) is another one
    journal = tmp_path / "journal.txt"
    journal.write_text("\n".join(kernel_lines[:6]).replace("(pulse)", "(python3)"))
    other = gpuops("triage", str(log), "--kernel-log", str(journal), "--vmid", "129")
    finding = [line for line in other.stdout.splitlines() if not line.startswith("kernel: ")]
    assert finding[0].startswith("child_process_died") and "host_oom_kill" not in other.stdout
    assert "kernel: the kernel's OOM killer killed PID 3783517 (python3) in CT 703" in other.stdout
    ours = gpuops("triage", str(log), "--kernel-log", str(journal), "--vmid", "703")
    assert "host_oom_kill (high confidence" in ours.stdout
    # the same journal rotated and compressed (kern.log.2.gz) reads the same
    import gzip

    rotated = tmp_path / "kern.log.2.gz"
    rotated.write_bytes(gzip.compress(journal.read_bytes()))
    assert gpuops("triage", str(log), "--kernel-log", str(rotated), "--vmid", "703").stdout == ours.stdout
    refused = gpuops("triage", str(log), "--vmid", "703")
    assert refused.returncode == 2 and "--kernel-log" in refused.stderr
    # both saved by Windows PowerShell's `>`: UTF-16 with a byte-order mark and CRLF line ends
    for path in (log, journal):
        (tmp_path / f"{path.stem}.utf16.txt").write_bytes(path.read_text().replace("\n", "\r\n").encode("utf-16"))
    windows = gpuops("triage", str(tmp_path / "attempt.utf16.txt"), "--kernel-log",
                     str(tmp_path / "journal.utf16.txt"), "--vmid", "703")
    assert windows.stdout == ours.stdout.replace(str(log), str(tmp_path / "attempt.utf16.txt"))


async def test_health_and_history_in_a_terminal(tmp_path, redis_url):
    """The same answers as /gpu health and /sglang history, from one Redis, in a separate process."""
    import asyncio
    import time
    from datetime import UTC, datetime

    from bot.core.attempts import Attempt, AttemptStatus, Transition
    from bot.store import AttemptStore, connect

    bus_loss = (FIXTURES / "kernel-log" / "xid-lines.txt").read_text().splitlines()[1].split("kernel: ", 1)[1]
    state = seed_node_state("pve19")
    stamp = datetime.fromtimestamp(time.time() - 3600, UTC).strftime("%Y-%m-%dT%H:%M:%S+0000")
    state["kernel_log"] = [f"{stamp} pve19 kernel: {bus_loss.replace('PCI:0000:01:00', 'PCI:0000:52:00')}"]
    node = await start_node(tmp_path / "pve19", "pve19", state=state, prefer=SSH_KIND)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"nodes": {"pve19": node.inventory_entry()},
                                         "containers": {"ct-cli": {"node": "pve19", "vmid": 319},
                                                        "ct-idle": {"node": "pve19", "vmid": 320}}}))
    store = AttemptStore(connect(redis_url))
    now = time.time()
    await store.save(Attempt("a-cli-1", "U1", "C1", "pve19", 319, "ct-cli", "/models/m",
                             ("--tp", "2", "--api-key", "sk-cli-secret"), 30000,
                             now - 60, (Transition(AttemptStatus.LAUNCHING, now - 60),
                                        Transition(AttemptStatus.FAILED, now - 30, "kv_pool_oom")),
                             error_line="RuntimeError: Not enough memory."))
    # a server the history says is ready, on a node this inventory does not have (one Redis, another
    # deployment's record): reported, and the report still made
    await store.save(Attempt("a-cli-2", "U1", "C1", "pve-gone", 400, None, "/models/m", ("--tp", "1"), 30000,
                             now - 90, (Transition(AttemptStatus.LAUNCHING, now - 90),
                                        Transition(AttemptStatus.READY, now - 80, "ready"))))
    await store.redis.aclose()
    env = {"PATH": "/usr/bin:/bin", "REDIS_URL": redis_url, "HOME": str(tmp_path)}
    try:
        health = await asyncio.to_thread(gpuops, "health", "--inventory", str(inventory), env=env)
        health_json = await asyncio.to_thread(gpuops, "health", "pve19", "--json", "--inventory", str(inventory),
                                              env=env)
        history = await asyncio.to_thread(gpuops, "history", "ct-cli", "--inventory", str(inventory), env=env)
        idle = await asyncio.to_thread(gpuops, "history", "ct-idle", "--inventory", str(inventory), env=env)
        as_json = await asyncio.to_thread(gpuops, "history", "ct-cli", "--json", "--inventory", str(inventory),
                                          env=env)
    finally:
        await node.stop()
    assert health.returncode == 3, health.stderr  # a finding: exit 3, like status
    assert "pve19 GPU 1: Xid 79 once, GPU has fallen off the bus" in health.stdout
    assert health_json.returncode == 3, health_json.stderr
    data = json.loads(health_json.stdout)
    assert any(f.startswith("pve19 GPU 1: Xid 79 once, GPU has fallen off the bus") for f in data["findings"])
    assert sorted((g["target"], g["gpu"]) for g in data["gpus"]) == [("pve19", 0), ("pve19", 1)]
    assert all(g["memory_total_mib"] == 49140 for g in data["gpus"])
    assert "pve19: ECC off on GPU 0, 1; 1 Xid event(s) in 24 h (journalctl)" in health.stdout
    assert "`a-cli-2` on pve-gone:400 port 30000 could not be checked (node `pve-gone` is not in this inventory)" \
        in health.stdout
    assert history.returncode == 0, history.stderr
    assert "Attempts on pve19:319 (ct-cli)" in history.stdout
    assert idle.returncode == 0, idle.stderr
    assert "No attempts recorded yet on pve19:320 (ct-idle)" in idle.stdout and "a-cli-1" not in idle.stdout
    assert "a-cli-1" in history.stdout and "failed" in history.stdout and "Not enough memory" in history.stdout
    assert "sk-cli-secret" not in history.stdout + as_json.stdout  # a secret flag's value is never shown
    (record,) = json.loads(as_json.stdout)
    assert (record["id"], record["status"], record["error_line"]) == ("a-cli-1", "failed", "RuntimeError: Not enough "
                                                                                             "memory.")
    assert record["argv"] == ["--tp", "2", "--api-key", "<redacted>"] and record["transitions"][-1]["note"] == \
        "kv_pool_oom"


def test_budget_reads_a_local_draft_models_config(tmp_path):
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(
        (FIXTURES / "model-configs/meta-llama__Llama-3.2-1B-Instruct/config.json").read_text())
    args = ("budget", "--model", str(FIXTURES / "model-configs/meta-llama__Meta-Llama-3.1-8B-Instruct"),
            "--gpu", "A6000", "--json", "--", "--speculative-algorithm", "STANDALONE")
    read = json.loads(gpuops(*args, "--speculative-draft-model-path", str(draft)).stdout)
    line = next(x for x in read["lines"] if x["label"] == "draft weights")
    assert "standalone draft, from its config" in line["why"] and read["draft_weights_gib"] > 2.0
    # a Hub id is not read: the draft is estimated, and says so
    hub = json.loads(gpuops(*args[:-1], "EAGLE3", "--speculative-draft-model-path", "org/some-eagle3").stdout)
    assert "draft config not read" in next(x for x in hub["lines"] if x["label"] == "draft weights")["why"]
    (draft / "config.json").write_text("{not json")
    broken = gpuops(*args, "--speculative-draft-model-path", str(draft))
    assert broken.returncode == 2 and "cannot read the draft model's config" in broken.stderr


def long_serving_log(cases_path, lab_logs, decode_lines):
    """A server that started (the lab's real startup log), served for a long time (a real decode-batch line
    of sglang-14972, repeated), then hung (sglang-pr6555's watchdog, a full case): the cause is at the end."""
    cases = {c["id"]: c for c in (json.loads(x) for x in cases_path.read_text().splitlines() if x)}
    decode = cases["sglang-14972"]["log_excerpt"].splitlines()[0]
    return "\n".join([*(lab_logs / "ready.log").read_text().splitlines(), *[decode] * decode_lines,
                      *cases["sglang-pr6555"]["log_excerpt"].splitlines()]) + "\n"


def test_a_long_log_is_read_at_both_ends_with_the_files_own_line_numbers(tmp_path):
    log = tmp_path / "serving.log"
    log.write_text(long_serving_log(FIXTURES / "sglang-failures/cases.jsonl", ROOT / "bot/lab/data/logs", 20000))
    assert log.stat().st_size > 2 * 1024 * 1024  # past what is read whole
    out = gpuops("triage", str(log), "--json")
    found = json.loads(out.stdout)
    assert found["label"] == "watchdog_timeout", out.stdout
    lines = log.read_text().splitlines()
    for evidence in found["evidence"]:  # the line numbers are the file's, past the skipped middle
        assert lines[evidence["line_no"] - 1].strip() == evidence["text"]
    assert any(n.startswith("a long log: read its first 512 KiB and last 1536 KiB, skipping ") for n in found["notes"])
    # piped in, it is read the same way as it streams in (not held whole), with the same line numbers
    piped = subprocess.run([sys.executable, "-m", "bot.cli", "triage", "-", "--json"], cwd=ROOT, timeout=120,
                           input=log.read_bytes(), capture_output=True)
    assert json.loads(piped.stdout) == found


def test_the_excerpt_of_a_stream_is_what_the_containers_script_prints_for_the_file(tmp_path):
    import random

    from bot.core.argv import excerpt_of_chunks, log_excerpt

    log = (FIXTURES / "sglang-failures/cases.jsonl").read_bytes()  # real lines, some long
    rng = random.Random(4)
    for size in (0, 1, 99, 100, 101, 5000, len(log)):
        data = log[:size]
        (tmp_path / "x.log").write_bytes(data)
        script = subprocess.run(log_excerpt(str(tmp_path / "x.log"), 40, 60), capture_output=True, check=True)
        cuts = sorted(rng.sample(range(len(data) + 1), min(5, len(data) + 1)))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        assert excerpt_of_chunks(chunks, 40, 60) == script.stdout, size


def test_a_rotated_compressed_log_is_read_as_the_plain_one_at_both_ends(tmp_path):
    import bz2
    import gzip
    import lzma

    plain = tmp_path / "serving.log"
    plain.write_text(long_serving_log(FIXTURES / "sglang-failures/cases.jsonl", ROOT / "bot/lab/data/logs", 20000))
    want = json.loads(gpuops("triage", str(plain), "--json").stdout)
    assert want["label"] == "watchdog_timeout" and any(n.startswith("a long log") for n in want["notes"])
    data = plain.read_bytes()
    for suffix, compress in ((".1.gz", gzip.compress), (".2.xz", lzma.compress), (".3.bz2", bz2.compress)):
        rotated = tmp_path / f"serving.log{suffix}"
        rotated.write_bytes(compress(data))
        out = gpuops("triage", str(rotated), "--json")
        assert out.returncode == 0 and json.loads(out.stdout) == want, suffix
    # from stdin too
    piped = subprocess.run([sys.executable, "-m", "bot.cli", "triage", "-", "--json"], cwd=ROOT, timeout=120,
                           input=gzip.compress(data), capture_output=True)
    assert json.loads(piped.stdout) == want
    # a UTF-16 copy (PowerShell's `>`), piped in too, reads as the file itself
    utf16 = subprocess.run([sys.executable, "-m", "bot.cli", "triage", "-", "--json"], cwd=ROOT, timeout=120,
                           input="\ufeff".encode("utf-16-be") + data.decode().encode("utf-16-be"), capture_output=True)
    assert json.loads(utf16.stdout) == want
    # a copy cut short keeps what it holds, and says so
    cut = tmp_path / "cut.log.gz"
    whole = gzip.compress(data)
    cut.write_bytes(whole[:len(whole) // 2])
    out = gpuops("triage", str(cut), "--json")
    assert "the gzip data ends early; read the" in out.stderr and json.loads(out.stdout)["label"]
    # a compression it cannot read is a clear usage error with the command that can
    (tmp_path / "serving.log.zst").write_bytes(bytes.fromhex("28b52ffd") + b"\0" * 8)
    out = gpuops("triage", str(tmp_path / "serving.log.zst"))
    assert out.returncode == 2 and "zstd-compressed; decompress it first (e.g. `zstd -dc" in out.stderr
    assert f"{tmp_path / 'serving.log.zst'} | gpuops triage -`" in out.stderr
    # a zstd kernel log: the hint pipes it into --kernel-log, not into the log's place
    out = gpuops("triage", str(plain), "--kernel-log", str(tmp_path / "serving.log.zst"))
    assert out.returncode == 2 and f"| gpuops triage {plain} --kernel-log -`" in out.stderr


def test_budget_of_a_checkpoint_saved_without_its_mtp_layers_warns_before_a_nextn_launch(tmp_path):
    # Qwen3.6-27B's config (one MTP layer) beside an index whose weight map, like the REAP re-save's, has no mtp.*
    (tmp_path / "config.json").write_text((FIXTURES / "model-configs/Qwen__Qwen3.6-27B/config.json").read_text())
    keys = ["lm_head.weight", "model.language_model.embed_tokens.weight", "model.language_model.norm.weight"]
    weight_map = dict.fromkeys(keys, "model.safetensors")
    index = {"metadata": {"total_size": 55_000_000_000}, "weight_map": weight_map}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    seed = ["--tp", "2", "--mem-fraction-static", "0.88", "--context-length", "32768", "--speculative-algorithm",
            "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
            "4"]
    out = gpuops("budget", "--model", str(tmp_path), "--gpu", "RTX A6000", "--gpus", "2", "--", *seed)
    assert out.returncode == 3, out.stdout + out.stderr  # degraded
    assert "holds no MTP tensor" in " ".join(out.stdout.split())
    # the same index with the head's tensors (Qwen3.5's names) says nothing of it
    weight_map["mtp.fc.weight"] = "model-mtp.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    out = gpuops("budget", "--model", str(tmp_path), "--gpu", "RTX A6000", "--gpus", "2", "--", *seed)
    assert "holds no MTP tensor" not in " ".join(out.stdout.split())


def test_budget_of_a_hub_id_reads_the_local_hugging_face_cache(tmp_path):
    import os

    repo = tmp_path / "hub" / "models--meta-llama--Meta-Llama-3.1-8B-Instruct"
    revision = "0e9e39f249a16976918f6564b8830bc894c89659"
    (repo / "snapshots" / revision).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    (repo / "snapshots" / revision / "config.json").write_text(
        (FIXTURES / "model-configs/meta-llama__Meta-Llama-3.1-8B-Instruct/config.json").read_text())
    env = {**os.environ, "HF_HOME": str(tmp_path)}
    env.pop("HF_HUB_CACHE", None)
    out = gpuops("budget", "--model", "meta-llama/Meta-Llama-3.1-8B-Instruct", "--gpu", "RTX A6000", "--gpus", "1",
                 "--", "--tp", "1", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Meta-Llama-3.1-8B-Instruct on 1x RTX A6000")
    assert "8.03 B params" in out.stdout  # read from the snapshot's config.json
    out = gpuops("budget", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "RTX A6000", env=env)
    assert out.returncode == 2 and "neither a path here nor in the Hugging Face cache" in out.stderr
    assert str(tmp_path / "hub" / "models--meta-llama--Llama-3.3-70B-Instruct") in out.stderr


def test_an_unreachable_redis_is_one_clear_line_not_a_traceback(tmp_path):
    from bot.lab.nodes import free_port

    (tmp_path / "key").write_text("")
    (tmp_path / "known_hosts").write_text("")
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"nodes": {"pve5": {"host": "127.0.0.1", "key": "key",
                                                            "known_hosts": "known_hosts"}},
                                         "containers": {"sglang-a6000": {"node": "pve5", "vmid": 129}}}))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "REDIS_URL": f"redis://:s3cret-pass@127.0.0.1:{free_port()}/0"}  # nothing listens there
    for args in (("history",), ("incident", "sglang-a6000"), ("history", "sglang-a6000", "--json")):
        out = gpuops(*args, "--inventory", str(inventory), env=env)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.startswith("gpuops: Redis unavailable (ConnectionError)"), (args, out.stderr)
        assert "Traceback" not in out.stderr and "s3cret-pass" not in out.stderr + out.stdout
