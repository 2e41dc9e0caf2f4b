"""Automatic operations (`rlsys.profiler.hooks`): what an unmodified script records.

Scripts that import torch or gymnasium run in a child process under the bootstrap, so that
no patch leaks into the test process; the finder and the class patching are also checked
in-process on throwaway classes and modules.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from rlsys.profiler import hooks
from rlsys.profiler.launch import child_environment
from rlsys.trace import Category, Event, Session, start_recording, stop_recording

STEPS, UPDATE_EVERY, VEC_STEPS = 40, 10, 3

RL_SCRIPT = f"""
import gymnasium as gym
import numpy as np
import torch

class Custom(gym.Env):  # defined after the patch: wrapped through __init_subclass__
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,))
    action_space = gym.spaces.Discrete(2)
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {{}}
    def step(self, action):
        return np.zeros(4, np.float32), 0.0, False, False, {{}}

torch.manual_seed(0)
env = gym.make("CartPole-v1")  # CartPoleEnv inside 3 wrappers: one operation per call
policy = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
obs, _ = env.reset(seed=0)
resets = 1
for step in range({STEPS}):
    with torch.no_grad():
        action = int(policy(torch.as_tensor(obs)).argmax())
    obs, reward, terminated, truncated, _ = env.step(action)
    if terminated or truncated:
        obs, _ = env.reset()
        resets += 1
    if step % {UPDATE_EVERY} == {UPDATE_EVERY} - 1:
        loss = policy(torch.randn(8, 4)).pow(2).mean()  # gradients on: not inference
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
vec = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
vec.reset(seed=0)
for _ in range({VEC_STEPS}):
    vec.step(vec.action_space.sample())
custom = Custom()
custom.reset()
custom.step(0)
print("RESETS", resets)
"""


def run_under_bootstrap(tmp_path: Path, source: str) -> tuple[Session, str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    trace = tmp_path / "trace"
    result = subprocess.run(
        [sys.executable, str(script)], env=child_environment(trace), capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return Session.load_dir(trace), result.stdout


def assert_not_nested_in_itself(events: list[Event], name: str) -> None:
    spans = sorted((e.start_ns, e.end_ns) for e in events if e.name == name)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start, f"two {name!r} operations overlap"


def test_an_unmodified_rl_script_records_the_three_operations(tmp_path: Path) -> None:
    session, stdout = run_under_bootstrap(tmp_path, RL_SCRIPT)
    resets = int(stdout.split("RESETS")[1])
    assert session.complete
    ops = [e for e in session.events if e.category is Category.OPERATION]
    counts = Counter(e.name for e in ops)
    assert set(counts) == set(hooks.OPERATIONS)
    updates = STEPS // UPDATE_EVERY
    # each call once: wrappers, vector sub-environments and submodules add nothing
    assert counts[hooks.SIMULATION] == STEPS + resets + 1 + VEC_STEPS + 2
    assert counts[hooks.INFERENCE] == STEPS  # the forward with gradients is not inference
    assert counts[hooks.BACKPROPAGATION] == 2 * updates  # backward + optimizer step
    for name in hooks.OPERATIONS:
        assert_not_nested_in_itself(ops, name)
    assert len({e.pid for e in ops}) == 1


def test_a_script_without_torch_or_gymnasium_does_not_import_them(tmp_path: Path) -> None:
    source = """
        import json, sys
        import rlsys
        from rlsys.profiler import hooks
        with rlsys.operation("work"):
            pass
        print(json.dumps({
            "imported": sorted(m for m in ("torch", "gymnasium", "stable_baselines3", "jax")
                               if m in sys.modules),
            "finder": hooks._FINDER in sys.meta_path,
            "recording": rlsys.trace.active_recorder() is not None,
        }))
    """
    session, stdout = run_under_bootstrap(tmp_path, source)
    report = json.loads(stdout)
    assert report == {"imported": [], "finder": True, "recording": True}
    assert [e.name for e in session.events] == ["work"]


def test_subclass_wrapping_records_only_the_outermost_call(tmp_path: Path) -> None:
    class Base:
        def step(self) -> str:
            return "base"

    class Early(Base):  # exists before the patch
        def step(self) -> str:
            return "early+" + super().step()

    hooks._wrap_subclasses(Base, ("step",), "simulation")

    class Late(Early):  # defined after it
        def step(self) -> str:
            return "late+" + super().step()

    hooks._wrap_subclasses(Base, ("step",), "simulation")  # idempotent
    recorder = start_recording(tmp_path)
    try:
        assert Late().step() == "late+early+base"
        assert Early().step() == "early+base"
    finally:
        stop_recording()
    assert Late.step.__name__ == "step" and Late.step.__wrapped__  # functools.wraps kept
    events = Session.load(recorder.path).events
    assert [e.name for e in events] == ["simulation", "simulation"]


def test_wrapped_calls_pass_through_when_nothing_records() -> None:
    calls = []
    wrapped = hooks.outermost("simulation", lambda x: calls.append(x) or x)
    assert wrapped(3) == 3 and calls == [3]


def test_c_call_intervals_switch_off_and_on_while_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`record_ccalls(False)` (an in-process calibration's "annotations" configuration)
    keeps an environment call's operation and drops its SIMULATOR interval; torch's entry
    points are restored, then wrapped again."""
    switched = []
    fake_torch = type(sys)("torch")
    monkeypatch.setitem(sys.modules, "torch", fake_torch)  # the real one stays unwrapped
    monkeypatch.setattr(hooks.torch_backend, "install", lambda t: switched.append(("on", t)))
    monkeypatch.setattr(hooks.torch_backend, "uninstall", lambda t: switched.append(("off", t)))
    step = hooks.outermost("simulation", lambda: "stepped", Category.SIMULATOR)
    recorder = start_recording(tmp_path)
    try:
        hooks.record_ccalls(False)
        assert step() == "stepped"
        hooks.record_ccalls(True)
        assert step() == "stepped"
    finally:
        hooks.record_ccalls(True)
        stop_recording()
    events = Session.load(recorder.path).events
    operations = sorted((e for e in events if e.category == Category.OPERATION),
                        key=lambda e: e.start_ns)  # fmt: skip
    intervals = [e for e in events if e.category == Category.SIMULATOR]
    assert [e.name for e in operations] == ["simulation", "simulation"]
    assert len(intervals) == 1  # the second call's only
    assert operations[1].start_ns <= intervals[0].start_ns <= intervals[0].end_ns
    assert intervals[0].end_ns <= operations[1].end_ns
    assert switched == [("off", fake_torch), ("on", fake_torch), ("on", fake_torch)]


