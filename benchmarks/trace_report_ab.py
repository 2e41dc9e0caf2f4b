"""`rlsys profile`'s recording and post-processing of a long trace, this checkout against
another (e.g. a `git worktree` of an older commit), side by side.

    git worktree add /tmp/old 1438fc4
    python benchmarks/trace_report_ab.py /tmp/old --steps 400000 --rounds 3

The workload is a gymnasium CartPole loop of `--steps` random steps, as fast as it goes
(two recorded intervals a step: the automatic "simulation" operation and its simulator
interval). Each tree records it once under its own `rlsys profile` (trace bytes per step);
then both trees turn the newer tree's trace into what `rlsys profile` writes (loading the
session, trace.json, the breakdown and summary), each in a fresh process, `--rounds` times,
the order reversed every round. Printed per tree: median seconds and peak RSS of that
post-processing process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

LOOP = """
import sys, gymnasium as gym
env = gym.make("CartPole-v1"); env.reset(seed=0); env.action_space.seed(0)
for _ in range(int(sys.argv[1])):
    _, _, terminated, truncated, _ = env.step(env.action_space.sample())
    if terminated or truncated:
        env.reset()
"""

POSTPROCESS = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from rlsys.profiler.breakdown import breakdown
from rlsys.profiler.summary import build_summary
from rlsys.trace import Session, write_chrome_trace
start = time.perf_counter()
session = Session.load_dir(sys.argv[2])
write_chrome_trace(session, sys.argv[3])
summary = build_summary(breakdown(session), command=["loop"], exit_code=0, stopped_by=None,
                        wall_seconds=1.0)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "peak_mib": resource.getrusage(
    resource.RUSAGE_SELF).ru_maxrss / 1024, "events": len(session.events)}))
"""


def record(tree: Path, steps: int, out: Path, loop: Path) -> float:
    """Profile the loop with `tree`'s rlsys; returns trace bytes per step."""
    command = [sys.executable, "-m", "rlsys.cli", "profile", "--quiet", "--out", str(out),
               "--", sys.executable, str(loop), str(steps)]  # fmt: skip
    # On PYTHONPATH, `tree`'s rlsys is the one the command's processes record with too.
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(command, check=True, capture_output=True, env=environment)
    return sum(p.stat().st_size for p in (out / "trace").glob("*.jsonl")) / steps


def postprocess(tree: Path, trace: Path, scratch: Path) -> dict:
    result = subprocess.run([sys.executable, "-c", POSTPROCESS, str(tree), str(trace),
                             str(scratch / "trace.json")],
                            check=True, capture_output=True, text=True)  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other", type=Path, help="the other checkout's root")
    parser.add_argument("--steps", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = {"this": HERE, "other": args.other.resolve()}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        loop = scratch / "loop.py"
        loop.write_text(LOOP)
        size = {name: record(tree, args.steps, scratch / name, loop)
                for name, tree in trees.items()}  # fmt: skip
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for round_ in range(args.rounds):
            order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
            for name in order:
                runs[name].append(postprocess(trees[name], scratch / "this" / "trace", scratch))
    for name, tree in trees.items():
        seconds = statistics.median(r["seconds"] for r in runs[name])
        peak = statistics.median(r["peak_mib"] for r in runs[name])
        rounds = ", ".join(f"{r['seconds']:.2f}" for r in runs[name])
        print(
            f"{name} ({tree}): recording {size[name]:.0f} bytes/step; post-processing "
            f"{runs[name][0]['events']:,} events: {seconds:.2f} s, peak {peak:.0f} MiB "
            f"(per round {rounds} s)"
        )


if __name__ == "__main__":
    main()
