"""nvidia-smi parsers: every format nvidia-smi writes, into :mod:`bot.core.gpu` values.

The bot itself only *asks* for structured output (``--query-gpu`` CSV, ``-q -x``), but
people paste whatever they have into incident threads, so the human table, ``-q`` text
and the one-line error banners are read too. Anything that is not recognised raises a
:class:`~bot.errors.ParseError` that keeps the raw text: never a crash, never an empty
table that looks like an idle machine.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from bot.core.gpu import Gpu, GpuProcess, MigDevice, ProcessListing, SmiError, SmiErrorKind, SmiSnapshot
from bot.errors import ParseError

FORMATS = ("table", "csv-gpu", "csv-apps", "xml", "q-text", "error")

# ---------------------------------------------------------------------------- cells

_MARKER_WORDS = {
    "n/a",
    "not supported",
    "err!",
    "unknown error",
    "not available in wddm driver model",
    "insufficient permissions",
    "gpu is lost",
    "unknown",
}
_UNIT_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(MiB|GiB|KiB|%|W|C|MHz|mW)?\s*$")


def is_marker(cell: str) -> bool:
    """True when a cell holds a "could not read" marker instead of a value."""
    text = cell.strip()
    return (text.startswith("[") and text.endswith("]")) or text.lower() in _MARKER_WORDS


def number(cell: str | None) -> float | None:
    """A numeric cell with or without its unit (``841 MiB``, ``22 %``, ``104W``, ``37``)."""
    if cell is None:
        return None
    match = _UNIT_RE.match(cell)
    if not match:
        return None
    value = float(match.group(1))
    return value / 1000 if match.group(2) == "mW" else value


def integer(cell: str | None) -> int | None:
    value = number(cell)
    return None if value is None else int(round(value))


class _Cells:
    """Collects typed values and remembers the literal text of unreadable ones."""

    def __init__(self) -> None:
        self.raw: dict[str, str] = {}

    def int(self, key: str, cell: str | None) -> int | None:
        value = integer(cell)
        if value is None and cell is not None and cell.strip():
            self.raw[key] = cell.strip()
        return value

    def float(self, key: str, cell: str | None) -> float | None:
        value = number(cell)
        if value is None and cell is not None and cell.strip():
            self.raw[key] = cell.strip()
        return value

    @staticmethod
    def text(cell: str | None) -> str | None:
        if cell is None:
            return None
        cell = cell.strip()
        return None if not cell or is_marker(cell) else cell


# ---------------------------------------------------------------------------- errors

_PCI = r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])"
_ERROR_RULES: tuple[tuple[re.Pattern[str], SmiErrorKind], ...] = (
    (re.compile(r"couldn't communicate with the NVIDIA driver", re.I), SmiErrorKind.DRIVER_COMMUNICATION_FAILURE),
    (re.compile(r"Driver/library version mismatch", re.I), SmiErrorKind.NVML_DRIVER_LIBRARY_MISMATCH),
    (re.compile(r"Failed to initialize NVML: Unknown Error", re.I), SmiErrorKind.NVML_INIT_UNKNOWN_ERROR),
    (re.compile(r"couldn't find libnvidia-ml\.so", re.I), SmiErrorKind.NVML_LIBRARY_NOT_FOUND),
    (re.compile(r"No devices were found", re.I), SmiErrorKind.NO_DEVICES_FOUND),
    (re.compile(r"Unable to determine the device handle for GPU\s*" + _PCI + r": GPU is lost", re.I),
     SmiErrorKind.DEVICE_HANDLE_GPU_LOST),
    (re.compile(r"Unable to determine the device handle for GPU\s*" + _PCI + r": Unknown Error", re.I),
     SmiErrorKind.DEVICE_HANDLE_UNKNOWN_ERROR),
)


def find_error(text: str) -> SmiError | None:
    """The error banner in an output, if any (it may stand alone or beside a table)."""
    for pattern, kind in _ERROR_RULES:
        match = pattern.search(text)
        if not match:
            continue
        lines = tuple(line.strip() for line in text.splitlines() if line.strip())
        pci = match.group(1) if match.groups() else None
        lib = re.search(r"NVML library version:\s*(\S+)", text)
        return SmiError(kind=kind, lines=lines, pci_bus_id=pci, nvml_library_version=lib.group(1) if lib else None)
    return None


def parse_error(text: str) -> SmiSnapshot:
    error = find_error(text)
    if error is None:
        raise ParseError("not an nvidia-smi error banner", text, kind="unrecognised-error")
    return SmiSnapshot(source_format="error", error=error)


# ---------------------------------------------------------------------------- table

_HEADER_RE = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?:Driver|KMD) Version:\s*(?P<driver>\S+)"
    r"(?:\s+CUDA(?: UMD)? Version:\s*(?P<cuda>\S+))?"
)
_PROC_GICI_RE = re.compile(
    r"^\s*(?P<gpu>\d+)\s+(?P<gi>\S+)\s+(?P<ci>\S+)\s+(?P<pid>\d+)\s+(?P<type>\S+)\s+(?P<name>.*?)\s+(?P<mem>\S+)\s*$"
)
_PROC_OLD_RE = re.compile(r"^\s*(?P<gpu>\d+)\s+(?P<pid>\d+)\s+(?P<type>\S+)\s+(?P<name>.*?)\s+(?P<mem>\S+)\s*$")
_MEM_PAIR_RE = re.compile(r"(\d+)\s*MiB\s*/\s*(\d+)\s*MiB")


def _cells(line: str) -> list[str] | None:
    line = line.rstrip()
    if not (line.startswith("|") and line.endswith("|")) or len(line) < 2:
        return None
    return line[1:-1].split("|")


def _is_table_line(line: str) -> bool:
    s = line.strip()
    return bool(s) and s[0] in "|+"


def parse_table(text: str) -> SmiSnapshot:
    """The default ``nvidia-smi`` table, every layout from driver 384 to 610 (and fragments)."""
    lines = text.splitlines()
    header = next((m for m in map(_HEADER_RE.search, lines) if m), None)
    gpus: list[Gpu] = []
    mig: list[MigDevice] = []
    processes: list[GpuProcess] = []
    listing = ProcessListing.ABSENT
    last_table_line = -1
    i = 0
    section = "gpus"
    gici_columns = False
    seen_process_rule = False
    while i < len(lines):
        line = lines[i]
        if _is_table_line(line):
            last_table_line = i
        if "MIG devices:" in line:
            section = "mig"
        elif "Processes:" in line:
            section = "processes"
            listing = ProcessListing.EMPTY
            seen_process_rule = False
        cells = _cells(line)
        if section == "gpus" and cells and len(cells) == 3 and re.search(_PCI, cells[1]):
            stats = _cells(lines[i + 1]) if i + 1 < len(lines) else None
            extra = _cells(lines[i + 2]) if i + 2 < len(lines) else None
            mig_mode = None
            if extra and len(extra) == 3 and not extra[0].strip() and extra[2].strip():
                mig_mode = extra[2].strip()
            gpus.append(_table_gpu(cells, stats, mig_mode, text))
        elif section == "mig" and cells and len(cells) == 4:
            ids = cells[0].split()
            if len(ids) == 4 and all(x.isdigit() for x in ids):
                mem = _MEM_PAIR_RE.search(cells[1])
                mig.append(MigDevice(
                    gpu=int(ids[0]), gi=int(ids[1]), ci=int(ids[2]), mig_dev=int(ids[3]),
                    memory_used_mib=int(mem.group(1)) if mem else None,
                    memory_total_mib=int(mem.group(2)) if mem else None,
                ))
        elif section == "processes" and cells is not None:
            content = "|".join(cells)
            if not seen_process_rule:
                if content.startswith("="):
                    seen_process_rule = True
                elif re.search(r"\bGI\b", content):
                    gici_columns = True
            elif "No running processes found" in content:
                listing = ProcessListing.NONE_FOUND
            elif content.strip():
                processes.append(_table_process(content, gici_columns, text))
                listing = ProcessListing.LISTED
        i += 1
    if not gpus:
        raise ParseError("no GPU rows found in the nvidia-smi table", text, kind="table-without-gpus")
    text_after = tuple(ln.strip() for ln in lines[last_table_line + 1:] if ln.strip())
    if mig:
        gpus = [replace(g, mig_devices=tuple(m for m in mig if m.gpu == g.index)) for g in gpus]
    return SmiSnapshot(
        source_format="table",
        gpus=tuple(gpus),
        driver_version=header.group("driver") if header else None,
        cuda_version=header.group("cuda") if header else None,
        nvidia_smi_version=header.group("smi") if header else None,
        process_listing=listing,
        processes=tuple(processes),
        text_after=text_after,
        error=find_error(text),
    )


def _table_gpu(first: list[str], stats: list[str] | None, mig_mode: str | None, text: str) -> Gpu:
    ident = first[0].split()
    if not ident or not ident[0].isdigit():
        raise ParseError("GPU row without an index", text, kind="table-row")
    index = int(ident[0])
    name = " ".join(ident[1:-1]) if len(ident) > 2 else " ".join(ident[1:])
    cells = _Cells()
    if not stats or len(stats) != 3:
        raise ParseError(f"GPU {index}: the row under its name is missing or malformed", text, kind="table-row")
    left = stats[0].split()
    fan = left[0] if left else None
    temp = left[1] if len(left) > 1 else None
    perf = left[2] if len(left) > 2 else None
    power = " ".join(left[3:])
    draw, _, cap = power.partition("/")
    memory_cell = stats[1].strip()
    mem = _MEM_PAIR_RE.search(memory_cell)
    used = int(mem.group(1)) if mem else None
    total = int(mem.group(2)) if mem else None
    if mem is None:
        cells.raw["memory"] = memory_cell
    right = stats[2].split()
    util_cell = right[0] if right else None
    return Gpu(
        index=index,
        name=name or None,
        name_truncated=name.endswith("..."),
        memory_used_mib=used,
        memory_total_mib=total,
        utilization_pct=cells.int("utilization", util_cell),
        temperature_c=cells.int("temperature", temp),
        power_draw_w=cells.float("power_draw", draw.strip() or None),
        power_limit_w=cells.float("power_limit", cap.strip() or None),
        fan_pct=cells.int("fan", fan),
        perf_state=_Cells.text(perf),
        compute_mode=" ".join(right[1:]) or None,
        mig_mode=mig_mode,
        pci_bus_id=re.search(_PCI, first[1]).group(1) if re.search(_PCI, first[1]) else None,  # type: ignore[union-attr]
        raw=cells.raw,
    )


def _table_process(content: str, gici: bool, text: str) -> GpuProcess:
    match = (_PROC_GICI_RE if gici else _PROC_OLD_RE).match(content)
    if not match:
        raise ParseError(f"process row not understood: {content.strip()!r}", text, kind="table-process-row")
    mem = match.group("mem")
    used = integer(mem)
    return GpuProcess(
        pid=int(match.group("pid")),
        name=match.group("name").strip(),
        used_mib=used,
        used_raw=None if used is not None else mem,
        gpu_index=int(match.group("gpu")),
        type=match.group("type"),
        gi=match.group("gi") if gici else None,
        ci=match.group("ci") if gici else None,
    )


# ---------------------------------------------------------------------------- CSV

# --query-gpu / --query-compute-apps fields: the bot's name -> the names nvidia-smi may print
_FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("name", "gpu_name"),
    "uuid": ("uuid", "gpu_uuid"),
    "pci.bus_id": ("pci.bus_id", "gpu_bus_id"),
    "used_memory": ("used_memory", "used_gpu_memory"),
    "power.draw": ("power.draw", "power.draw.instant", "power.draw.average"),
    "power.limit": ("power.limit", "enforced.power.limit"),
}
KNOWN_QUERY_FIELDS = frozenset({
    "timestamp", "driver_version", "count", "name", "serial", "uuid", "pci.bus_id", "index",
    "memory.total", "memory.used", "memory.free", "memory.reserved", "utilization.gpu",
    "utilization.memory", "temperature.gpu", "power.draw", "power.limit", "fan.speed", "pstate",
    "compute_mode", "mig.mode.current", "pid", "process_name", "used_memory", "gpu_name",
    "gpu_uuid", "gpu_bus_id", "gpu_serial", "used_gpu_memory",
})
_APP_FIELDS = {"pid", "process_name", "used_memory", "used_gpu_memory"}


def normalise_field(column: str) -> str:
    """``memory.used [MiB]`` -> ``memory.used``."""
    return column.strip().split(" [", 1)[0].strip().lower()


def field(row: dict[str, str], name: str) -> str | None:
    """A field's cell under any of its printed names; a readable value beats a marker."""
    cells = [row[n] for n in _FIELD_ALIASES.get(name, (name,)) if n in row]
    return next((c for c in cells if not is_marker(c)), cells[0] if cells else None)


