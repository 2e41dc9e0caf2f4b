"""Configuration of each algorithm: one dataclass, a docstring per field, CLI names alike."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from rlsys.errors import UsageError

ENV_BACKENDS = ("gymnax", "gymnasium", "envpool", "trivial")
SEGMENTED = {"no": False, "yes": True, "auto": "auto"}  # --segmented -> compile(segmented=)
NETWORKS = ("auto", "mlp", "cnn")
MAX_N_STEP = 64  # REINFORCE's n-step returns (`REINFORCEConfig.validate`)
INT32_MAX = 2**31 - 1  # iteration indices and sizes are int32 inside the program
MAX_SEED = 2**32 - 1  # NumPy's and JAX's seeds are unsigned 32-bit integers


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass
class CommonConfig:
    """Options every algorithm has."""

    env: str = "gymnax:CartPole-v1"
    """Environment as BACKEND:ID: gymnax (inside the compiled program), gymnasium or envpool
    (on the host, one vector env of num_envs; envpool needs the envpool extra), or
    trivial:SHAPE[:STEPS] (TimeRL's trivial env, in-graph: observations of SHAPE such as 64
    or 3x84x84, episodes of STEPS, default 100)."""
    total_steps: int = 500_000
    """Environment steps to train for (rounded down to whole iterations)."""
    num_envs: int = 8
    """Environments stepped in parallel (b)."""
    num_steps: int = 128
    """Steps per environment per iteration (t); a rollout is num_envs * num_steps steps."""
    learning_rate: float = 2.5e-4
    """Adam learning rate (at the first iteration when annealed)."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over the iterations."""
    gamma: float = 0.99
    """Discount factor."""
    max_grad_norm: float = 0.5
    """Clip gradients to this global norm (inf: no clipping)."""
    hidden_size: int = 64
    """Units per hidden layer of the networks (the actor and critic MLPs: tanh)."""
    hidden_layers: int = 2
    """Hidden layers of the networks."""
    network: str = "auto"
    """What reads the observations: "mlp" (hidden_size x hidden_layers on the flattened
    observation), "cnn" (the Atari network of Mnih et al. 2015: three convolutions and a
    dense layer of 512, shared by actor and critic, over images (C, H, W) of at least 36x36;
    the heads on top are single layers) or "auto" (cnn for such images, else mlp)."""
    seed: int = 0
    """Seed of parameters, actions, environments and minibatch order (0 to 2**32 - 1)."""
    iterations_per_call: int = 10
    """Iterations per jitted call (progress is reported between calls)."""
    segmented: str = "no"
    """Compile an iteration as several XLA programs (cut around its loops and after its
    gradients), run one iteration per call: "yes", "auto" (only where compiling, not
    running, sets the process's peak memory: small rollouts) or "no" (one program). On CPU,
    where compiling sets the peak, that peak falls by a quarter to a third, for iterations
    up to about 1.4x as long; "auto" compiles a large rollout's iteration twice (segmented,
    then whole). Either also hands jaxlib's machine code back to the OS around compiling
    (about half a second each time it is read back)."""
    devices: str = "1"
    """Devices to split the environments over: a number, or "auto" (one CPU device per core,
    kept only if the split's first calls ran faster than one device's). Each device runs
    the whole iteration on its share; needs an in-graph environment and environments that
    do not read each other's values: A2C and REINFORCE split, PPO's shuffled minibatches and
    DQN's replay do not ("auto" then stays on one device). A segmented iteration is split
    segment by segment; "auto" tries a split of it only for iterations of 4 GFLOP or more
    in matrix products (memory), compiled whole (faster) unless --segmented yes."""
    checkpoint_every: int = 50
    """Save checkpoint.npz every this many iterations (at the next call's end) and at the
    end; 0: only at the end."""

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        return self.total_steps // self.batch_size

    @property
    def env_backend(self) -> str:
        return self.env.split(":", 1)[0]

    @property
    def env_id(self) -> str:
        return self.env.split(":", 1)[1]

    def validate(self) -> CommonConfig:
        if ":" not in self.env or self.env_backend not in ENV_BACKENDS:
            raise UsageError(
                f"--env {self.env!r}: expected BACKEND:ID with BACKEND one of "
                f"{', '.join(ENV_BACKENDS)}",
                hint="e.g. --env gymnax:CartPole-v1 or --env gymnasium:CartPole-v1"
                + (f" (Atari: --env gymnasium:{self.env})" if self.env.startswith("ALE/") else ""),
            )
        self._check_finite()
        for name in ("num_envs", "num_steps", "hidden_size", "hidden_layers",
                     "iterations_per_call"):  # fmt: skip
            if getattr(self, name) < 1:
                raise UsageError(f"{_flag(name)} must be at least 1")
        if self.num_iterations < 1:
            raise UsageError(
                f"--total-steps {self.total_steps} is less than one iteration "
                f"({self.num_envs} envs x {self.num_steps} steps = {self.batch_size})",
                hint=f"pass --total-steps {self.batch_size} or more, or fewer envs or steps",
            )
        if self.batch_size > INT32_MAX:
            raise UsageError(
                f"--num-envs {self.num_envs} x --num-steps {self.num_steps}: at most "
                f"{INT32_MAX:,} steps an iteration"
            )
        if self.num_iterations > INT32_MAX:
            raise UsageError(
                f"--total-steps {self.total_steps} is {self.num_iterations:,} iterations of "
                f"{self.batch_size} steps; at most {INT32_MAX:,} are counted",
                hint="lower --total-steps or raise --num-envs / --num-steps",
            )
        if not 0 <= self.seed <= MAX_SEED:
            raise UsageError(f"--seed {self.seed}: a seed from 0 to {MAX_SEED}")
        if not self.learning_rate > 0:
            raise UsageError(f"--learning-rate {self.learning_rate}: a positive number")
        if not 0 <= self.gamma <= 1:
            raise UsageError(f"--gamma {self.gamma}: a discount from 0 to 1")
        if not self.max_grad_norm > 0:
            raise UsageError(f"--max-grad-norm {self.max_grad_norm}: a positive norm",
                             hint="--max-grad-norm inf turns clipping off")  # fmt: skip
        if self.checkpoint_every < 0:
            raise UsageError("--checkpoint-every must be 0 or more")
        if self.network not in NETWORKS:
            raise UsageError(f"--network {self.network!r}: choose {', '.join(NETWORKS)}")
        if self.segmented not in SEGMENTED:
            raise UsageError(f"--segmented {self.segmented!r}: choose {', '.join(SEGMENTED)}")
        if self.devices != "auto" and not (self.devices.isdigit() and int(self.devices) >= 1):
            raise UsageError(f"--devices {self.devices!r}: a positive number or auto")
        return self

    def _check_finite(self) -> None:
        """Every number option is finite (NaN would pass the range checks below and train
        to NaN), except --max-grad-norm inf, which turns clipping off; integers fit the
        program's int32 (sizes, step counts)."""
        for field in fields(self):
            value = getattr(self, field.name)
            counted = field.name in ("seed", "total_steps")  # checked below
            if type(value) is int and not counted and abs(value) > INT32_MAX:
                raise UsageError(f"{_flag(field.name)} {value}: at most {INT32_MAX:,}")
            if type(value) is not float or math.isfinite(value):
                continue
            if field.name == "max_grad_norm" and value == math.inf:
                continue
            raise UsageError(f"{_flag(field.name)} {value}: a finite number")

    def _check_lambda(self) -> None:
        gae_lambda = self.gae_lambda  # type: ignore[attr-defined]
        if not 0 <= gae_lambda <= 1:
            raise UsageError(f"--gae-lambda {gae_lambda}: a value from 0 to 1")


