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


HLO = """HloModule m

%product (p0: f32[8,4], p1: f32[4,2]) -> f32[8,2] {
  %p0 = f32[8,4]{1,0} parameter(0)
  %p1 = f32[4,2]{1,0} parameter(1)
  ROOT %d = f32[8,2]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%body (t: (f32[8,4], f32[4,2])) -> (f32[8,4], f32[4,2]) {
  %t = (f32[8,4]{1,0}, f32[4,2]{1,0}) parameter(0)
  %x = f32[8,4]{1,0} get-tuple-element(%t), index=0
  %w = f32[4,2]{1,0} get-tuple-element(%t), index=1
  %c = f32[8,2]{1,0} call(%x, %w), to_apply=%product
  ROOT %r = (f32[8,4]{1,0}, f32[4,2]{1,0}) tuple(%x, %w)
}

ENTRY %main (x0: f32[8,4], w0: f32[4,2]) -> f32[] {
  %x0 = f32[8,4]{1,0} parameter(0)
  %w0 = f32[4,2]{1,0} parameter(1)
  %init = (f32[8,4]{1,0}, f32[4,2]{1,0}) tuple(%x0, %w0)
  %loop = (f32[8,4]{1,0}, f32[4,2]{1,0}) while(%init), condition=%body, body=%body
  %zero = f32[] constant(0)
  ROOT %sum = f32[] reduce(%x0, %zero), dimensions={0,1}, to_apply=%add
}
"""


def test_calls_count_and_a_loop_without_a_trip_count_counts_once() -> None:
    assert matmul_flops(HLO) == 2 * 8 * 2 * 4  # the product, called once in the loop body
    known = HLO.replace("body=%body", 'body=%body, backend_config={"known_trip_count":{"n":"5"}}')
    assert matmul_flops(known) == 5 * 2 * 8 * 2 * 4
