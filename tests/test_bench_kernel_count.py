"""`benchmarks/gpu/kernel_count.py` attributes GPU events to the loop bodies of the HLO."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "kernel_count.py"

HLO = """\
%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]) parameter(0)
  %loop_add_fusion.3 = f32[8]{0} fusion(%p), kind=kLoop, calls=%fused_add
  ROOT %t = (s32[], f32[8]) tuple(%p, %loop_add_fusion.3)
}

ENTRY %main.7 (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %gemm_fusion_dot.1 = f32[8]{0} fusion(%a), kind=kCustom, calls=%gemm
  %while.2 = (s32[], f32[8]) while(%t0), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"4"}}
  ROOT %r = f32[8]{0} get-tuple-element(%while.2), index=1
}
"""  # noqa: E501 (an HLO line as XLA prints it)


@pytest.fixture(scope="module")
def kernel_count():
    spec = importlib.util.spec_from_file_location("kernel_count", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_events_go_to_their_loop_body_with_the_idle_time_before_them(kernel_count) -> None:
    events = [  # (start ns, end ns, op, is a copy), as measure() collects them, 2 iterations
        (0, 4_000, "gemm_fusion_dot_1", False),  # a kernel's name: dots become underscores
        (6_000, 7_000, "loop_add_fusion.3", False),
        (7_000, 8_000, "loop_add_fusion.3", False),
        (12_000, 13_000, "memcpy32_post", True),
    ]
    table = kernel_count.per_computation(events, 2, HLO)
    count, busy, idle = table["body while body (4 trips per call)"]
    assert (count, busy, idle) == (1.0, 1.0, 1.0)  # 2 kernels, 2 us busy, 2 us idle, over 2
    assert table["main.7"] == [0.5, 2.0, 0.0]
    assert table["(not in the HLO)"] == [0.5, 0.5, 2.0]
