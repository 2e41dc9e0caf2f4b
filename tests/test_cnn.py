"""Convolutions: the `conv2d` op against PyTorch's, its gradients inside a loop, the Atari
network's shapes and initialization, and PPO learning through it from images."""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import rlsys.compiler.rules.conv as conv_rule
import rlsys.rt as rt
from rlsys.algos.config import PPOConfig
from rlsys.algos.ppo import build_ppo
from rlsys.cli import main
from rlsys.compiler.lower.hlo_work import computations
from rlsys.compiler.nn import ConvTorso, smallest_image_side


@pytest.mark.parametrize("stride", [1, 2, 4])
@pytest.mark.parametrize("backend", ["jax", "ref"])
def test_conv2d_and_its_gradients_equal_pytorchs(stride: int, backend: str) -> None:
    """Images (i, b) of 11x13x3 through a 5x4 kernel to 2 channels; the loss is a nonlinear
    function of the output, so its gradients in images and kernel are not trivial."""
    _check_conv2d_against_pytorch(stride, backend)


@pytest.mark.parametrize("stride", [1, 4])
def test_the_kernel_gradient_over_chunks_of_images_equals_pytorchs(monkeypatch, stride) -> None:
    """With patches larger than PATCH_BYTES, the kernel gradient gathers them a few images at
    a time (here one) and sums the chunks' products."""
    products = []
    patch_product = conv_rule._patch_product
    monkeypatch.setattr(conv_rule, "PATCH_BYTES", 1)

    def counted(x, *args):
        products.append(x.shape[0])
        return patch_product(x, *args)

    monkeypatch.setattr(conv_rule, "_patch_product", counted)
    _check_conv2d_against_pytorch(stride, "jax")
    assert products and set(products) == {1}


def _check_conv2d_against_pytorch(stride: int, backend: str) -> None:
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


def _convolutions(text: str) -> list[tuple[str, str, bool]]:
    """(computation, instruction text, whether a library (YNNPACK) fusion calls it) of each
    convolution in an optimized HLO module."""
    bodies, _ = computations(text)
    library = set(re.findall(r"kind=kCustom, calls=%([\w.\-]+)", text))
    return [(name, instruction, name in library)
            for name, instructions in bodies.items()
            for _, instruction in instructions if " convolution(" in instruction]  # fmt: skip


def test_a_cnn_programs_convolutions_are_xla_cpus_canonical_eigen_ones() -> None:
    """Inside the acting and update loops: NHWC images and HWIO kernels (the only form
    XLA:CPU's Eigen kernel takes there), gradients included, and none handed to YNNPACK
    (`rlsys/compiler/lower/cpu_convolutions.py`)."""
    config = PPOConfig(env="trivial:1x84x84:8", num_envs=2, num_steps=8, total_steps=32,
                       num_minibatches=2, network="cnn").validate()  # fmt: skip
    built = build_ppo(config)
    exe = built.program.compile(bounds=built.bounds)
    (text,) = exe.optimized_hlo().values()
    found = _convolutions(text)
    # acting (3), the critic at final observations (3), the update: forward (3), the input
    # gradients of conv2 and conv3 (2; conv1's input is the observation)
    assert len(found) == 11
    for _, instruction, in_library in found:
        assert "dim_labels=b01f_01io->b01f" in instruction and not in_library, instruction


def test_ppo_gathers_each_minibatch_of_frames_inside_its_update_loop() -> None:
    """The frames of update u are gathered (and moved channels last) in update u, not all
    updates' before the loop (`schedule._sink_inputs`); small minibatch values (actions,
    advantages, ...) stay gathered at once."""
    config = PPOConfig(env="trivial:1x84x84:8", num_envs=2, num_steps=8, total_steps=32,
                       num_minibatches=2, network="cnn").validate()  # fmt: skip
    built = build_ppo(config)
    rows = built.program.compile(bounds=built.bounds).explain(file=io.StringIO())
    over_u = [r for r in rows if "u" in r.decisions and r.op in ("take", "transpose")]
    in_loop = [r.op for r in over_u if r.decisions["u"] == "scan"]
    assert sorted(in_loop) == ["take", "transpose"]
    assert len(over_u) > len(in_loop)
