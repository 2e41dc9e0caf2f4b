"""Recurrent tensors in three small programs (run: python examples/recurrences.py).

1. A recurrence:            x[0] = 1, x[t + 1] = 2 x[t]
2. Returns with episode ends: ret[t] = r[t] + gamma (1 - done[t]) ret[t + 1]
3. A tiny policy gradient:  a softmax policy over 3 arms learns which arm pays most.
"""

from __future__ import annotations

import numpy as np

import rlsys.rt as rt


def doubling() -> np.ndarray:
    prog = rt.Program(dims=("t",))
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        x = rt.placeholder()
        x[0] = 1.0
        x[t + 1] = x[t] * 2.0
        prog.output("x", x)
    return prog.compile(bounds={T: 8}).run()["x"]


def returns(rewards: np.ndarray, dones: np.ndarray, gamma: float = 0.9) -> np.ndarray:
    prog = rt.Program(dims=("t",))
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        r, done = rt.input("r"), rt.input("done")
        ret = rt.placeholder()
        ret[T - 1] = r[T - 1]
        ret[t] = r + gamma * (1.0 - done) * ret[t + 1]
        prog.output("ret", ret)
    return prog.compile(bounds={T: len(rewards)}).run({"r": rewards, "done": dones})["ret"]


def bandit(iterations: int = 200, batch: int = 16):
    payout = np.array([0.2, 1.0, 0.5], "float32")
    prog = rt.Program(dims=("i", "b"))
    i, b = prog.dims
    _, B = prog.bounds
    with prog:
        theta = rt.placeholder(shape=(3,), domain=(i,), name="theta")
        theta[0] = rt.const(np.zeros(3, "float32"))
        policy = rt.Categorical(theta[i])
        arm = policy.sample(rt.random.key(0).fold_in(i).fold_in(b))
        reward = rt.const(payout).take(arm)
        loss = (-policy.log_prob(arm) * reward)[i, 0:B].mean()
        rt.optim.SGD(lr=0.5).minimize(loss, theta)
        prog.output("mean_reward", reward[i, 0:B].mean())
    exe = prog.compile(bounds={"I": iterations, "B": batch})
    return exe, exe.run()["mean_reward"]


if __name__ == "__main__":
    print("doubling:", doubling())
    print("returns: ", returns(np.ones(5, "float32"), np.array([0, 0, 1, 0, 0], "float32")))
    exe, rewards = bandit()
    print(f"bandit: mean reward {rewards[:10].mean():.2f} (first 10) -> "
          f"{rewards[-10:].mean():.2f} (last 10)")  # fmt: skip
    exe.explain()
