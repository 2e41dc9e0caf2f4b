"""Counting a compiled program's matrix-product arithmetic (`lower/hlo_work.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlsys.compiler.lower.hlo_work import matmul_flops

X, W = jnp.ones((256, 64)), jnp.ones((64, 64))
PRODUCT = 2 * 256 * 64 * 64  # one 256x64 by 64x64 product


def _flops(fn, *args) -> float:
    return matmul_flops(jax.jit(fn).lower(*args).compile().as_text())


def test_a_loop_body_counts_once_per_trip() -> None:
    def scanned(x, w):
        return jax.lax.scan(lambda c, _: (jnp.tanh(c @ w), None), x, None, length=100)[0]

    assert _flops(scanned, X, W) == 100 * PRODUCT


def test_a_gradient_counts_its_backward_products() -> None:
    def loss(w, x):  # forward x@w, h@w; backward: h@wᵀ, hᵀ·g, xᵀ·g (h@w's value is unused)
        return jnp.sum(jnp.tanh(x @ w) @ w)

    assert _flops(jax.grad(loss), W, X) == 4 * PRODUCT


def test_a_conditional_counts_its_costliest_branch() -> None:
    def either(p, x, w):
        return jax.lax.cond(p, lambda: (x @ w) @ w, lambda: x)

    assert _flops(either, True, X, W) == 2 * PRODUCT


def test_a_program_without_products_counts_none() -> None:
    assert _flops(lambda x: jnp.tanh(x).sum(), X) == 0.0
    assert matmul_flops("not HLO") == 0.0
