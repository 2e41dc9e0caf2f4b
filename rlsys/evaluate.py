"""`rlsys eval DIR --episodes N`: run a trained policy and print its mean and std return.

The policy is the one after the last update in DIR's checkpoint; with `normalize_obs` it
sees observations normalized by the checkpoint's running statistics. Each episode runs in its
own environment (one batch of N), for at most the environment's episode limit or
`--max-steps`; actions are the most likely ones (`--stochastic` samples instead). Evaluation
is itself a small recurrent-tensor program: the acting loop of training with fixed
parameters. It keeps each step's reward and end of episode, not its observations (the loop
carries the last one), so its memory does not grow with the episodes' length: two Atari
episodes of 5,000 steps peaked at 355 MiB.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from rlsys.errors import UsageError

DESCRIPTION = "Run the trained policy of a `rlsys train` folder and report its returns."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="DIR", help="a folder of `rlsys train`")
    parser.add_argument("--episodes", type=int, default=10, help="episodes to run (default 10)")
    parser.add_argument("--max-steps", type=int, default=None, metavar="N",
                        help="end each episode after at most N steps (default: the "
                             "environment's episode limit)")  # fmt: skip
    parser.add_argument("--stochastic", action="store_true",
                        help="sample actions (DQN: ε-greedy with its end_e)")  # fmt: skip


def final_values(algo: str, config, state, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The values after the last iteration of the recurrences over i called `names` (params,
    obs_mean, ...), from a checkpoint's loop state; names the program lacks are left out."""
    import rlsys.algos as algos
    from rlsys.compiler.pipeline import run_pipeline

    graph, _ = run_pipeline(algos.ALGORITHMS[algo][1](config).program.graph())
    values = {}
    for node in graph:
        if node.name in names:
            update = next(b for b in node.branches if int(b.region[0][0].evaluate({})) == 1)
            saved = state.carry.get(str(update.edge.node))
            if saved is None or tuple(np.shape(saved)[1:]) != tuple(node.shape):
                raise UsageError(
                    f"the checkpoint's {node.name} does not match the {algo} program its "
                    f"config.toml builds (expected shape {tuple(node.shape)}, saved "
                    f"{'none' if saved is None else tuple(np.shape(saved)[1:])}): the folder "
                    "was written by another configuration or rlsys version",
                    hint="evaluate a run written by this rlsys, or set the options it was "
                    'trained with in its config.toml (e.g. network = "mlp")',
                )
            values[node.name] = np.asarray(saved[0])
    return values


def evaluate(config, params: np.ndarray, episodes: int, greedy: bool = True,
             obs_stats: tuple[np.ndarray, np.ndarray] | None = None,
             max_steps: int | None = None) -> np.ndarray:  # fmt: skip
    """The return of each of `episodes` episodes played with `params`, each for at most
    `max_steps` (default: the environment's limit); `obs_stats`: the (mean, var)
    observations are normalized with, as in training (`normalize_obs`)."""
    import rlsys.rt as rt
    from rlsys.algos.common import act, acting_model, make_env
    from rlsys.algos.normalize import Normalizer

    one = make_env(dataclasses.replace(config, num_envs=1))  # its shapes, before N of them
    steps = one.max_episode_steps if max_steps is None else min(max_steps, one.max_episode_steps)
    env = one if episodes == 1 else make_env(dataclasses.replace(config, num_envs=episodes))
    prog = rt.Program(dims=("i", "b", "t"))
    i, b, t = prog.dims
    T = prog.bounds[-1]
    with prog:
        obs_norm = None
        if obs_stats is not None:
            obs_norm = Normalizer(*obs_stats, clip=config.obs_clip)
        model = acting_model(env, config, obs_norm)
        rollout = act(prog, env, model, rt.const(params), config.seed + 1000, greedy=greedy)
        alive = rt.placeholder(domain=(i, b, t), name="alive")  # 1 until the episode ends
        alive[i, b, 0] = 1.0
        alive[i, b, t + 1] = alive * (1.0 - rollout.step.done)
        prog.output("returns", (rollout.step.reward * alive)[i, b, 0:T].sum())
    bounds = {"I": 1, "B": episodes, "T": steps}
    return prog.compile(bounds=bounds).run()["returns"][0]


def run(args: argparse.Namespace) -> int:
    from rlsys.train import ALGORITHMS, read_config
    from rlsys.training import CHECKPOINT, checkpoint_algo, load_checkpoint

    if args.episodes < 1:
        raise UsageError("--episodes must be at least 1")
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError("--max-steps must be at least 1")
    checkpoint = args.run_dir / CHECKPOINT
    if not args.run_dir.is_dir():
        what = "not a folder" if args.run_dir.exists() else "no such folder"
        raise UsageError(f"{args.run_dir}: {what}",
                         hint="evaluate a folder written by `rlsys train`")  # fmt: skip
    if not checkpoint.exists():
        from rlsys.train import config_algo

        algo = config_algo(args.run_dir / "config.toml")
        hint = (f"its run stopped before saving one: continue it with `rlsys train {algo} "
                f"--resume {args.run_dir}`" if algo else "evaluate a folder written by "
                "`rlsys train`")  # fmt: skip
        raise UsageError(f"{args.run_dir} holds no {CHECKPOINT}", hint=hint)
    algo = checkpoint_algo(checkpoint)
    config_class = ALGORITHMS[algo][0]
    config = config_class(**read_config(args.run_dir / "config.toml", config_class)).validate()
    final = final_values(algo, config, load_checkpoint(checkpoint, algo),
                         ("params", "obs_mean", "obs_var"))  # fmt: skip
    # The statistics after the last iteration: those of all observations of training.
    obs_stats = (final["obs_mean"], final["obs_var"]) if "obs_mean" in final else None
    from rlsys.cli import compile_cache

    with compile_cache(args):
        returns = evaluate(config, final["params"], args.episodes, greedy=not args.stochastic,
                           obs_stats=obs_stats, max_steps=args.max_steps)  # fmt: skip
    mean, std = round(float(returns.mean()), 1) + 0.0, returns.std()  # + 0.0: no "-0.0"
    episodes = f"{args.episodes} episode{'s' if args.episodes > 1 else ''}"
    print(f"{algo} on {config.env}: mean return {mean:.1f} ± {std:.1f} over {episodes} "
          f"({'sampled' if args.stochastic else 'greedy'} actions)")  # fmt: skip
    return 0