@dataclass
class ActorCriticConfig(CommonConfig):
    """Options of the actor-critic algorithms (PPO, A2C, REINFORCE)."""

    ent_coef: float = 0.01
    """Weight of the entropy bonus."""
    vf_coef: float = 0.5
    """Weight of the value loss."""

    def validate(self) -> ActorCriticConfig:
        super().validate()
        for name in ("ent_coef", "vf_coef"):  # loss weights
            if getattr(self, name) < 0:
                raise UsageError(f"{_flag(name)} {getattr(self, name)}: 0 or more")
        return self


@dataclass
class PPOConfig(ActorCriticConfig):
    """PPO with CleanRL's ppo.py semantics."""

    gae_lambda: float = 0.95
    """Lambda of generalized advantage estimation."""
    num_minibatches: int = 4
    """Minibatches per epoch; the rollout is split into this many shuffled parts."""
    update_epochs: int = 4
    """Passes over the rollout per iteration."""
    norm_adv: bool = True
    """Normalize advantages within each minibatch."""
    clip_coef: float = 0.2
    """Surrogate clipping coefficient (also clips the value update when clip_vloss)."""
    clip_vloss: bool = True
    """Clip the value-function update like the policy's."""
    normalize_obs: bool = False
    """Normalize observations by their running mean and variance (over all iterations
    before the current one; checkpointed, and used by `rlsys eval`). For continuous control
    (CleanRL's ppo_continuous_action); off by default: CartPole learns without it."""
    obs_clip: float = 10.0
    """Clip normalized observations to [-obs_clip, obs_clip] (with normalize_obs)."""
    normalize_reward: bool = False
    """Learn from rewards divided by the running std of discounted returns (training
    metrics still report the environment's returns). For continuous control; off by
    default."""
    reward_clip: float = 10.0
    """Clip scaled rewards to [-reward_clip, reward_clip] (with normalize_reward)."""

    def validate(self) -> PPOConfig:
        super().validate()
        if self.num_minibatches < 1 or self.update_epochs < 1:
            raise UsageError("--num-minibatches and --update-epochs must be at least 1")
        if self.batch_size % self.num_minibatches:
            raise UsageError(
                f"--num-minibatches {self.num_minibatches} does not divide the rollout of "
                f"{self.batch_size} steps",
                hint="choose num-envs x num-steps divisible by num-minibatches",
            )
        for name in ("obs_clip", "reward_clip"):
            if getattr(self, name) <= 0:
                raise UsageError(f"{_flag(name)} {getattr(self, name)}: a positive number")
        if self.clip_coef <= 0:
            raise UsageError(f"--clip-coef {self.clip_coef}: a positive number",
                             hint="CleanRL's default is 0.2")  # fmt: skip
        self._check_lambda()
        return self


