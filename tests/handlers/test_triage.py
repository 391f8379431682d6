"""/sglang triage through the real app: the attempt's own log, evidence, and next experiments."""

import re

from bot.lab import fake_sglang
from bot.lab.nodes import container_path
from bot.views import blocks_to_text
from tests.handlers.test_launch_flow import SEED, buttons, model, post_with, wait_text


async def failed_launch(lab, scenario, flags="--mem-fraction-static 0.85"):
    """A forced launch that fails; returns its attempt once it is recorded as failed."""
    import asyncio

    before = {a.id for a in await lab.services.attempts.recent("pve5", 129, 50)}
    lab.nodes["pve5"].set_scenario(129, [scenario], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} {flags} --force", user_id="U0ADMIN")
    for _ in range(300):
        new = [a for a in await lab.services.attempts.recent("pve5", 129, 50) if a.id not in before]
        if new and new[0].status.value == "failed":
            await wait_text(lab, f"Attempt `{new[0].id}` failed", method="chat.postMessage")  # final edit made
            return new[0]
        await asyncio.sleep(0.1)
    raise AssertionError("the forced launch did not fail in time")


async def triaged(lab, attempt):
    """`/sglang triage <attempt>` in the channel: its answer, and that answer as text."""
    await lab.slash("/sglang", f"triage {attempt.id}")
    report = post_with(await wait_text(lab, "Triage of", method="chat.postMessage"), "Triage of")
    return report, blocks_to_text(report.blocks)


async def relaunched_by(lab, report, button, scenario="ready"):
    """Click the triage's ``button``; the attempt it launched, once that is ready."""
    choice = next(b for b in buttons(report) if b["text"]["text"] == button)
    lab.nodes["pve5"].set_scenario(129, [scenario], delay_s=0.02)
    await lab.click(choice["action_id"], choice["value"])
    await wait_text(lab, "*ready*")
    return (await lab.services.attempts.recent("pve5", 129, 1))[0]


async def test_triage_names_the_cause_not_the_sigquit_echo_and_offers_experiments(lab):
    attempt = await failed_launch(lab, "sigquit_after_oom")
    # the real MMU-fault Xid line, on this node's GPU 0: once an hour before the attempt (not its
    # concern), once while it ran
    from datetime import UTC, datetime

    from tests.handlers.test_scheduler import XID_LINES

    fault = XID_LINES[-1].split("XID: ", 1)[1].replace("PCI:0000:00:06", "PCI:0000:4f:00")
    state = lab.nodes["pve5"].read_state()
    state["kernel_log"] = [f"{datetime.fromtimestamp(at, UTC).strftime('%Y-%m-%dT%H:%M:%S+0000')} pve5 kernel: {fault}"
                           for at in (attempt.created_at - 3600, attempt.created_at + 1)]
    lab.nodes["pve5"].write_state(state)
    await lab.slash("/sglang", f"triage {attempt.id}", user_id="U0EVE")  # viewers may triage
    calls = await wait_text(lab, "Triage of", method="chat.postMessage")
    report = post_with(calls, "Triage of")
    text = blocks_to_text(report.blocks)
    assert (f"*Triage of `{attempt.id}`* on pve5:129 (sglang-a6000): *kv_pool_oom* "
            "(high confidence, startup: KV pool)") in text
    assert "Also in the log, not the cause: child_process_died" in text
    from pathlib import Path

    log_lines = Path(attempt.log_path).read_text().split("\n")
    number = next(i for i, x in enumerate(log_lines, 1) if x.startswith("RuntimeError: Not enough memory"))
    assert f"L{number}: RuntimeError: Not enough memory" in text  # the line number in the attempt's own log
    assert "no process holds GPU memory" in text and "sglang 0.5.9" in text and "free disk on" in text
    assert "kernel: pve5 GPU 0: Xid 31 once, GPU memory page fault (MMU fault) (application-caused)" in text
    assert report.params.get("thread_ts") == attempt.thread_ts  # answered in the attempt's thread
    choice = next(b for b in buttons(report) if "--mamba-ssm-dtype bfloat16" in b["text"]["text"])
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    await lab.click(choice["action_id"], choice["value"])
    await wait_text(lab, "*ready*")
    latest = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    assert latest.changes == ("+ --mamba-ssm-dtype bfloat16",)
    assert (await lab.services.attempts.get(attempt.id)).observed["triage"] == "kv_pool_oom"


async def test_a_log_written_by_another_run_is_refused_as_stale(lab):
    attempt = await failed_launch(lab, "kv_pool_oom")
    log = container_path(lab.nodes["pve5"], 129, "logs", f"{attempt.id}.log")
    from pathlib import Path

    old = Path(log).read_text().split("\n", 1)[1]
    Path(log).write_text("gpuops attempt a20200101-000000-0000 started 2020-01-01T00:00:00Z\n" + old)
    await lab.slash("/sglang", f"triage {attempt.id}")
    calls = await wait_text(lab, "stale log", method="chat.postMessage")
    text = blocks_to_text(post_with(calls, "stale log").blocks)
    assert "was not written by attempt" in text and "kv_pool_oom" not in text


