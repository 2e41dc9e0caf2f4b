"""Two small RL-shaped GPU workloads for `rlsys profile`: CartPole on the CPU, the network on
the GPU (or the CPU where there is none, so the script also runs as a dry run).

    python workloads.py torch --steps 300    # torch: auto operations (no_grad, backward, step)
    python workloads.py jax --steps 300      # jax: annotated with rlsys.operation
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

import rlsys

HIDDEN, BATCH, UPDATE_EVERY = 256, 256, 20


def run_torch(steps: int) -> None:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"torch on {device}", flush=True)
    policy = torch.nn.Sequential(torch.nn.Linear(4, HIDDEN), torch.nn.Tanh(),
                                 torch.nn.Linear(HIDDEN, 2)).to(device)  # fmt: skip
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    for step in range(steps):
        with torch.no_grad():
            action = int(policy(torch.as_tensor(obs, device=device)).argmax())
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()
        if step % UPDATE_EVERY == UPDATE_EVERY - 1:
            loss = policy(torch.randn(BATCH, 4, device=device)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def run_jax(steps: int) -> None:
    import jax
    import jax.numpy as jnp

    print(f"jax on {jax.devices()[0].platform}", flush=True)
    keys = jax.random.split(jax.random.key(0), 2)
    params = {"w1": jax.random.normal(keys[0], (4, HIDDEN)) * 0.1,
              "w2": jax.random.normal(keys[1], (HIDDEN, 2)) * 0.1}  # fmt: skip

    def forward(p, x):
        return jnp.tanh(x @ p["w1"]) @ p["w2"]

    @jax.jit
    def update(p, x):
        grads = jax.grad(lambda q: (forward(q, x) ** 2).mean())(p)
        return jax.tree.map(lambda w, g: w - 1e-3 * g, p, grads)

    act = jax.jit(lambda p, x: jnp.argmax(forward(p, x)))
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    batch = jnp.ones((BATCH, 4))
    for step in range(steps):
        with rlsys.operation("inference"):
            action = int(act(params, jnp.asarray(obs)))
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()
        if step % UPDATE_EVERY == UPDATE_EVERY - 1:
            with rlsys.operation("backpropagation"):
                params = jax.block_until_ready(update(params, batch))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("framework", choices=["torch", "jax"])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    np.random.seed(0)
    (run_torch if args.framework == "torch" else run_jax)(args.steps)


if __name__ == "__main__":
    main()
