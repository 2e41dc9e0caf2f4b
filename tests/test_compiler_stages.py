"""Programs with host ops: stages in explain(), host loops, and what they compute."""

from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest

import rlsys.compiler.lower.jax_program as jax_program
import rlsys.compiler.lower.jax_staged as jax_staged
import rlsys.rt as rt
from rlsys.algos.config import PPOConfig
from rlsys.algos.ppo import build_ppo
from rlsys.compiler.errors import RecurrenceError
from rlsys.envs import GymnasiumEnv


def small_ppo(env: str, num_steps: int = 8):
    config = PPOConfig(env=env, num_envs=2, num_steps=num_steps, num_minibatches=2,
                       update_epochs=1, total_steps=2 * num_steps * 3, seed=3)  # fmt: skip
    return build_ppo(config)


def test_a_host_environment_makes_act_and_learn_stages() -> None:
    built = small_ppo("gymnasium:CartPole-v1")
    rows = built.program.compile(bounds=built.bounds).explain(file=io.StringIO())
    by_name = {row.tensor: row for row in rows}
    by_op: dict[str, list] = {}
    for row in rows:
        by_op.setdefault(row.op, []).append(row)
    # The acting chain crosses env.step on the host: its loops run from Python.
    assert by_name["obs"].decisions == {"i": "host loop", "b": "vectorize", "t": "host loop"}
    assert [r.stage for r in by_op["gymnasium_step"]] == ["act"]
    assert [r.stage for r in by_op["argmax"]] == ["act"]  # the sampled action
    assert [r.stage for r in by_op["gymnasium_reset"]] == ["setup"]
    # Returns, gradients and the update come after the last host op: the learn stage.
    assert by_name["advantage"].stage == "learn"
    assert by_name["advantage"].decisions["t"] == "reverse scan"
    assert {r.stage for r in by_op["grad"]} == {"learn"}
    assert by_name["params"].stage == "act"  # read by the policy: the act stage owns it


def test_an_in_graph_environment_has_one_stage() -> None:
    built = small_ppo("gymnax:CartPole-v1")
    rows = built.program.compile(bounds=built.bounds).explain(file=io.StringIO())
    assert {row.stage for row in rows} == {"main"}
    assert all("host loop" not in row.decisions.values() for row in rows)