def test_the_triage_reads_the_checkpoints_model_types_from_its_config():
    from bot.lab.nodes import LAB_DIR
    from bot.triage import _model_types

    config = (LAB_DIR / "data" / "models" / "Qwen3.6-27B" / "config.json").read_text()
    assert _model_types(config) == ("qwen3_5", "qwen3_5_text")
    assert _model_types("not json") == () and _model_types("[1, 2]") == ()


async def test_a_compiler_failure_offers_the_launch_without_torch_compile_as_a_button(lab):
    """Not a memory finding: the experiment is the label's, one flag, and the click relaunches through the
    pre-flight with only that change."""
    # flags the budget passes (the first test's remedy applied), so the relaunch's pre-flight lets it start
    attempt = await failed_launch(lab, "torch_compile_error", "--mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16")
    report, text = await triaged(lab, attempt)
    assert "*torch_compile_error*" in text and "`drop --enable-torch-compile`" in text
    latest = await relaunched_by(lab, report, "launch with drop --enable-torch-compile")
    assert latest.changes == ("- --enable-torch-compile (on)",) and "--enable-torch-compile" not in latest.argv


async def test_a_peer_access_failure_shows_the_p2p_matrix_and_offers_the_switch(lab):
    """GPUs whose chipset has no P2P (as 2x L4 report it): the triage reads the matrix in the container, names
    the pair, and the button relaunches with --disable-custom-all-reduce, which starts."""
    state = lab.nodes["pve5"].read_state()
    state["containers"]["129"]["smi"] = {"p2p": "CNS"}
    lab.nodes["pve5"].write_state(state)
    attempt = await failed_launch(lab, "p2p_unsupported", "--mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16")
    report, text = await triaged(lab, attempt)
    assert "*gpu_p2p_unsupported*" in text
    assert "peer access: GPU0<->GPU1: CNS (Chipset not supported)" in text
    latest = await relaunched_by(lab, report, "launch with --disable-custom-all-reduce")
    assert latest.changes == ("+ --disable-custom-all-reduce (on)",)


async def test_an_nccl_shared_memory_failure_shows_dev_shm_and_relaunches_with_that_transport_off(lab):
    """NCCL could not make its segment in /dev/shm. `@gpuops triage` in the attempt's thread reads the room there in
    the container and offers only the launch without that transport (not P2P: the log names its transport). The click
    relaunches with NCCL_SHM_DISABLE=1 in the server's environment, where the stand-in's NCCL then goes on, and that
    start confirms the triage's hypothesis in the thread's summary."""
    import shutil

    attempt = await failed_launch(lab, "nccl_shm_error", "--mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16")
    await lab.mention("triage", attempt.thread_ts)
    report = post_with(await wait_text(lab, "Triage of", method="chat.postMessage"), "Triage of")
    text = blocks_to_text(report.blocks)
    assert "*nccl_error*" in text
    free = shutil.disk_usage("/dev/shm").free / 2**30  # the lab container's /dev/shm is this machine's
    assert f"/dev/shm in the container: {free:.1f} GiB free of " in text
    assert "NCCL could not make a 9.2 MiB segment there" in text
    offered = [b["text"]["text"] for b in buttons(report)]
    assert "launch with NCCL_SHM_DISABLE=1" in offered and not any("NCCL_P2P_DISABLE" in b for b in offered)
    latest = await relaunched_by(lab, report, "launch with NCCL_SHM_DISABLE=1", scenario="nccl_shm_error")
    assert latest.changes == ("+ NCCL_SHM_DISABLE=1",) and latest.argv[0] == "NCCL_SHM_DISABLE=1"
    calls = await wait_text(lab, "confirmed by gpuops", method="chat.update")
    summary = blocks_to_text([c for c in calls if c.method == "chat.update"
                              and "Incident summary" in blocks_to_text(c.blocks)][-1].blocks)
    assert "the first cause is nccl_error" in summary
    assert f"{latest.id} with `+ NCCL_SHM_DISABLE=1` started: the failure went with it" in summary


async def test_a_piecewise_graph_failure_relaunches_without_that_runner_and_the_start_confirms_it(lab):
    """The piecewise CUDA-graph runner fails (a real server log): `@gpuops triage` in the attempt's thread names a
    capture failure and offers the launch without piecewise graphs, as SGLang's message says, not without CUDA graphs.
    The click relaunches with --disable-piecewise-cuda-graph, the stand-in then starts, and that start confirms the
    triage's hypothesis in the thread's summary."""
    attempt = await failed_launch(lab, "piecewise_graph_error", "--mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16")
    # the card's first error is the line the triage names (the log's first error line is the traceback's header,
    # cut in its frames: it says only that the scheduler raised)
    assert attempt.error_line.startswith("[2026-06-08 19:59:38] Piecewise CUDA Graph failed with error: ")
    await wait_text(lab, f"first error: `{attempt.error_line[:60]}")
    await lab.mention("triage", attempt.thread_ts)
    report = post_with(await wait_text(lab, "Triage of", method="chat.postMessage"), "Triage of")
    text = blocks_to_text(report.blocks)
    assert "*cuda_graph_capture_error*" in text and "piecewise" in text
    offered = [b["text"]["text"] for b in buttons(report)]
    assert "launch with --disable-piecewise-cuda-graph" in offered and not any("--disable-cuda-graph" in b
                                                                               for b in offered)
    latest = await relaunched_by(lab, report, "launch with --disable-piecewise-cuda-graph",
                                 scenario="piecewise_graph_error")
    assert latest.changes == ("+ --disable-piecewise-cuda-graph (on)",)
    calls = await wait_text(lab, "confirmed by gpuops", method="chat.update")
    summary = blocks_to_text([c for c in calls if c.method == "chat.update"
                              and "Incident summary" in blocks_to_text(c.blocks)][-1].blocks)
    assert "the first cause is cuda_graph_capture_error" in summary


