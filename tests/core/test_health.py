from datetime import datetime
from zoneinfo import ZoneInfo

from bot.core.health import GpuSample, Schedule, Unreachable, build_report, due_occurrence
from bot.core.report import LEFT_RUNNING, LaunchRef


def ts(text, zone="UTC"):
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


def test_due_occurrence_in_a_time_zone_with_grace():
    berlin = Schedule("morning", "C1", "08:30", "Europe/Berlin")
    assert due_occurrence(berlin, ts("2026-12-03 08:29", "Europe/Berlin")) is None
    assert due_occurrence(berlin, ts("2026-12-03 08:30", "Europe/Berlin")) == "2026-12-03"
    assert due_occurrence(berlin, ts("2026-12-03 14:29", "Europe/Berlin")) == "2026-12-03"  # late, within 6 h
    assert due_occurrence(berlin, ts("2026-12-03 14:31", "Europe/Berlin")) is None  # missed for good
    late_night = Schedule("late", "C1", "23:00", "UTC")
    assert due_occurrence(late_night, ts("2026-12-04 02:00")) == "2026-12-03"  # across midnight


def sample(at, gpu=0, used=1, util=0, holders=None, target="pve5", driver="580.126.09"):
    return GpuSample(at, target, gpu, "NVIDIA RTX A6000", used, 49140, util, 40, 30.0, holders or {}, driver, "13.0")


def test_idle_held_orphaned_unreachable_drift_and_changes():
    now = ts("2026-12-03 08:30")
    samples = [sample(now - h * 3600, 0, 30000, 0, {"CT 129": 30000}) for h in (3, 2, 1, 0)]
    samples += [sample(now - h * 3600, 1, 20000, 0) for h in (1, 0)]
    samples += [sample(now - h * 3600, 0, 1, 55, target="pve6", driver="570.124.06") for h in (2, 0)]
    down = [Unreachable(now, "pve7", "no answer within 12s")]
    previous = {"gpus": [{"target": "pve5", "gpu": 0, "holders_now": {}}],
                "versions": {"pve5": "driver 570 / CUDA 12.8"}, "unreachable": []}
    report = build_report(samples, down, now, previous)
    assert "pve5 GPU 0: memory held while idle for 3.0 h — CT 129 30000 MiB" in report.findings
    assert ("pve5 GPU 1: 20000 MiB held with no process listed (orphaned): `/gpu free pve5` finds what keeps it"
            in report.findings)
    assert any(f.startswith("driver/CUDA differ across nodes") for f in report.findings)
    assert report.unreachable == ("pve7: no answer within 12s",)
    assert "pve5 GPU 0: CT 129 now holds memory" in report.changes
    assert "pve5: driver 570 / CUDA 12.8 -> driver 580.126.09 / CUDA 13.0" in report.changes
    day = next(d for d in report.gpus if d.target == "pve6")
    assert (day.util_peak_pct, day.util_mean_pct, day.idle_held_hours) == (55, 55, 0.0)
    assert not any("cap" in f for f in report.findings)  # these samples carry no enforced cap


def test_memory_held_while_idle_names_the_launch_holding_it_and_how_to_free_a_failed_ones():
    now = ts("2026-12-03 08:30")
    samples = [sample(now - h * 3600, gpu, 30000, 0, {"CT 129": 30000}) for h in (3, 2, 1, 0) for gpu in (0, 1)]
    serving = LaunchRef("a20261203-050000-aaaa", "ready", 30000)
    left = LaunchRef("a20261203-040000-bbbb", LEFT_RUNNING, 30001)
    report = build_report(samples, [], now, None, held_by={("pve5", 0): (serving,), ("pve5", 1): (left,)})
    assert ("pve5 GPU 0: memory held while idle for 3.0 h — CT 129 30000 MiB (a20261203-050000-aaaa (ready, port "
            "30000))") in report.findings
    assert ("pve5 GPU 1: memory held while idle for 3.0 h — CT 129 30000 MiB (a20261203-040000-bbbb (failed, left "
            "running, port 30001): a failed launch's server, `/sglang stop a20261203-040000-bbbb` frees it)"
            ) in report.findings