@dataclass(frozen=True)
class CsvTable:
    """A ``--query-*`` CSV as printed: its column names (as shown) and its rows."""

    columns: tuple[str, ...]
    rows: tuple[dict[str, str], ...]  # normalised field -> literal cell
    has_header: bool
    header_repeats: int

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(normalise_field(c) for c in self.columns)

    @property
    def is_apps(self) -> bool:
        return bool(_APP_FIELDS & set(self.fields))


def _looks_like_header(row: Sequence[str]) -> bool:
    fields = [normalise_field(c) for c in row]
    return any(f in KNOWN_QUERY_FIELDS for f in fields) and all(
        re.fullmatch(r"[a-z_.0-9]+", f) for f in fields
    )


def read_csv(text: str, fields: Sequence[str] | None = None) -> CsvTable:
    """Read a ``--format=csv[,noheader][,nounits]`` output.

    A headerless CSV names no columns: ``fields`` (the ``--query-gpu=`` list that produced
    it) must be given, or the result would be guesswork.
    """
    rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r and any(c.strip() for c in r)]
    if not rows:
        raise ParseError("empty CSV output", text, kind="csv-empty")
    header: list[str] | None = rows[0] if _looks_like_header(rows[0]) else None
    if header is None:
        if not fields:
            raise ParseError(
                "headerless CSV: say which --query fields produced it (e.g. --fields name,memory.total)",
                text, kind="csv-headerless",
            )
        header = list(fields)
        body = rows
    else:
        body = rows[1:]
    names = [normalise_field(c) for c in header]
    repeats = 1 if header is not None and fields is None else 0
    records: list[dict[str, str]] = []
    for row in body:
        if [c.strip() for c in row] == [c.strip() for c in header]:
            repeats += 1
            continue
        if len(row) != len(names):
            raise ParseError(
                f"CSV row has {len(row)} cells, header has {len(names)}: {', '.join(row)[:120]}",
                text, kind="csv-row",
            )
        records.append({n: c.strip() for n, c in zip(names, row, strict=True)})
    return CsvTable(columns=tuple(c.strip() for c in header), rows=tuple(records),
                    has_header=fields is None, header_repeats=repeats)