@dataclass
class A2CConfig(ActorCriticConfig):
    """Advantage actor-critic: one gradient step on each (short) rollout."""

    num_steps: int = 16
    """Steps per environment per iteration (t)."""
    learning_rate: float = 1e-3
    """Adam learning rate (at the first iteration when annealed)."""
    gae_lambda: float = 1.0
    """Lambda of GAE (1.0: n-step returns over the rollout, bootstrapped by the critic)."""

    def validate(self) -> A2CConfig:
        super().validate()
        self._check_lambda()
        return self


@dataclass
class REINFORCEConfig(ActorCriticConfig):
    """REINFORCE with a learned value baseline."""

    learning_rate: float = 1e-3
    """Adam learning rate (at the first iteration when annealed)."""
    returns: str = "mc"
    """How returns are estimated: "mc" (Monte-Carlo, to the end of the rollout) or
    "nstep" (n_step rewards, then the critic's value)."""
    n_step: int = 8
    """Rewards summed by n-step returns before bootstrapping (at most 64, or num_steps:
    more sum the same rewards)."""

    def validate(self) -> REINFORCEConfig:
        super().validate()
        if self.returns not in ("mc", "nstep"):
            raise UsageError(f"--returns {self.returns!r}: choose mc or nstep")
        if self.n_step < 1:
            raise UsageError("--n-step must be at least 1")
        if min(self.n_step, self.num_steps) > MAX_N_STEP:
            raise UsageError(
                f"--n-step {self.n_step}: at most {MAX_N_STEP}, or --num-steps "
                f"({self.num_steps}): each of the n steps is one more recurrence of the "
                "program, and XLA's compiler ran out of stack at 128",
                hint="--returns mc sums the rewards to the rollout's end",
            )
        return self