def test_host_loops_compute_what_an_ordered_callback_computes(monkeypatch) -> None:
    """The same program with its host op called from a host loop and from inside one jitted
    function (an ordered io_callback, the lowering used before host loops)."""
    staged = small_ppo("gymnasium:CartPole-v1")
    staged_out = staged.program.compile(bounds=staged.bounds).run()
    monkeypatch.setattr(jax_program, "has_host", lambda graph, step: False)
    callback = small_ppo("gymnasium:CartPole-v1")
    callback_out = callback.program.compile(bounds=callback.bounds).run()
    assert staged_out.keys() == callback_out.keys()
    for name, value in staged_out.items():
        np.testing.assert_allclose(value, callback_out[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(("num_steps", "packed_bytes"), [(8, None), (1, None), (8, 0)])
def test_a_rotated_host_loop_computes_what_the_plain_one_computes(
    monkeypatch, num_steps, packed_bytes
) -> None:
    """PPO's acting loop is [policy -> env.step -> the rest of the step]: it runs rotated,
    one jitted call per step (the rest of a step with the next step's policy). Without
    rotation, two calls per step, the program computes the same (also for one step, where
    no rotated call runs, and with every constant too large to pack)."""
    if packed_bytes is not None:
        monkeypatch.setattr(jax_staged, "_PACKED_CONSTANT_BYTES", packed_bytes)
    rotated_runs = []
    run = jax_staged.Rotated.run
    monkeypatch.setattr(jax_staged.Rotated, "run",
                        lambda self, *args: rotated_runs.append(1) or run(self, *args))  # fmt: skip
    built = small_ppo("gymnasium:CartPole-v1", num_steps)
    rotated = built.program.compile(bounds=built.bounds).run()
    assert rotated_runs, "the acting loop did not run rotated"
    monkeypatch.setattr(jax_staged, "Rotated", lambda *args: None)
    built = small_ppo("gymnasium:CartPole-v1", num_steps)
    plain = built.program.compile(bounds=built.bounds).run()
    for name, value in rotated.items():
        np.testing.assert_allclose(value, plain[name], rtol=1e-6, atol=1e-7, err_msg=name)


def test_a_host_loop_keeps_a_value_read_only_at_its_last_step_without_a_stack(
    monkeypatch, staged_loops
) -> None:
    """The observation env.step returns is read after the acting loop only at its last step
    (it starts the next iteration): the loop keeps that step's value, from the carry, not a
    stack of every step's (110 MB per rollout of 8 Atari games x 128 steps). The program
    computes the same as with the stack, rotated or not."""

    def run(rotate: bool, last_steps: bool) -> dict:
        with monkeypatch.context() as patch:
            if not rotate:
                patch.setattr(jax_staged, "Rotated", lambda *args: None)
            if not last_steps:
                patch.setattr(jax_staged, "carried_to_the_end", lambda *args: frozenset())
            built = small_ppo("gymnasium:CartPole-v1")
            outputs = built.program.compile(bounds=built.bounds).run()
        (acting,) = [loop for loop in staged_loops if loop.stack_shapes]
        staged_loops.clear()
        assert (acting.rotated is not None) == rotate
        assert bool(acting.last_steps) == last_steps
        assert not acting.last_steps & set(acting.stack_shapes)
        return outputs

    for rotate in (True, False):
        kept_last, stacked = run(rotate, last_steps=True), run(rotate, last_steps=False)
        for name, value in stacked.items():
            np.testing.assert_array_equal(value, kept_last[name], err_msg=name)


@pytest.mark.parametrize(("backend", "reverse_reads"),
                         [("jax", False), ("jax", True), ("ref", True)])  # fmt: skip
def test_a_program_without_iteration_loop_steps_the_environment_in_order(
    backend, reverse_reads
) -> None:
    """dims (b, t): the host op is stepped T times, in order, with actions computed from the
    observations; a reverse scan after it (returns) runs in the learn part. The reference
    interpreter calls the host op once per t for all b, as the JAX lowering does."""
    prog = rt.Program(dims=("b", "t"))
    b, t = prog.dims
    _, T = prog.bounds
    with prog:
        env = GymnasiumEnv("CartPole-v1", num_envs=3, seed=7)
        obs = rt.placeholder(shape=(4,), name="obs")
        obs[b, 0] = env.reset(rt.random.key(0).fold_in(b)).obs
        action = (obs.slice_axis(2, 3).reshape(()) > 0.0).astype("int32")  # push toward the pole
        step = env.step(action)
        obs[b, t + 1] = step.obs
        prog.output("reward", step.reward[b, 0:T])
        prog.output("action", action[b, 0:T])
        if reverse_reads:
            ret = rt.placeholder(name="ret")
            ret[b, T - 1] = step.reward[b, T - 1]
            ret[b, t] = step.reward + 0.5 * ret[b, t + 1]
            prog.output("ret", ret[b, 0:T])
    out = prog.compile(bounds={"B": 3, "T": 6}, backend=backend).run()

    same_step = gym.vector.AutoresetMode.SAME_STEP
    vector = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(3)],
                                      autoreset_mode=same_step)  # fmt: skip
    observation, _ = vector.reset(seed=7)
    rewards, actions = [], []
    for _ in range(6):
        chosen = (observation[:, 2] > 0).astype("int64")
        observation, reward, *_ = vector.step(chosen)
        rewards.append(reward)
        actions.append(chosen)
    np.testing.assert_array_equal(out["action"], np.stack(actions, axis=1))
    np.testing.assert_array_equal(out["reward"], np.stack(rewards, axis=1))
    if reverse_reads:
        expected = np.zeros((3, 6), "float32")
        for k in reversed(range(6)):
            expected[:, k] = rewards[k] + (0.5 * expected[:, k + 1] if k < 5 else 0.0)
        np.testing.assert_allclose(out["ret"], expected, rtol=1e-6)


def test_a_rotated_loop_reads_program_inputs(monkeypatch) -> None:
    """A policy that reads a program input (a threshold, a constant of the acting loop,
    packed with the others) computes in the rotated loop what the plain loop computes, and
    the input changes the actions."""

    def run(threshold: float) -> dict:
        prog = rt.Program(dims=("b", "t"))
        b, t = prog.dims
        _, T = prog.bounds
        with prog:
            env = GymnasiumEnv("CartPole-v1", num_envs=3, seed=7)
            limit = rt.input("threshold", domain=())
            obs = rt.placeholder(shape=(4,), name="obs")
            obs[b, 0] = env.reset(rt.random.key(0).fold_in(b)).obs
            action = (obs.slice_axis(2, 3).reshape(()) > limit).astype("int32")
            obs[b, t + 1] = env.step(action).obs
            prog.output("action", action[b, 0:T])
        exe = prog.compile(bounds={"B": 3, "T": 6})
        return exe.run({"threshold": np.float32(threshold)})

    rotated_runs = []
    original = jax_staged.Rotated.run
    counted = lambda self, *args: rotated_runs.append(1) or original(self, *args)  # noqa: E731
    monkeypatch.setattr(jax_staged.Rotated, "run", counted)
    rotated = {x: run(x)["action"] for x in (0.0, 1.0)}
    assert rotated_runs, "the acting loop did not run rotated"
    monkeypatch.setattr(jax_staged, "Rotated", lambda *args: None)
    for x, actions in rotated.items():
        np.testing.assert_array_equal(actions, run(x)["action"])
    assert rotated[1.0].sum() == 0 and rotated[0.0].sum() > 0  # the pole angle stays below 1