def test_the_finder_patches_a_watched_module_once_after_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "rlsys_fake_watched.py").write_text("VALUE = 1\n")
    seen = []
    monkeypatch.setattr(
        hooks, "_PATCHES", {"rlsys_fake_watched": lambda m, sources: seen.append(m.VALUE)}
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.meta_path.insert(0, hooks._FINDER)
    try:
        import rlsys_fake_watched  # type: ignore[import-not-found]
    finally:
        sys.meta_path.remove(hooks._FINDER)
        sys.modules.pop("rlsys_fake_watched", None)
    assert seen == [1]
    assert type(rlsys_fake_watched.__spec__.loader).__name__ == "SourceFileLoader"
    assert "exec_module" not in vars(rlsys_fake_watched.__spec__.loader)  # restored


FORK_IN_OPERATION = """
    import os, sys
    import rlsys
    from rlsys.profiler import hooks

    step = hooks.outermost("simulation", lambda: None)

    def forking():
        pid = os.fork()
        if pid == 0:  # a worker forked inside the parent's call: its own calls are its own
            step()
            rlsys.stop_recording()
            os._exit(0)
        os.waitpid(pid, 0)
        return pid

    rlsys.start_recording(sys.argv[1])
    print(hooks.outermost("simulation", forking)())
    rlsys.stop_recording()
"""


def test_a_child_forked_inside_an_operation_records_its_own_calls(tmp_path: Path) -> None:
    script = tmp_path / "fork.py"
    script.write_text(textwrap.dedent(FORK_IN_OPERATION))
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "t")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    child = int(result.stdout)
    events = Session.load_dir(tmp_path / "t").events
    assert sorted(e.pid == child for e in events) == [False, True]
    assert {e.name for e in events} == {"simulation"}


PERSISTENT_WORKERS = """
    import torch
    import rlsys
    from torch.utils.data import DataLoader, Dataset

    class Items(Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, index):
            with rlsys.operation("load"):
                return torch.zeros(3)

    if __name__ == "__main__":
        loader = DataLoader(Items(), batch_size=4, num_workers=2, persistent_workers=True)
        for epoch in range(2):
            for batch in loader:
                pass
"""


def test_persistent_dataloader_workers_keep_their_events(tmp_path: Path) -> None:
    """multiprocessing terminates them at exit, and torch's SIGTERM handler ends a worker
    with _exit(0), which skipped closing its recording: all its events were lost."""
    session, _ = run_under_bootstrap(tmp_path, PERSISTENT_WORKERS)
    loads = Counter(e.pid for e in session.events if e.name == "load")
    assert sorted(loads.values()) == [16, 16]  # each worker: half the items, two epochs
    assert session.complete
