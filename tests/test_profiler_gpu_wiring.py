"""`rlsys profile` with a (fake) NVML GPU: sampler in the parent, profilers in the child.

NVML is faked in the parent; the child then gets the GPU flag and starts the JAX profiler on
`import jax` (on the CPU here, so it records no kernels) and checks torch.cuda (False here).
What this proves is the wiring: flag, import watch, trace conversion at exit, and the GPU
section in summary.json, trace.json and report.html, with no warning from any collector.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlsys.cli import main
from rlsys.profiler.summary import load_summary

SCRIPT = """
    import jax
    import jax.numpy as jnp
    import torch
    import rlsys

    try:  # the child must be tracing already: a second trace is refused
        jax.profiler.start_trace("unused")
        raise SystemExit(5)
    except RuntimeError:
        pass
    f = jax.jit(lambda x: x @ x)
    for _ in range(5):
        with rlsys.operation("inference"):
            f(jnp.ones((64, 64))).block_until_ready()
"""


def fake_pynvml(utilization: int) -> SimpleNamespace:
    return SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetUtilizationRates=lambda handle: SimpleNamespace(gpu=utilization, memory=0),
    )


@pytest.mark.slow
def test_profile_with_a_gpu_writes_the_gpu_section(tmp_path: Path, monkeypatch, capfd) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(utilization=64))
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = tmp_path / "p"
    assert main(["profile", "--quiet", "--out", str(out), "--", sys.executable, str(script)]) == 0
    assert "no GPU trace" not in capfd.readouterr().err
    gpu = load_summary(out)["gpu"]
    (device,) = gpu["devices"]
    assert device["device"] == "cuda:0" and device["samples"] > 0
    assert gpu["polled_utilization"] == 64.0 and device["busy_seconds"] == 0.0  # CPU: no kernels
    assert (out / "gpu_util.png").is_file()
    trace = json.loads((out / "trace.json").read_text())["traceEvents"]
    assert any(e["ph"] == "C" and e["name"] == "cuda:0 utilization" for e in trace)
    assert "GPU: true busy time vs polled utilization" in (out / "report.html").read_text()
