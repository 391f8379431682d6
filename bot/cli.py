"""`gpuops ...`: the terminal front end over the same use cases and views."""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import functools
import io
import itertools
import json
import logging
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from bot.core import argv as remote
from bot.core.argv import LOG_TAIL_MAX_LINES, LogExcerpt, hub_cache, hub_repo_dir, hub_snapshot_dir, is_hub_id
from bot.core.commands import DEFAULT_LOG_LINES
from bot.core.gpu import SmiSnapshot
from bot.core.model import CheckpointIndex, ModelSpec, read_index
from bot.errors import GpuopsError, TargetError, UsageError
from bot.signals import Interrupted, cleaning_up, interruptible

if TYPE_CHECKING:
    from bot.core.attempts import Attempt
    from bot.core.inventory import Inventory, Target


def _snapshot_json(snapshot: SmiSnapshot) -> dict[str, Any]:
    return {
        "format": snapshot.source_format,
        "driver_version": snapshot.driver_version,
        "cuda_version": snapshot.cuda_version,
        "error": None if snapshot.error is None else {
            "kind": snapshot.error.kind.value, "lines": list(snapshot.error.lines),
            "pci_bus_id": snapshot.error.pci_bus_id,
        },
        "process_listing": snapshot.process_listing.value,
        "gpus": [
            {
                "index": g.index, "name": g.name, "memory_used_mib": g.memory_used_mib,
                "memory_total_mib": g.memory_total_mib, "utilization_pct": g.utilization_pct,
                "temperature_c": g.temperature_c, "power_draw_w": g.power_draw_w, "power_limit_w": g.power_limit_w,
                "uuid": g.uuid, "pci_bus_id": g.pci_bus_id, "unreadable": dict(g.raw),
                "mig_devices": [asdict(m) for m in g.mig_devices],
                "processes": [
                    {"pid": p.pid, "name": p.name, "used_mib": p.used_mib, "type": p.type}
                    for p in snapshot.processes_of(g)
                ],
            }
            for g in snapshot.gpus
        ],
        "unattached_processes": [
            {"pid": p.pid, "name": p.name, "used_mib": p.used_mib, "gpu_uuid": p.gpu_uuid}
            for p in snapshot.processes if not any(p in snapshot.processes_of(g) for g in snapshot.gpus)
        ],
    }


def _smi_text(snapshot: SmiSnapshot) -> str:
    from bot.core.report import GPU_HEADER, PROCESS_HEADER, gpu_line

    lines = [f"format: {snapshot.source_format}  driver: {snapshot.driver_version or '-'}  "
             f"CUDA: {snapshot.cuda_version or '-'}  GPUs: {len(snapshot.gpus)}"]
    if snapshot.error:
        lines.append(f"ERROR {snapshot.error.kind.value}: {snapshot.error.meaning}")
        lines += [f"  | {line}" for line in snapshot.error.lines]
    if snapshot.gpus:
        lines += [GPU_HEADER, *(gpu_line(g) for g in snapshot.gpus)]
        for g in snapshot.gpus:
            if g.raw:
                lines.append(f"  GPU {g.index} unreadable: " + ", ".join(f"{k}={v}" for k, v in g.raw.items()))
    lines.append(f"processes: {snapshot.process_listing.value}")
    if snapshot.processes:
        lines.append(PROCESS_HEADER)
        for p in snapshot.processes:
            used = p.used_mib if p.used_mib is not None else (p.used_raw or "n/a")
            gpu = p.gpu_index if p.gpu_index is not None else "?"
            lines.append(f"{gpu:>3}  {p.pid if p.pid is not None else '?':>8}  {'':>5}  {used:>7}  {p.name}")
    return "\n".join(lines)


def cmd_smi_parse(args: argparse.Namespace) -> int:
    from bot.core.smi import decode, parse_any

    data = _read_input(args.file, "nvidia-smi output")
    fields = args.fields.split(",") if args.fields else None
    snapshot = parse_any(decode(data), fields=fields, fmt=args.format)
    print(json.dumps(_snapshot_json(snapshot), indent=2) if args.json else _smi_text(snapshot))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from bot.core.inventory import resolve_targets
    from bot.core.report import status_data, target_view
    from bot.status import read_status, with_launches
    from bot.views import status_text

    async def work(services: Any) -> int:
        targets = resolve_targets(args.target, services.inventory, services.settings.local_gpus)
        report = await read_status(services.transport, services.inventory, targets,
                                   limits=services.limits, deadline_s=services.settings.status_deadline_s)
        report = await with_launches(report, services.attempts)
        if args.json:
            unread = {"launches_unread": report.launches_unread} if report.launches_unread else {}
            print(json.dumps({**status_data(report.statuses, report.launches), "elapsed_s": round(report.elapsed_s, 3),
                              **unread}, indent=2))
        else:
            print(status_text(report))
        # exit 3 when any target needs attention: scripts and cron can act on it
        return 0 if all(target_view(s).state == "ok" for s in report.statuses) else 3

    return _with_services(args, work)


def _with_services(args: argparse.Namespace, work: Any) -> int:
    """Build the same services the bot uses (embedded Redis unless REDIS_URL), run ``work``, close."""
    from bot.app import build_services
    from bot.config import Settings

    settings = Settings() if args.inventory is None else Settings(inventory=Path(args.inventory))

    async def run() -> int:
        services = build_services(settings)
        try:
            return int(await work(services))
        finally:
            with cleaning_up():
                await services.close()

    return asyncio.run(interruptible(run()))


def cmd_health(args: argparse.Namespace) -> int:
    """The daily health report, now: the samples kept in Redis plus a fresh read (same as /gpu health)."""
    import time

    from bot.scheduler import Scheduler
    from bot.views import blocks_to_text, health_messages

    async def work(services: Any) -> int:
        report = await Scheduler(services, client=None).report(args.target, "cli", time.time())
        if args.json:
            print(json.dumps(report.to_dict(), indent=2, default=str))
        else:
            print("\n".join(blocks_to_text(m.blocks) for m in health_messages(report)))
        return 3 if report.findings or report.unreachable else 0

    return _with_services(args, work)


def cmd_history(args: argparse.Namespace) -> int:
    """The attempts recorded in Redis, newest first (same as /sglang history)."""
    from bot.views import blocks_to_text, history_message

    async def work(services: Any) -> int:
        if args.container:
            target = _one_container(args.container, services.inventory, before="history is kept per container: ")
            found = await services.attempts.recent(target.node, target.vmid, args.count)
            where = target.label
        else:
            found, where = await services.attempts.recent(count=args.count), "all containers"
        if args.json:
            print(json.dumps([_attempt_json(a) for a in found], indent=2, default=str))
        else:
            print(blocks_to_text(history_message(found, where).blocks))
        return 0

    return _with_services(args, work)