@dataclass
class DQNConfig(CommonConfig):
    """DQN with CleanRL's dqn.py semantics (replay buffer, target network, linear ε schedule),
    in batches: each iteration steps num_envs x num_steps, stores them, then takes
    num_envs x num_steps / train_frequency gradient steps. Defaults are tuned for CartPole:
    seed 0 ends 100k steps at a mean training return above 400 (CleanRL's own settings take
    500k steps with 1 env)."""

    total_steps: int = 100_000
    """Environment steps to train for (rounded down to whole iterations)."""
    num_envs: int = 4
    """Environments stepped in parallel (b)."""
    num_steps: int = 32
    """Steps per environment per iteration (t), stored in the buffer before learning."""
    learning_rate: float = 1e-3
    """Adam learning rate (at the first iteration when annealed)."""
    anneal_lr: bool = False
    """Anneal the learning rate linearly to 0 over the iterations."""
    max_grad_norm: float = 10.0
    """Clip gradients to this global norm (as SB3's DQN; CleanRL does not clip)."""
    hidden_size: int = 128
    """Units per hidden layer of the Q-network (relu)."""
    buffer_size: int = 10_000
    """Transitions the replay buffer holds (rounded up to whole iterations); the oldest are
    overwritten first."""
    minibatch_size: int = 128
    """Transitions sampled uniformly from the buffer per gradient step (CleanRL's
    batch_size)."""
    train_frequency: int = 4
    """Environment steps per gradient step; must divide num_envs x num_steps."""
    learning_starts: int = 1_000
    """Environment steps before learning starts (whole iterations: learning starts at the
    first iteration that ends past this step)."""
    target_network_frequency: int = 512
    """Environment steps between target-network updates (made at the end of the iteration
    that reaches them)."""
    tau: float = 1.0
    """Target update rate: target = tau * online + (1 - tau) * target (1.0: a hard copy)."""
    start_e: float = 1.0
    """Exploration ε at the start."""
    end_e: float = 0.05
    """Exploration ε at the end of the schedule (also for `rlsys eval --stochastic`)."""
    exploration_fraction: float = 0.2
    """Fraction of total_steps over which ε falls linearly from start_e to end_e."""
    loss: str = "mse"
    """TD loss: "mse" (CleanRL's) or "huber" (smooth L1, as in the Atari DQN)."""

    @property
    def updates_per_iteration(self) -> int:
        return self.batch_size // self.train_frequency

    @property
    def buffer_slots(self) -> int:
        """Iterations the replay buffer holds: buffer_size rounded up to whole iterations."""
        return -(-self.buffer_size // self.batch_size)

    def validate(self) -> DQNConfig:
        super().validate()
        for name in ("buffer_size", "minibatch_size", "train_frequency",
                     "target_network_frequency"):  # fmt: skip
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if self.batch_size % self.train_frequency:
            raise UsageError(
                f"--train-frequency {self.train_frequency} does not divide the "
                f"{self.batch_size} steps of an iteration",
                hint="choose num-envs x num-steps divisible by train-frequency",
            )
        if self.learning_starts < 0:
            raise UsageError(f"--learning-starts {self.learning_starts}: 0 or more")
        if not 0.0 < self.tau <= 1.0:
            raise UsageError(f"--tau {self.tau}: more than 0 and at most 1")
        if not 0.0 <= self.end_e <= self.start_e <= 1.0:
            raise UsageError(f"--end-e {self.end_e}, --start-e {self.start_e}: need "
                             "0 <= end-e <= start-e <= 1")  # fmt: skip
        if self.exploration_fraction <= 0:
            raise UsageError(f"--exploration-fraction {self.exploration_fraction}: more than 0")
        if self.loss not in ("mse", "huber"):
            raise UsageError(f"--loss {self.loss!r}: choose mse or huber")
        if self.minibatch_size > self.buffer_slots * self.batch_size:
            raise UsageError(
                f"--minibatch-size {self.minibatch_size} is more than the replay buffer holds "
                f"({self.buffer_slots * self.batch_size} transitions)",
                hint="raise --buffer-size or lower --minibatch-size",
            )
        if self.learning_starts >= self.num_iterations * self.batch_size:
            raise UsageError(
                f"--learning-starts {self.learning_starts}: learning would never start in "
                f"a run of {self.num_iterations * self.batch_size} steps",
                hint="lower --learning-starts or raise --total-steps",
            )
        return self


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each dataclass field (used for --help)."""
    import ast
    import inspect
    import itertools
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):  # base classes first, subclasses override
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body
        for node, following in itertools.pairwise(body):
            is_doc = isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and is_doc:
                docs[node.target.id] = " ".join(str(following.value.value).split())
    return docs
