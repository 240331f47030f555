"""Numerical comparison helpers shared by the tests (llm.c style: print, then assert)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def assert_close(
    got: np.ndarray, ref: np.ndarray, *, atol: float, rtol: float, name: str = "value"
) -> None:
    """Asserts ``|got - ref| <= atol + rtol * |ref|`` elementwise.

    Prints the max difference always and the first mismatches on failure.
    """
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, f"{name}: shape {got.shape} != reference {ref.shape}"
    diff = np.abs(got - ref)
    bound = atol + rtol * np.abs(ref)
    bad = ~(diff <= bound)  # NaN counts as a mismatch
    max_diff = float(np.nanmax(diff)) if diff.size else 0.0
    print(f"{name}: max |diff| = {max_diff:.3e} over {ref.size} values (atol {atol}, rtol {rtol})")
    if bad.any():
        idx = np.argwhere(bad)[:5]
        lines = [
            f"  at {tuple(int(i) for i in ix)}: got {got[tuple(ix)]!r} ref {ref[tuple(ix)]!r}"
            for ix in idx
        ]
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {ref.size} values outside tolerance\n" + "\n".join(lines)
        )


def finite_difference(
    f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6
) -> np.ndarray:
    """Central finite-difference gradient of scalar ``f`` at ``x`` (float64)."""
    x = np.array(x, dtype=np.float64)
    grad = np.zeros_like(x)
    flat = x.reshape(-1)
    g = grad.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        up = f(x)
        flat[i] = old - eps
        down = f(x)
        flat[i] = old
        g[i] = (up - down) / (2 * eps)
    return grad