def cmd_incident(args: argparse.Namespace) -> int:
    """The incident threads following a container, as their summaries show them (same as the thread's top message):
    the attempts, the hypotheses with their status, the last observations. With a word after the container
    (hypothesis, note, confirm, refute), that word is recorded in the container's thread, as `@gpuops` there would
    record it; `history` prints each thread's whole record, as `@gpuops history` there does."""
    import time
    from dataclasses import asdict

    from bot.core.incident import RECORD_VERBS
    from bot.core.inventory import Target
    from bot.incidents import record_from_terminal, with_finished
    from bot.views import blocks_to_text, incident_summary, thread_history_messages

    words = list(args.words)
    if args.container in (*RECORD_VERBS, "history"):
        raise UsageError(f"name the container first: gpuops incident <container> {args.container} ...")
    if words and words[0] not in (*RECORD_VERBS, "history"):
        raise UsageError(f"`{words[0]}` is not a word for a thread: after the container, one of "
                         f"{', '.join(RECORD_VERBS)} (`gpuops incident <container> hypothesis <text>`), or history")
    if words[1:] and words[0] == "history":
        raise UsageError("`history` takes nothing after it: gpuops incident <container> history")

    thread = f" as thread {args.thread}" if args.thread else ""

    async def work(services: Any) -> int:
        if args.container:
            target = _one_container(args.container, services.inventory,
                                    before="incident threads follow a container: ")
            containers = [(target.node, target.vmid, target.label)]
        else:
            containers = [(c.node, c.vmid, Target("container", c.node, c.vmid, name).label)
                          for name, c in services.inventory.containers.items()]
        found = []
        for node, vmid, label in containers:
            following = [incident for incident in await services.incidents.following(node, vmid)
                         if args.thread in (None, incident.thread_ts)]
            attempts = await services.attempts.recent(node, vmid, 20) if following else []
            # what the thread's summary says once the bot's scheduler has caught up (nothing is saved from here)
            found += [(label, with_finished(services, incident, attempts), attempts) for incident in following]
        if words and words[0] != "history":
            return await record(services, found, containers[0][2])
        if args.json:
            records = [{**{k: v for k, v in incident.to_dict().items() if k not in ("summary_digest", "announcements")},
                        "container": label} for label, incident, _ in found]
            print(json.dumps(records, indent=2, default=str))
        elif not found:
            where = containers[0][2] if args.container else "any container"
            print(f"No incident thread follows {where}{thread} (a thread follows a container once "
                  "`@gpuops` is mentioned in the thread of one of its launches).")
        else:
            for label, incident, attempts in found:
                print(f"Thread {incident.thread_ts} in channel {incident.channel} ({label}):")
                shown = thread_history_messages(incident, attempts) if words else [incident_summary(incident, attempts)]
                print("\n".join(blocks_to_text(m.blocks) for m in shown) + "\n")
        return 0

    async def record(services: Any, found: list[Any], label: str) -> int:
        if not found:
            raise UsageError(f"No incident thread follows {label}{thread}, so nothing was recorded: "
                             "a thread follows a container once `@gpuops` is mentioned in the thread of one of its "
                             "launches")
        if len(found) > 1:
            threads = ", ".join(f"{incident.thread_ts} (channel {incident.channel})" for _, incident, _ in found)
            raise UsageError(f"{len(found)} incident threads follow {label}: {threads}; say which with --thread TS "
                             "(nothing was recorded)")
        verb, rest = words[0], words[1:]
        hypothesis_id = rest.pop(0) if verb in ("confirm", "refute") and rest else ""
        incident, recorded = await record_from_terminal(services, found[0][1], verb, " ".join(rest), hypothesis_id,
                                                        _cli_user(), time.time())
        if args.json:
            print(json.dumps({"recorded": asdict(recorded),
                              "thread_ts": incident.thread_ts, "channel": incident.channel, "container": label},
                             indent=2))
        else:
            print(f"Recorded in thread {incident.thread_ts} (channel {incident.channel}, {label}): {recorded.plain}\n"
                  "The bot says it in the thread and updates the summary on its next tick (within 30 s while "
                  "`gpuops serve` runs; else when it next starts).")
        return 0

    return _with_services(args, work)


def _read_input(name: str, what: str) -> bytes:
    """A file the command reads, or stdin for ``-``: a file that cannot be read is a usage error."""
    try:
        return sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {what} {name}: {exc.strerror or exc}") from None


def _read_log(name: str) -> LogExcerpt:
    """A log to triage (a file, or stdin for ``-``): whole, or for a long one its head and tail as the script that
    reads a container's log keeps them (``argv.excerpt_of_chunks``, so the two answers agree), read as it streams
    in; a rotated log logrotate compressed (gzip, or xz/bzip2) as it is decompressed."""
    if name == "-":
        start = sys.stdin.buffer.read(16)
        return _excerpt_of_stream(io.BufferedReader(_Prefixed(start, sys.stdin.buffer)), start, name)
    try:
        with Path(name).open("rb") as file:
            start = file.read(16)
            file.seek(0)
            return _excerpt_of_stream(file, start, name)
    except OSError as exc:
        raise UsageError(f"cannot read log {name}: {exc.strerror or exc}") from None


def _read_kernel_log(name: str, log: str) -> str:
    """A saved kernel log, whole (an OOM kill or an Xid may be anywhere in it); a rotated one (kern.log.2.gz) is
    decompressed. ``log`` is the log it goes with, for the hint of a compression we cannot read."""
    data = _read_input(name, "kernel log")
    kind = _compression(data[:16])
    if kind is not None:
        piped_to = f"gpuops triage {shlex.quote(log)} --kernel-log -"
        data = b"".join(_decompressed(kind, io.BytesIO(data), name, piped_to))
    return b"".join(_as_utf8(iter((data,)))).decode("utf-8", errors="replace")


class _Prefixed(io.RawIOBase):
    """A stream whose first bytes were already read (to tell a compressed one), given back first."""

    def __init__(self, start: bytes, rest: BinaryIO) -> None:
        self._start, self._rest = start, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._start[:len(buffer)] if self._start else self._rest.read(len(buffer))
        self._start = self._start[len(data):]
        buffer[:len(data)] = data
        return len(data)


def _excerpt_of_stream(stream: BinaryIO, start: bytes, name: str) -> LogExcerpt:
    """The head and tail of a log read from ``stream`` (from its start), decompressed when ``start`` says so."""
    kind = _compression(start)
    try:
        chunks = iter(lambda: stream.read(1 << 20), b"") if kind is None else _decompressed(kind, stream, name)
        text = remote.excerpt_of_chunks(_as_utf8(chunks))
    except OSError as exc:
        raise UsageError(f"cannot read log {name}: {exc.strerror or exc}") from None
    return remote.parse_log_excerpt(text.decode("utf-8", errors="replace"))