def test_optimized_hlo_names_the_loops_xla_compiled() -> None:
    from benchmarks.xla_breakdown import parse_hlo

    built = small_ppo("gymnax:CartPole-v1")  # acting: 8 steps; learning: 2 minibatch updates
    texts = built.program.compile(bounds=built.bounds).optimized_hlo()
    assert list(texts) == ["iterations[1]"]
    owner, body, labels = parse_hlo(texts["iterations[1]"])
    # The acting scan and the reverse scan of GAE run 8 trips, the minibatch updates 2; the
    # critic on final observations as many as the truncations need (`next_values`).
    assert set(labels.values()) == {"while body (2 trips per call)",
                                    "while body (8 trips per call)",
                                    "while body (? trips per call)"}  # fmt: skip
    assert set(owner) == set(body) and set(labels) <= set(owner.values())
    host = small_ppo("gymnasium:CartPole-v1")
    with pytest.raises(RecurrenceError, match="has host ops"):
        host.program.compile(bounds=host.bounds).optimized_hlo()


def test_auto_placement_keeps_a_program_with_host_ops_on_one_device() -> None:
    host = small_ppo("gymnasium:CartPole-v1")  # the test session's JAX has two CPU devices
    exe = host.program.compile(bounds=host.bounds, devices="auto")
    assert exe.devices == 1 and "it has host ops" in exe.placement


def test_running_a_compiled_host_loop_compiles_nothing_more(xla_compilations) -> None:
    """The copy of a step's index onto the device (`jax_staged._on_device`) is compiled with
    the program, not in a run's first step (12 ms of a host PPO run's 200)."""
    import jax

    jax.clear_caches()  # as in a fresh process
    built = small_ppo("gymnasium:CartPole-v1")
    exe = built.program.compile(bounds=built.bounds)
    xla_compilations.clear()
    losses = []
    exe.run(on_iteration=lambda i, out: losses.append(float(out["loss"])))
    assert xla_compilations == []
    assert len(losses) == 3 and all(np.isfinite(losses))