async def test_a_port_conflict_names_the_process_holding_the_port_by_pid(lab):
    """The real line of a TCPStore that could not listen on port 42173: the triage reads, in the container,
    who listens there now (here: this test process, holding a socket on it) and says whose port it is."""
    import os
    import socket

    import pytest

    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        holder.bind(("127.0.0.1", 42173))
    except OSError:
        holder.close()
        pytest.skip("port 42173 is taken on this machine")
    holder.listen()
    try:
        attempt = await failed_launch(lab, "port_in_use", "--mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16")
        # an earlier launch on this container whose recorded process group is this test's (it holds the socket)
        from dataclasses import replace as changed

        earlier = changed(attempt, id="a20261203-000000-0001", pid=os.getpgid(0), thread_ts=None, message_ts=None)
        await lab.services.attempts.save(earlier)
        await lab.slash("/sglang", f"triage {attempt.id}")
        calls = await wait_text(lab, "Triage of", method="chat.postMessage")
        text = blocks_to_text(post_with(calls, "Triage of").blocks)
    finally:
        holder.close()
    assert "*port_in_use*" in text
    assert (f"port 42173 (not this launch's --port {attempt.port}: a port SGLang opened for its ranks or workers "
            f"(torch dist-init, NCCL, ZMQ)) is held by PID {os.getpid()}: ") in text
    assert "- attempt a20261203-000000-0001's process group: `/sglang stop a20261203-000000-0001`" in text
    # the next step moves the launch off the ranks' port, or stops the holder by its PID
    assert "--nccl-port" in text


async def test_an_unknown_name_or_attempt_is_answered_with_what_triage_takes(lab):
    _, ack, _ = await lab.slash("/sglang", "triage sglang-a600")
    assert "unknown container `sglang-a600` (containers: sglang-a6000; or `<node>:<vmid>` on pve5, pve6, pve7)" \
        in ack and "or an attempt id like" in ack
    _, ack, _ = await lab.slash("/sglang", "triage a20201231-235959-beef")
    assert ack == "reading the attempt's own log…"
    responded = await lab.standin.wait_for(lambda c: any(x.method == "response_url" for x in c), 20)
    text = next(c for c in responded if c.method == "response_url").params["text"]
    assert "no attempt `a20201231-235959-beef` is recorded" in text


async def test_triage_with_no_launched_attempt_says_which_case_it_is(lab):
    async def answer(text):
        before = len(lab.standin.calls)
        await lab.slash("/sglang", text)
        responded = await lab.standin.wait_for(lambda c: any(x.method == "response_url" for x in c[before:]), 20)
        return next(c for c in responded[before:] if c.method == "response_url").params["text"]

    assert "no attempt was launched from this channel: name a container or an attempt id" in await answer("triage")
    assert "no attempt is recorded on pve5:129 (sglang-a6000)" in await answer("triage sglang-a6000")
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85")
    await wait_text(lab, "Pre-flight refused", method="chat.postMessage")
    (refused,) = await lab.services.attempts.recent(count=5)
    text = await answer("triage sglang-a6000")
    assert f"attempt `{refused.id}` on pve5:129 started no server (failed: refused by pre-flight), so it has no log" \
        in text


async def test_a_containers_triage_reads_its_latest_launch_not_a_refusal_made_after_it(lab):
    """A launch fails; the next try is refused by its pre-flight (no server, no log: its answer said why). A triage of
    the container reads the failed launch's log, where before it answered that the refusal has no log."""
    failed = await failed_launch(lab, "kv_pool_oom")
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 3")
    await wait_text(lab, "Pre-flight refused", method="chat.postMessage")
    newest = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    assert newest.id != failed.id and newest.pid is None
    await lab.slash("/sglang", "triage sglang-a6000")
    report = blocks_to_text(post_with(await wait_text(lab, "Triage of", method="chat.postMessage"),
                                      "Triage of").blocks)
    assert f"*Triage of `{failed.id}`*" in report and "*kv_pool_oom*" in report


async def test_a_server_that_failed_after_a_long_run_is_triaged_from_its_logs_end(lab):
    """The log of a server that served for hours is megabytes long: the cause at its end is read (the
    log's head and tail, over SSH), and quoted with the file's own line numbers."""
    from pathlib import Path

    from tests.conftest import FIXTURES, ROOT
    from tests.edges.test_cli import long_serving_log

    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 "
                               "--mamba-ssm-dtype bfloat16 --force", user_id="U0ADMIN")
    await wait_text(lab, "*ready*")
    attempt = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    served = long_serving_log(FIXTURES / "sglang-failures/cases.jsonl", ROOT / "bot/lab/data/logs", 20000)
    with open(attempt.log_path, "a") as log:  # the server kept writing to its own log
        log.write(served.split("\n", 40)[-1])
    await lab.slash("/sglang", f"triage {attempt.id}", user_id="U0EVE")
    calls = await wait_text(lab, "Triage of", method="chat.postMessage")
    text = blocks_to_text(post_with(calls, "Triage of").blocks)
    assert f"*Triage of `{attempt.id}`* on pve5:129 (sglang-a6000): *watchdog_timeout*" in text
    lines = Path(attempt.log_path).read_text().split("\n")
    number = next(i for i, x in enumerate(lines, 1) if "Watchdog timeout (self.watchdog_timeout=300)" in x)
    assert number > 19000 and f"L{number}: " in text
    assert "a long log: read its first 512 KiB and last 1536 KiB" in text


