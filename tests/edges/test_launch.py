"""Launch, follow, stop and free through real SSH, a real Redis and the lab's SGLang stand-in."""

import sys
import time
from dataclasses import replace

import pytest

from bot.config import parse_inventory
from bot.core.argv import launched_process, log_excerpt, pct_exec
from bot.core.attempts import AttemptStatus
from bot.core.inventory import resolve_targets
from bot.core.startup_log import Stage
from bot.core.status import Thresholds
from bot.errors import UsageError
from bot.lab.nodes import container_path
from bot.launch import (
    LaunchRequest,
    LaunchSettings,
    exit_report,
    follow,
    free,
    free_plan,
    gpu_holders,
    preflight,
    reconcile,
    start,
    stop,
)
from bot.ssh import SshTransport
from bot.store import AttemptStore, connect

SEED = ("--tp", "2", "--context-length", "65536", "--enable-torch-compile", "--speculative-algorithm", "NEXTN",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--mamba-full-memory-ratio", "0.5")
FAST = LaunchSettings(poll_s=0.2, stop_timeout_s=5)


@pytest.fixture
async def setup(pve_node, redis_url):
    inventory = parse_inventory({
        "nodes": {"pve5": pve_node.inventory_entry()},
        "containers": {"sglang-a6000": {"node": "pve5", "vmid": 129, "python": sys.executable,
                                        "log_dir": container_path(pve_node, 129, "logs")}},
    }, "test")
    transport = SshTransport(inventory)
    client = connect(redis_url)
    await client.flushall()
    store = AttemptStore(client)
    yield pve_node, inventory, transport, store
    await transport.close()
    await client.aclose()


def request(node, *flags, user="U0OPS"):
    model = container_path(node, 129, "models", "Qwen3.6-27B")
    return model, (*flags,)


async def run_launch(node, inventory, transport, store, flags, force=False):
    target = resolve_targets("sglang-a6000", inventory)[0]
    model = container_path(node, 129, "models", "Qwen3.6-27B")
    req = LaunchRequest(target, model, tuple(flags), "U0OPS", "C0LAB", force=force)
    pre = await preflight(transport, inventory, store, req, Thresholds(), FAST)
    return req, pre


async def collect(attempt, inventory, transport, store):
    seen = []

    async def notify(a, progress, final):
        seen.append((progress.stage, final, a.status))

    final = await follow(transport, inventory, store, attempt, notify, FAST, "replica-test")
    return final, seen


async def test_preflight_refuses_the_seed_launch_at_085_with_the_real_reasons(setup):
    node, inventory, transport, store = setup
    _, pre = await run_launch(node, inventory, transport, store, (*SEED, "--mem-fraction-static", "0.85"))
    checks = {c.name: c for c in pre.checks}
    assert pre.blocked
    assert checks["memory budget"].result == "fail" and "Not enough memory" in checks["memory budget"].detail
    assert checks["GPUs clean"].result == "ok" and checks["port free"].result == "ok"
    assert checks["SGLang supports the model"].result == "warn"  # 0.5.9 < 0.5.10
    assert checks["transformers"].result == "ok" and "config written by 4.57.1" in checks["transformers"].detail


async def test_an_sglang_variable_the_installed_sglang_never_mentions_is_named_before_the_launch(setup):
    """The launch's SGLANG_* words against the names the container's SGLang source mentions, read over SSH: a typo
    would be ignored by SGLang without a word, so the pre-flight names it and what it likely meant."""
    node, inventory, transport, store = setup
    flags = (*SEED, "--mem-fraction-static", "0.88")
    _, typo = await run_launch(node, inventory, transport, store, ("SGLANG_ENABLE_SPEC_V3=1", *flags))
    check = next(c for c in typo.checks if c.name == "environment known")
    assert check.result == "warn"
    assert check.detail == ("SGLang 0.5.9 never mentions `SGLANG_ENABLE_SPEC_V3` (did you mean "
                            "`SGLANG_ENABLE_SPEC_V2`?): it would be ignored")
    _, known = await run_launch(node, inventory, transport, store, ("SGLANG_ENABLE_SPEC_V2=1", *flags))
    check = next(c for c in known.checks if c.name == "environment known")
    assert (check.result, check.detail) == ("ok", "SGLang 0.5.9 here knows SGLANG_ENABLE_SPEC_V2")
    # no SGLang variable, nothing to check (NCCL's are read by NCCL)
    _, other = await run_launch(node, inventory, transport, store, ("NCCL_P2P_DISABLE=1", *flags))
    assert "environment known" not in {c.name for c in other.checks}


async def test_the_port_check_binds_as_the_server_will_and_names_what_stops_it(setup):
    """The server binds its --host and --port only once its model is loaded: the pre-flight binds them first, in the
    container over SSH. A wildcard --host is stopped by a listener on any one address (the connect to 127.0.0.1 it
    did before found 127.0.0.2's listener free), and an address the container lacks is named, not called free."""
    import socket

    from bot.lab.nodes import free_port

    node, inventory, transport, store = setup
    port = free_port()
    flags = (*SEED, "--mem-fraction-static", "0.88", "--mamba-ssm-dtype", "bfloat16", "--port", str(port))
    with socket.socket() as holder:  # another server, listening on one loopback address
        holder.bind(("127.0.0.2", port))
        holder.listen()
        _, wildcard = await run_launch(node, inventory, transport, store, (*flags, "--host", "0.0.0.0"))
        _, other = await run_launch(node, inventory, transport, store, (*flags, "--host", "127.0.0.3"))
    checks = {c.name: c for c in wildcard.checks}
    assert (checks["port free"].result, checks["port free"].detail) == ("fail", f"0.0.0.0:{port} is already in use")
    assert wildcard.blocked
    assert {c.name: c for c in other.checks}["port free"].detail == f"127.0.0.3:{port} is free"
    # TEST-NET-1 (RFC 5737), never a local address: only bound, so no packet goes out
    _, missing = await run_launch(node, inventory, transport, store, (*flags, "--host", "192.0.2.1"))
    check = {c.name: c for c in missing.checks}["port free"]
    assert check.result == "fail" and check.detail == (
        f"the server could not listen on 192.0.2.1:{port} in the container ([Errno 99] Cannot assign requested "
        "address): --host must be an address the container has, or 0.0.0.0 for all")
    _, free = await run_launch(node, inventory, transport, store, flags)
    assert {c.name: c for c in free.checks}["port free"].detail == f"127.0.0.1:{port} is free"


async def test_a_stopped_container_is_named_as_stopped_by_the_preflight_and_by_any_command_in_it(setup):
    """`pct exec` in a stopped container dies with Proxmox's "CT 129 not running": the pre-flight says what that
    means, where it quoted pct's exit 255 twice (the container check and the port check)."""
    from bot.core.argv import pct_exec
    from bot.errors import ContainerDown

    node, inventory, transport, store = setup
    state = node.read_state()
    state["containers"]["129"]["status"] = "stopped"
    node.write_state(state)
    _, pre = await run_launch(node, inventory, transport, store, (*SEED, "--mem-fraction-static", "0.88"))
    stopped = ("container 129 on pve5 is not running, so nothing in it holds a GPU (`pct start 129` on pve5 starts "
               "it; pct: CT 129 not running)")
    checks = {c.name: c for c in pre.checks}
    assert pre.blocked and (checks["container answers"].result, checks["container answers"].detail) == (
        "fail", stopped)
    assert "port free" not in checks
    with pytest.raises(ContainerDown) as down:  # any command there: a log read, a stop's lookup
        await transport.run("pve5", pct_exec(129, ("cat", "/etc/hostname")))
    assert down.value.user_message == down.value.last_word == stopped and down.value.exit_status == 255
    assert down.value.stopped
    with pytest.raises(ContainerDown) as missing:
        await transport.run("pve5", pct_exec(999, ("true",)))
    assert missing.value.user_message.startswith("pve5 has no container 999 (pct: Configuration file")
    assert not missing.value.stopped


def test_transformers_older_than_the_checkpoint_is_a_warning():
    from bot.budget import PlannedBudget
    from bot.launch import _transformers_check

    planned = PlannedBudget(None, "t", (), {"transformers": "4.51.3"},  # type: ignore[arg-type]
                            model_transformers="4.57.1")
    check = _transformers_check(planned)
    assert check.result == "warn" and "older than the 4.57.1" in check.detail


async def test_launch_becomes_ready_and_stop_returns_the_memory(setup):
    node, inventory, transport, store = setup
    node.set_scenario(129, ["ready"], delay_s=0.25)  # slower than the 0.2 s poll: every stage is seen
    _, pre = await run_launch(node, inventory, transport, store,
                              ("--tp", "2", "--mem-fraction-static", "0.88", "--mamba-ssm-dtype", "bfloat16"))
    assert not pre.blocked, pre.checks
    attempt = await start(transport, inventory, store, pre, FAST, time.time())
    assert attempt.status is AttemptStatus.LAUNCHING and attempt.pid and attempt.log_path.endswith(f"{attempt.id}.log")
    final, seen = await collect(attempt, inventory, transport, store)
    assert final.status is AttemptStatus.READY, final.transitions
    stages = [s for s, _, _ in seen]
    assert Stage.WEIGHTS_LOADED in stages and Stage.KV_ALLOCATED in stages and stages[-1] is Stage.READY
    assert final.observed["kv_tokens"] == 422310  # read from the attempt's own log
    assert "generated ' OK.'" in final.transitions[-1].note
    holders, _ = await gpu_holders(transport, inventory, resolve_targets("pve5", inventory)[0])
    assert {h.pid for h in holders} == {attempt.pid}
    result = await stop(transport, inventory, store, final, FAST, "U0OPS")
    assert result.attempt.status is AttemptStatus.STOPPED and result.signal_used == "SIGTERM"
    assert result.memory_note.startswith("memory returned")
    holders, _ = await gpu_holders(transport, inventory, resolve_targets("pve5", inventory)[0])
    assert holders == []


async def test_failed_launch_reports_its_first_error_line(setup):
    node, inventory, transport, store = setup
    node.set_scenario(129, ["kv_pool_oom"], delay_s=0.02)
    req, pre = await run_launch(node, inventory, transport, store, (*SEED, "--mem-fraction-static", "0.85"),
                                force=True)
    attempt = await start(transport, inventory, store, pre, FAST, time.time())
    assert attempt.forced
    final, _ = await collect(attempt, inventory, transport, store)
    assert final.status is AttemptStatus.FAILED
    assert final.error_line == "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    assert final.observed["weights_gib"] == 14.45
    assert await store.lock_holder("pve5", 129) is None  # released


async def test_a_label_recorded_while_the_launch_ran_is_kept_when_it_finishes(setup):
    """A triage of a launch still running (a stalled one) records its label on the attempt; the follower's final
    save keeps it beside the log's readings."""
    import asyncio
    from dataclasses import replace

    node, inventory, transport, store = setup
    node.set_scenario(129, ["kv_pool_oom"], delay_s=0.3)
    req, pre = await run_launch(node, inventory, transport, store, (*SEED, "--mem-fraction-static", "0.85"),
                                force=True)
    attempt = await start(transport, inventory, store, pre, FAST, time.time())
    following = asyncio.ensure_future(collect(attempt, inventory, transport, store))
    await asyncio.sleep(0.5)
    running = await store.get(attempt.id)
    assert running is not None and running.status is AttemptStatus.LAUNCHING
    await store.save(replace(running, observed={**running.observed, "triage": "unknown"}))
    final, _ = await following
    assert final.status is AttemptStatus.FAILED
    assert final.observed["triage"] == "unknown" and final.observed["weights_gib"] == 14.45


async def test_lock_refuses_a_second_launch_and_names_the_holder(setup):
    node, inventory, transport, store = setup
    node.set_scenario(129, ["hang"], delay_s=0.02)
    _, pre = await run_launch(node, inventory, transport, store, ("--tp", "2", "--mem-fraction-static", "0.88",
                                                                  "--mamba-ssm-dtype", "bfloat16"))
    first = await start(transport, inventory, store, pre, FAST, time.time())
    with pytest.raises(UsageError) as err:
        await start(transport, inventory, store, pre, FAST, time.time())
    assert f"attempt {first.id}" in err.value.user_message
    _, again = await run_launch(node, inventory, transport, store, ("--tp", "2"))
    assert any(c.name == "no launch in progress" and c.result == "fail" for c in again.checks)
    await stop(transport, inventory, store, first, FAST, "U0OPS")


async def test_restart_reconciles_live_and_dead_attempts(setup):
    node, inventory, transport, store = setup
    node.set_scenario(129, ["hang", "hang"], delay_s=0.02)
    flags = ("--tp", "2", "--mem-fraction-static", "0.88", "--mamba-ssm-dtype", "bfloat16")
    _, pre = await run_launch(node, inventory, transport, store, flags)
    live = await start(transport, inventory, store, pre, FAST, time.time())
    await store.unlock("pve5", 129, live.id)
    dead = await start(transport, inventory, store, pre, FAST, time.time() + 1)
    await stop(transport, inventory, store, dead, FAST, "test")
    # the bot "crashed" before recording the stop: `dead` is still launching in Redis, its process gone
    stopped = await store.get(dead.id)
    await store.save(replace(stopped, transitions=stopped.transitions[:-1]))
    assert (await store.get(dead.id)).status is AttemptStatus.LAUNCHING
    resumed = await reconcile(transport, inventory, store)
    assert [a.id for a in resumed] == [live.id]
    assert (await store.get(dead.id)).status is AttemptStatus.ORPHANED
    await stop(transport, inventory, store, live, FAST, "test")


class WritesMeanwhile(SshTransport):
    """The real transport, where another writer changes the history once while one command's answer comes back:
    a write placed exactly where a real one (a terminal's stop, a person's triage) can land."""

    def __init__(self, inventory, argv, write):
        super().__init__(inventory)
        self.argv, self.write, self.wrote = tuple(argv), write, False

    async def run(self, node, argv, **kwargs):
        result = await super().run(node, argv, **kwargs)
        if tuple(argv) == self.argv and not self.wrote:
            self.wrote = True
            await self.write()
        return result


async def test_a_restart_keeps_a_stop_recorded_while_it_looked_for_the_process(setup):
    """The bot restarts while a terminal stops the launch: the stop recorded while the restart looked for the
    process is what the history keeps (the restart does not write its older copy over it as orphaned)."""
    node, inventory, transport, store = setup
    node.set_scenario(129, ["hang"], delay_s=0.02)
    _, pre = await run_launch(node, inventory, transport, store,
                              ("--tp", "2", "--mem-fraction-static", "0.88", "--mamba-ssm-dtype", "bfloat16"))
    attempt = await start(transport, inventory, store, pre, FAST, time.time())
    stopped = await stop(transport, inventory, store, attempt, FAST, "cli:root")
    launching = replace(stopped.attempt, transitions=stopped.attempt.transitions[:-1])
    await store.save(launching)  # as it was when the terminal's stop began

    async def terminal_stop():
        await store.change(attempt.id, lambda _: stopped.attempt)

    racing = WritesMeanwhile(inventory, pct_exec(129, launched_process(attempt.pid, attempt.log_path)), terminal_stop)
    try:
        assert await reconcile(racing, inventory, store) == []
    finally:
        await racing.close()
    assert racing.wrote
    kept = await store.get(attempt.id)
    assert kept.status is AttemptStatus.STOPPED and kept.transitions[-1].note.startswith("stopped by cli:root")


async def test_an_exit_report_keeps_a_label_recorded_while_it_read_the_log(setup):
    """A server that exited is triaged by a person while the exit's report reads its log: the report's first error
    line is added to the record as it is then, with the person's label kept."""
    node, inventory, transport, store = setup
    node.set_scenario(129, ["kv_pool_oom"], delay_s=0.02)
    _, pre = await run_launch(node, inventory, transport, store, (*SEED, "--mem-fraction-static", "0.85"),
                              force=True)
    final, _ = await collect(await start(transport, inventory, store, pre, FAST, time.time()), inventory, transport,
                             store)
    exited = replace(final, error_line=None)  # as the sampler read it: exited, no error line recorded yet
    await store.save(exited)

    async def triage():
        await store.change(final.id, lambda a: replace(a, observed={**a.observed, "triage": "kv_pool_oom"}))

    racing = WritesMeanwhile(inventory, pct_exec(129, log_excerpt(final.log_path)), triage)
    try:
        report = await exit_report(racing, store, exited)
    finally:
        await racing.close()
    assert racing.wrote
    kept = await store.get(final.id)
    assert kept.observed["triage"] == "kv_pool_oom"
    assert kept.error_line == report.attempt.error_line == \
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."


async def test_free_kills_only_the_listed_pids_still_holding_memory(setup):
    node, inventory, transport, store = setup
    mine = node.spawn_holder(0, "python3 stray.py", 30000, 129)
    other = node.spawn_holder(1, "python3 train.py", 20000, 131)
    holders, _ = await gpu_holders(transport, inventory, resolve_targets("pve5", inventory)[0])
    assert {h.pid for h in holders} == {mine, other}
    started = {h.pid: h.started for h in holders}
    result = await free(transport, inventory, "pve5", ((mine, started[mine]), (999_999, 1)), FAST)
    assert result.killed == (mine,)
    assert result.skipped == ("PID 999999 no longer holds GPU memory or a GPU open: left alone",)
    import os

    os.kill(other, 0)  # the unlisted process is untouched
    node.add_process  # noqa: B018


async def test_freeing_a_container_stops_only_its_own_processes_that_hold_a_gpu_open(setup):
    """Memory held by no process: what holds a GPU open is listed for the container named, not another container's
    process nor NVIDIA's own service; a confirmed one that no longer holds the GPU open by the click is left alone."""
    node, inventory, transport, store = setup
    node.spawn_device_holder("nvidia-cuda-mps-server", None, ("/dev/nvidia0", "/dev/nvidia1"))  # NVIDIA's own
    mine = node.spawn_device_holder("python3", 129, ("/dev/nvidia0",), keeps_orphaned_mib={0: 30000})
    other = node.spawn_device_holder("python3", 131, ("/dev/nvidia1",), keeps_orphaned_mib={1: 20000})
    plan = await free_plan(transport, inventory, store, resolve_targets("sglang-a6000", inventory)[0], Thresholds())
    assert [(d.process.pid, d.process.vmid, d.devices) for d in plan.device_holders] == [(mine, 129, ("/dev/nvidia0",))]
    assert plan.orphaned == ((0, 30001), (1, 20001)) and plan.pids == (mine,)
    whole = await free_plan(transport, inventory, store, resolve_targets("pve5", inventory)[0], Thresholds())
    assert whole.pids == tuple(sorted((mine, other)))
    import os

    os.kill(other, 9)
    node._children[-1].wait(5)
    result = await free(transport, inventory, "pve5", whole.processes, FAST)
    assert result.killed == (mine,)
    assert result.skipped == (f"PID {other} no longer holds GPU memory or a GPU open: left alone",)
    assert result.memory_note == "memory returned: GPU 0: 1 MiB used; GPU 1: 1 MiB used"


async def test_gpus_clean_looks_only_at_the_gpus_the_launch_uses(setup):
    node, inventory, transport, store = setup
    node.spawn_holder(1, "python3 train.py", 20000, 131)  # another container on GPU 1
    _, pre = await run_launch(node, inventory, transport, store, ("--tp", "1", "--mem-fraction-static", "0.88",
                                                                  "--mamba-ssm-dtype", "bfloat16"))
    assert {c.name: c.result for c in pre.checks}["GPUs clean"] == "ok"  # tp=1 uses GPU 0 only
    _, pre = await run_launch(node, inventory, transport, store, ("--tp", "2", "--mem-fraction-static", "0.88"))
    clean = {c.name: c for c in pre.checks}["GPUs clean"]
    assert clean.result == "fail" and "(CT 131) python3 train.py 20000 MiB" in clean.detail
    # a refused pre-flight starts nothing, and says which checks refused it
    with pytest.raises(UsageError, match=r"the pre-flight refused this launch: GPUs clean: .*\(CT 131\) python3 "
                                         r"train\.py 20000 MiB"):
        await start(transport, inventory, store, pre, FAST, time.time())
    assert await store.recent("pve5", 129, 1) == []


def _weights_line(pre):
    return next(x for x in pre.planned.budget.lines if x.label == "target weights")


async def test_the_next_preflight_uses_the_weights_an_earlier_load_of_the_checkpoint_logged(setup):
    node, inventory, transport, store = setup
    flags = (*SEED, "--mem-fraction-static", "0.88")
    _, first = await run_launch(node, inventory, transport, store, flags)
    estimate = first.planned.budget.weights_gib
    assert "measured" not in _weights_line(first).why
    # an earlier load of this checkpoint, same layout, same SGLang, as Redis keeps it (written by `follow`)
    from bot.core.attempts import Attempt

    model = container_path(node, 129, "models", "Qwen3.6-27B")
    sglang = first.planned.versions["sglang"]
    earlier = Attempt("a20261202-090000-0001", "U0OPS", "C0LAB", "pve5", 129, "sglang-a6000", model,
                      ("--model-path", model, *flags, "--port", "30000"), 30000, time.time() - 600,
                      predicted={"sglang": sglang, "free_mib": 49_139},
                      observed={"weights_gib": 26.13, "weights_format": "dtype=bfloat16",
                                "avail_before_load_gib": 46.9})
    await store.save(earlier.moved(AttemptStatus.PLANNED, time.time() - 600))
    _, again = await run_launch(node, inventory, transport, store, flags)
    b = again.planned.budget
    assert b.weights_gib == 26.13 and b.weights_source == "measured"
    from bot.views import budget_messages

    summary = budget_messages(b, "t")[0].blocks[0]["text"]["text"]
    assert "weights 26.13 GiB/GPU (measured)" in summary
    assert _weights_line(again).why.startswith("measured: attempt a20261202-090000-0001's log logged 26.13 GiB")
    assert f"the estimate was {estimate:.2f} GiB" in _weights_line(again).why
    # and from what CUDA context + NCCL took before that load (49,139 MiB free then, 46.9 GiB at Load weight begin)
    context = 49_139 / 1024 - 46.9
    free_now = min(again.planned.free_mib)
    assert b.pre_gib == pytest.approx(free_now / 1024 - context)
    pre_line = next(x for x in b.lines if x.label == "free before load (pre)")
    assert f"minus the {context:.2f} GiB CUDA context/NCCL took in attempt a20261202-090000-0001's log" in pre_line.why
    # the pools follow: what is left for them comes from that pre and the weights as measured
    left = next(x for x in b.lines if x.label == "left for KV/state pools").gib
    assert left == pytest.approx(b.pre_gib - 26.13 - b.pre_gib * (1 - b.mem_fraction_static))


async def test_a_load_of_another_checkpoint_is_named_and_not_used(setup):
    node, inventory, transport, store = setup
    node.set_scenario(129, ["kv_pool_oom"], delay_s=0.02)  # replays a real log of an AWQ load (14.45 GiB)
    flags = (*SEED, "--mem-fraction-static", "0.85")
    _, pre = await run_launch(node, inventory, transport, store, flags, force=True)
    attempt = await start(transport, inventory, store, pre, FAST, time.time())
    final, _ = await collect(attempt, inventory, transport, store)
    assert final.observed["weights_gib"] == 14.45 and final.observed["weights_format"] == "quant=awq"
    _, again = await run_launch(node, inventory, transport, store, flags)
    assert again.planned.budget.weights_gib == pre.planned.budget.weights_gib  # still the estimate
    assert f"attempt {final.id}'s log logged 14.45 GiB, not used: that load was awq, this launch loads " \
           "unquantized bfloat16" in _weights_line(again).why
