"""What the profiler's hooks cost a program while they are installed and nothing records.

`rlsys profile` installs its automatic operations (wrappers of environment steps, optimizer
steps, backward passes and `nn.Module.__call__`) at startup; while no recorder is active
(before recording starts, after `--max-seconds`) every wrapped call still pays the wrapper's
first test. That cost, a percent or so of a training loop, is below what two runs of the
loop on a shared machine can resolve (`profiler_overhead`'s `*-disabled` systems), so this
case measures it as calls x cost per call:

* the workload (the unmodified CleanRL-style PPO or SB3 PPO of `benchmarks/baselines/`) runs
  once with the hooks installed, nothing recording, and each wrapper counting its calls;
* the idle wrappers' cost per call is timed around a no-op, against the bare no-op call,
  in 15 batches (minimum: the cost itself, without the machine's interruptions);
* `idle_cost_pct` = sum(calls x cost per call) / the loop's time, less the counting's own
  cost (timed the same way).

User annotations (`rlsys.operation`) with nothing recording are measured per call in
`annotation_overhead`.
"""

from __future__ import annotations

import collections
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlsys.bench import Case, System, child_main, report

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.baselines import TORCH_PPO, torch_ppo  # noqa: E402  (needs the repo on the path)

STEPS = {False: 16_384, True: 4_096}
BATCHES, CALLS = 15, 20_000


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _ns_per_call(function: Callable[..., Any]) -> float:
    """Cost of calling `function(1)` over calling `_noop(1)`, min over batches."""
    samples = []
    for _ in range(BATCHES):
        start = time.perf_counter_ns()
        for _ in range(CALLS):
            _noop(1)
        middle = time.perf_counter_ns()
        for _ in range(CALLS):
            function(1)
        samples.append((time.perf_counter_ns() - middle - (middle - start)) / CALLS)
    return min(samples)


def _counting(counts: collections.Counter, kind: str, make: Callable[..., Any]):
    """A wrapper factory like `make`, whose wrappers also count their calls."""
    from rlsys.profiler import hooks

    @functools.wraps(make)
    def factory(*args: Any, **kwargs: Any) -> Any:
        wrapper = make(*args, **kwargs)

        @functools.wraps(wrapper)
        def counted(*call_args: Any, **call_kwargs: Any) -> Any:
            counts[kind] += 1
            return wrapper(*call_args, **call_kwargs)

        setattr(counted, hooks._MARK, getattr(wrapper, hooks._MARK, kind))
        return counted

    return factory


def run(*, quick: bool, seed: int, impl: str) -> None:
    from rlsys.profiler import hooks, sources

    counts: collections.Counter = collections.Counter()
    outermost, inference_call = hooks.outermost, hooks._inference_call
    hooks.outermost = _counting(counts, "wrapper", outermost)
    hooks._inference_call = _counting(counts, "module", inference_call)
    hooks.install(sources.enabled())  # before the workload imports gymnasium, torch, SB3
    workload = torch_ppo(impl)
    result = workload.train(STEPS[quick], seed)

    import torch

    idle = {
        "wrapper": outermost("simulation", _noop, hooks.Category.SIMULATOR),
        "module": inference_call(torch, _noop),
    }
    cost = {kind: _ns_per_call(function) for kind, function in idle.items()}
    counted = _counting(collections.Counter(), "count", lambda: _noop)()
    counting_ns = _ns_per_call(counted)
    calls = sum(counts.values())
    loop_ns = result["run_seconds"] * 1e9 - calls * counting_ns
    idle_ns = sum(counts[kind] * cost[kind] for kind in cost)
    report(
        env_steps=result["env_steps"],
        seconds=loop_ns / 1e9,
        wrapper_calls=counts["wrapper"],
        module_calls=counts["module"],
        ns_per_wrapper_call=cost["wrapper"],
        ns_per_module_call=cost["module"],
        idle_cost_pct=100 * idle_ns / loop_ns,
    )


CASE = Case(
    name="hooks_idle_cost",
    description=(
        "The profiler's hooks installed but not recording: calls of each kind of wrapper in "
        "a CleanRL-style and an SB3 PPO on CartPole-v1 (torch, 1 thread), times the idle "
        "wrapper's cost per call, as a percentage of the training loop."
    ),
    baseline="cleanrl",
    timeout_s=300.0,
    systems=[
        System(name, run=run, params={"impl": name}, description=f"baselines/{module}.py")
        for name, module in TORCH_PPO.items()
    ],
)

if __name__ == "__main__":
    child_main(CASE)