async def test_gpuops_triage_in_a_terminal_gives_the_slack_answer_for_an_attempt_or_container(lab, tmp_path):
    """`gpuops triage <attempt|container>` reads the attempt's own log over SSH, as /sglang triage does, and
    records its label on the attempt; a name that is neither a file nor a target says what it looked for."""
    import asyncio
    import json
    from pathlib import Path

    from tests.edges.test_cli import gpuops

    attempt = await failed_launch(lab, "sigquit_after_oom")
    inventory = str(lab.workdir / "inventory.yml")
    env = {"PATH": "/usr/bin:/bin", "REDIS_URL": lab.services.settings.redis_url, "HOME": str(tmp_path)}
    by_id = await asyncio.to_thread(gpuops, "triage", attempt.id, "--inventory", inventory, env=env)
    assert by_id.returncode == 0, by_id.stderr
    assert (f"*Triage of `{attempt.id}`* on pve5:129 (sglang-a6000): *kv_pool_oom* "
            "(high confidence, startup: KV pool)") in by_id.stdout
    assert "Also in the log, not the cause: child_process_died" in by_id.stdout
    lines = Path(attempt.log_path).read_text().split("\n")
    number = next(i for i, x in enumerate(lines, 1) if x.startswith("RuntimeError: Not enough memory"))
    assert f"L{number}: RuntimeError: Not enough memory" in by_id.stdout
    assert "no process holds GPU memory" in by_id.stdout and "sglang 0.5.9" in by_id.stdout
    assert "`--mamba-ssm-dtype bfloat16` — " in by_id.stdout  # the budget engine's remedies, as in Slack
    relaunch = next(x for x in by_id.stdout.splitlines() if x.strip().startswith("/sglang launch sglang-a6000 "))
    assert relaunch.endswith("--mamba-ssm-dtype bfloat16") and "--force" not in relaunch  # what its button launches
    assert f"{SEED} --mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16" in relaunch  # the flags as typed
    saved = await lab.services.attempts.get(attempt.id)
    assert saved.observed["triage"] == "kv_pool_oom"
    audit = (await lab.services.store.audit_entries(5))[0]
    assert audit["action"] == "sglang.triage" and audit["user"].startswith("cli:") and audit["attempt"] == attempt.id

    by_container = await asyncio.to_thread(gpuops, "triage", "sglang-a6000", "--json", "--inventory", inventory,
                                           env=env)
    assert by_container.returncode == 0, by_container.stderr
    data = json.loads(by_container.stdout)
    assert data["attempt"] == attempt.id and data["finding"]["label"] == "kv_pool_oom" and data["stale"] is None
    assert data["finding"]["evidence"][0]["line_no"] == number
    assert any(r["change"] == "--mamba-ssm-dtype bfloat16" for r in data["remedies"])

    # a log another run wrote is refused as stale here too (exit 3: not diagnosed)
    Path(attempt.log_path).write_text("gpuops attempt a20200101-000000-0000 started 2020-01-01T00:00:00Z\n"
                                      + "\n".join(lines[1:]))
    stale = await asyncio.to_thread(gpuops, "triage", attempt.id, "--inventory", inventory, env=env)
    assert stale.returncode == 3 and "stale log" in stale.stdout and "was not written by attempt" in stale.stdout

    typo = await asyncio.to_thread(gpuops, "triage", "sglang-a600", "--inventory", inventory, env=env)
    assert typo.returncode == 2 and "no log file sglang-a600 here" in typo.stderr and "unknown container" in typo.stderr
    assert "Traceback" not in typo.stderr


