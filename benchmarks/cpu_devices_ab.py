"""An acting loop of the scaling sweep on one XLA:CPU device and split over several, A/B.

    python benchmarks/cpu_devices_ab.py layers=4             # a point of scaling_sweep
    python benchmarks/cpu_devices_ab.py base --devices 2 --rounds 9

XLA:CPU runs a while loop's body one op at a time, and an acting step's products (envs x
width) are too small for its intra-op threads: the loop uses one core. Split over the envs
across CPU devices (`--xla_force_host_platform_device_count`, one sharded jit), each device
runs its share on a core of its own. The loop here has the sweep point's shapes (observations
of OBS_SIZE floats, `layers` tanh layers of `width`, 2 logits; the state moves by the clipped
first logit), not rlsys's program: it measures what such a placement could give the sweep's
acting loop. Printed: the median over rounds of each variant's median milliseconds per
loop, and the largest difference between the two variants' final states.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # rlsys and benchmarks


def main() -> None:
    from benchmarks.cases.scaling_sweep import OBS_SIZE, grid

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("point", choices=tuple(grid()))
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    point = grid()[args.point]
    if args.devices < 2 or point["envs"] % args.devices:
        parser.error(f"--devices must be at least 2 and divide the point's {point['envs']} envs")
    flag = f"--xla_force_host_platform_device_count={args.devices}"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}"
    import jax  # after XLA_FLAGS: the flag is read when the CPU backend starts
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    sizes = (OBS_SIZE, *(point["width"],) * point["layers"], 2)
    rng = np.random.default_rng(0)
    weights = [jnp.asarray(rng.normal(0, n**-0.5, (n, m)), jnp.float32)
               for n, m in itertools.pairwise(sizes)]  # fmt: skip
    state = jnp.asarray(rng.normal(size=(point["envs"], OBS_SIZE)), jnp.float32)

    def acting(state, weights):
        def step(state, _):
            h = state
            for w in weights[:-1]:
                h = jnp.tanh(h @ w)
            logits = h @ weights[-1]
            return state + 0.01 * jnp.clip(logits[:, :1], -1, 1), None

        return jax.lax.scan(step, state, None, length=point["episode"])[0]

    mesh = Mesh(np.array(jax.devices()[: args.devices]), ("envs",))
    split = NamedSharding(mesh, PartitionSpec("envs"))
    variants = {
        "one device": (jax.jit(acting), state, weights),
        f"{args.devices} devices": (
            jax.jit(acting, out_shardings=split),
            jax.device_put(state, split),
            jax.device_put(weights, NamedSharding(mesh, PartitionSpec())),
        ),
    }
    millis: dict[str, list[float]] = {name: [] for name in variants}
    finals = {name: np.asarray(f(s, w)) for name, (f, s, w) in variants.items()}  # compiles
    for _ in range(args.rounds):
        for name, (f, s, w) in variants.items():
            times = []
            for _ in range(5):
                start = time.perf_counter()
                f(s, w).block_until_ready()
                times.append(time.perf_counter() - start)
            millis[name].append(statistics.median(times) * 1e3)
    loop = f"{point['episode']} steps of {point['envs']} envs"
    for name, values in millis.items():
        print(f"{args.point} {name:>10}: {statistics.median(values):7.2f} ms per acting loop "
              f"({loop}), {args.rounds} rounds")  # fmt: skip
    one, many = finals.values()
    print(f"largest difference of the final states: {np.abs(one - many).max():.3g}")


if __name__ == "__main__":
    main()
