"""The "where the time goes" verdict: a few sentences of advice derived from a profile summary.

The verdict names the operation that owns the most wall time, the category that owns most of
its thread time, and the advice of the first rule in `RULES` that matches the pair:

    op, category = dominant operation, its dominant category
    for rule in RULES:
        if rule.operation in (op, ANY) and rule.category in (category, ANY):
            return f"{share}% of the run is {op} ({category}): {rule.advice}"

Rules are data, most specific first, so adding advice is adding a row. Everything reads the
JSON-ready summary dict (`rlsys.profiler.summary`), so `rlsys report` gives the same verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlsys.profiler.result import NO_OPERATION

ANY = "*"

GPU_IDLE_BELOW = 0.5
"""A run with GPU activity whose GPU is busy less than this share of the time is GPU-starved."""


@dataclass(frozen=True)
class Rule:
    operation: str  # an operation name, or ANY
    category: str  # a CPU category (or "gpu" when GPU-only time dominates), or ANY
    advice: str


RULES: tuple[Rule, ...] = (
    Rule(NO_OPERATION, ANY, "most time is outside every operation; annotate the script's "
         "loop with rlsys.operation(...) to see what it is"),
    Rule(ANY, "overhead", "the profiler's own cost dominates; profile a longer run or fewer "
         "events"),
    Rule(ANY, "compile", "compilation dominates; run longer, or avoid recompiling (stable "
         "shapes, a compile cache)"),
    Rule(ANY, "wait", "threads mostly wait; the pipeline is unbalanced: give the stage being "
         "waited for more workers, or overlap it (asynchronous actors)"),
    Rule(ANY, "comm", "moving data between processes dominates; send larger fragments less "
         "often, or use shared memory"),
    Rule("simulation", "gpu", "the simulator runs on the GPU and keeps it busy; this is "
         "already GPU-bound simulation: larger env batches only if the GPU has headroom"),
    Rule("simulation", ANY, "simulation on the CPU dominates: add actors (parallel "
         "environments) or vectorize the environment"),
    Rule(ANY, "cuda_api", "CPU time goes to CUDA API calls (kernel launches, syncs): batch "
         "more work per call, fuse kernels or use CUDA graphs, and avoid per-step syncs"),
    Rule(ANY, "gpu", "the GPU is the bottleneck: a smaller or mixed-precision model, or a "
         "faster GPU"),
    Rule("inference", "python", "interpreter overhead in inference: batch observations across "
         "environments, jit or vectorize the policy (torch.compile, jax.jit)"),
    Rule("backpropagation", "python", "interpreter overhead in training: jit or vectorize the "
         "update (torch.compile, jax.jit), fewer and larger minibatches"),
    Rule("backpropagation", "backend", "the ML backend's compute dominates training: larger "
         "batches per call, or a GPU"),
    Rule("inference", "backend", "the ML backend's compute dominates inference: batch "
         "observations across environments, or run the policy on a GPU"),
    Rule(ANY, "python", "interpreter overhead dominates: jit or vectorize the hot loop"),
    Rule(ANY, "backend", "the ML backend's compute dominates: larger batches, or a GPU"),
    Rule(ANY, "simulator", "the simulator's native code dominates: add actors or vectorize the "
         "environment"),
)  # fmt: skip


def _dominant(values: dict[str, float]) -> tuple[str | None, float]:
    """The key with the largest value (first on ties) and its share of the sum."""
    total = sum(values.values())
    if total <= 0:
        return None, 0.0
    key = max(values, key=lambda k: values[k])
    return key, values[key] / total


def dominant_category(times: dict[str, Any]) -> tuple[str | None, float]:
    """The category that owns most of an operation's time, and its share.

    "gpu" when GPU-only wall time exceeds every CPU category's thread time: then the CPU mostly
    waits for the GPU, whatever category that waiting was recorded under.
    """
    categories = dict(times["categories"])
    gpu_only = times.get("resources", {}).get("gpu_only", 0.0)
    if gpu_only > 0:
        categories["gpu"] = gpu_only
    return _dominant(categories)


def advice(operation: str, category: str | None) -> str | None:
    """The advice of the first rule matching (operation, category)."""
    for rule in RULES:
        if rule.operation in (operation, ANY) and rule.category in (category, ANY):
            return rule.advice
    return None


def verdict(summary: dict[str, Any]) -> list[str]:
    """One to three sentences: what dominates and what to do; partial and GPU notes."""
    sentences: list[str] = []
    if not summary.get("complete", True):
        sentences.append("This profile is partial (the run did not finish); shares are of "
                         "the part that was recorded.")  # fmt: skip
    seconds = {name: t["seconds"] for name, t in summary["operations"].items()}
    operation, share = _dominant(seconds)
    if operation is None:
        return [*sentences, "Nothing was recorded: no operation took any time."]
    times = summary["operations"][operation]
    category, category_share = dominant_category(times)
    where = f" ({category}, {100 * category_share:.0f}% of its time)" if category else ""
    text = f"{100 * share:.0f}% of the run is {operation}{where}"
    tip = advice(operation, category)
    sentences.append(f"{text}: {tip}." if tip else f"{text}.")
    sentences.extend(_gpu_sentences(summary))
    return sentences


def _gpu_sentences(summary: dict[str, Any]) -> list[str]:
    gpu = summary.get("gpu")
    total = summary["total"]
    if total["seconds"] <= 0 or total.get("gpu_seconds", 0.0) <= 0:
        return []
    busy = total["gpu_seconds"] / total["seconds"]
    text = f"The GPU ran kernels {100 * busy:.0f}% of the time"
    polled = gpu.get("polled_utilization") if gpu else None
    if polled is not None:
        text += f" (NVML, as nvidia-smi, reported {polled:.0f}% utilization)"
    if busy < GPU_IDLE_BELOW:
        text += "; it is starved by the CPU side: speed that up or overlap it with GPU work"
    return [text + "."]


def comparison_verdict(
    left: dict[str, Any], right: dict[str, Any], names: tuple[str, str]
) -> list[str]:
    """How the second run differs from the first: total ratio and the largest change."""
    a, b = names
    before, after = left["total"]["seconds"], right["total"]["seconds"]
    if before <= 0 or after <= 0:
        return [f"One of {a} and {b} recorded no time; nothing to compare."]
    ratio = before / after
    faster = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"
    sentences = [f"{b} took {after:.3f} s against {before:.3f} s for {a}: {faster}."]
    changes = {
        name: right["operations"].get(name, {}).get("seconds", 0.0)
        - left["operations"].get(name, {}).get("seconds", 0.0)
        for name in dict.fromkeys([*left["operations"], *right["operations"]])
    }
    if changes:
        name = max(changes, key=lambda n: abs(changes[n]))
        delta = changes[name]
        if delta != 0:
            verb = "grew" if delta > 0 else "shrank"
            sentences.append(f"The largest change: {name} {verb} by {abs(delta):.3f} s.")
    return sentences