async def test_recording_a_triage_keeps_what_the_follower_saved_meanwhile(redis_url):
    """The label is added to the attempt as it is in Redis when the triage ends, not to the copy read when it
    began: a launch that failed while its log was being read stays failed."""
    import time

    from bot.core.attempts import Attempt, AttemptStatus, Transition
    from bot.core.diagnosis import diagnose
    from bot.store import AttemptStore, Store, connect
    from bot.triage import TriageReport, record_triage

    client = connect(redis_url)
    attempts, store = AttemptStore(client), Store(client)
    now = time.time()
    began = Attempt("a20261204-060000-0001", "U1", "C1", "pve5", 129, "sglang-a6000", "/models/m", ("--tp", "2"),
                    30000, now, (Transition(AttemptStatus.LAUNCHING, now),), pid=4242)
    await attempts.save(began)
    await attempts.save(began.moved(AttemptStatus.FAILED, now + 5, "kv_pool_oom"))  # the follower, meanwhile
    finding = diagnose("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
    report = TriageReport(began, finding, None, 1, "GPUs now: -", {}, "free disk: unknown", (), None)
    await record_triage(attempts, store, report, "cli:root", "")
    saved = await attempts.get(began.id)
    assert saved.status is AttemptStatus.FAILED and saved.observed["triage"] == "kv_pool_oom"
    await client.aclose()


async def test_the_labs_terminal_answers_from_the_same_records_as_the_app(lab):
    """In `./dev lab`, a `gpuops ...` line runs the terminal command on the lab's inventory and Redis: the attempt
    the app recorded is there, and its triage is the one Slack gives."""
    attempt = await failed_launch(lab, "kv_pool_oom")
    status, text = await lab.terminal(["history", "sglang-a6000"])
    assert status == 0 and attempt.id in text and "failed" in text
    status, text = await lab.terminal(["triage", "sglang-a6000"])
    assert status == 0 and f"*Triage of `{attempt.id}`* on pve5:129 (sglang-a6000): *kv_pool_oom*" in text
    status, text = await lab.terminal(["lab"])
    assert status == 2 and "not from inside the lab" in text


async def test_triage_of_a_server_that_came_up_says_no_failure_and_proposes_no_relaunch(lab):
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 "
                               "--mamba-ssm-dtype bfloat16 --force", user_id="U0ADMIN")
    await wait_text(lab, "*ready*")
    attempt = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    await lab.slash("/sglang", f"triage {attempt.id}", user_id="U0EVE")
    calls = await wait_text(lab, "Triage of", method="chat.postMessage")
    report = post_with(calls, "Triage of")
    text = blocks_to_text(report.blocks)
    assert f"*Triage of `{attempt.id}`* on pve5:129 (sglang-a6000): *no_failure* (medium confidence, runtime)" in text
    assert "no failure in this log: the server reported ready" in text
    assert buttons(report) == []  # nothing to relaunch


async def test_memory_left_on_one_gpu_is_refused_by_sglangs_balance_check_and_triage_names_it(lab):
    """Leftover memory on one of a tp=2 launch's GPUs: the stand-in refuses at distributed init, as SGLang's
    balance check does, and the triage names the leftovers with the `/gpu free` that lists them."""
    import asyncio
    from pathlib import Path

    node = lab.nodes["pve5"]
    leftover = node.spawn_holder(0, "python3 -m sglang.launch_server", 30000, 129)  # an earlier server, on GPU 0 only
    state = node.read_state()
    node.set_scenario(129, [], delay_s=0.02)  # no forced outcome: the stand-in checks the balance itself
    before = {a.id for a in await lab.services.attempts.recent("pve5", 129, 50)}
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 --force",
                    user_id="U0ADMIN")
    attempt = None
    for _ in range(300):
        new = [a for a in await lab.services.attempts.recent("pve5", 129, 50) if a.id not in before]
        if new and new[0].status.value == "failed":
            attempt = new[0]
            break
        await asyncio.sleep(0.1)
    assert attempt is not None, "the forced launch over leftover memory did not fail"
    # the pre-flight said so before the launch: the budget knows SGLang's balance check
    forced = post_with(await wait_text(lab, "launching anyway", method="chat.postMessage"), "launching anyway")
    assert "The memory capacity is unbalanced" in blocks_to_text(forced.blocks)
    log = Path(attempt.log_path).read_text()
    assert "Load weight begin" not in log and "RuntimeError: The memory capacity is unbalanced" in log
    await lab.slash("/sglang", f"triage {attempt.id}", user_id="U0EVE")
    report = post_with(await wait_text(lab, "Triage of", method="chat.postMessage"), "Triage of")
    text = blocks_to_text(report.blocks)
    assert f"*Triage of `{attempt.id}`* on pve5:129 (sglang-a6000): *gpu_memory_occupied* (high confidence" in text
    # the numbers are the lab's: GPU 0 has 30000 MiB less free than GPU 1
    free = [(g["memory_total_mib"] - g.get("memory_used_mib", 1) - (30000 if g["index"] == 0 else 0)) / 1024
            for g in state["gpus"][:2]]
    assert f"one GPU had only {min(free):.2f} GB free against {max(free):.2f} GB" in text
    assert (f"GPU 0: 30001 MiB in use, held by PID {leftover} (CT 129) 30000 MiB: `/gpu free pve5:129` (this "
            "container) or `/gpu free pve5` (every container on the node) stops them by PID") in text
    assert "`/gpu status pve5:129` shows which processes hold" in text  # the next step names this container
    assert not buttons(report)  # no flag change fixes memory someone else holds
    for _ in range(50):  # the label is recorded once the answer is posted
        recorded = (await lab.services.attempts.get(attempt.id)).observed.get("triage")
        if recorded:
            break
        await asyncio.sleep(0.1)
    assert recorded == "gpu_memory_occupied"


