"""PPO on CartPole-v1, same hyperparameters: rlsys vs PureJaxRL-, CleanRL-style and SB3.

Every system trains the same PPO (8 envs x 128 steps, 4 epochs x 4 minibatches, 64-64 tanh
actor and critic, the defaults of `PPOConfig`; see `benchmarks/baselines/`) for up to 500k
env steps (100k with `--quick`) and stops once the mean return of the last 10 iterations
with finished episodes reaches 475. Reported:

* `env_steps` / `seconds`: the iterations computed and the time they took, after
  compilation or setup (an early stop makes the run shorter, not the rate wrong);
* `compile_seconds`: building and compiling (JAX systems), setting up envs and model (torch);
* `time_to_475_s`: from the start of the process (imports and compilation included) to the
  moment the criterion was met, and `steps_to_475`; both only in runs that met it, so
  `reached_475` (1 or 0) says in how many runs that was (its median is 1 when most did);
* `final_return`: the mean return of the last 10 iterations with episodes when it stopped.

The JAX systems are checked between jitted calls of up to 10 iterations each (rlsys's
`iterations_per_call`, which it lowers to split the run into equal calls: 8 for 488
iterations; the PureJaxRL-style `chunk`), so they may compute up to 9 iterations past the
target; the torch ones check after every iteration.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rlsys.bench import Case, System, child_main, installed, report

ROOT = Path(__file__).resolve().parents[2]  # the repository: `benchmarks.baselines` lives here
TARGET = 475.0
CHUNK = 10  # iterations per jitted call of both JAX systems


def _process_start() -> float:
    """The start of this process on the `time.perf_counter()` clock."""
    import psutil

    now_wall, now_perf = time.time(), time.perf_counter()
    return now_perf - (now_wall - psutil.Process().create_time())


def _train_rlsys(total_steps: int, seed: int, *, target: float, clock_start: float,
                 env: str = "gymnax:CartPole-v1") -> dict:  # fmt: skip
    from benchmarks.baselines import Progress
    from rlsys.algos.config import PPOConfig
    from rlsys.algos.ppo import build_ppo

    began = time.perf_counter()
    config = PPOConfig(env=env, total_steps=total_steps, seed=seed,
                       iterations_per_call=CHUNK).validate()  # fmt: skip
    built = build_ppo(config)
    exe = built.program.compile(bounds=built.bounds, iterations_per_call=CHUNK)
    compile_seconds = time.perf_counter() - began
    progress = Progress(config.batch_size, target=target, clock_start=clock_start)

    def on_iteration(i: int, outputs: dict) -> bool:
        return progress.add(float(outputs["episode_return_sum"]), float(outputs["episodes"]))

    run_began = time.perf_counter()
    exe.run(on_iteration=on_iteration)
    run_seconds = time.perf_counter() - run_began
    seen = len(progress.returns)  # iterations are computed a call at a time
    per_call = exe.iterations_per_call  # CHUNK or less: calls split the run evenly
    computed = min(config.num_iterations, -(-seen // per_call) * per_call)
    return progress.result(iterations=computed, compile_seconds=compile_seconds,
                           run_seconds=run_seconds)  # fmt: skip


def _train(impl: str, total_steps: int, seed: int, clock_start: float, env: str) -> dict:
    if impl == "rlsys":
        return _train_rlsys(total_steps, seed, target=TARGET, clock_start=clock_start, env=env)
    if impl == "purejaxrl":
        from benchmarks.baselines import purejaxrl_style_ppo

        return purejaxrl_style_ppo.train(total_steps, seed, target=TARGET,
                                         clock_start=clock_start, chunk=CHUNK)  # fmt: skip
    if impl == "cleanrl":
        from benchmarks.baselines import cleanrl_style_ppo as module
    else:
        from benchmarks.baselines import sb3_ppo as module
    return module.train(total_steps, seed, target=TARGET, clock_start=clock_start)


def run(*, quick: bool, seed: int, impl: str, env: str = "gymnax:CartPole-v1") -> None:
    clock_start = _process_start()
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    result = _train(impl, 100_000 if quick else 500_000, seed, clock_start, env)
    metrics = {
        "compile_seconds": result["compile_seconds"],
        "reached_475": 1.0 if result["steps_to_target"] is not None else 0.0,
    }
    if result["steps_to_target"] is not None:  # report() takes no NaN: left out when unmet
        metrics["time_to_475_s"] = result["time_to_target_s"]
        metrics["steps_to_475"] = result["steps_to_target"]
    if result["final_return"] == result["final_return"]:  # not NaN
        metrics["final_return"] = result["final_return"]
    report(env_steps=result["env_steps"], seconds=result["run_seconds"], **metrics)


CASE = Case(
    name="ppo_cartpole",
    description=(
        "PPO on CartPole-v1 with the same hyperparameters (8 envs x 128 steps, 4 epochs x 4 "
        "minibatches, 64-64 tanh MLPs), up to 500k env steps, stopping once the mean return "
        "of the last 10 iterations reaches 475: rlsys's compiled program vs a PureJaxRL-style "
        "hand-written JAX PPO, a CleanRL-style PyTorch PPO and Stable-Baselines3."
    ),
    baseline="sb3",
    timeout_s=300.0,
    systems=[
        System(
            "rlsys-ppo",
            run=run,
            params={"impl": "rlsys"},
            description="rlsys.algos.ppo (gymnax CartPole), 10 iterations per call",
        ),
        System(
            "purejaxrl-style",
            run=run,
            params={"impl": "purejaxrl"},
            description="hand-written JAX: vmap + lax.scan under jit, 10 iterations per call",
        ),
        System(
            "cleanrl-style",
            run=run,
            params={"impl": "cleanrl"},
            description="PyTorch, gymnasium SyncVectorEnv (SAME_STEP autoreset), 1 thread",
        ),
        System(
            "sb3",
            run=run,
            params={"impl": "sb3"},
            available=installed("stable_baselines3"),
            missing="stable-baselines3 not installed (pip install 'rlsys[bench]')",
            description="Stable-Baselines3 PPO('MlpPolicy'), DummyVecEnv, 1 thread",
        ),
    ],
)

if __name__ == "__main__":
    child_main(CASE)