def test_power_over_the_enforced_cap_is_a_finding_at_the_cap_is_not():
    now = ts("2026-12-03 08:30")

    def at_power(h, draw, gpu=0):
        return GpuSample(now - h * 3600, "pve5", gpu, "NVIDIA RTX A6000", 40000, 49140, 98, 70, draw, {"CT 129": 40000},
                         "580.126.09", "13.0", power_limit_w=300.0)

    samples = [at_power(h, w) for h, w in ((3, 299.8), (2, 341.2), (1, 300.9), (0, 355.0))]
    samples += [at_power(h, 314.0, gpu=1) for h in (1, 0)]  # within 5% of the cap: running at the limit
    report = build_report(samples, [], now, None)
    assert [f for f in report.findings if "cap" in f] == ["pve5 GPU 0: drew 355 W over its 300 W cap in 2 of 4 samples"]



def test_samples_from_a_status_sum_each_containers_memory_and_keep_unread_targets_as_down():
    """One sample per GPU row, with the memory each holder uses summed (a container's processes together, host
    processes as `host`); a target that gave no rows is recorded as down with its problem; one whose
    nvidia-smi answered with an error banner and no GPUs is down with that banner's meaning."""
    from bot.core.gpu import GpuProcess, ProcessListing, SmiSnapshot
    from bot.core.health import samples_from
    from bot.core.inventory import Target
    from bot.core.smi import find_error
    from bot.core.status import TargetState, assess_node, unreachable
    from tests.conftest import FIXTURES
    from tests.core.test_argv_and_status import gpu, node_snapshot

    procs = [GpuProcess(4242, "python3", 30000, gpu_uuid="GPU-0", vmid=129),
             GpuProcess(4243, "python3", 2000, gpu_uuid="GPU-0", vmid=129),
             GpuProcess(777, "Xorg", 5, gpu_uuid="GPU-0"),
             GpuProcess(5100, "python3", 9000, gpu_uuid="GPU-1", vmid=131)]
    node = assess_node(Target("node", "pve5"), node_snapshot([gpu(0, used=32005), gpu(1, used=9000)], procs,
                                                             ProcessListing.LISTED))
    down = unreachable(Target("node", "pve7"), "connection refused")
    error = find_error((FIXTURES / "nvidia-smi" / "error" / "nvml-mismatch-with-lib-version-550.txt").read_text())
    mismatch = assess_node(Target("node", "pve6"), SmiSnapshot("error", (), error=error))
    at = ts("2026-12-03 08:30")
    samples, gone = samples_from((node, down, mismatch), at)
    assert [(s.target, s.gpu, s.memory_used_mib, s.holders) for s in samples] == [
        ("pve5", 0, 32005, {"CT 129": 32000, "host": 5}), ("pve5", 1, 9000, {"CT 131": 9000})]
    assert {s.driver for s in samples} == {"580.126.09"} and {s.at for s in samples} == {at}
    assert [(u.target, u.problem, u.state) for u in gone] == [("pve7", "connection refused", "unreachable"),
                                                              ("pve6", error.meaning, "smi-error")]
    assert mismatch.state is TargetState.SMI_ERROR


def test_a_stopped_container_is_named_apart_from_faults_and_a_container_back_is_named_itself():
    """A container the node says is stopped was not read, but nothing is wrong there: it is listed as stopped, not
    with the targets that did not answer. A target back since the last report is named whole, a container's label
    with its own colon ("pve5:130 (bench)") included, where the report once named only its node."""
    now = ts("2026-12-04 08:30")
    down = [Unreachable(now, "pve5:129 (sglang-a6000)", "container 129 on pve5 is not running, so nothing in it holds "
                        "a GPU (`pct start 129` on pve5 starts it; pct: CT 129 not running)", "stopped"),
            Unreachable(now, "pve7", "no answer within 12s")]
    previous = {"gpus": [], "unreachable": ["pve5:130 (bench): no answer within 12s", "pve7: connection refused"],
                "stopped": ["pve5:131: container 131 on pve5 is not running"]}
    report = build_report([], down, now, previous)
    assert report.unreachable == ("pve7: no answer within 12s",)
    assert report.stopped == ("pve5:129 (sglang-a6000): container 129 on pve5 is not running, so nothing in it holds a "
                              "GPU (`pct start 129` on pve5 starts it; pct: CT 129 not running)",)
    # pve7 is still down, with other words: not "reachable again"
    assert report.changes == ("reachable again: pve5:130 (bench)", "running again: pve5:131")
    # a sample stored before the state was kept is read as unreachable, as it was
    old = build_report([], [Unreachable(now, "pve6", "connection refused")], now, None)
    assert (old.unreachable, old.stopped) == (("pve6: connection refused",), ())
