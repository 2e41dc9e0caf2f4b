#!/usr/bin/env bash
# GPU check of the profiler: profile a PyTorch and a JAX workload on the GPU with
# `rlsys profile`, compare them, and check that kernels, CUDA API time and NVML samples were
# recorded. Results (summary.json, report.html, gpu_util.png, trace.json) go under $OUT.
#
#   benchmarks/gpu/profile_gpu.sh             fresh venv: torch (CUDA), jax[cuda12], nvidia-ml-py
#   benchmarks/gpu/profile_gpu.sh --dry-run   this Python ($PYTHON, default python3), no installs,
#                                             no GPU needed (then nothing GPU-specific is checked)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/runs/gpu-check}
STEPS=${STEPS:-400}
mkdir -p "$OUT"

if [[ ${1:-} == --dry-run ]]; then
    PY=${PYTHON:-python3}
else
    VENV=${VENV:-$OUT/venv}
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    # torch's default Linux wheel is the CUDA build; pip resolves one CUDA 12 runtime for both.
    "$VENV/bin/pip" install -q torch "jax[cuda12]" nvidia-ml-py
    "$VENV/bin/pip" install -q -e "$ROOT"
    PY=$VENV/bin/python
fi

EXPECT_GPU=()
if "$PY" -c "from rlsys.profiler.collectors.nvml import open_nvml; assert open_nvml()"; then
    EXPECT_GPU=(--expect-gpu)
fi
echo "GPU found by NVML: ${EXPECT_GPU[*]:-no}"

status=0
for framework in torch jax; do
    rm -rf "${OUT:?}/$framework"
    "$PY" -m rlsys.cli profile --quiet --out "$OUT/$framework" -- \
        "$PY" "$ROOT/benchmarks/gpu/workloads.py" "$framework" --steps "$STEPS" || status=1
done
"$PY" -m rlsys.cli report --quiet --out "$OUT" "$OUT/torch" "$OUT/jax" || status=1
"$PY" "$ROOT/benchmarks/gpu/check_outputs.py" "$OUT" "${EXPECT_GPU[@]}" || status=1
exit $status
