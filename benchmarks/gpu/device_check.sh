#!/usr/bin/env bash
# Every GPU check of rlsys in one call on a lent GPU machine, phase by phase, each under its
# own time limit so that one hang cannot eat the others' time:
#
#   info      the GPU, driver, python3's torch and jax, and what they see
#   profile   benchmarks/gpu/profile_gpu.sh: a PyTorch and a JAX workload under `rlsys profile`
#             (GPU kernels, CUDA API time, NVML samples), then `rlsys profile` of a PPO run
#   train     the README's main job (`rlsys train ppo`, gymnax CartPole) with JAX on the GPU
#   ppo       bench case ppo_cartpole, rlsys vs the PureJaxRL-style PPO, both on the GPU
#   sweep     bench case scaling_sweep, rlsys vs the PureJaxRL-style A2C, both on the GPU
#             (only the points named in $SWEEP_POINTS, comma-separated, when it is set)
#   kernels   benchmarks/gpu/kernel_count.py: GPU kernels per iteration of rlsys and the
#             PureJaxRL-style, PPO and the sweep's base point, per loop of the program
#             (kernels, GPU time, GPU idle time), rlsys with and without its XLA:GPU
#             options (rlsys/compiler/lower/gpu_launch.py); the optimized HLO goes to hlo/
#   chunks    benchmarks/chunked_grad_ab.py at five sweep points: the gradient re-run whole
#             vs in 1 MiB chunks (a CPU-cache optimization: does it cost on the GPU?)
#
#   benchmarks/gpu/device_check.sh [PHASE ...]     (default: info profile train ppo sweep)
#
# It uses the machine's own python3 (CUDA builds of torch and jax, nvidia-ml-py); packages
# that machine lacks come as wheels in .whl/ (ignored by git), fetched where pip works:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#       gymnasium==1.3.0 farama-notifications==0.0.4 gymnax==1.0.1
# Results: $OUT/summary.txt (the last lines of each phase) and $OUT/check.tar.gz (every log,
# profile and bench folder), rewritten after each phase.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/runs/device-check}
WORK=$(mktemp -d)
PY=${PYTHON:-python3}
SWEEP_POINTS=${SWEEP_POINTS:-}
mkdir -p "$OUT"
cd "$ROOT" || exit 1

if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

info() {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,power.draw --format=csv
    "$PY" - <<'EOF'
import sys, jax, numpy, torch
print(sys.version.split()[0], "jax", jax.__version__, jax.devices(), "numpy", numpy.__version__)
print("torch", torch.__version__, "cuda", torch.cuda.is_available())
import gymnasium, gymnax
print("gymnasium", gymnasium.__version__, "gymnax ok")
EOF
}

profile() {
    PYTHON=$PY OUT=$WORK/profile STEPS=${STEPS:-400} bash benchmarks/gpu/profile_gpu.sh --dry-run
    local status=$?
    "$PY" -m rlsys.cli profile --quiet --out "$WORK/profile/ppo" -- "$PY" -m rlsys.cli train ppo \
        --env gymnax:CartPole-v1 --total-steps 200000 --quiet --out "$WORK/profile/ppo-run" &&
        "$PY" -c "import json,sys; s=json.load(open(sys.argv[1])); g=s.get('gpu') or {}
print('ppo:', round(s['total']['seconds'], 2), 's', s['total']['categories'])
print('gpu:', {k: v for k, v in g.items() if k != 'devices'})" \
            "$WORK/profile/ppo/summary.json" || status=1
    return $status
}

train() {
    "$PY" -m rlsys.cli train ppo --env gymnax:CartPole-v1 --out "$WORK/train"
}

ppo() {
    "$PY" -m rlsys.cli bench run ppo_cartpole --systems rlsys-ppo,purejaxrl-style --reps 2 \
        --out "$WORK/bench-ppo"
}

sweep() {
    local systems
    systems=$("$PY" -c "
import sys; sys.path.insert(0, 'benchmarks/cases')
from scaling_sweep import grid
points = [p for p in '$SWEEP_POINTS'.split(',') if p] or grid()
print(','.join(f'{i}@{p}' for p in points for i in ('rlsys', 'purejaxrl')))")
    "$PY" -m rlsys.cli bench run scaling_sweep --systems "$systems" --reps 1 \
        --out "$WORK/bench-sweep"
}

kernels() {
    "$PY" benchmarks/gpu/kernel_count.py ppo --rlsys off,rlsys --hlo-dir "$WORK/hlo"
    "$PY" benchmarks/gpu/kernel_count.py sweep base --rlsys off,rlsys --hlo-dir "$WORK/hlo"
}

chunks() {
    for point in base envs=512 episode=500 layers=4 width=16; do
        "$PY" benchmarks/chunked_grad_ab.py "$point" --rounds 5
    done
}

declare -A LIMIT=([info]=40 [profile]=150 [train]=80 [ppo]=110 [sweep]=160 [kernels]=200
    [chunks]=150)
PHASES=("$@")
[[ ${#PHASES[@]} -gt 0 ]] || PHASES=(info profile train ppo sweep)
for phase in "${PHASES[@]}"; do
    began=$SECONDS
    timeout "${LIMIT[$phase]}" bash -c "$(declare -f "$phase"); $(declare -p PY WORK SWEEP_POINTS); $phase" \
        >"$WORK/$phase.log" 2>&1
    status=$?
    {
        echo "== $phase: exit $status after $((SECONDS - began)) s"
        tail -n 40 "$WORK/$phase.log"
    } | tee -a "$OUT/summary.txt"
    tar -czf "$OUT/check.tar.gz" -C "$WORK" --exclude='*.npz' --exclude='*.jsonl' \
        --exclude='profile/ppo/trace.json' .
done
