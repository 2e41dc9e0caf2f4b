"""Check and summarize the profiles written by profile_gpu.sh: one line per workload.

    python check_outputs.py OUT [--expect-gpu]

Fails (exit 1) when a profile lacks summary.json, report.html or its operations, or, with
--expect-gpu, lacks GPU kernels, CUDA API time or NVML samples.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlsys.profiler.summary import load_summary
from rlsys.profiler.verdict import verdict


def check(directory: Path, expect_gpu: bool) -> list[str]:
    summary = load_summary(directory)
    problems = [] if (directory / "report.html").is_file() else ["no report.html"]
    if not {"inference", "backpropagation"} <= set(summary["operations"]):
        problems.append(f"operations are {list(summary['operations'])}")
    gpu = summary.get("gpu")
    if expect_gpu:
        if gpu is None or not any(d["busy_seconds"] > 0 for d in gpu["devices"]):
            problems.append("no GPU kernels recorded")
        elif gpu["polled_utilization"] is None:
            problems.append("no NVML samples")
        if summary["total"]["categories"].get("cuda_api", 0.0) <= 0:
            problems.append("no CUDA API time")
    busy = f"busy {gpu['busy_percent']:.1f}% vs polled {gpu['polled_utilization']}%" if gpu \
        else "no GPU section"  # fmt: skip
    print(f"{directory.name}: {summary['total']['seconds']:.2f} s, {busy}; "
          f"{' '.join(verdict(summary))}")  # fmt: skip
    return problems


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--expect-gpu", action="store_true")
    args = parser.parse_args()
    failed = False
    for name in ("torch", "jax"):
        problems = check(args.out / name, args.expect_gpu)
        for problem in problems:
            print(f"FAIL {name}: {problem}", file=sys.stderr)
        failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
