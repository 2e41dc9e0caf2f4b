"""Convolutions on XLA:CPU go to its Eigen kernel, not to YNNPACK.

XLA:CPU hands some ops to the YNNPACK library (`xla_cpu_experimental_ynn_fusion_type`): by
default matrix products, reductions and single convolutions. For the Atari network's
convolutions YNNPACK was the slow choice: the Nature CNN and a 7-action head over 4 x 256
frames in a `lax.scan` took 163 ms per 256 frames with the default (conv1 alone 82 ms in
YNNPACK) against 37 ms with convolutions left to Eigen (one process, alternating calls),
and XLA chose YNNPACK for them or not depending on what followed the network. So the
option is XLA's default less single convolutions. Programs without convolutions compile
to the same HLO either way (PPO on gymnax CartPole, the A2C sweep's base point: compared
instruction for instruction; benchmarks/HISTORY.md, thirty-eighth session).

Applied through `backend_options.py`.
"""

from __future__ import annotations

CPU_CONVOLUTION_OPTIONS: dict[str, object] = {
    "xla_cpu_experimental_ynn_fusion_type": (
        "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE"
    ),
}
