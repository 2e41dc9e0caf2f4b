"""2-D convolution of channels-last images (..., H, W, C) by a kernel (KH, KW, C, O),
unpadded ("VALID", as the Atari networks of DQN and PPO use it), with a stride.

Channels last, and a gradient of our own, because of how XLA:CPU runs convolutions: only
the canonical form (NHWC images, HWIO kernel, NHWC output) goes to its Eigen kernel, and
XLA rewrites other forms into it only in a program's top-level computation, not inside a
loop body. An rlsys iteration runs its convolutions inside loops (acting steps, minibatch
updates), where the NCHW form and JAX's own gradient convolutions (kernels and images
with swapped axes) ran in a slow generic loop: the Nature CNN's gradient over 4 x 64
Atari frames in a `lax.scan` took 4.9 s with JAX's rule against 0.29 s with the one below,
which writes both gradients as canonical convolutions or a matrix product.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from rlsys.compiler.rules.base import ShapeError, TensorType, largest_divisor, promote, register

_CANONICAL = ("NHWC", "HWIO", "NHWC")


def _conv2d_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    x, kernel = types
    stride = params["stride"]
    if len(x.shape) < 3 or len(kernel.shape) != 4:
        raise ShapeError(f"conv2d: expected images (..., H, W, C) and a kernel (KH, KW, C, O), "
                         f"got {x.shape} and {kernel.shape}")  # fmt: skip
    height, width, channels = x.shape[-3:]
    kh, kw, kernel_channels, out = kernel.shape
    if kernel_channels != channels:
        raise ShapeError(f"conv2d: the kernel {kernel.shape} reads {kernel_channels} channels, "
                         f"the images {x.shape} have {channels}")  # fmt: skip
    if kh > height or kw > width:
        raise ShapeError(f"conv2d: a {kh}x{kw} kernel does not fit {height}x{width} images")
    if stride < 1:
        raise ShapeError(f"conv2d: stride {stride} must be at least 1")
    shape = (*x.shape[:-3], (height - kh) // stride + 1, (width - kw) // stride + 1, out)
    return TensorType(shape, promote([x.dtype, kernel.dtype]))


def _forward(x, kernel, stride: int):
    return lax.conv_general_dilated(x, kernel, (stride, stride), "VALID",
                                    dimension_numbers=_CANONICAL)  # fmt: skip


def _input_gradient(dy, kernel, stride: int, image_hw: tuple[int, int]):
    """dy (N, H', W', O) back to the images: the stride-dilated dy, padded, convolved with
    the kernel flipped in space and its channel axes swapped (both done as copies: a
    reversed window or swapped kernel axes are not the canonical form)."""
    kh, kw = kernel.shape[:2]
    flipped = jnp.transpose(jnp.flip(kernel, (0, 1)), (0, 1, 3, 2))
    (height, width), s = image_hw, stride
    pad = ((kh - 1, kh - 1 + (height - kh) % s), (kw - 1, kw - 1 + (width - kw) % s))
    return lax.conv_general_dilated(dy, flipped, (1, 1), pad, lhs_dilation=(s, s),
                                    dimension_numbers=_CANONICAL)  # fmt: skip


PATCH_BYTES = 16 * 2**20  # the most im2col patches the kernel gradient gathers at once


def _kernel_gradient(x, dy, stride: int, kernel_hw: tuple[int, int]):
    """Σ over images and positions of the patch under each output times dy: the patches
    gathered by strided slices (im2col), then a matrix product over their rows. Gathered for
    all images at once, the patches of the Nature CNN's first layer over a PPO minibatch of
    256 Atari frame stacks take 105 MB (8x8x4 values for each of 400 positions per image), so
    images go in chunks whose patches take at most PATCH_BYTES, their products summed."""
    (kh, kw), (n, out_h, out_w, out) = kernel_hw, dy.shape
    per_image = out_h * out_w * kh * kw * x.shape[3] * x.dtype.itemsize
    chunk = largest_divisor(n, 1, PATCH_BYTES // per_image) or 1
    if chunk == n:
        return _patch_product(x, dy, stride, kernel_hw)

    def add_chunk(total, images):
        return total + _patch_product(*images, stride, kernel_hw), None

    pieces = (
        x.reshape(n // chunk, chunk, *x.shape[1:]),
        dy.reshape(n // chunk, chunk, *dy.shape[1:]),
    )
    zero = jnp.zeros((kh, kw, x.shape[3], out), jnp.result_type(x, dy))
    return lax.scan(add_chunk, zero, pieces)[0]


def _patch_product(x, dy, stride: int, kernel_hw: tuple[int, int]):
    (kh, kw), s = kernel_hw, stride
    out_h, out_w = dy.shape[1:3]
    patches = jnp.stack([x[:, a : a + (out_h - 1) * s + 1 : s, b : b + (out_w - 1) * s + 1 : s]
                         for a in range(kh) for b in range(kw)], axis=3)  # fmt: skip
    rows = patches.reshape(-1, kh * kw * x.shape[3])
    product = rows.T @ dy.reshape(-1, dy.shape[3])
    return product.reshape(kh, kw, x.shape[3], dy.shape[3])


@functools.cache
def _conv_with_gradient(stride: int):
    @jax.custom_vjp
    def conv(x, kernel):
        return _forward(x, kernel, stride)

    def forward(x, kernel):
        return _forward(x, kernel, stride), (x, kernel)

    def backward(saved, dy):
        x, kernel = saved
        dx = _input_gradient(dy, kernel, stride, x.shape[1:3]).astype(x.dtype)
        return dx, _kernel_gradient(x, dy, stride, kernel.shape[:2]).astype(kernel.dtype)

    conv.defvjp(forward, backward)
    return conv


def _conv2d(x, kernel, stride: int):
    """x's leading axes (spatial ones, or the rows of `OpRule.rows`) become the batch."""
    lead = x.shape[:-3]
    dtype = jnp.result_type(x, kernel)
    batch = x.reshape(-1, *x.shape[-3:]).astype(dtype)
    y = _conv_with_gradient(stride)(batch, kernel.astype(dtype))
    return y.reshape(*lead, *y.shape[1:])


register("conv2d", _conv2d_infer, _conv2d, rows=True)
