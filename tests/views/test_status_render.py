"""Golden renders of Block Kit for corpus samples, and Slack's limits at scale."""

import json
import os
from dataclasses import replace

import pytest

from bot.core.gpu import GpuProcess, ProcessListing
from bot.core.inventory import Target
from bot.core.smi import parse_any
from bot.core.status import assess_container, assess_node, unreachable
from bot.status import StatusReport
from bot.views import MESSAGE_TEXT_LIMIT, blocks_to_text, status_messages, status_text
from tests.conftest import FIXTURES

GOLDEN = FIXTURES.parent / "views" / "golden"
SMI = FIXTURES / "nvidia-smi"


def snapshot(path):
    return parse_any((SMI / path).read_text())


def corpus_report():
    node = Target("node", "pve5")
    ct = Target("container", "pve5", 129, "sglang-a6000")
    statuses = (
        assess_node(node, snapshot("table/cz-580.126.09-l40s-one-proc.txt")),
        assess_container(ct, snapshot("table/ln-515.86.01-node2-near-full-empty-procs.txt"), None),
        assess_node(Target("node", "pve6"), snapshot("error/nvml-mismatch-oneline-shine30.txt")),
        assess_node(Target("node", "pve8"), snapshot("table/cslev-580.95.05-gb10-mem-not-supported.txt")),
        unreachable(Target("node", "pve7"), "pve7: SSH connect to 10.0.0.7:22 timed out"),
    )
    return StatusReport(statuses, elapsed_s=1.25)


def check_golden(name, value):
    path = GOLDEN / name
    if os.environ.get("GPUOPS_UPDATE_GOLDEN"):
        path.write_text(value)
    assert path.exists(), f"missing golden {path}; run with GPUOPS_UPDATE_GOLDEN=1 and review it"
    assert value == path.read_text()


def test_block_kit_golden_for_corpus_samples():
    messages = status_messages(corpus_report())
    rendered = json.dumps([{"text": m.text, "blocks": m.blocks} for m in messages], indent=1, ensure_ascii=False)
    check_golden("status_corpus.blocks.json", rendered + "\n")


def test_terminal_golden_for_corpus_samples():
    check_golden("status_corpus.txt", status_text(corpus_report()) + "\n")


def test_states_that_are_not_idle_never_look_idle():
    text = blocks_to_text(status_messages(corpus_report())[0].blocks)
    assert "[X] *pve7*  unreachable" in text
    assert "nvidia-smi error (nvml-driver-library-mismatch)" in text
    assert "processes: not visible inside the container" in text  # not "none"
    assert "unreadable: memory=Not Supported" in text  # GB10 memory is not 0 MiB


def test_eight_gpus_with_twenty_processes_each_fit_slack_limits():
    base = snapshot("table/sc-535.129.03-8x-rtx3090.txt")
    procs = tuple(
        GpuProcess(pid=100000 + g * 100 + i, name=f"/opt/venv/bin/python3 -m sglang.launch_server worker {i}",
                   used_mib=512, gpu_index=g)
        for g in range(8) for i in range(20)
    )
    big = replace(base, processes=procs, process_listing=ProcessListing.LISTED)
    report = StatusReport(tuple(assess_node(Target("node", f"pve{n}"), big) for n in range(7)), 2.0)
    messages = status_messages(report)
    assert len(messages) > 1  # 7 nodes x (8 GPUs, 20 processes each) need more than one message
    for message in messages:
        assert len(message.blocks) <= 50
        texts = [block.get("text", {}).get("text", "") for block in message.blocks]
        assert all(len(t) <= 3000 for t in texts)
        assert sum(map(len, texts)) <= MESSAGE_TEXT_LIMIT  # Slack's msg_blocks_too_long comes far below 50 x 3000
    text = "\n".join(blocks_to_text(m.blocks) for m in messages)
    assert all(text.count(f" {p.pid} ") == 7 for p in procs)  # every process of every node, once
    assert all(f"*pve{n}*" in text for n in range(7))


@pytest.mark.parametrize("sample", ["table/cz-580.126.09-l40s-one-proc.txt", "xml/telegraf-dual_a5000-v13.xml",
                                    "q-text/ugx-l40s-595-load-q.txt"])
def test_every_structured_format_renders_the_same_rows(sample):
    status = assess_node(Target("node", "n"), snapshot(sample))
    text = blocks_to_text(status_messages(StatusReport((status,), 0.1))[0].blocks)
    for row in status.rows:
        assert f"{row.gpu.memory_used_mib}/{row.gpu.memory_total_mib} MiB" in text
        for p in row.processes:
            assert str(p.pid) in text


async def test_posts_to_one_channel_are_paced_one_per_second():
    import time as _time

    from bot.slack import ChannelPace

    pace = ChannelPace()
    started = _time.monotonic()
    for _ in range(3):
        await pace.wait("C1")
    await pace.wait("C2")  # another channel is not held back
    elapsed = _time.monotonic() - started
    assert 2.0 <= elapsed < 2.5