async def test_an_oom_whose_torch_report_names_a_process_still_holding_memory_says_so(lab):
    """torch's report lists processes by host PID; the triage reads the node now and names the one that still
    holds memory (a real torch message, its PIDs set to the lab's own processes)."""
    from pathlib import Path

    from tests.conftest import FIXTURES

    attempt = await failed_launch(lab, "kv_pool_oom")
    node = lab.nodes["pve5"]
    other = node.spawn_holder(0, "python3 other_server.py", 1106, 131)  # another container's server, still there
    message = (FIXTURES / "other-logs" / "torch-oom-reports.txt").read_text().splitlines()[2]
    message = message.replace("Process 238746", f"Process {other}").replace("Process 244515", "Process 4194000")
    log_path = Path(attempt.log_path)
    header = log_path.read_text().split("\n", 1)[0]
    # the launch's own log, as a loader that ran out of memory would have written it
    log_path.write_text(f"{header}\n{message.split('] ', 2)[2]}\n")
    await lab.slash("/sglang", f"triage {attempt.id}", user_id="U0EVE")
    report = post_with(await wait_text(lab, "Triage of", method="chat.postMessage"), "Triage of")
    text = blocks_to_text(report.blocks)
    assert f"PID {other} (CT 131: python3 other_server.py) held 1.08 GiB when the launch ran out and still " \
           "holds 1106 MiB" in text
    assert "PID 4194000 held 468.00 MiB when the launch ran out; it holds no GPU memory now" in text
    assert "`/gpu free pve5` lists those PIDs" in text
    assert "*weight_load_oom*" in text and "3 other processes held 1.56 GiB" in text


async def test_a_driver_mismatch_shows_the_driver_the_node_runs(lab):
    """CUDA error 803 in the launch's own log (a real line): the triage names the driver family and shows the node's
    driver and CUDA as its nvidia-smi reports them, the versions the container must match."""
    from pathlib import Path

    from tests.conftest import FIXTURES

    attempt = await failed_launch(lab, "kv_pool_oom")
    log_path = Path(attempt.log_path)
    header = log_path.read_text().split("\n", 1)[0]
    log_path.write_text(f"{header}\n{(FIXTURES / 'other-logs' / 'cuda-803-lines.txt').read_text()}")
    _, text = await triaged(lab, attempt)
    assert "*cuda_driver_too_old*" in text and "--no-kernel-module" in text
    assert "pve5 runs NVIDIA driver 580.126.09, which runs CUDA up to 13.0" in text


async def test_cuda_failing_to_initialise_shows_whether_the_container_passes_the_uvm_device(lab):
    """torch's 'CUDA unknown error' warning in the launch's own log (real lines), in a container whose config lacks
    /dev/nvidia-uvm: the triage reads the config and says which node is missing."""
    from pathlib import Path

    from tests.conftest import FIXTURES

    attempt = await failed_launch(lab, "kv_pool_oom")
    log_path = Path(attempt.log_path)
    header = log_path.read_text().split("\n", 1)[0]
    log_path.write_text(f"{header}\n{(FIXTURES / 'other-logs' / 'cuda-init-unknown-error.txt').read_text()}")
    state = lab.nodes["pve5"].read_state()
    state["containers"]["129"]["devices"].remove("/dev/nvidia-uvm")
    lab.nodes["pve5"].write_state(state)
    _, text = await triaged(lab, attempt)
    assert "*cuda_driver_too_old*" in text and "pve5 runs NVIDIA driver 580.126.09" in text
    assert "CT 129 passes /dev/nvidia0, /dev/nvidia1, /dev/nvidiactl, /dev/nvidia-uvm-tools but not /dev/nvidia-uvm" \
        in text


async def test_cuda_failing_to_initialise_shows_what_the_container_has_in_place_of_the_uvm_device(lab):
    """The config passes /dev/nvidia-uvm, but the bind found no device on the node when the container started: the
    triage looks inside the container and names the empty file there."""
    from pathlib import Path

    from tests.conftest import FIXTURES

    attempt = await failed_launch(lab, "kv_pool_oom")
    log_path = Path(attempt.log_path)
    header = log_path.read_text().split("\n", 1)[0]
    log_path.write_text(f"{header}\n{(FIXTURES / 'other-logs' / 'cuda-init-unknown-error.txt').read_text()}")
    state = lab.nodes["pve5"].read_state()
    state["containers"]["129"]["dev_nodes"]["/dev/nvidia-uvm"] = ["regular empty file", 0, 0]
    lab.nodes["pve5"].write_state(state)
    _, text = await triaged(lab, attempt)
    assert "*cuda_driver_too_old*" in text
    assert "inside CT 129, /dev/nvidia-uvm (regular empty file): not the device node(s) its config passes" in text


async def test_a_rank_asking_for_a_gpu_the_container_cannot_see_shows_the_indices_against_the_nodes_gpus(lab):
    """`invalid device ordinal` in the launch's own log (real lines): the triage names the GPUs the launch uses
    (tp 2 from index 1) against the node's two, and where the container's passthrough is configured."""
    from pathlib import Path

    from tests.conftest import FIXTURES

    attempt = await failed_launch(lab, "kv_pool_oom", flags="--mem-fraction-static 0.85 --base-gpu-id 1")
    log_path = Path(attempt.log_path)
    header = log_path.read_text().split("\n", 1)[0]
    lines = (FIXTURES / "other-logs" / "invalid-device-ordinal.txt").read_text().splitlines()
    log_path.write_text(f"{header}\n{lines[0]}\n{lines[1]}\n")
    _, text = await triaged(lab, attempt)
    assert "*gpu_index_out_of_range*" in text
    assert "the launch uses 2 GPU(s) (tp x pp x dp), indices 1..2: the process must see at least 3" in text
    assert "pve5 has 2 GPU(s) (nvidia-smi on the node)" in text
    assert "`pct config 129` on pve5 passes 2 GPU device(s) into the container (/dev/nvidia0, /dev/nvidia1)" in text