def gpu_from_query_row(row: dict[str, str], position: int) -> Gpu:
    cells = _Cells()
    index = integer(field(row, "index"))
    return Gpu(
        index=position if index is None else index,
        name=_Cells.text(field(row, "name")),
        memory_used_mib=cells.int("memory_used", field(row, "memory.used")),
        memory_total_mib=cells.int("memory_total", field(row, "memory.total")),
        utilization_pct=cells.int("utilization", field(row, "utilization.gpu")),
        temperature_c=cells.int("temperature", field(row, "temperature.gpu")),
        power_draw_w=cells.float("power_draw", field(row, "power.draw")),
        power_limit_w=cells.float("power_limit", field(row, "power.limit")),
        fan_pct=cells.int("fan", field(row, "fan.speed")),
        perf_state=_Cells.text(field(row, "pstate")),
        compute_mode=_Cells.text(field(row, "compute_mode")),
        mig_mode=_Cells.text(field(row, "mig.mode.current")),
        uuid=_Cells.text(field(row, "uuid")),
        pci_bus_id=_Cells.text(field(row, "pci.bus_id")),
        raw=cells.raw,
    )


def process_from_apps_row(row: dict[str, str]) -> GpuProcess:
    mem = field(row, "used_memory")
    used = integer(mem)
    return GpuProcess(
        pid=integer(field(row, "pid")),
        name=(field(row, "process_name") or "").strip(),
        used_mib=used,
        used_raw=mem if used is None and mem else None,
        gpu_uuid=_Cells.text(field(row, "uuid")),
        gpu_index=integer(field(row, "index")),
    )


