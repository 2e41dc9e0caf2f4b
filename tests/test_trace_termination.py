"""A recorded process ended by SIGTERM closes its trace first (multiprocessing.Pool's exit,
`rlsys profile`'s time limit), and one stuck in C still dies; SIGHUP likewise."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlsys.profiler.launch import child_environment
from rlsys.trace import Session, termination

SCRIPT = textwrap.dedent(
    """
    import ctypes, multiprocessing, sys, time
    import rlsys

    def sleep_in_python():
        with rlsys.operation("child-op"):
            pass
        with rlsys.operation("sleeping"):
            time.sleep(60)

    def stuck_in_c():
        # A default mutex locked twice by one thread: no signal interrupts the second lock,
        # as in a child forked while another thread held a lock.
        libc = ctypes.CDLL(None)
        mutex = ctypes.create_string_buffer(64)
        libc.pthread_mutex_lock(mutex)
        with rlsys.operation("child-op"):
            pass
        libc.pthread_mutex_lock(mutex)

    if __name__ == "__main__":
        method, target = sys.argv[1:]
        context = multiprocessing.get_context(method)
        child = context.Process(target=globals()[target])
        child.start()
        time.sleep(1.5)
        start = time.monotonic()
        child.terminate()
        child.join(30)
        print(child.pid, child.exitcode, time.monotonic() - start)
    """
)


def _terminate_child(tmp_path: Path, method: str, target: str) -> tuple[int, int, float]:
    # As under `rlsys profile`: every Python process records from the start (the forkserver
    # too, so that its children are forked from a recording process).
    script = tmp_path / "parent.py"
    script.write_text(SCRIPT)
    env = child_environment(tmp_path / "t")
    result = subprocess.run([sys.executable, str(script), method, target], env=env,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    pid, exitcode, seconds = result.stdout.split()
    return int(pid), int(exitcode), float(seconds)


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_terminated_child_closes_its_trace_and_dies_of_sigterm(tmp_path, method) -> None:
    pid, exitcode, _ = _terminate_child(tmp_path, method, "sleep_in_python")
    assert exitcode == -15
    session = Session.load_dir(tmp_path / "t")
    assert session.complete
    child_events = [e for e in session.events if e.pid == pid]
    assert [e.name for e in child_events] == ["child-op", "sleeping"]
    assert child_events[1].attrs == {"unfinished": True}  # open when the signal came


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_child_stuck_in_c_is_killed_after_the_grace_period(tmp_path, method) -> None:
    pid, exitcode, seconds = _terminate_child(tmp_path, method, "stuck_in_c")
    assert exitcode == -9
    assert seconds < termination.GRACE_S + 3
    session = Session.load_dir(tmp_path / "t")  # closed by the watcher thread, not the handler
    assert session.complete
    assert [e.name for e in session.events if e.pid == pid] == ["child-op"]


HUNG_UP = textwrap.dedent(
    """
    import os, signal, sys
    import rlsys

    if sys.argv[2] == "nohup":
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    rlsys.start_recording(sys.argv[1])
    with rlsys.operation("before"):
        pass
    with rlsys.operation("open"):
        os.kill(os.getpid(), signal.SIGHUP)
        sum(range(1000))  # its handler runs by now
    print("survived SIGHUP")
    """
)


@pytest.mark.parametrize("ignored", [False, True])
def test_sighup_closes_the_trace_and_the_process_dies_of_it(tmp_path, ignored) -> None:
    # Its default action, like SIGTERM's, skipped the exit handlers: the buffered events and
    # the footer were lost. Where it is ignored (nohup), it stays ignored.
    script = tmp_path / "hung_up.py"
    script.write_text(HUNG_UP)
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "t"),
                             "nohup" if ignored else "-"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == (0 if ignored else -1), result.stderr
    assert ("survived" in result.stdout) == ignored
    session = Session.load_dir(tmp_path / "t")
    assert session.complete
    assert [(e.name, e.attrs) for e in session.events] == [
        ("before", None),
        ("open", None if ignored else {"unfinished": True}),
    ]


OWN_HANDLER_THEN_FORK = textwrap.dedent(
    """
    import os, signal, sys
    import rlsys

    rlsys.start_recording(sys.argv[1])
    signal.signal(signal.SIGTERM, lambda *_: print("own handler", flush=True))
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))  # its handler runs by now
        rlsys.stop_recording()
        os._exit(0)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    rlsys.stop_recording()
    """
)


def test_a_forked_child_keeps_the_programs_own_sigterm_handler(tmp_path) -> None:
    # The child's setup put SIGTERM back to its default action: the child died of it.
    script = tmp_path / "own_handler.py"
    script.write_text(OWN_HANDLER_THEN_FORK)
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "t")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["own", "handler", "0"]


SIGNAL_DURING_WRITE = textwrap.dedent(
    """
    import os, signal, sys
    import rlsys

    recorder = rlsys.start_recording(sys.argv[1])
    with rlsys.operation("written-when-signalled"):
        pass
    write_event_lines = recorder.writer.write_event_lines

    def signal_then_write(lines, events):
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs inside this write
        sum(range(1000))
        write_event_lines(lines, events)

    recorder.writer.write_event_lines = signal_then_write
    recorder.flush()
    print("survived SIGTERM")
    """
)


def test_sigterm_during_the_traces_own_write_closes_it_after_that_write(tmp_path) -> None:
    script = tmp_path / "signalled.py"
    script.write_text(SIGNAL_DURING_WRITE)
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "t")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == -15, result.stderr
    assert "survived" not in result.stdout
    session = Session.load_dir(tmp_path / "t")
    assert session.complete
    assert [e.name for e in session.events] == ["written-when-signalled"]


AT_ONCE = textwrap.dedent(
    """
    import multiprocessing, sys, time
    import rlsys

    def child():
        with rlsys.operation("child-op"):
            time.sleep(30)

    if __name__ == "__main__":
        children = [multiprocessing.get_context(sys.argv[1]).Process(target=child)
                    for _ in range(3)]
        for process in children:
            process.start()
        for process in children:  # at once: some are still between fork and their setup
            process.terminate()
        for process in children:
            process.join(20)
        print(*[process.exitcode for process in children])
    """
)


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_children_terminated_as_they_start_leave_the_parent_alone(tmp_path, method) -> None:
    """A child signalled before its own setup ran its parent's handler and woke the parent's
    watcher through the pipe they shared: the parent died of the child's SIGTERM."""
    script = tmp_path / "at_once.py"
    script.write_text(AT_ONCE)
    result = subprocess.run([sys.executable, str(script), method],
                            env=child_environment(tmp_path / "t"), capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["-15", "-15", "-15"]
    assert Session.load_dir(tmp_path / "t").complete
