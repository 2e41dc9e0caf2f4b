"""Networks as recurrent-tensor building blocks: `Linear`-layer MLPs with orthogonal init.

All weights of a module live in one flat parameter vector with domain (i,): `params[0]` is
the initialization, and an optimizer's `minimize` defines `params[i + 1]`. Calling the module
slices and reshapes its layers out of `params[i]`. One vector keeps gradients, global-norm
clipping and checkpoints simple, and Adam is elementwise, so the result equals per-tensor
Adam.

Initialization follows CleanRL / PureJaxRL: orthogonal weights (gain sqrt(2) for hidden
layers, `output_gain` for the last), zero biases, reproducible from `seed`. The weights are
drawn with NumPy, not `jax.nn.initializers`: run eagerly, JAX compiles every random draw and
QR of a new shape, about 2 s for PPO's two networks on a 2-core machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rlsys.compiler.builder import current_program
from rlsys.compiler.index import Dim
from rlsys.compiler.tensor import RecurrentTensor, constant

ACTIVATIONS = ("tanh", "relu")


def orthogonal(rng: np.random.Generator, n_in: int, n_out: int, gain: float) -> np.ndarray:
    """An (n_in, n_out) matrix with orthonormal rows or columns (whichever are fewer), times
    `gain`: the Q of a Gaussian matrix, signs fixed by R's diagonal so that Q is uniformly
    distributed (Saxe et al. 2014; what torch's `orthogonal_` and JAX's initializer draw)."""
    tall = rng.standard_normal((max(n_in, n_out), min(n_in, n_out)))
    q, r = np.linalg.qr(tall)
    q *= np.sign(np.diag(r))
    return gain * (q if n_in >= n_out else q.T)


class MLP:
    """sizes = (inputs, hidden..., outputs); activation between layers, none after the last."""

    def __init__(
        self,
        sizes: Sequence[int],
        activation: str = "tanh",
        output_gain: float = 1.0,
        seed: int = 0,
        dim: Dim | None = None,
        name: str = "mlp",
        own_params: bool = True,
    ) -> None:
        """With `own_params=False` the module makes no placeholder: call it with a slice of
        a larger parameter vector (several modules sharing one optimizer state)."""
        from rlsys.rt import placeholder

        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, not {activation!r}")
        program = current_program()
        self.sizes = tuple(int(n) for n in sizes)
        self.activation = activation
        self.dim = dim or program.dims[0]
        self.initial = self._initial_parameters(output_gain, seed)
        self.params = None
        if own_params:
            self.params = placeholder(shape=self.initial.shape, domain=(self.dim,), name=name)
            self.params[0] = constant(program, self.initial)

    @property
    def layers(self) -> list[tuple[int, int]]:
        """(inputs, outputs) of each linear layer."""
        return list(zip(self.sizes[:-1], self.sizes[1:], strict=True))

    @property
    def num_parameters(self) -> int:
        return sum(n_in * n_out + n_out for n_in, n_out in self.layers)

    def _initial_parameters(self, output_gain: float, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        pieces = []
        layers = self.layers
        for k, (n_in, n_out) in enumerate(layers):
            gain = output_gain if k == len(layers) - 1 else math.sqrt(2.0)
            weight = orthogonal(rng, n_in, n_out, gain)
            pieces += [weight.astype("float32").ravel(), np.zeros(n_out, "float32")]
        return np.concatenate(pieces)

    def __call__(self, x: RecurrentTensor, params: RecurrentTensor | None = None):
        """The network applied to x, with `params` (default: this module's params[i])."""
        if params is None:
            if self.params is None:
                raise ValueError("this MLP has no parameters of its own: pass `params`")
            params = self.params[self.dim]
        offset, h = 0, x
        layers = self.layers
        for k, (n_in, n_out) in enumerate(layers):
            weight = params.slice_axis(offset, offset + n_in * n_out).reshape(n_in, n_out)
            offset += n_in * n_out
            bias = params.slice_axis(offset, offset + n_out)
            offset += n_out
            h = h @ weight + bias
            if k < len(layers) - 1:
                h = h.tanh() if self.activation == "tanh" else h.relu()
        return h