def parse_csv_gpu(text: str, fields: Sequence[str] | None = None) -> SmiSnapshot:
    table = read_csv(text, fields)
    if table.is_apps:
        raise ParseError("this CSV lists processes (--query-compute-apps), not GPUs", text, kind="csv-kind")
    return snapshot_from_query(table)


def snapshot_from_query(table: CsvTable, processes: CsvTable | None = None) -> SmiSnapshot:
    """GPUs from a ``--query-gpu`` table; a timestamped log keeps each GPU's latest row."""
    rows = table.rows
    if "timestamp" in table.fields:
        latest: dict[str, tuple[int, dict[str, str]]] = {}
        for row in rows:
            key = field(row, "uuid") or field(row, "pci.bus_id") or field(row, "index") or "0"
            position = latest[key][0] if key in latest else len(latest)
            latest[key] = (position, row)
        gpus = tuple(gpu_from_query_row(r, p) for p, r in latest.values())
    else:
        gpus = tuple(gpu_from_query_row(r, p) for p, r in enumerate(rows))
    driver = next((r["driver_version"] for r in rows if _Cells.text(r.get("driver_version"))), None)
    procs, listing = processes_from_query(processes) if processes is not None else ((), ProcessListing.ABSENT)
    return SmiSnapshot(
        source_format="csv-gpu",
        gpus=gpus,
        driver_version=driver,
        process_listing=listing,
        processes=procs,
        sample_count=len(rows),
    )


