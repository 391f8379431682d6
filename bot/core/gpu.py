"""Typed GPU values, as read from nvidia-smi (any format) or NVML.

A value nvidia-smi could not read (``[N/A]``, ``Not Supported``, ``ERR!``) is ``None``
and its literal text is kept in ``raw`` so it can be shown as what it is: a failed read
never looks like an idle GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class ProcessListing(StrEnum):
    """What the output says about GPU processes (tells "none" from "can't see")."""

    LISTED = "listed"  # rows present
    NONE_FOUND = "none-found"  # nvidia-smi printed "No running processes found"
    EMPTY = "empty"  # section present but no rows: typical inside a container / PID namespace
    ABSENT = "absent"  # the output has no process section at all (not queried)


@dataclass(frozen=True)
class GpuProcess:
    pid: int | None
    name: str
    used_mib: int | None
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    type: str | None = None  # C, G, C+G
    gi: str | None = None
    ci: str | None = None
    used_raw: str | None = None  # literal memory cell when it is not a number
    vmid: int | None = None  # LXC container that owns the PID (attributed on the host)
    group: int | None = None  # its process group inside its own PID namespace (NSpgid): a launch's PID there
    # when it started, in clock ticks after boot (/proc/<pid>/stat field 22): tells it from a later process that
    # is given the same PID once it ends, which a stop confirmed for it must leave alone
    started: int | None = None
    running_s: float | None = None  # how long it had run when read (from its start time and the node's uptime)

    @property
    def owner(self) -> str:
        """Whose process it is, as the answers name it: "CT 129", or "host"."""
        return f"CT {self.vmid}" if self.vmid else "host"


@dataclass(frozen=True)
class DeviceHolder:
    """A process that holds a GPU's device node open (``/dev/nvidia0``) while nvidia-smi lists no memory for it: a
    killed server's child that inherited the device, a process stuck exiting. What it holds keeps the GPU memory a
    dead process left from being freed, so nvidia-smi shows that memory held by no process."""

    process: GpuProcess  # its PID, command name, container, group and start time; no GPU index or memory of its own
    devices: tuple[str, ...]  # the GPU device nodes it holds, e.g. ("/dev/nvidia0",)


@dataclass(frozen=True)
class MigDevice:
    gpu: int
    gi: int | None
    ci: int | None
    mig_dev: int | None
    memory_used_mib: int | None
    memory_total_mib: int | None


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str | None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    utilization_pct: int | None = None
    temperature_c: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    fan_pct: int | None = None
    perf_state: str | None = None
    compute_mode: str | None = None
    mig_mode: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    minor_number: int | None = None
    name_truncated: bool = False
    mig_devices: tuple[MigDevice, ...] = ()
    raw: dict[str, str] = field(default_factory=dict)  # literal text of cells that are not values

    @property
    def memory_free_mib(self) -> int | None:
        if self.memory_used_mib is None or self.memory_total_mib is None:
            return None
        return self.memory_total_mib - self.memory_used_mib

    @property
    def unreadable_fields(self) -> tuple[str, ...]:
        """Fields whose cell held a marker instead of a value (N/A, Not Supported, ERR!)."""
        return tuple(sorted(self.raw))


class SmiErrorKind(StrEnum):
    DRIVER_COMMUNICATION_FAILURE = "driver-communication-failure"
    NVML_DRIVER_LIBRARY_MISMATCH = "nvml-driver-library-mismatch"
    NVML_INIT_UNKNOWN_ERROR = "nvml-init-unknown-error"
    NVML_LIBRARY_NOT_FOUND = "nvml-library-not-found"
    NO_DEVICES_FOUND = "no-devices-found"
    DEVICE_HANDLE_UNKNOWN_ERROR = "device-handle-unknown-error"
    DEVICE_HANDLE_GPU_LOST = "device-handle-gpu-lost"


SMI_ERROR_MEANING: dict[SmiErrorKind, str] = {
    SmiErrorKind.DRIVER_COMMUNICATION_FAILURE: "driver not loaded or not reachable",
    SmiErrorKind.NVML_DRIVER_LIBRARY_MISMATCH: (
        "NVML/driver version mismatch (driver upgraded without reboot, or container libs differ)"
    ),
    SmiErrorKind.NVML_INIT_UNKNOWN_ERROR: "NVML failed to initialise (often lost device nodes in a container)",
    SmiErrorKind.NVML_LIBRARY_NOT_FOUND: "libnvidia-ml.so not found (driver libs not mounted)",
    SmiErrorKind.NO_DEVICES_FOUND: "no GPU visible (passthrough or driver problem)",
    SmiErrorKind.DEVICE_HANDLE_UNKNOWN_ERROR: "a GPU failed to respond",
    SmiErrorKind.DEVICE_HANDLE_GPU_LOST: "a GPU fell off the bus: reboot needed",
}


@dataclass(frozen=True)
class SmiError:
    kind: SmiErrorKind
    lines: tuple[str, ...]
    pci_bus_id: str | None = None
    nvml_library_version: str | None = None

    @property
    def meaning(self) -> str:
        return SMI_ERROR_MEANING[self.kind]


@dataclass(frozen=True)
class SmiSnapshot:
    """One reading of one machine's GPUs, whatever format it came from."""

    source_format: str  # table | csv-gpu | csv-apps | xml | q-text | error | nvml | query
    gpus: tuple[Gpu, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    nvidia_smi_version: str | None = None
    process_listing: ProcessListing = ProcessListing.ABSENT
    error: SmiError | None = None
    attached_gpus: int | None = None
    text_after: tuple[str, ...] = ()
    sample_count: int | None = None  # CSV logs: how many rows were read
    processes: tuple[GpuProcess, ...] = ()

    def processes_of(self, gpu: Gpu) -> tuple[GpuProcess, ...]:
        """Processes on one GPU: matched by UUID when both sides have one, else by index."""
        return tuple(p for p in self.processes if process_on_gpu(p, gpu))


def process_on_gpu(process: GpuProcess, gpu: Gpu) -> bool:
    if process.gpu_uuid and gpu.uuid:
        return process.gpu_uuid == gpu.uuid
    return process.gpu_index is not None and process.gpu_index == gpu.index