def test_a_large_constant_broadcast_is_computed_where_read_not_passed(monkeypatch) -> None:
    """DQN's replay rings start as zeros broadcast from a constant. A segment reading them
    computes the broadcast itself instead of taking the materialized zeros, which would be
    held for the whole run (545 MB for Pong's frames); the metrics stay the same bit for
    bit."""
    from rlsys.algos.config import DQNConfig
    from rlsys.algos.dqn import build_dqn

    # 80,000 transitions of CartPole: the observation ring's zeros are 1.4 MB (over 1 MiB)
    config = DQNConfig(env="gymnasium:CartPole-v1", num_envs=4, num_steps=16, total_steps=256,
                       buffer_size=80_000, learning_starts=64, iterations_per_call=2,
                       seed=3).validate()  # fmt: skip
    segments = []
    init = jax_staged.Segment.__init__

    def recorded(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        segments.append(self)

    def losses() -> list[float]:
        built = build_dqn(config)
        exe = built.program.compile(bounds=built.bounds)
        seen = []
        exe.run(on_iteration=lambda i, out: seen.append(float(out["loss"])))
        return seen

    def zeros_passed() -> set[str]:  # the large broadcasts segments take as arguments
        graph = segments[0].template.graph
        large = {n.id for n in graph if n.op == "broadcast_to"
                 and np.prod(n.shape) * np.dtype(n.dtype).itemsize > 2**20}  # fmt: skip
        return {graph[n].label() for s in segments for n in s.value_reads if n in large}

    monkeypatch.setattr(jax_staged.Segment, "__init__", recorded)
    regenerated = losses()
    assert not zeros_passed()
    monkeypatch.setattr(jax_staged, "regenerated", lambda ctx, node: False)
    segments.clear()
    materialized = losses()
    assert zeros_passed()  # the observation ring's zeros
    assert regenerated == materialized and len(regenerated) == 4 and any(regenerated)


def test_a_replay_ring_is_written_in_place(monkeypatch) -> None:
    """DQN's ring starts as zeros and each iteration writes one slot of it (`set_rows`). The
    window carrying it starts as zeros too, so the merge of the two reads the window alone
    (`jax._step_from_zeros`), and the segment writing the slot is given the carry to keep
    (donated): XLA writes the slot into the ring it was passed, with no copy of the ring
    among its temporaries. Without that rule, a select between the zeros and the window
    made a new ring every iteration; the losses are the same bit for bit."""
    import rlsys.compiler.lower.jax as jax_lowering
    from rlsys.algos.config import DQNConfig
    from rlsys.algos.dqn import build_dqn

    # 80,000 transitions of CartPole: an observation ring of 1.4 MB
    config = DQNConfig(env="gymnasium:CartPole-v1", num_envs=4, num_steps=16, total_steps=256,
                       buffer_size=80_000, learning_starts=64, seed=3).validate()  # fmt: skip
    ring_bytes = 80_000 * 17 // 16 * 4 * 4  # 17 frames per 16 steps of an env
    segments = []
    init = jax_staged.Segment.__init__

    def recorded(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        segments.append(self)

    def run() -> tuple[list[float], object]:
        segments.clear()
        built = build_dqn(config)
        exe = built.program.compile(bounds=built.bounds)
        seen = []
        exe.run(on_iteration=lambda i, out: seen.append(float(out["loss"])))
        (writer,) = [s for s in segments if s.finish is not None and len(s.loop_dims) == 1]
        return seen, writer.compiled.memory_analysis()

    monkeypatch.setattr(jax_staged.Segment, "__init__", recorded)
    in_place, memory = run()
    assert memory.alias_size_in_bytes >= ring_bytes  # the ring's output is its input
    assert memory.temp_size_in_bytes < ring_bytes / 2
    monkeypatch.setattr(jax_lowering, "_step_from_zeros", lambda *args: None)
    selected, memory = run()
    assert memory.temp_size_in_bytes >= ring_bytes  # a new ring, every iteration
    assert in_place == selected and len(in_place) == 4 and any(in_place)


def test_an_in_graph_replay_ring_is_updated_in_place_across_calls() -> None:
    """With an in-graph environment the iterations run as jitted calls (several iterations
    each), each taking the carry the last one returned: it is donated, so the call's ring
    is the one it was passed rather than a copy of it, and each run starts from zeros of
    its own (a second run gives the same losses). (Inside a call XLA still copies the rings
    once into its loop over the iterations: 4.3 MB of temporaries against 2.7 MB of rings.)"""
    from rlsys.algos.config import DQNConfig
    from rlsys.algos.dqn import build_dqn

    config = DQNConfig(env="gymnax:CartPole-v1", num_envs=4, num_steps=16, total_steps=256,
                       buffer_size=80_000, learning_starts=64, seed=3).validate()  # fmt: skip
    built = build_dqn(config)
    exe = built.program.compile(bounds=built.bounds, iterations_per_call=2)
    memory = exe._calls[2].memory_analysis()
    ring_bytes = 80_000 * 17 // 16 * 4 * 4  # the observations
    assert memory.alias_size_in_bytes >= ring_bytes
    runs = []
    for _ in range(2):
        losses = []
        exe.run(on_iteration=lambda i, out, losses=losses: losses.append(float(out["loss"])))
        runs.append(losses)
    assert runs[0] == runs[1] and len(runs[0]) == 4 and any(runs[0])


def test_an_in_graph_program_does_not_hold_a_replay_rings_zeros_for_the_run(monkeypatch) -> None:
    """The zeros a ring starts as are a large broadcast of a constant: the prologue leaves
    them out of what it passes to the iterations (they would be held for the whole run: 613
    MiB for Breakout-MinAtar with a 200,000-step buffer), which read the carried ring."""
    from rlsys.algos.config import DQNConfig
    from rlsys.algos.dqn import build_dqn

    config = DQNConfig(env="gymnax:CartPole-v1", num_envs=4, num_steps=16, total_steps=128,
                       buffer_size=80_000, learning_starts=64, seed=3).validate()  # fmt: skip

    def prologue_bytes_and_losses() -> tuple[int, list[float]]:
        built = build_dqn(config)
        exe = built.program.compile(bounds=built.bounds, iterations_per_call=2)
        losses = []
        exe.run(on_iteration=lambda i, out: losses.append(float(out["loss"])))
        return exe._prologue_fn.memory_analysis().output_size_in_bytes, losses

    passed, losses = prologue_bytes_and_losses()
    monkeypatch.setattr(jax_program, "regenerated", lambda ctx, node: False)
    held, held_losses = prologue_bytes_and_losses()
    ring_bytes = 80_000 * 17 // 16 * 4 * 4  # the observations: 1.4 MB, over the 1 MiB regenerated
    assert held - passed >= ring_bytes
    assert losses == held_losses and len(losses) == 2 and all(np.isfinite(losses))