async def test_an_uncorrectable_ecc_error_is_hardware_with_the_nodes_ecc_counters_beside_it(lab):
    """The launch's log ends in torch's uncorrectable ECC error (a real line): the triage names a hardware fault, not
    the flags, and reads the node's ECC counters now: GPU 1 with its errors and a pending remapped row."""
    from pathlib import Path

    from tests.conftest import FIXTURES

    attempt = await failed_launch(lab, "kv_pool_oom")
    log_path = Path(attempt.log_path)
    header = log_path.read_text().split("\n", 1)[0]
    ecc = next(row.split("\t")[1] for row in (FIXTURES / "other-logs" / "thread-first-cause-lines.tsv").read_text()
               .splitlines() if row.startswith("gpu_hardware_error\t"))
    log_path.write_text(f"{header}\n{ecc}\n")
    state = lab.nodes["pve5"].read_state()
    state["gpus"][1].update(ecc_mode="Enabled", ecc_mode_pending="Enabled", ecc_uncorrected_volatile=3,
                            remapped_pending="Yes")
    lab.nodes["pve5"].write_state(state)
    _, text = await triaged(lab, attempt)
    assert "*gpu_hardware_error*" in text and "hardware fault" in text
    assert ("ECC counters now: pve5 GPU 1: a remapped row is pending — reset the GPU (stop its processes first) to "
            "activate it; pve5 GPU 1: 3 uncorrectable ECC error(s) since the driver loaded") in text


async def test_a_launch_the_kernel_killed_is_named_from_the_nodes_kernel_log(lab):
    # the stand-in's scheduler is killed at the container's memory limit while its weights load: the kernel writes
    # the kill into the node's log, the launcher's log says only that rank 0 died with exit code -9
    attempt = await failed_launch(lab, "host_oom_kill")
    # the launch's own failure already says so: the follower read the node's kernel log when the log said nothing
    assert attempt.error_line.startswith("killed by the kernel's OOM killer: CT 129 reached its memory limit (PID ")
    assert attempt.error_line.endswith("; the log's last word: [" + attempt.error_line.split("last word: [", 1)[1])
    assert "Rank 0 scheduler is dead" in attempt.error_line
    final = [blocks_to_text(c.blocks) + str(c.params.get("text", "")) for c in lab.standin.calls
             if f"Attempt `{attempt.id}` failed" in blocks_to_text(c.blocks) + str(c.params.get("text", ""))]
    assert final and "killed by the kernel's OOM killer: CT 129 reached its memory limit" in final[-1]
    await lab.slash("/sglang", f"triage {attempt.id}")
    calls = await wait_text(lab, "Triage of", method="chat.postMessage")
    text = blocks_to_text(post_with(calls, "Triage of").blocks)
    assert f"*Triage of `{attempt.id}`* on pve5:129 (sglang-a6000): *host_oom_kill* (high confidence" in text
    assert "in CT 129 while this launch ran: CT 129 reached its memory limit" in text
    assert "`pct set 129 -memory &lt;MiB&gt;`" in text or "`pct set 129 -memory <MiB>`" in text
    assert "the rank 0 scheduler exited with code -9: SIGKILL" in text  # the log's own reading, kept as a note
    assert "kernel: pve5: the kernel's OOM killer killed PID" in text and "in CT 129, holding 45.0 GiB" in text
    import asyncio

    for _ in range(50):  # recorded on the attempt after the answer is posted
        if (await lab.services.attempts.get(attempt.id)).observed.get("triage") == "host_oom_kill":
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the triage's label was not recorded on the attempt")


async def test_after_an_oom_kill_the_next_preflight_warns_about_the_containers_limit(lab):
    from tests.handlers.test_launch_flow import SEED as FLAGS

    await failed_launch(lab, "host_oom_kill")
    # a launch the budget refuses, so the checklist is posted without starting SGLang
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {FLAGS} --mem-fraction-static 0.85")
    text = blocks_to_text(post_with(calls, "Pre-flight refused").blocks)
    assert "container memory" in text and "CT 129: RAM limit 64.0 GiB (+0.5 GiB swap)" in text
    assert "killed PID" in text and "at this container's limit" in text and "`pct set 129 -memory" in text
    # the limit raised (the lab's `pct config` answers from the container's record): the warning names the new limit
    state = lab.nodes["pve5"].read_state()
    state["containers"]["129"]["memory_mib"] = 131072
    lab.nodes["pve5"].write_state(state)
    # (another command: the same one again within seconds is a double click, answered once)
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {FLAGS} --mem-fraction-static 0.84")
    assert "CT 129: RAM limit 128.0 GiB" in blocks_to_text(post_with(calls, "Pre-flight refused").blocks)