def processes_from_query(table: CsvTable | None) -> tuple[tuple[GpuProcess, ...], ProcessListing]:
    """A ``--query-compute-apps`` table; ``None`` (nvidia-smi printed nothing) means no processes."""
    procs = tuple(process_from_apps_row(r) for r in table.rows) if table is not None else ()
    return procs, ProcessListing.LISTED if procs else ProcessListing.NONE_FOUND


def parse_csv_apps(text: str, fields: Sequence[str] | None = None) -> SmiSnapshot:
    table = read_csv(text, fields)
    if not table.is_apps:
        raise ParseError("this CSV lists GPUs, not processes", text, kind="csv-kind")
    procs = tuple(process_from_apps_row(r) for r in table.rows)
    return SmiSnapshot(
        source_format="csv-apps",
        processes=procs,
        process_listing=ProcessListing.LISTED if procs else ProcessListing.NONE_FOUND,
    )


# ---------------------------------------------------------------------------- XML

def _x(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    return found.text.strip() if found is not None and found.text is not None else None


def _first(node: ET.Element, *paths: str) -> str | None:
    for path in paths:
        value = _x(node, path)
        if value is not None:
            return value
    return None


def parse_xml(text: str) -> SmiSnapshot:
    """``nvidia-smi -q -x`` (DTD versions 9 to 13, with or without DOCTYPE)."""
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise ParseError(f"nvidia-smi XML is not well-formed: {exc}", text, kind="xml-syntax") from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"XML root is <{root.tag}>, expected <nvidia_smi_log>", text, kind="xml-root")
    gpus: list[Gpu] = []
    processes: list[GpuProcess] = []
    any_process_element = False
    for position, node in enumerate(root.findall("gpu")):
        gpu = _xml_gpu(node, position)
        gpus.append(gpu)
        element = node.find("processes")
        if element is not None:  # present and empty: nvidia-smi looked and found none
            any_process_element = True
            processes += _xml_processes(element, gpu)
    listing = ProcessListing.ABSENT
    if any_process_element:
        listing = ProcessListing.LISTED if processes else ProcessListing.NONE_FOUND
    return SmiSnapshot(
        source_format="xml",
        gpus=tuple(gpus),
        driver_version=_x(root, "driver_version"),
        cuda_version=_x(root, "cuda_version"),
        attached_gpus=integer(_x(root, "attached_gpus")),
        process_listing=listing,
        processes=tuple(processes),
    )


def _xml_gpu(node: ET.Element, position: int) -> Gpu:
    """One ``<gpu>`` element: its readings (power under the element names of each DTD version) and MIG devices."""
    cells = _Cells()
    mig_devices = tuple(
        MigDevice(
            gpu=position,
            gi=integer(_x(m, "gpu_instance_id")),
            ci=integer(_x(m, "compute_instance_id")),
            mig_dev=integer(_x(m, "index")),
            memory_used_mib=integer(_x(m, "fb_memory_usage/used")),
            memory_total_mib=integer(_x(m, "fb_memory_usage/total")),
        )
        for m in node.findall("mig_devices/mig_device")
    )
    return Gpu(
        index=position,
        name=_Cells.text(_x(node, "product_name")),
        memory_used_mib=cells.int("memory_used", _x(node, "fb_memory_usage/used")),
        memory_total_mib=cells.int("memory_total", _x(node, "fb_memory_usage/total")),
        utilization_pct=cells.int("utilization", _x(node, "utilization/gpu_util")),
        temperature_c=cells.int("temperature", _x(node, "temperature/gpu_temp")),
        power_draw_w=cells.float("power_draw", _first(
            node, "gpu_power_readings/power_draw", "gpu_power_readings/instant_power_draw",
            "power_readings/power_draw", "gpu_power_readings/average_power_draw")),
        power_limit_w=cells.float("power_limit", _first(
            node, "gpu_power_readings/current_power_limit", "power_readings/power_limit",
            "power_readings/enforced_power_limit")),
        fan_pct=cells.int("fan", _x(node, "fan_speed")),
        perf_state=_Cells.text(_x(node, "performance_state")),
        compute_mode=_Cells.text(_x(node, "compute_mode")),
        mig_mode=_x(node, "mig_mode/current_mig"),
        uuid=_Cells.text(_x(node, "uuid")),
        pci_bus_id=node.get("id") or _x(node, "pci/pci_bus_id"),
        minor_number=integer(_x(node, "minor_number")),
        mig_devices=mig_devices,
        raw=cells.raw,
    )