def _as_utf8(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """A log saved as UTF-16 with its byte-order mark (Windows PowerShell's `>` writes logs so) re-encoded as UTF-8 as
    it streams, so its lines are read as lines; any other log passes unchanged (read as UTF-8 later)."""
    first = b""
    for chunk in chunks:
        first += chunk
        if len(first) >= 2:
            break
    if not first.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        if first:
            yield first
        yield from chunks
        return
    decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")
    for chunk in itertools.chain((first,), chunks):
        yield decoder.decode(chunk).encode("utf-8")
    yield decoder.decode(b"", final=True).encode("utf-8")


# how a compressed file starts: logrotate's `compress` writes gzip; xz and bzip2 are its common compresscmd choices
_COMPRESSIONS = (("gzip", re.compile(rb"\x1f\x8b")), ("xz", re.compile(rb"\xfd7zXZ\x00")),
                 ("bzip2", re.compile(rb"BZh[1-9]1AY&SY")), ("zstd", re.compile(rb"\x28\xb5\x2f\xfd")))


def _compression(start: bytes) -> str | None:
    return next((kind for kind, magic in _COMPRESSIONS if magic.match(start)), None)


def _decompressed(kind: str, file: BinaryIO, name: str, piped_to: str = "gpuops triage -") -> Iterator[bytes]:
    """The decompressed bytes of ``file`` (from its start) in chunks; a stream that ends early (compressed while
    it was written, or copied in part) yields what it holds and says so. ``piped_to`` is the command that reads
    the decompressed text from stdin, for the hint when the compression is one we cannot read."""
    import bz2
    import gzip
    import lzma

    opened: dict[str, Callable[[BinaryIO], io.BufferedIOBase]] = {
        "gzip": lambda f: gzip.GzipFile(fileobj=f), "xz": lzma.LZMAFile, "bzip2": bz2.BZ2File}
    if kind not in opened:
        source = "FILE" if name == "-" else shlex.quote(name)
        raise UsageError(f"cannot read log {name}: it is {kind}-compressed; decompress it first "
                         f"(e.g. `{kind} -dc {source} | {piped_to}`)")
    stream = opened[kind](file)
    read = 0
    try:
        while chunk := stream.read(1 << 20):
            read += len(chunk)
            yield chunk
    except EOFError:
        if not read:
            raise UsageError(f"cannot read log {name}: its {kind} data ends before any of the log") from None
        print(f"gpuops: {name}: the {kind} data ends early; read the {read} bytes it holds", file=sys.stderr)
    except (OSError, lzma.LZMAError) as exc:
        raise UsageError(f"cannot read log {name}: not readable {kind} data ({exc})") from None


def cmd_budget(args: argparse.Namespace) -> int:
    if args.container:
        return _container_budget(args)
    if args.inventory:
        raise UsageError("--inventory is for --container: a local budget reads no inventory")
    if not args.gpu:
        raise UsageError('--gpu is required (e.g. --gpu "RTX A6000"), or --container to read the GPUs, the '
                         "model and the SGLang version from a container")
    from bot.core.budget import BudgetInput, GpuPlan, MeasuredLoad, compute_budget, parse_version
    from bot.core.flags import parse_sglang_flags
    from bot.core.gpus import gpu_matches, gpu_total_mib, split_gpu_count
    from bot.core.model import ModelConfigError, read_config

    counted, args.gpu = split_gpu_count(args.gpu)  # "2x RTX A6000"
    if counted is not None and args.gpus is not None and counted != args.gpus:
        raise UsageError(f"--gpu names {counted} GPUs and --gpus {args.gpus}: give the count once")
    args.gpus = counted if counted is not None else args.gpus
    if args.gpus is not None and args.gpus < 1:
        raise UsageError("--gpus is how many GPUs the launch may use: 1 or more")
    path = _local_model(args.model)
    config_path = path / "config.json" if path.is_dir() else path
    try:
        config = json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read model config {config_path}: {exc}") from None
    total = args.total_mib or gpu_total_mib(args.gpu)
    try:
        free = tuple(int(x) for x in args.free_mib.split(",")) if args.free_mib else ()
    except ValueError:
        raise UsageError(f"--free-mib takes MiB per GPU separated by commas (e.g. 48000,47800), "
                         f"not {args.free_mib!r}") from None
    if any(x < 0 for x in free):
        raise UsageError("--free-mib values are MiB, not negative")
    if total is None and not free:
        candidates = gpu_matches(args.gpu)
        if candidates:
            named = ", ".join(f"{known} ({mib} MiB)" for known, mib in candidates.items())
            raise UsageError(f"GPU {args.gpu!r} could be {named}: name one, or give --total-mib (or --free-mib)")
        raise UsageError(f"unknown GPU {args.gpu!r}: give --total-mib (or --free-mib)")
    flags = parse_sglang_flags(_flag_args(args))
    if args.gpus is None:
        args.gpus = flags.gpus_spanned  # the GPUs the flags use (tp x pp x dp from --base-gpu-id); more when given
    if flags.gpus_spanned > args.gpus:
        raise UsageError(f"the launch needs {flags.gpus_described()}, --gpus is {args.gpus}")
    if flags.gpus_placed and len(free) > max(flags.gpu_indices):  # every GPU's free memory: the launch's are picked
        free = tuple(free[i] for i in flags.gpu_indices)
    gpus = GpuPlan(args.gpu, total, args.gpus, free)
    try:
        model = read_config(config, name=Path(args.model).name if is_hub_id(args.model) else config_path.parent.name)
    except ModelConfigError as exc:
        raise UsageError(f"cannot budget {config_path}: {exc}") from None
    index = _checkpoint(config_path.parent, model)
    measured = None
    if args.weights_gib is not None:
        if args.weights_gib <= 0:
            raise UsageError("--weights-gib is the positive GiB per GPU an earlier load logged")
        measured = MeasuredLoad(args.weights_gib, flags.weight_layout, "--weights-gib (an earlier load)")
    budget = compute_budget(BudgetInput(model, flags, gpus, parse_version(args.sglang or "current"), index.total_size,
                                        measured_load=measured,
                                        draft_config=_draft_config(flags.speculative_draft_model_path),
                                        mtp_in_checkpoint=index.mtp_tensors))
    title = f"{model.name} on {args.gpus}x {args.gpu}, tp={flags.tp}" + (f" pp={flags.pp}" if flags.pp > 1 else "")
    return _print_budget(args, budget, title, [(total or max(free)) / 1024 for _ in range(flags.tp)])


def _flag_args(args: argparse.Namespace) -> list[str]:
    """The SGLang flags after ``--``."""
    return list(args.flags[1:] if args.flags[:1] == ["--"] else args.flags)


VERDICT_EXIT = {"fits": 0, "degraded": 3, "fails": 4}


def _print_budget(args: argparse.Namespace, budget: Any, title: str, totals_gib: list[float],
                  refused_flags: tuple[str, ...] | None = None) -> int:
    """A budget as a table or JSON, its chart when asked; the exit status says the verdict (a command line the
    container's SGLang would refuse fails like a budget that does not fit)."""
    from bot.views import budget_text

    if args.json:
        print(json.dumps({**_budget_json(budget, _flag_args(args)), "flags_refused": refused_flags}, indent=2))
    else:
        print(budget_text(budget, title, refused_flags))
    if args.chart:
        from bot.chart import budget_png

        Path(args.chart).write_bytes(budget_png(budget, totals_gib, title))
    return VERDICT_EXIT["fails"] if refused_flags else VERDICT_EXIT[budget.verdict.value]


OR_ATTEMPT = ", or an attempt id (`gpuops history` lists them)"


def _one_container(spec: str, inventory: Inventory, before: str = "", also: str = "") -> Target:
    """The one container ``spec`` names in the inventory; else a usage error listing the containers it could name,
    with ``before`` and ``also`` (what else the command takes) around it."""
    from bot.core.inventory import resolve_container

    try:
        return resolve_container(spec, inventory)
    except TargetError as exc:
        raise UsageError(f"{before}{exc.user_message}{also}") from None


def _container_budget(args: argparse.Namespace) -> int:
    """The answer /sglang budget gives: the model's config and checkpoint size, the installed SGLang and each GPU's
    live free memory read in the container, and an earlier load's measured weights from the history in Redis."""
    given = [name for name, value in (("--gpu", args.gpu), ("--gpus", args.gpus), ("--total-mib", args.total_mib),
                                      ("--free-mib", args.free_mib), ("--sglang", args.sglang),
                                      ("--weights-gib", args.weights_gib)) if value is not None]
    if given:
        raise UsageError(f"with --container the GPUs, their free memory and the SGLang version are read there: "
                         f"drop {', '.join(given)}")
    from bot.budget import flag_refusals, naming_holders, plan_budget
    from bot.launch import HISTORY_FOR_WEIGHTS

    async def work(services: Any) -> int:
        target = _one_container(args.container, services.inventory)
        history = await services.attempts.recent(target.node, target.vmid, count=HISTORY_FOR_WEIGHTS)
        planned = await plan_budget(services.transport, services.inventory, target, args.model,
                                    tuple(_flag_args(args)), history)
        planned = await naming_holders(services.transport, services.inventory, services.attempts, target, planned,
                                       services.limits.orphaned_memory_mib)
        refused = await flag_refusals(services.transport, services.attempts, services.inventory, target, planned,
                                      _flag_args(args))
        return _print_budget(args, planned.budget, planned.title, list(planned.gpu_totals_gib), refused)

    return _with_services(args, work)


def _local_model(model: str) -> Path:
    """A model directory (or config.json) on this machine; a Hub id (org/name) that is not a local path is
    looked up in the local Hugging Face cache (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub),
    at the snapshot its refs/main names, as SGLang would load it."""
    path = Path(model)
    if path.exists() or not is_hub_id(model):
        return path
    repo = Path(hub_repo_dir(os.path.abspath(hub_cache(os.environ, os.path.expanduser("~"))), model))
    try:
        return Path(hub_snapshot_dir(str(repo), (repo / "refs" / "main").read_text()))
    except OSError:
        raise UsageError(f"{model} is neither a path here nor in the Hugging Face cache ({repo}): download it "
                         f"(`huggingface-cli download {model}`) or give its directory") from None
    except ValueError as exc:
        raise UsageError(f"{model} in the Hugging Face cache ({repo}): {exc}") from None


def _draft_config(draft_path: str | None) -> dict[str, Any] | None:
    """The --speculative-draft-model-path's config.json when it is a local directory (or the file
    itself), or a Hub id in the local cache; None otherwise: the draft is then estimated."""
    if not draft_path:
        return None
    try:
        path = _local_model(draft_path)
    except UsageError:
        return None
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.is_file():
        return None
    try:
        config = json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read the draft model's config {config_path}: {exc}") from None
    if not isinstance(config, dict):
        raise UsageError(f"the draft model's config {config_path} is not a JSON object")
    return config


def _checkpoint(directory: Path, model: ModelSpec) -> CheckpointIndex:
    """The checkpoint as /sglang budget reads it: the safetensors index's total_size (and whether it holds the
    config's MTP layers), else the sum of the ``*.safetensors`` files beside config.json; a None size (estimate
    from the config) when neither is there."""
    path = directory / "model.safetensors.index.json"
    index = CheckpointIndex(None, None)
    if path.is_file():
        with contextlib.suppress(OSError, UnicodeDecodeError):
            index = read_index(path.read_text(), model)
    if index.total_size is not None:
        return index
    sizes = [f.stat().st_size for f in directory.glob("*.safetensors") if f.is_file()]
    return CheckpointIndex(sum(sizes) or None, index.mtp_tensors)


def _budget_json(budget: Any, flags: Sequence[str]) -> dict[str, Any]:
    data = {k: v for k, v in asdict(budget).items() if k not in ("lines", "remedies", "version")}
    data["version"] = str(budget.version)
    data["verdict"] = budget.verdict.value
    data["lines"] = [asdict(line) for line in budget.lines]
    data["remedies"] = _remedies_json(budget.remedies, flags)
    return data


def _remedies_json(remedies: Any, flags: Sequence[str]) -> list[dict[str, Any]]:
    """Each remedy with the flags it launches: the launch's own ``flags`` with its change, as the Slack answer's
    button launches them (secret values redacted); null for a remedy that is not a flag change."""
    from bot.core.flags import redacted

    return [{"change": r.change, "effect": r.effect,
             "argv": list(redacted(changed)) if (changed := r.launch_flags(flags)) is not None else None}
            for r in remedies]


def _attempt_json(attempt: Attempt) -> dict[str, Any]:
    """An attempt's record as stored, with the state it is in and no secret flag's value."""
    from bot.core.flags import redacted

    return {**attempt.to_dict(), "status": attempt.status.value, "argv": list(redacted(attempt.argv))}


def _preflight_json(pre: Any, user_flags: Sequence[str], command: str, nexts: Sequence[str]) -> dict[str, Any]:
    """The pre-flight's checks and, when it refused, its remedies and the next launches (as ``nexts`` words them)."""
    budget = pre.remedy_budget
    return {"passed": not pre.blocked, "command": command, "checks": [asdict(c) for c in pre.checks],
            "remedies": _remedies_json(budget.remedies if budget and pre.blocked else (), user_flags),
            "next": list(nexts) if pre.blocked else []}


def cmd_preflight(args: argparse.Namespace) -> int:
    """The checks /sglang launch makes before it starts anything, read the same way, without launching: exit 0
    passed, 3 passed with warnings, 4 refused."""
    import shlex

    from bot.core.flags import redacted
    from bot.launch import launch_command, launch_title, next_launches, preflight
    from bot.views import blocks_to_text, preflight_message

    async def work(services: Any) -> int:
        request = _launch_request(args, services.inventory, user="cli", channel="cli")
        target = request.target
        pre = await preflight(services.transport, services.inventory, services.attempts, request, services.limits,
                              services.launch)
        budget = pre.remedy_budget
        commands = [f"/sglang launch {shlex.join((target.spec, request.model_path, *redacted(f)))}"
                    for _, f in next_launches(pre)]
        command = launch_command(services.inventory, pre)
        if args.json:
            print(json.dumps(_preflight_json(pre, request.flags, command, commands), indent=2))
        else:
            message = preflight_message(launch_title(request), pre.checks, budget, pre.blocked, False,
                                        command=command)
            print(blocks_to_text(message.blocks))
            if pre.blocked and commands:
                print("Next, each through the pre-flight again:\n" + "\n".join(f"  {c}" for c in commands))
        if pre.blocked:
            return 4
        return 3 if any(c.result == "warn" for c in pre.checks) else 0

    return _with_services(args, work)


def _launch_request(args: argparse.Namespace, inventory: Inventory, user: str, channel: str) -> Any:
    """The launch ``--profile`` names, or the one ``--container``, ``--model`` and the flags after ``--`` spell."""
    from bot.launch import LaunchRequest

    force = bool(getattr(args, "force", False))
    if args.profile:
        if args.container or args.model or _flag_args(args):
            raise UsageError("--profile is the whole launch: give it alone, or --container and --model with flags")
        profile = inventory.profiles.get(args.profile)
        if profile is None:
            known = ", ".join(sorted(inventory.profiles)) or "none are configured"
            raise UsageError(f"no launch profile `{args.profile}` (profiles: {known})")
        target = _one_container(profile.container, inventory, before=f"profile {args.profile}: ")
        return LaunchRequest(target, profile.model_path, tuple(profile.flags), user, channel, force)
    if not args.container or not args.model:
        raise UsageError("give --container and --model (then -- and the SGLang flags), or --profile")
    target = _one_container(args.container, inventory)
    return LaunchRequest(target, args.model, tuple(_flag_args(args)), user, channel, force)


def _cli_user() -> str:
    """Who acts from this terminal, as the history and the audit name them."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no login name for this uid (a bare container)
        return f"cli:uid {os.getuid()}"


def cmd_launch(args: argparse.Namespace) -> int:
    """/sglang launch from a terminal: the pre-flight; then, when it passes (or --force), the launch with its own log
    and PID, followed until the server answers or fails. Recorded in the same history as Slack's launches. Exit 0
    ready, 4 refused or failed; Ctrl-C stops following the launch, not the server. With --json what a person reads
    goes to stderr, and stdout is one JSON document at the end: the outcome, the attempt's record, the pre-flight
    and, once launched, the last progress read from the log."""
    import time

    from bot.core.attempts import AttemptStatus
    from bot.core.flags import redacted
    from bot.core.startup_log import Progress
    from bot.launch import (
        follow,
        launch_command,
        launch_title,
        next_launches,
        preflight,
        record_refused,
        start,
    )
    from bot.triage import read_stacks
    from bot.views import STACKS_HEAD, blocks_to_text, preflight_message, progress_message

    user = _cli_user()
    started: list[str] = []  # the attempt's id, to name it when the person stops following
    say = functools.partial(print, file=sys.stderr) if args.json else print

    async def work(services: Any) -> int:
        request = _launch_request(args, services.inventory, user, channel="")
        target = request.target
        pre = await preflight(services.transport, services.inventory, services.attempts, request, services.limits,
                              services.launch)
        title, command = launch_title(request), launch_command(services.inventory, pre)
        budget = pre.planned.budget if pre.planned is not None else None
        launches = [shlex.join(("gpuops", "launch", "--container", target.spec, "--model", request.model_path, "--",
                                *redacted(flags))) for _, flags in next_launches(pre)] if pre.blocked else []
        if pre.blocked and not args.force:
            refused = await record_refused(services.attempts, services.inventory, pre, time.time())
            say(blocks_to_text(preflight_message(title, pre.checks, pre.remedy_budget, True, False,
                                                 command=command).blocks))
            if launches:
                say("Next, each through the pre-flight again:\n" + "\n".join(f"  {c}" for c in launches))
            say(f"Attempt {refused.id} recorded as refused; --force launches it anyway.")
            await services.store.audit(action="sglang.launch", user=user, channel="", target=target.label,
                                       attempt=refused.id, result="refused by pre-flight")
            if args.json:
                print(json.dumps({"outcome": "refused", "attempt": _attempt_json(refused),
                                  "preflight": _preflight_json(pre, request.flags, command, launches)},
                                 indent=2, default=str))
            return 4
        say(blocks_to_text(preflight_message(title, pre.checks, budget, pre.blocked, pre.blocked,
                                             command=command).blocks))
        attempt = await start(services.transport, services.inventory, services.attempts, pre, services.launch,
                              time.time(), planned=lambda planned: started.append(planned.id))
        await services.store.audit(action="sglang.launch", user=user, channel="", target=target.label,
                                   attempt=attempt.id, argv=list(redacted(attempt.argv)), forced=str(attempt.forced),
                                   result=f"started PID {attempt.pid}")
        say(f"Started attempt {attempt.id}: PID {attempt.pid}, log {attempt.log_path}", flush=True)
        began = shown_at = time.monotonic()
        last, shown = Progress(), ""

        async def notify(current: Attempt, progress: Progress, final: bool) -> None:
            """A line at each further stage, and within a long one (the weights, the graphs) how far it got, every
            PROGRESS_LINE_S; the card at the end has the figures."""
            nonlocal last, shown, shown_at
            now = time.monotonic()
            if progress.stage != last.stage or (progress.label != shown and now - shown_at >= PROGRESS_LINE_S):
                say(f"  {now - began:6.0f}s  {progress.label}", flush=True)
                shown, shown_at = progress.label, now
            last = progress

        try:
            # given up on, it is left to the bot's scheduler to watch on (`gpuops serve`), not this terminal
            end = await follow(services.transport, services.inventory, services.attempts, attempt, notify,
                               services.launch, services.replica, watch_given_up=False)
        except GpuopsError:
            print(_still_running(attempt.id), file=sys.stderr)
            raise
        say(blocks_to_text(progress_message(end, last).blocks))
        if end.given_up_at is not None:
            if stacks := await read_stacks(services.transport, services.inventory, end):
                say(STACKS_HEAD + "\n" + "\n".join(f"  {line}" for line in stacks))
            say("The bot (`gpuops serve`), where it runs, reads its log on: should it come up after all, it is "
                "recorded ready.")
        if end.status is AttemptStatus.READY:
            say(f"`gpuops stop {end.id}` stops it.")
        else:
            say(f"`gpuops triage {end.id}` names the first cause; `gpuops log {end.id}` shows the last lines.")
        if args.json:
            print(json.dumps({"outcome": end.status.value, "attempt": _attempt_json(end),
                              "preflight": _preflight_json(pre, request.flags, command, launches),
                              "progress": {**asdict(last), "stage": last.stage.name.lower(), "label": last.label}},
                             indent=2, default=str))
        return 0 if end.status is AttemptStatus.READY else 4

    try:
        return _with_services(args, work)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGHUP (Interrupted): main() gives the exit status
        if started:
            with contextlib.suppress(OSError):  # a closed terminal (SIGHUP) has nowhere to show it
                print("\n" + _still_running(started[0]), file=sys.stderr)
                if args.json:
                    print(json.dumps({"outcome": "not followed", "attempt_id": started[0]}, indent=2))
        raise


PROGRESS_LINE_S = 15.0  # a terminal following a launch hears from a long stage this often


def _still_running(attempt_id: str) -> str:
    return (f"Stopped following attempt {attempt_id}; the server itself was not stopped. `gpuops log {attempt_id}` "
            f"shows where it is, `gpuops stop {attempt_id}` stops it, and a running gpuops bot follows it from here.")


async def _answer(prompt: str) -> str:
    """A line the person types ("" at the end of the input). Read on a daemon thread, so that Ctrl-C at the prompt
    ends the command at once instead of waiting for a line."""
    import threading

    loop = asyncio.get_running_loop()
    line: asyncio.Future[str] = loop.create_future()

    def answered(text: str) -> None:
        if not line.done():
            line.set_result(text)

    def read() -> None:
        text = sys.stdin.readline()
        with contextlib.suppress(RuntimeError):  # the command ended meanwhile and its loop is closed
            loop.call_soon_threadsafe(answered, text)

    print(prompt, end="", flush=True)
    threading.Thread(target=read, daemon=True).start()
    text = await line
    if not text:
        print()  # the input ended: end the prompt's line
    return text


async def _confirmed(yes: bool, prompt: str) -> bool:
    """--yes, or a typed y; anything else (an empty or closed input too) is a no, and says nothing was done."""
    if yes or (await _answer(prompt)).strip().lower() in ("y", "yes"):
        return True
    print("Nothing was done.")
    return False


def cmd_stop(args: argparse.Namespace) -> int:
    """/sglang stop from a terminal: the attempt's process group is signalled only after the person answers y (or
    gives --yes), never on an empty or closed input; then nvidia-smi shows whether the memory came back."""
    from bot.core.attempts import is_attempt_id
    from bot.launch import attempt_to_stop, stop
    from bot.views import stop_plan_lines, stop_question, stopped_text

    user = _cli_user()

    async def work(services: Any) -> int:
        target = None if is_attempt_id(args.what) else _one_container(
            args.what, services.inventory, also=OR_ATTEMPT)
        attempt = await attempt_to_stop(services.attempts, args.what, target, "gpuops history")
        print(stop_question(attempt))
        print("\n".join(f"  - {line}" for line in stop_plan_lines(attempt, services.launch.stop_timeout_s)))
        if not await _confirmed(args.yes, "Type y to stop it: "):
            return 3
        result = await stop(services.transport, services.inventory, services.attempts, attempt, services.launch, user)
        text = stopped_text(result)
        print(text)
        await services.store.audit(action="sglang.stop", user=user, channel="", requested_by=user, result=text[:500])
        return 0

    return _with_services(args, work)


def cmd_free(args: argparse.Namespace) -> int:
    """/gpu free from a terminal: the processes holding GPU memory on a node or container, by PID (a recorded
    launch's are left to `gpuops stop`); they are signalled only after the person answers y (or gives --yes), and
    only those listed that still hold memory then and are still the process listed."""
    from bot.core.inventory import resolve_targets
    from bot.launch import free, free_plan
    from bot.views import free_plan_lines, free_question, freed_text, nothing_to_free_text

    user = _cli_user()

    async def work(services: Any) -> int:
        targets = resolve_targets(args.target, services.inventory)
        if len(targets) != 1:
            raise UsageError(f"`{args.target}` is not one node or container")
        plan = await free_plan(services.transport, services.inventory, services.attempts, targets[0],
                               services.limits)
        if not plan.pids:
            print(nothing_to_free_text(plan, "gpuops stop"))
            return 0
        print(free_question(plan))
        print("\n".join(f"  - {line}" for line in free_plan_lines(plan, "gpuops stop")))
        if not await _confirmed(args.yes, "Type y to stop them: "):
            return 3
        result = await free(services.transport, services.inventory, plan.target.node, plan.processes,
                            services.launch)
        text = freed_text(result, plan.target.node)
        print(text)
        await services.store.audit(action="gpu.free", user=user, channel="", requested_by=user, result=text[:500])
        return 0

    return _with_services(args, work)


def cmd_triage(args: argparse.Namespace) -> int:
    """A log file (or stdin) is diagnosed as it is; an attempt id or a container gets the answer /sglang triage
    gives: that attempt's own log read over SSH (stale logs refused), the evidence and the next experiments."""
    # a container or attempt name holds no "/": such a name is a path even when the file is missing
    if args.what == "-" or "/" in args.what or Path(args.what).exists() or args.launch or \
            args.stalled_minutes is not None or args.kernel_log or args.vmid is not None:
        return _triage_file(args)
    from bot.errors import ConfigError

    try:
        return _triage_attempt(args)
    except (TargetError, ConfigError) as exc:
        raise UsageError(f"no log file {args.what} here; as an attempt id or a container: {exc.user_message}") \
            from None


def _triage_attempt(args: argparse.Namespace) -> int:
    from bot.core.attempts import is_attempt_id
    from bot.status import launch_refs_if_read
    from bot.triage import find_attempt, record_triage, triage_attempt
    from bot.views import blocks_to_text, triage_message

    async def work(services: Any) -> int:
        target = None if is_attempt_id(args.what) else _one_container(
            args.what, services.inventory, before=f"no log file {args.what} here; ", also=OR_ATTEMPT)
        attempt = await find_attempt(services.attempts, args.what, target)
        report = await triage_attempt(services.transport, services.inventory, attempt,
                                      lambda: services.attempts.recent(attempt.node, attempt.vmid, 20),
                                      services.launch.stall_timeout_s, lambda: launch_refs_if_read(services.attempts))
        await record_triage(services.attempts, services.store, report, _cli_user(), "")
        if args.json:
            print(json.dumps(_triage_report_json(report), indent=2))
        else:
            print(blocks_to_text(triage_message(report).blocks))
            relaunches = _relaunch_commands(report)
            if relaunches:
                print("to run a next experiment (the buttons of the Slack answer):")
                print("\n".join(f"  {command}" for command in relaunches))
        return 0 if report.finding is not None and report.finding.label != "unknown" else 3

    return _with_services(args, work)


def cmd_log(args: argparse.Namespace) -> int:
    """The last lines of an attempt's own log, read in its container (same answer as /sglang log)."""
    import time

    from bot.attempt_log import read_attempt_log
    from bot.core.attempts import is_attempt_id
    from bot.core.commands import checked_log_lines
    from bot.triage import find_attempt
    from bot.views import attempt_log_messages, blocks_to_text

    lines = checked_log_lines(args.lines)

    async def work(services: Any) -> int:
        target = None if is_attempt_id(args.what) else _one_container(
            args.what, services.inventory, also=OR_ATTEMPT)
        attempt = await find_attempt(services.attempts, args.what, target)
        log = await read_attempt_log(services.transport, attempt, lines)
        print("\n".join(blocks_to_text(m.blocks) for m in attempt_log_messages(log, time.time())))
        return 0 if log.tail is not None else 3

    return _with_services(args, work)


def _relaunch_commands(report: Any) -> list[str]:
    """Each remedy and experiment as the /sglang launch that runs it (through the pre-flight)."""
    import shlex

    from bot.core.flags import redacted
    from bot.launch import remedy_launches

    a = report.attempt
    where = a.container or f"{a.node}:{a.vmid}"
    budget = report.planned.budget if report.planned else None
    flag_sets = [tuple(redacted(flags)) for _, flags in remedy_launches(budget, report.relaunch)]
    flag_sets += [tuple(redacted(e.argv)) for e in report.experiments]
    return [f"/sglang launch {shlex.join((where, a.model_path, *flags))}" for flags in flag_sets]


def _triage_report_json(report: Any) -> dict[str, Any]:
    a = report.attempt
    remedies = report.planned.budget.remedies if report.planned is not None else ()
    return {
        "attempt": a.id, "target": a.target_label, "log": a.log_path, "stale": report.stale,
        "finding": asdict(report.finding) if report.finding is not None else None,
        "gpus": report.gpus, "versions": report.versions, "disk": report.disk, "xid": list(report.xid),
        "oom_kills": list(report.oom_kills), "peer_access": report.peer_access,
        "label_evidence": list(report.label_evidence), "stacks": list(report.stacks),
        "remedies": _remedies_json(remedies, report.relaunch),
        "experiments": [asdict(e) for e in report.experiments],
    }


def _triage_file(args: argparse.Namespace) -> int:
    import shlex

    from bot.core.diagnosis import LaunchContext, diagnose_excerpt
    from bot.core.experiments import finding_experiments
    from bot.core.flags import command_flags
    from bot.core.gpu_faults import oom_kill_findings, oom_kills, xid_events, xid_findings
    from bot.core.label_evidence import killed_by_the_oom_killer

    given = shlex.split(args.launch) if args.launch else []
    launch = command_flags(given)
    context = LaunchContext.from_argv(given) if args.launch else None
    finding = diagnose_excerpt(_read_log(args.what), stalled_minutes=args.stalled_minutes, context=context)
    kernel: list[str] = []
    if args.kernel_log == "-" and args.what == "-":
        raise UsageError("the log and --kernel-log cannot both be read from stdin: save one to a file")
    if args.kernel_log:
        # the node's kernel log of the launch's time, saved (`journalctl -k --since ...`, `dmesg -T`): a kill there
        # explains a log that says nothing of its own death
        text = _read_kernel_log(args.kernel_log, args.what)
        kills = oom_kills(text)
        finding = killed_by_the_oom_killer(finding, kills, args.vmid)
        kernel = [*oom_kill_findings("kernel", kills, args.vmid), *xid_findings("kernel", xid_events(text))]
    elif args.vmid is not None:
        raise UsageError("--vmid names the container of the processes in --kernel-log: give that file too")
    experiments = finding_experiments(finding, launch) if launch else ()
    if args.json:
        print(json.dumps({**asdict(finding), "experiments": [asdict(e) for e in experiments], "kernel": kernel},
                         indent=2))
    else:
        for line in kernel:
            print(line)
        print(f"{finding.label} ({finding.confidence} confidence, phase: {finding.phase})")
        print(f"  why: {finding.explanation}")
        for ev in finding.evidence:
            print(f"  L{ev.line_no}: {ev.text}")
        if finding.also_seen:
            print(f"  also in the log (not the cause): {', '.join(finding.also_seen)}")
        for note in finding.notes:
            print(f"  note: {note}")
        print(f"  next: {finding.next_step}")
        for experiment in experiments:
            print(f"  try: {experiment.change} ({experiment.why}):\n       {shlex.join(experiment.argv)}")
    return 0 if finding.label != "unknown" else 3


def cmd_lab(args: argparse.Namespace) -> int:
    from bot.lab.console import run_lab

    return asyncio.run(interruptible(run_lab(script=args.script)))


def cmd_demo(args: argparse.Namespace) -> int:
    from bot.lab.demo import run_demo

    return asyncio.run(interruptible(run_demo(args.script)))


def cmd_serve(args: argparse.Namespace) -> int:
    from bot.app import serve
    from bot.config import Settings

    logging.getLogger("gpuops").setLevel(logging.INFO)  # what it serves, and when it stops
    asyncio.run(serve(Settings()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuops", description="GPU chat-ops for SGLang on Proxmox")
    sub = parser.add_subparsers(dest="command", required=True)

    status = sub.add_parser("status", help="GPU status of nodes/containers (same answer as /gpu status)")
    status.add_argument("target", nargs="?", default="all")
    status.add_argument("--json", action="store_true", help="print the targets, GPUs and processes as JSON")
    status.add_argument("--inventory", help="inventory file (default: $GPUOPS_INVENTORY or inventory.yml)")
    status.set_defaults(func=cmd_status)

    health = sub.add_parser("health", help="the daily GPU health report, now (same answer as /gpu health)")
    health.add_argument("target", nargs="?", default="all")
    health.add_argument("--json", action="store_true", help="print the report (per-GPU day, findings) as JSON")
    health.add_argument("--inventory", help="inventory file (default: $GPUOPS_INVENTORY or inventory.yml)")
    health.set_defaults(func=cmd_health)

    history = sub.add_parser("history", help="launch attempts recorded in Redis (same answer as /sglang history)")
    history.add_argument("container", nargs="?", help="a container name or node:vmid (default: all)")
    history.add_argument("--count", type=int, default=15)
    history.add_argument("--json", action="store_true",
                         help="print the attempt records (secret flag values redacted) as JSON")
    history.add_argument("--inventory", help="inventory file (default: $GPUOPS_INVENTORY or inventory.yml)")
    history.set_defaults(func=cmd_history)

    incident = sub.add_parser("incident", help="the incident threads following a container: their attempts, "
                              "hypotheses and observations (the summary at the top of each thread)")
    incident.add_argument("container", nargs="?", help="a container name or node:vmid (default: every container "
                          "of the inventory)")
    incident.add_argument("words", nargs="*", metavar="WORD", help="record in the container's thread, as `@gpuops` "
                          "there does: hypothesis TEXT, note TEXT, confirm H1 WHY, refute H1 WHY (the bot says it in "
                          "the thread on its next tick); or history, to print each thread's whole record (every "
                          "attempt, hypothesis, decision and note, in order) instead of its summary")
    incident.add_argument("--thread", metavar="TS", help="the thread (its ts, as listed) when several follow the "
                          "container")
    incident.add_argument("--json", action="store_true", help="print the threads' records (or what was recorded) "
                          "as JSON")
    incident.add_argument("--inventory", help="inventory file (default: $GPUOPS_INVENTORY or inventory.yml)")
    incident.set_defaults(func=cmd_incident)

    smi = sub.add_parser("smi", help="nvidia-smi output tools")
    smi_sub = smi.add_subparsers(dest="smi_command", required=True)
    parse = smi_sub.add_parser("parse", help="parse a saved nvidia-smi output of any kind (auto-detected)")
    parse.add_argument("file", help="file path, or - for stdin")
    parse.add_argument("--json", action="store_true", help="print normalised JSON")
    parse.add_argument("--format", choices=["table", "csv-gpu", "csv-apps", "xml", "q-text", "error"])
    parse.add_argument("--fields", help="for headerless CSV: the --query-gpu/--query-compute-apps field list")
    parse.set_defaults(func=cmd_smi_parse)

    budget = sub.add_parser("budget", help="will an SGLang launch fit, and why (before the 10-minute load)")
    budget.add_argument("--model", required=True, help="model directory (config.json), a config.json file, or a "
                        "Hugging Face id (org/name) in the local cache; with --container, the model's directory or "
                        "Hub id in that container")
    budget.add_argument("--container", help="read the model, the installed SGLang and each GPU's live free memory in "
                        "this container (same answer as /sglang budget); then --gpu and the options up to "
                        "--weights-gib are not given")
    budget.add_argument("--inventory", help="with --container: inventory file (default: $GPUOPS_INVENTORY or "
                        "inventory.yml)")
    budget.add_argument("--gpu", help='GPU model, e.g. "RTX A6000" (required without --container)')
    budget.add_argument("--gpus", type=int, help="how many GPUs the launch may use (default: those its flags use, "
                        "tp x pp x dp; more lets the remedies use them); `--gpu \"2x RTX A6000\"` says it too")
    budget.add_argument("--total-mib", type=int, help="GPU memory, when the GPU name is not known")
    budget.add_argument("--free-mib", help="free MiB per GPU as nvidia-smi shows them, comma-separated (every GPU's, "
                        "in its order, to have a --base-gpu-id launch's picked by index)")
    budget.add_argument("--sglang", help="SGLang version, e.g. 0.5.9 (default: current)")
    budget.add_argument("--weights-gib", type=float,
                        help="weights per GPU an earlier load of this checkpoint logged, same tp/pp/quantization "
                             "(`Load weight end ... mem usage=`): used instead of the estimate")
    budget.add_argument("--json", action="store_true", help="print the numbers as JSON")
    budget.add_argument("--chart", help="also write a per-GPU stacked bar PNG here")
    budget.add_argument("flags", nargs=argparse.REMAINDER, help="-- then the sglang launch flags")
    budget.set_defaults(func=cmd_budget)

    pre = sub.add_parser("preflight", help="the checks /sglang launch makes, without launching: GPUs clean, port, "
                         "hardware, container memory, SGLang and transformers, peer access, the memory budget, every "
                         "flag against the installed SGLang's parser")
    pre.add_argument("--container", help="the container (its name, or node:vmid)")
    pre.add_argument("--model", help="the model's directory in the container, or its Hugging Face id cached there")
    pre.add_argument("--profile", help="a launch profile of the inventory instead of --container, --model and flags")
    pre.add_argument("--json", action="store_true")
    pre.add_argument("--inventory", help="inventory file (default: $GPUOPS_INVENTORY or inventory.yml)")
    pre.add_argument("flags", nargs=argparse.REMAINDER, help="-- then the sglang launch flags")
    pre.set_defaults(func=cmd_preflight)

    launch = sub.add_parser("launch", help="the pre-flight, then the launch with its own log and PID, followed "
                            "until the server answers (same as /sglang launch)")
    launch.add_argument("--container", help="the container (its name, or node:vmid)")
    launch.add_argument("--model", help="the model's directory in the container, or its Hugging Face id cached there")
    launch.add_argument("--profile", help="a launch profile of the inventory instead of --container, --model and "
                        "flags")
    launch.add_argument("--force", action="store_true", help="launch even when the pre-flight refuses (recorded as "
                        "forced)")
    launch.add_argument("--json", action="store_true", help="what a person reads to stderr; at the end, the outcome, "
                        "the attempt's record, the pre-flight and the last progress as one JSON document on stdout")
    launch.add_argument("--inventory", help="inventory file (default: $GPUOPS_INVENTORY or inventory.yml)")
    launch.add_argument("flags", nargs=argparse.REMAINDER, help="-- then the sglang launch flags")
    launch.set_defaults(func=cmd_launch)

    stop_cmd = sub.add_parser("stop", help="stop an attempt's server by its recorded process group, after you answer "
                              "y (same as /sglang stop)")
    stop_cmd.add_argument("what", metavar="ATTEMPT|CONTAINER", help="an attempt id, or a container (its running "
                          "attempt)")
    stop_cmd.add_argument("--yes", action="store_true", help="do not ask; stop it")
    stop_cmd.add_argument("--inventory", help="inventory file (default: $GPUOPS_INVENTORY or inventory.yml)")
    stop_cmd.set_defaults(func=cmd_stop)

    free_cmd = sub.add_parser("free", help="stop, by PID after you answer y, the processes holding GPU memory on a "
                              "node or container (same as /gpu free)")
    free_cmd.add_argument("target", metavar="NODE|CONTAINER")
    free_cmd.add_argument("--yes", action="store_true", help="do not ask; stop the processes listed")
    free_cmd.add_argument("--inventory", help="inventory file (default: $GPUOPS_INVENTORY or inventory.yml)")
    free_cmd.set_defaults(func=cmd_free)

    log_cmd = sub.add_parser("log", help="the last lines of an attempt's own log, read in its container (same answer "
                             "as /sglang log)")
    log_cmd.add_argument("what", metavar="ATTEMPT|CONTAINER", help="an attempt id, or a container (its latest attempt)")
    log_cmd.add_argument("-n", "--lines", type=int, default=DEFAULT_LOG_LINES,
                         help=f"how many lines (default {DEFAULT_LOG_LINES}, at most {LOG_TAIL_MAX_LINES})")
    log_cmd.add_argument("--inventory", help="inventory file (default: $GPUOPS_INVENTORY or inventory.yml)")
    log_cmd.set_defaults(func=cmd_log)

    triage = sub.add_parser("triage", help="name the first cause of a failed SGLang launch: from a log file, or "
                            "from an attempt's own log in its container (same answer as /sglang triage)")
    triage.add_argument("what", metavar="LOGFILE|ATTEMPT|CONTAINER",
                        help="a log file (- for stdin); or an attempt id, or a container (its latest attempt), "
                             "whose own log is read over SSH")
    triage.add_argument("--json", action="store_true")
    triage.add_argument("--launch", help="with a log file: the launch command (its flags decide some generic symptoms)")
    triage.add_argument("--stalled-minutes", type=float,
                        help="with a log file: how long the log has not grown (a hang)")
    triage.add_argument("--kernel-log", metavar="FILE",
                        help="with a log file: the node's kernel log of the launch's time, saved (journalctl -k "
                             "--since ..., dmesg -T): the OOM killer's kills and Xid events in it are read")
    triage.add_argument("--vmid", type=int, help="with --kernel-log: the container the server ran in (else a killed "
                                                  "Python/SGLang process anywhere in the file counts)")
    triage.add_argument("--inventory", help="inventory file (default: $GPUOPS_INVENTORY or inventory.yml)")
    triage.set_defaults(func=cmd_triage)

    lab = sub.add_parser("lab", help="run the embedded lab with a console that shows what Slack would show")
    lab.add_argument("--script", action="store_true", help="play a scripted session instead of reading commands")
    lab.set_defaults(func=cmd_lab)

    demo = sub.add_parser("demo", help="play a scripted bring-up through the real app in the lab")
    demo.add_argument("--script", default="seed", help="which story (default: seed)")
    demo.set_defaults(func=cmd_demo)

    serve = sub.add_parser("serve", help="run the Slack bot (Socket Mode with an app token, else HTTP)")
    serve.set_defaults(func=cmd_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except GpuopsError as exc:
        print(f"gpuops: {exc.user_message}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        with contextlib.suppress(OSError):
            print(f"gpuops: stopped by {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
