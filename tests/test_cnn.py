"""Convolutions: the `conv2d` op against PyTorch's, its gradients inside a loop, the Atari
network's shapes and initialization, and PPO learning through it from images."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import rlsys.rt as rt
from rlsys.cli import main
from rlsys.compiler.nn import ConvTorso, smallest_image_side


@pytest.mark.parametrize("stride", [1, 2, 4])
@pytest.mark.parametrize("backend", ["jax", "ref"])
def test_conv2d_and_its_gradients_equal_pytorchs(stride: int, backend: str) -> None:
    """Images (i, b) of 11x13x3 through a 5x4 kernel to 2 channels; the loss is a nonlinear
    function of the output, so its gradients in images and kernel are not trivial."""
    prog = rt.Program(dims=("i", "b"))
    i, b = prog.dims
    I, B = prog.bounds
    with prog:
        x = rt.input("x", shape=(11, 13, 3), domain=(i, b))
        kernel = rt.input("kernel", shape=(5, 4, 3, 2), domain=(i,))
        y = x.conv2d(kernel, stride=stride)
        loss = (y.tanh() * y).sum()[i, 0:B].mean()
        prog.output("y", y)
        prog.output("dkernel", rt.grad(loss, kernel))
        prog.output("dx", rt.grad(loss, x))
    rng = np.random.default_rng(stride)
    xs = rng.normal(size=(2, 3, 11, 13, 3)).astype("float32")
    kernels = rng.normal(size=(2, 5, 4, 3, 2)).astype("float32")
    out = prog.compile(bounds={I: 2, B: 3}, backend=backend).run({"x": xs, "kernel": kernels})
    for k in range(2):  # PyTorch: NCHW images, OIHW kernels
        images = torch.tensor(xs[k].transpose(0, 3, 1, 2), requires_grad=True)
        weight = torch.tensor(kernels[k].transpose(3, 2, 0, 1), requires_grad=True)
        expected = torch.nn.functional.conv2d(images, weight, stride=stride)
        (expected.tanh() * expected).sum(dim=(1, 2, 3)).mean().backward()
        np.testing.assert_allclose(out["y"][k], expected.detach().numpy().transpose(0, 2, 3, 1),
                                   rtol=1e-4, atol=1e-4)  # fmt: skip
        np.testing.assert_allclose(out["dkernel"][k], weight.grad.numpy().transpose(2, 3, 1, 0),
                                   rtol=1e-4, atol=1e-4)  # fmt: skip
        np.testing.assert_allclose(out["dx"][k], images.grad.numpy().transpose(0, 2, 3, 1),
                                   rtol=1e-4, atol=1e-4)  # fmt: skip


def test_conv2d_shape_errors_name_the_op() -> None:
    prog = rt.Program(dims=("i",))
    with prog:
        x = rt.input("x", shape=(8, 8, 3))
        with pytest.raises(rt.RecurrenceError, match="reads 4 channels, the images"):
            x.conv2d(rt.const(np.zeros((3, 3, 4, 2), "float32")))
        with pytest.raises(rt.RecurrenceError, match="a 9x9 kernel does not fit 8x8"):
            x.conv2d(rt.const(np.zeros((9, 9, 3, 2), "float32")))


def test_the_atari_torso_has_the_nature_networks_shapes_and_orthogonal_kernels() -> None:
    assert smallest_image_side() == 36  # 36 -> 8 -> 3 -> 1
    torso = ConvTorso((4, 84, 84), seed=0)
    assert torso.flat_size == 7 * 7 * 64  # CleanRL's nn.Linear(64 * 7 * 7, 512)
    sizes = [math.prod(shape) + bias for shape, bias in torso.shapes]
    assert torso.initial.size == sum(sizes) == 1_684_128  # PyTorch's Nature CNN, less heads
    offset = 0
    for (shape, _), size in zip(torso.shapes, sizes, strict=True):
        weight = torso.initial[offset : offset + math.prod(shape)].reshape(-1, shape[-1])
        np.testing.assert_allclose(weight.T @ weight, 2.0 * np.eye(shape[-1]), atol=1e-4)
        assert not torso.initial[offset + math.prod(shape) : offset + size].any()  # biases 0
        offset += size


def test_ppo_learns_from_images_through_the_cnn(tmp_path: Path, capsys) -> None:
    """The trivial env's position broadcast to a 36x36 image: PPO through the CNN moves it
    toward the origin (a random policy's return is about -25 over 16-step episodes)."""
    out = tmp_path / "run"
    argv = ["train", "ppo", "--env", "trivial:1x36x36:16", "--network", "cnn",
            "--total-steps", "8192", "--num-envs", "8", "--num-steps", "64",
            "--learning-rate", "1e-3", "--quiet", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    with (out / "metrics.csv").open() as handle:
        returns = [float(row["episode_return"]) for row in csv.DictReader(handle)]
    assert returns[0] < -20.0
    assert np.mean(returns[-4:]) > -10.0, returns