def _xml_processes(element: ET.Element, gpu: Gpu) -> list[GpuProcess]:
    """The ``<process_info>`` entries of one GPU's ``<processes>``."""
    processes = []
    for info in element.findall("process_info"):
        mem = _x(info, "used_memory")
        used = integer(mem)
        processes.append(GpuProcess(
            pid=integer(_x(info, "pid")),
            name=_x(info, "process_name") or "",
            used_mib=used,
            used_raw=mem if used is None else None,
            gpu_index=gpu.index,
            gpu_uuid=gpu.uuid,
            type=_x(info, "type"),
            gi=_x(info, "gpu_instance_id"),
            ci=_x(info, "compute_instance_id"),
        ))
    return processes


# ---------------------------------------------------------------------------- -q text

@dataclass
class _Node:
    key: str
    value: str | None
    children: list[_Node]

    def get(self, *path: str) -> _Node | None:
        node: _Node | None = self
        for part in path:
            node = next((c for c in node.children if c.key == part), None) if node else None
        return node

    def value_of(self, *path: str) -> str | None:
        node = self.get(*path)
        return node.value if node else None


def _qtext_tree(text: str) -> _Node:
    root = _Node("", None, [])
    stack: list[tuple[int, _Node]] = [(-1, root)]
    for line in text.splitlines():
        if not line.strip() or line.strip().startswith("="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, sep, value = line.strip().partition(":")
        if sep and re.match(r"^GPU [0-9A-Fa-f]{4,8}$", key.strip()):  # "GPU 00000000:01:00.0"
            key, value, sep = line.strip(), "", ""
        node = _Node(key.strip(), value.strip() if sep else None, [])
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def parse_qtext(text: str) -> SmiSnapshot:
    """``nvidia-smi -q`` (also ``-a``): an indented key/value tree."""
    root = _qtext_tree(text)
    gpus: list[Gpu] = []
    processes: list[GpuProcess] = []
    any_processes = False
    for position, node in enumerate(n for n in root.children if n.key.startswith("GPU ")):
        cells = _Cells()
        mig_devices = tuple(
            MigDevice(
                gpu=position,
                gi=integer(m.value_of("GPU Instance ID")),
                ci=integer(m.value_of("Compute Instance ID")),
                mig_dev=integer(m.value_of("Index")),
                memory_used_mib=integer(m.value_of("Shared FB Memory Usage", "Used")
                                        or m.value_of("FB Memory Usage", "Used")),
                memory_total_mib=integer(m.value_of("Shared FB Memory Usage", "Total")
                                         or m.value_of("FB Memory Usage", "Total")),
            )
            for m in node.children if m.key == "MIG Device"
        )
        power = node.get("GPU Power Readings") or node.get("Power Readings")
        gpu = Gpu(
            index=position,
            name=_Cells.text(node.value_of("Product Name")),
            memory_used_mib=cells.int("memory_used", node.value_of("FB Memory Usage", "Used")),
            memory_total_mib=cells.int("memory_total", node.value_of("FB Memory Usage", "Total")),
            utilization_pct=cells.int("utilization", node.value_of("Utilization", "Gpu")
                                       or node.value_of("Utilization", "GPU")),
            temperature_c=cells.int("temperature", node.value_of("Temperature", "GPU Current Temp")),
            power_draw_w=cells.float("power_draw", _any_value(
                power, "Power Draw", "Instantaneous Power Draw", "Average Power Draw")),
            power_limit_w=cells.float("power_limit", _any_value(power, "Current Power Limit", "Power Limit")),
            fan_pct=cells.int("fan", node.value_of("Fan Speed")),
            perf_state=_Cells.text(node.value_of("Performance State")),
            compute_mode=_Cells.text(node.value_of("Compute Mode")),
            mig_mode=node.value_of("MIG Mode", "Current"),
            uuid=_Cells.text(node.value_of("GPU UUID")),
            pci_bus_id=node.key.split(" ", 1)[1],
            minor_number=integer(node.value_of("Minor Number")),
            mig_devices=mig_devices,
            raw=cells.raw,
        )
        gpus.append(gpu)
        section = node.get("Processes")
        if section is not None:
            any_processes = True
            processes.extend(_qtext_processes(section, position, gpu.uuid))
    if not gpus:
        raise ParseError("no GPU sections in nvidia-smi -q output", text, kind="qtext-without-gpus")
    listing = ProcessListing.ABSENT
    if any_processes:
        listing = ProcessListing.LISTED if processes else ProcessListing.NONE_FOUND
    return SmiSnapshot(
        source_format="q-text",
        gpus=tuple(gpus),
        driver_version=_version(root.value_of("KMD Version") or root.value_of("Driver Version")),
        cuda_version=_version(root.value_of("CUDA UMD Version") or root.value_of("CUDA Version")),
        attached_gpus=integer(root.value_of("Attached GPUs")),
        process_listing=listing,
        processes=tuple(processes),
    )


def _any_value(node: _Node | None, *keys: str) -> str | None:
    if node is None:
        return None
    return next((v for v in (node.value_of(k) for k in keys) if v is not None), None)


def _version(value: str | None) -> str | None:
    """``610.57.04 [Deprecated; ...]`` -> ``610.57.04``."""
    return value.split()[0] if value else None


def _qtext_processes(section: _Node, position: int, uuid: str | None) -> Iterable[GpuProcess]:
    """Rows are flat siblings (GI, CI, Process ID) with Type/Name/Memory nested under the PID."""
    gi = ci = None
    for child in section.children:
        if child.key == "GPU instance ID":
            gi = child.value
        elif child.key == "Compute instance ID":
            ci = child.value
        elif child.key == "Process ID":
            mem = child.value_of("Used GPU Memory")
            used = integer(mem)
            yield GpuProcess(
                pid=integer(child.value), name=child.value_of("Name") or "", used_mib=used,
                used_raw=mem if used is None else None, gpu_index=position, gpu_uuid=uuid,
                type=child.value_of("Type"), gi=gi, ci=ci,
            )
            gi = ci = None


# ---------------------------------------------------------------------------- any

def decode(data: bytes) -> str:
    """Bytes as saved: UTF-16 with a BOM (Windows PowerShell redirects) or UTF-8."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = data.decode("utf-16")
    else:
        text = data.decode("utf-8-sig", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def detect_format(text: str) -> str:
    stripped = text.lstrip()
    if stripped.startswith("<?xml") or stripped.startswith("<nvidia_smi_log") or "<nvidia_smi_log" in text[:500]:
        return "xml"
    if "NVSMI LOG" in text or re.search(r"^Attached GPUs\s*:", text, re.M):
        return "q-text"
    if re.search(r"^\s*\|.*\|\s*$", text, re.M) and re.search(r"^\s*\+-{5,}", text, re.M):
        return "table"
    if find_error(text):
        return "error"
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if "," in first or (first and first.strip() and normalise_field(first) in KNOWN_QUERY_FIELDS):
        try:
            table = read_csv(text, None)
        except ParseError as exc:
            if exc.kind == "csv-headerless":
                return "csv-gpu"
            raise
        return "csv-apps" if table.is_apps else "csv-gpu"
    raise ParseError("not a recognised nvidia-smi output", text, kind="unknown-format")


def parse_any(text: str, fields: Sequence[str] | None = None, fmt: str | None = None) -> SmiSnapshot:
    """Parse any supported nvidia-smi output; ``fmt`` forces a format, else it is detected."""
    fmt = fmt or detect_format(text)
    if fmt == "table":
        return parse_table(text)
    if fmt == "xml":
        return parse_xml(text)
    if fmt == "q-text":
        return parse_qtext(text)
    if fmt == "error":
        return parse_error(text)
    if fmt == "csv-apps":
        return parse_csv_apps(text, fields)
    if fmt == "csv-gpu":
        return parse_csv_gpu(text, fields)
    raise ParseError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}", text, kind="unknown-format")
