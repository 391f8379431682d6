"""Evidence a label calls for: the port a launch could not bind and its holder; transformers versions."""

import json

from bot.core.diagnosis import diagnose
from bot.core.label_evidence import (
    PortHolder,
    parse_port_holders,
    port_evidence,
    ports_named,
    transformers_evidence,
)
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
