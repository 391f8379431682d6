"""py-spy's stack dumps of a launch's processes, as the stack script prints them (real captures: tests/fixtures/py-spy,
see SOURCES.md)."""

from bot.core.stacks import HEADER, ProcessStacks, parse_stack_dumps, stack_lines
from tests.conftest import FIXTURES

DUMPS = FIXTURES / "py-spy"


def test_each_process_of_the_group_is_read_with_its_command_and_threads():
    processes = parse_stack_dumps((DUMPS / "parent-and-child.txt").read_text())
    assert [p.pid for p in processes] == [25132, 25174]
    parent, child = processes
    assert parent.command == "/root/.pyenv/versions/3.11.7/bin/python3 par.py"
    (main,) = parent.threads
    assert (main.name, main.active) == ("MainThread", False)
    assert [(f.function, f.file, f.line) for f in main.frames] == [("wait_for_children", "par.py", 4),
                                                                   ("<module>", "par.py", 5)]
    assert child.threads[0].frames[0].function == "capture" and child.problem is None


def test_the_main_thread_and_active_ones_are_shown_idle_helpers_counted_and_a_failed_dump_says_why():
    lines = stack_lines(parse_stack_dumps((DUMPS / "threads-and-a-non-python-child.txt").read_text()))
    assert lines == (
        "PID 25646 /root/.pyenv/versions/3.11.7/bin/python3 par2.py (+1 idle thread)",
        "  busy (active): spin (par2.py:7) <- Thread.run (threading.py:982) <- Thread._bootstrap_inner "
        "(threading.py:1045) <- Thread._bootstrap (threading.py:1002)",
        "  MainThread (idle): wait_for_children (par2.py:11) <- <module> (par2.py:12)",
        "PID 25838 /root/.pyenv/versions/3.11.7/bin/python3 -c import time def capture():     time.",
        "  MainThread (idle): capture (<string>:3) <- <module> (<string>:4)",
        # py-spy's own error line, not the Rust backtrace printed after it
        "PID 25839 sleep 60: no stacks (Failed to find python version from target process)",
    )


def test_deep_stacks_are_cut_to_their_innermost_frames():
    lines = stack_lines(parse_stack_dumps((DUMPS / "threads-and-a-non-python-child.txt").read_text()), depth=2)
    assert lines[1] == "  busy (active): spin (par2.py:7) <- Thread.run (threading.py:982) <- …"


def test_a_dump_that_timed_out_or_is_not_json_is_named_not_dropped():
    real = (DUMPS / "parent-and-child.txt").read_text().splitlines()
    command = real[1]
    timed_out = f"{HEADER}4242 124\n{command}\n"
    garbled = f"{HEADER}4243 0\n{command}\n" + "\n".join(real[2:6])  # a JSON answer cut short
    assert parse_stack_dumps(timed_out + garbled) == (
        ProcessStacks(4242, command.strip(), problem="py-spy did not answer within its time limit"),
        ProcessStacks(4243, command.strip(), problem="py-spy's answer was not JSON: " + "\n".join(real[2:6])),
    )
    assert parse_stack_dumps("") == ()
