"""Use case: the memory budget of a launch, with the facts read from the container itself:
the model's config.json and checkpoint size, the installed SGLang version, and the GPUs'
live free memory. Slack, the CLI and the launch pre-flight call :func:`plan_budget`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bot.core import argv as remote
from bot.core.attempts import Attempt, earlier_load
from bot.core.budget import (
    Budget,
    BudgetInput,
    GpuPlan,
    compute_budget,
    frees_gpus_first,
    parse_version,
    stop_launches_first,
)
from bot.core.flags import LaunchFlags, check_model_flag, indices_text, parse_sglang_flags
from bot.core.gpu import Gpu, SmiSnapshot
from bot.core.installed_flags import InstalledFlags, flag_problems, parse_installed_flags
from bot.core.inventory import Inventory, Target
from bot.core.model import CheckpointIndex, ModelConfigError, read_config, read_index
from bot.core.report import Launch, LaunchRef, memory_holders
from bot.errors import CommandFailed, GpuopsError, RemoteError, UsageError
from bot.status import Transport, launch_refs, read_gpus, read_node
from bot.store import AttemptStore

log = logging.getLogger(__name__)

PACKAGES = ("sglang", "transformers", "torch", "flashinfer-python")


@dataclass(frozen=True)
class PlannedBudget:
    budget: Budget
    title: str
    gpu_totals_gib: tuple[float, ...]
    versions: dict[str, str | None]
    gpu_uuids: tuple[str, ...] = ()  # the GPUs the launch will use (LaunchFlags.gpu_indices)
    model_transformers: str | None = None  # transformers_version recorded in config.json
    free_mib: tuple[int, ...] = ()  # free MiB of the launch GPUs when the budget was planned


async def cached_model_dir(transport: Transport, target: Target, hf_cache: str, model: str) -> str:
    """The directory in the container that holds ``model``'s files: the path itself, or for a Hub id
    (``org/name``, which SGLang resolves the same way) the snapshot its Hugging Face cache's
    ``refs/main`` names. A Hub id that is not cached there is a usage error naming where it was looked for."""
    if not remote.is_hub_id(model):
        return model
    assert target.vmid is not None
    repo = remote.hub_repo_dir(hf_cache, model)
    ref = await transport.run(target.node, remote.pct_exec(target.vmid, remote.read_file(repo + "/refs/main")),
                              ok_exit=(0, 1))
    if ref.exit_status != 0:
        raise UsageError(f"`{model}` is not in the Hugging Face cache of container {target.label} (no "
                         f"`{repo}/refs/main`): download it there first (`huggingface-cli download {model}`), "
                         "or give the model's directory")
    try:
        return remote.hub_snapshot_dir(repo, ref.stdout)
    except ValueError as exc:
        raise UsageError(f"`{model}` in container {target.label}: {exc}") from None


async def plan_budget(transport: Transport, inventory: Inventory, target: Target, model_path: str,
                      flag_argv: tuple[str, ...], history: Sequence[Attempt] = ()) -> PlannedBudget:
    """``history``: the container's attempts, newest first; an earlier load of the same checkpoint
    in the same layout gives the weights as measured instead of estimated."""
    if target.kind != "container" or target.vmid is None:
        raise UsageError("a budget is planned for a container (`<node>:<vmid>` or its name)")
    flags = parse_sglang_flags(flag_argv)
    check_model_flag(flag_argv, model_path)
    container = inventory.container_settings(target.node, target.vmid)
    python, hf_cache = container.python, container.hf_cache

    def inside(argv: remote.Argv) -> remote.Argv:
        assert target.vmid is not None
        return remote.pct_exec(target.vmid, argv)

    model_dir = await cached_model_dir(transport, target, hf_cache, model_path)
    try:
        remote.checked_path(model_dir)  # said of the path given, before a file name is put after it
        config_path = remote.checked_path(model_dir.rstrip("/") + "/config.json")
        index_path = remote.checked_path(model_dir.rstrip("/") + "/model.safetensors.index.json")
        sizes_argv = remote.safetensors_sizes(model_dir)
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    config_out, index_out, sizes_out, versions_out, gpus, draft = await asyncio.gather(
        transport.run(target.node, inside(remote.read_file(config_path)), ok_exit=(0, 1)),
        transport.run(target.node, inside(remote.read_file(index_path)), ok_exit=(0, 1)),
        transport.run(target.node, inside(sizes_argv), ok_exit=(0, 1)),
        transport.run(target.node, inside(remote.python_package_versions(python, PACKAGES)), ok_exit=(0, 1, 127)),
        read_gpus(transport, target.node, target.vmid),
        _draft_config(transport, target, hf_cache, flags.speculative_draft_model_path),
    )
    if config_out.exit_status != 0:
        raise UsageError(f"no config.json at `{model_dir}` in container {target.label}")
    try:
        model = read_config(json.loads(config_out.stdout), name=model_path.rstrip("/").rsplit("/", 1)[-1])
    except (json.JSONDecodeError, ModelConfigError) as exc:
        raise UsageError(f"`{config_path}` is not a usable config.json: {exc}") from None
    index = read_index(index_out.stdout, model) if index_out.exit_status == 0 else CheckpointIndex(None, None)
    weights_total = index.total_size  # None: estimated from config.json
    if weights_total is None and sizes_out.exit_status == 0 and sizes_out.stdout.strip():
        weights_total = sum(int(x) for x in sizes_out.stdout.split() if x.isdigit())
    try:
        versions = json.loads(versions_out.stdout) if versions_out.exit_status == 0 else {}
    except json.JSONDecodeError:
        versions = {}
    plan, used, totals = _gpu_plan(gpus.gpus, flags, target)
    sglang = versions.get("sglang")
    measured = earlier_load(history, model_path, flags.weight_layout, sglang)
    budget = compute_budget(BudgetInput(model, flags, plan, parse_version(sglang), weights_total,
                                        measured_load=measured, draft_config=draft,
                                        mtp_in_checkpoint=index.mtp_tensors))
    installed = f"SGLang {sglang}" if sglang else "SGLang not found in the container (assuming current)"
    title = f"{model.name} on {target.label}: {len(used)}x {plan.name.removeprefix('NVIDIA ')}, {installed}"
    uuids = tuple(g.uuid for g in used if g.uuid)
    return PlannedBudget(budget, title, tuple(t / 1024 for t in totals), versions, uuids,
                         model.transformers_version, plan.free_mib)


async def naming_holders(transport: Transport, inventory: Inventory, store: AttemptStore, target: Target,
                         planned: PlannedBudget, orphaned_mib: int) -> PlannedBudget:
    """The budget whose remedy to free the GPUs names the recorded launches holding them, to stop as the attempts
    they are (as the launch pre-flight does): read on the node only when the budget says to free them. Unread (the
    node or the history), the remedy stays as it was."""
    if not frees_gpus_first(planned.budget):
        return planned
    node = inventory.node(target.node)
    try:
        host, launches = await asyncio.gather(read_node(transport, target.node, node.proc_root),
                                              launch_refs(store))
    except GpuopsError as exc:
        log.info("the budget's GPU holders not named: %s", exc.user_message)
        return planned
    return holders_named(planned, host, launches, target.node, orphaned_mib)


def holders_named(planned: PlannedBudget, host: SmiSnapshot, launches: Mapping[Launch, LaunchRef], node: str,
                  orphaned_mib: int) -> PlannedBudget:
    """The budget whose remedy to free the GPUs names the recorded launches holding them on ``host`` (the node's
    reading) as what to stop first, and `/gpu free` only for the other holders."""
    holders = memory_holders(host, planned.gpu_uuids, node, launches, orphaned_mib)
    return replace(planned, budget=stop_launches_first(planned.budget, holders.launches, holders.others))


def _gpu_plan(seen: Sequence[Gpu], flags: LaunchFlags,
              target: Target) -> tuple[GpuPlan, Sequence[Gpu], list[int]]:
    """The GPUs the launch will use (those its ranks' indices name, :attr:`LaunchFlags.gpu_indices`, in the order
    the container sees them) as the budget plans them, and the total MiB of each that reports one."""
    indices = flags.gpu_indices
    if flags.gpus_spanned > len(seen):
        raise UsageError(f"the launch needs {flags.gpus_described()}; container {target.label} sees {len(seen)}"
                         + (f" (GPU {indices_text(range(len(seen)))})" if flags.gpus_placed and seen else ""))
    if len(set(indices)) < len(indices):
        doubled = next(i for i in indices if indices.count(i) > 1)
        raise UsageError(f"the launch's ranks would share GPU {doubled}: SGLang steps --gpu-id-step within a "
                         f"pipeline stage only, so with --pp-size {flags.pp} and --gpu-id-step {flags.gpu_id_step} "
                         "the stages overlap; use --gpu-id-step 1")
    used = [seen[i] for i in indices]
    totals = [g.memory_total_mib for g in used if g.memory_total_mib]
    free = tuple(g.memory_free_mib for g in used if g.memory_free_mib is not None)
    name = (used[0].name or "GPU") if used else "GPU"
    return GpuPlan(name, min(totals) if totals else None, len(seen), free), used, totals


async def _draft_config(transport: Transport, target: Target, hf_cache: str,
                        draft: str | None) -> dict[str, Any] | None:
    """The draft's config.json when --speculative-draft-model-path is a path in the container, or a Hub id cached
    there (one that is not leaves the draft estimated from the target)."""
    if not draft or target.vmid is None:
        return None
    try:
        path = remote.checked_path((await cached_model_dir(transport, target, hf_cache, draft)).rstrip("/")
                                   + "/config.json")
    except (ValueError, UsageError):
        return None
    out = await transport.run(target.node, remote.pct_exec(target.vmid, remote.read_file(path)), ok_exit=(0, 1))
    with contextlib.suppress(json.JSONDecodeError):
        config = json.loads(out.stdout) if out.exit_status == 0 else None
        return config if isinstance(config, dict) else None
    return None


SGLANG_FLAGS_TIMEOUT_S = 120  # importing SGLang's server_args pulls in torch: seconds, more on a cold disk


async def read_installed_flags(transport: Transport, store: AttemptStore, target: Target, python: str,
                           version: str | None, argv: Sequence[str]) -> InstalledFlags | str:
    """The flags the container's SGLang accepts, read from its own parser, or why they could not be read. A list
    read earlier for the same version (kept a day: importing SGLang takes seconds) is used when it accepts ``argv``;
    a refusal is always made from a fresh read (the same version string may have been reinstalled with new flags)."""
    assert target.vmid is not None
    if not version:
        return "SGLang is not installed there"
    cached = await store.installed_flags(target.node, target.vmid, version)
    if cached and not flag_problems(earlier := InstalledFlags(cached), argv):
        return earlier
    try:
        result = await transport.run(target.node, remote.pct_exec(target.vmid, remote.sglang_flags(python)),
                                     timeout_s=SGLANG_FLAGS_TIMEOUT_S)
        installed = parse_installed_flags(result.stdout)
    except RemoteError as exc:
        return f"its parser did not load: {exc.last_word}"
    except ValueError as exc:
        return f"its parser gave no flag list: {exc}"
    await store.save_installed_flags(target.node, target.vmid, version, dict(installed.options))
    return installed


async def flag_refusals(transport: Transport, store: AttemptStore, inventory: Inventory, target: Target,
                        planned: PlannedBudget, argv: Sequence[str]) -> tuple[str, ...] | None:
    """What the container's SGLang would refuse of ``argv`` (each said with the flag a typo meant); None when its
    own flags could not be read."""
    assert target.vmid is not None
    python, version = inventory.container_settings(target.node, target.vmid).python, planned.versions.get("sglang")
    installed = await read_installed_flags(transport, store, target, python, version, argv)
    if not isinstance(installed, InstalledFlags):
        return None
    return tuple(p.describe(f"SGLang {version}") for p in flag_problems(installed, argv))


__all__ = ["CommandFailed", "PlannedBudget", "flag_refusals", "holders_named", "naming_holders", "plan_budget",
           "read_installed_flags"]
