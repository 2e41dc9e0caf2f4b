"""Segmented compilation: an iteration compiled as several XLA programs (cut around its loops
and after its gradients) computes what the one program computes; "auto" keeps the segments
only where their temporaries are small."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import rlsys.compiler.lower.jax_program as jax_program
import rlsys.compiler.lower.jax_staged as jax_staged
from rlsys.algos.a2c import build_a2c
from rlsys.algos.config import A2CConfig
from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.schedule import Compute


def small_a2c(env: str):
    config = A2CConfig(env=env, num_envs=3, num_steps=6, total_steps=3 * 6 * 3, hidden_size=8,
                       iterations_per_call=1, seed=2)  # fmt: skip
    return build_a2c(config.validate())


def _segment_ends(monkeypatch) -> list[str]:
    """What each compiled segment ends with: a loop, an op, or "finish" (the one that moves
    the iteration loop's windows)."""
    ends: list[str] = []
    original = jax_staged.Segment.__init__

    def recorded(self, ctx, steps, host, finish=None, stacks=None, split=None) -> None:
        original(self, ctx, steps, host, finish, stacks, split)
        last = steps[-1] if steps else None
        kind = "loop" if last is not None and not isinstance(last, Compute) else (
            ctx.graph[last.node].op if last is not None else "")  # fmt: skip
        ends.append("finish" if finish is not None else kind)

    monkeypatch.setattr(jax_staged.Segment, "__init__", recorded)
    return ends


def test_an_a2c_iteration_is_cut_around_its_acting_and_returns_loops_and_after_its_gradient(
    monkeypatch,
) -> None:
    ends = _segment_ends(monkeypatch)
    built = small_a2c("trivial:4:6")
    built.program.compile(bounds=built.bounds, segmented=True)
    # the prologue (one segment), then the iteration: the noise drawn for the acting steps |
    # acting scan | the rewards and bootstrap values for the returns | returns scan | loss and
    # gradient | the optimizer's update and metrics, which move the loop's windows
    assert len(ends) == 7, ends
    noise, acting, values, returns, gradient, update = ends[1:]
    assert (acting, returns, gradient, update) == ("loop", "loop", "grad", "finish"), ends
    assert {noise, values}.isdisjoint({"loop", "grad", "finish"}), ends


def test_no_segment_passes_on_what_only_the_gradients_re_run_reads() -> None:
    """A2C's loss, computed with its gradient, re-runs the critic over every (b, t): the
    segments before it neither compute nor return the critic's values (`unread_values`)."""
    built = small_a2c("trivial:4:6")
    exe = built.program.compile(bounds=built.bounds, segmented=True)
    segments = [segment for part in exe._staged_parts for segment in part.segments()]
    ctx = segments[0].template
    assert any(ctx.graph[n].op == "matmul" for n in ctx.unread)  # the critic's layers
    assert not ctx.unread & set().union(*(segment.out_axes for segment in segments))
    computed = {s.node for segment in segments for s in segment.steps if isinstance(s, Compute)}
    assert not ctx.unread & computed


@pytest.mark.parametrize("env", ["trivial:4:6", "gymnasium:CartPole-v1"])
def test_a_segmented_iteration_computes_what_one_program_computes(env: str) -> None:
    built = small_a2c(env)
    whole = built.program.compile(bounds=built.bounds).run()
    built = small_a2c(env)
    segmented = built.program.compile(bounds=built.bounds, segmented=True).run()
    assert segmented.keys() == whole.keys()
    for name, value in whole.items():
        np.testing.assert_array_equal(segmented[name], value, err_msg=name)


def test_a_segmented_program_has_no_single_optimized_hlo() -> None:
    built = small_a2c("trivial:4:6")
    executable = built.program.compile(bounds=built.bounds, segmented=True)
    with pytest.raises(RecurrenceError, match="compiled segmented"):
        executable.optimized_hlo()


def test_auto_keeps_the_segments_of_an_iteration_with_small_temporaries(monkeypatch) -> None:
    built = small_a2c("trivial:4:6")
    whole = built.program.compile(bounds=built.bounds).run()
    built = small_a2c("trivial:4:6")
    executable = built.program.compile(bounds=built.bounds, segmented="auto")
    assert executable.segmented and executable.iterations_per_call == 1
    # Temporaries above the threshold: running sets the peak, so one program is compiled.
    monkeypatch.setattr(jax_program, "SEGMENTED_TEMPORARIES", -1)
    built = small_a2c("trivial:4:6")
    executable = built.program.compile(bounds=built.bounds, iterations_per_call=3,
                                       segmented="auto")  # fmt: skip
    assert not executable.segmented and not executable.staged
    assert executable.iterations_per_call == 3
    assert list(executable.optimized_hlo()) == ["iterations[3]"]
    for name, value in executable.run().items():
        np.testing.assert_array_equal(value, whole[name], err_msg=name)


def test_auto_frees_the_segments_it_compiled_before_compiling_one_program(monkeypatch) -> None:
    # Kept alive, the segments' executables held 15 MiB at the scaling sweep's width=256.
    segments: weakref.WeakSet = weakref.WeakSet()
    created: list[int] = []
    original = jax_staged.Segment.__init__

    def recorded(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        segments.add(self)
        created.append(id(self))

    monkeypatch.setattr(jax_staged.Segment, "__init__", recorded)
    monkeypatch.setattr(jax_program, "SEGMENTED_TEMPORARIES", -1)
    built = small_a2c("trivial:4:6")
    executable = built.program.compile(bounds=built.bounds, segmented="auto")
    assert not executable.segmented
    gc.collect()
    assert created and not segments


def test_segmented_takes_a_bool_or_auto() -> None:
    built = small_a2c("trivial:4:6")
    with pytest.raises(RecurrenceError, match="segmented must be False, True or 'auto'"):
        built.program.compile(bounds=built.bounds, segmented="yes")
