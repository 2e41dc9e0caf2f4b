"""How long building and compiling rlsys's PPO program takes (default config, CartPole).

`build_seconds`: importing rlsys and gymnax and building the recurrent-tensor program;
`compile_seconds`: the passes, the schedule, tracing and XLA compilation of the prologue,
the iteration function (10 iterations per call) and the epilogue. Then 10 iterations run,
for a first throughput figure.
"""

from __future__ import annotations

import time

from rlsys.bench import Case, System, child_main, report


def run(*, quick: bool, seed: int) -> None:
    start = time.perf_counter()
    from rlsys.algos.config import PPOConfig
    from rlsys.algos.ppo import build_ppo

    config = PPOConfig(total_steps=10 * 1024, seed=seed).validate()
    built = build_ppo(config)
    built_at = time.perf_counter()
    exe = built.program.compile(bounds=built.bounds, iterations_per_call=10)
    compiled_at = time.perf_counter()
    exe.run()
    done = time.perf_counter()
    report(env_steps=config.num_iterations * config.batch_size, seconds=done - compiled_at,
           build_seconds=built_at - start, compile_seconds=compiled_at - built_at)  # fmt: skip


CASE = Case(
    name="ppo_compile",
    description="Build and compile time of rlsys's PPO program (CartPole, 8 x 128, 4 x 4).",
    baseline="rlsys-ppo",
    systems=[System("rlsys-ppo", run=run, description="rlsys.algos.ppo, default config")],
)

if __name__ == "__main__":
    child_main(CASE)
