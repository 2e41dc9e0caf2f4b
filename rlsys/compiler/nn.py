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
from rlsys.compiler.errors import RecurrenceError
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
            raise RecurrenceError(f"MLP: activation must be one of {ACTIVATIONS}, not "
                                  f"{activation!r}")  # fmt: skip
        sizes = tuple(sizes)
        whole = all(isinstance(n, int | np.integer) and not isinstance(n, bool) for n in sizes)
        if len(sizes) < 2 or not whole or min(sizes) < 1:  # else NumPy failed on the weights
            raise RecurrenceError(
                f"MLP: sizes {sizes} must be (inputs, hidden..., outputs): two or more "
                "positive integers, e.g. MLP((4, 64, 2))"
            )
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
        h, layers = x, self.layers
        shapes = [((n_in, n_out), n_out) for n_in, n_out in layers]
        for k, (weight, bias) in enumerate(weights_and_biases(params, shapes)):
            h = h @ weight + bias
            if k < len(layers) - 1:
                h = h.tanh() if self.activation == "tanh" else h.relu()
        return h


def weights_and_biases(params: RecurrentTensor, shapes):
    """Each layer's (weight, bias) sliced out of a flat parameter vector laid out as the
    modules here lay theirs: per layer, a weight of `shape`, then its `size` biases."""
    offset = 0
    for shape, size in shapes:
        count = math.prod(shape)
        weight = params.slice_axis(offset, offset + count).reshape(*shape)
        bias = params.slice_axis(offset + count, offset + count + size)
        offset += count + size
        yield weight, bias


# The convolutions of Mnih et al. 2015 (DQN's "Nature" network, also CleanRL's and SB3's
# Atari policies): (channels out, kernel side, stride), then one dense layer.
NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
NATURE_DENSE = 512


def smallest_image_side(convs=NATURE_CONVS) -> int:
    """The least height and width of images the convolutions map to at least 1x1."""
    side = 1
    for _, kernel, stride in reversed(convs):
        side = (side - 1) * stride + kernel
    return side


class ConvTorso:
    """Convolutions (relu) over image observations (C, H, W), then a dense layer (relu):
    features for the heads an algorithm puts on top. Like `MLP(own_params=False)`, it reads
    its weights from a slice of a larger parameter vector; `initial` is that slice at init
    (orthogonal, gain sqrt(2), zero biases, as CleanRL's Atari networks). It takes images or
    their flattened vectors (what a replay buffer or an observation normalizer holds), and
    moves channels last once, at the start: the layout `conv2d` runs fastest in."""

    def __init__(self, image_shape: Sequence[int], convs=NATURE_CONVS, dense=NATURE_DENSE,
                 seed: int = 0) -> None:  # fmt: skip
        self.image_shape = tuple(int(n) for n in image_shape)
        self.convs = tuple(tuple(int(n) for n in c) for c in convs)
        channels, height, width = self.image_shape
        for out, side, stride in self.convs:
            if side > min(height, width):
                raise RecurrenceError(f"a {side}x{side} convolution does not fit the "
                                 f"{height}x{width} maps of images {self.image_shape}")  # fmt: skip
            height, width = (height - side) // stride + 1, (width - side) // stride + 1
            channels = out
        self.flat_size = channels * height * width
        self.features = int(dense)
        self.initial = self._initial_parameters(seed)

    @property
    def shapes(self) -> list[tuple[tuple[int, ...], int]]:
        """(weight shape, bias size) of each layer: HWIO kernels, then the dense layer."""
        shapes, channels = [], self.image_shape[0]
        for out, side, _ in self.convs:
            shapes.append(((side, side, channels, out), out))
            channels = out
        return [*shapes, ((self.flat_size, self.features), self.features)]

    def _initial_parameters(self, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        pieces = []
        for shape, bias in self.shapes:
            # A kernel is orthogonal as the (KH*KW*C, O) matrix of its patches to outputs.
            fan_in, fan_out = math.prod(shape[:-1]), shape[-1]
            weight = orthogonal(rng, fan_in, fan_out, math.sqrt(2.0)).reshape(shape)
            pieces += [weight.astype("float32").ravel(), np.zeros(bias, "float32")]
        return np.concatenate(pieces)

    def __call__(self, x: RecurrentTensor, params: RecurrentTensor) -> RecurrentTensor:
        """Features (..., dense) of images x (..., C, H, W) or of their vectors (..., C*H*W)."""
        rank = 1 if len(x.shape) and x.shape[-1] == math.prod(self.image_shape) else 3
        lead = x.shape[: len(x.shape) - rank]
        h = x.reshape(*lead, *self.image_shape) if rank == 1 else x
        n = len(lead)
        h = h.transpose(*range(n), n + 1, n + 2, n)  # (..., H, W, C)
        for k, (weight, bias) in enumerate(weights_and_biases(params, self.shapes)):
            if k < len(self.convs):
                h = h.conv2d(weight, stride=self.convs[k][2]) + bias
            else:
                h = h.reshape(*lead, self.flat_size) @ weight + bias
            h = h.relu()
        return h