async def test_a_context_longer_than_the_models_is_named_and_its_computed_length_relaunches(lab):
    """The pre-flight refuses it with SGLang's own ValueError; an admin forces it, SGLang refuses it before loading,
    and the triage names that refusal (not an unknown) with the budget's --context-length as the button."""
    attempt = await failed_launch(lab, "auto", flags="--tp 2 --context-length 524288 --mem-fraction-static 0.88 "
                                                     "--mamba-ssm-dtype bfloat16")
    # the card's and the history's first error is the exception the traceback ends in, not its header
    assert attempt.error_line.startswith("ValueError: User-specified context_length (524288) is greater")
    report, text = await triaged(lab, attempt)
    assert (f"*Triage of `{attempt.id}`* on pve5:129 (sglang-a6000): *context_length_over_model* "
            "(high confidence") in text
    assert "User-specified context_length (524288) is greater than the derived context_length (262144)" in text
    latest = await relaunched_by(lab, report, "launch with --context-length 262144", scenario="auto")
    assert latest.changes == ("--context-length 524288 -> 262144",)


async def test_a_launch_still_starting_or_stopped_early_is_not_triaged_as_a_hang(lab):
    """A triage seconds into the weight load finds a launch still starting, and after a person stops it there, one
    stopped on request: not "a hang while loading weights" (the follower's stall timeout, 10 min, makes a hang)."""
    from pathlib import Path

    from tests.handlers.test_launch_flow import confirmed_stop

    stand_in = Path(fake_sglang.__file__)
    lab.nodes["pve5"].set_scenario(129, ["hang"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2 --mem-fraction-static 0.88 "
                               "--mamba-ssm-dtype bfloat16")
    await wait_text(lab, "*launching*: loading weights")
    (attempt,) = await lab.services.attempts.recent("pve5", 129, 1)
    await lab.slash("/sglang", f"triage {attempt.id}")
    running = blocks_to_text(post_with(await wait_text(lab, "*still_starting*", method="chat.postMessage"),
                                       "*still_starting*").blocks)
    assert "still starting: its last line, " in running and "came after weight loading began" in running
    assert "hang" not in running.replace("not a hang yet", "").replace("10 min without output is one", "")
    # where its process waits now, read by py-spy in the container: the stand-in's own frame
    hang_line = max(n for n, line in enumerate(stand_in.read_text().splitlines(), 1)  # its hang's, the last one
                    if "time.sleep(3600)" in line)
    assert "Where its processes are now (py-spy, innermost frame first):" in running
    assert re.search(rf"PID {attempt.pid} .*sglang\.launch_server.*\n  MainThread \(idle\): main "
                     rf"\(\S*fake_sglang\.py:{hang_line}\) <- ", running), running
    # where it was is not how it ended: no label is kept for its thread to compare failures by
    assert "triage" not in (await lab.services.attempts.get(attempt.id)).observed
    done = await confirmed_stop(lab, "sglang-a6000")
    assert "(SIGTERM)" in done
    await lab.slash("/sglang", f"triage {attempt.id}")
    stopped = blocks_to_text(post_with(await wait_text(lab, "*stopped_on_request*", method="chat.postMessage"),
                                       "*stopped_on_request*").blocks)
    assert "stopped on request " in stopped and "after weight loading began: nothing in the log names a failure" \
        in stopped
    assert "a hang while loading weights" not in stopped
    assert "py-spy" not in stopped  # its server has ended: nothing to read
    assert (await lab.services.attempts.get(attempt.id)).observed["triage"] == "stopped_on_request"


async def test_gpus_an_earlier_launchs_server_holds_are_named_as_that_launch_to_stop(lab):
    """The seed story's trap: an earlier attempt's server still holds the GPUs when the next launch (forced past
    its pre-flight) is refused by SGLang's memory check. The triage names that attempt as what holds them and its
    `/sglang stop`, where it named a PID and `/gpu free` (which leaves a launch's processes to its stop)."""
    from tests.handlers.test_scheduler import ready_server

    serving = await ready_server(lab)
    attempt = await failed_launch(lab, "gpu_memory_occupied")
    report, text = await triaged(lab, attempt)
    assert "*gpu_memory_occupied*" in text, text
    held = f"PID {serving.pid} (CT 129) "
    assert f"<- {serving.id} (ready, port 30000): `/sglang stop {serving.id}` stops the launch holding it" in text
    assert text.count(held) >= 2 and "/gpu free" not in text, text  # the GPUs-now line names it too
    assert f"{held}" in text and f"MiB <- {serving.id} (ready, port 30000)" in text
    assert (f"*Next experiment:* `/sglang stop {serving.id}` stops the launch holding the GPUs; then relaunch "
            "unchanged") in text


async def test_a_kv_pool_failure_whose_budget_says_the_launch_starts_is_offered_the_same_launch_again(lab):
    """The log says the KV pool did not fit, but the same launch's budget on the clean GPUs says it starts (the
    lab's replayed log is an AWQ load, so its measured weights are not used): the triage says why it computes no
    change, and its button launches the same flags again, which tells the two readings apart; before, it gave only
    the label's advice and no button."""
    flags = "--mem-fraction-static 0.88 --context-length 32768 --mamba-ssm-dtype bfloat16"
    attempt = await failed_launch(lab, "kv_pool_oom", flags)
    report, text = await triaged(lab, attempt)
    assert "*kv_pool_oom*" in text
    assert "1. `the same flags` — the budget of this launch on the GPUs as they are now says it starts (" in text, text
    assert [b["text"]["text"] for b in buttons(report)] == ["launch with the same flags"]
    again = await relaunched_by(lab, report, "launch with the same flags")
    from bot.core.attempts import user_flags

    assert again.id != attempt.id and user_flags(again.argv) == user_flags(attempt.argv)
