"""The numpy forward and backward of every op in the Mamba model, one small function each.

NATIVE-ONLY: imports numpy; never imported by browser code.

This module owns the per-op math the CPU model (:mod:`evermind.model.cpu`) is built from, kept
as pure functions so that tests can check each backward against finite differences and the
GPU kernels can be checked against each forward/backward. Functions work in the dtype they are
given (float32 to serve, float64 for gradient checks).

Shape letters: B batch, L sequence length, D d_model, I d_inner, N d_state, K d_conv,
V vocab_size, M = B * L rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from evermind.errors import ShapeError

__all__ = [
    "FloatArray",
    "IntArray",
    "ScanCache",
    "conv1d_bwd",
    "conv1d_fwd",
    "cross_entropy_bwd",
    "cross_entropy_fwd",
    "rmsnorm_bwd",
    "rmsnorm_fwd",
    "selective_scan_bwd",
    "selective_scan_fwd",
    "sigmoid",
    "silu_bwd",
    "silu_fwd",
    "softplus_bwd",
    "softplus_fwd",
]

FloatArray = npt.NDArray[np.floating[Any]]
IntArray = npt.NDArray[np.integer[Any]]


# ---- pointwise -------------------------------------------------------------------------------


def sigmoid(x: FloatArray) -> FloatArray:
    """1 / (1 + exp(-x)), written as exp(-softplus(-x)) so large |x| neither overflows nor warns."""
    return np.exp(-np.logaddexp(0.0, -x))


def silu_fwd(x: FloatArray) -> FloatArray:
    """SiLU (swish): x * sigmoid(x)."""
    return x * sigmoid(x)


def silu_bwd(dy: FloatArray, x: FloatArray) -> FloatArray:
    """Gradient of SiLU: dy * s * (1 + x * (1 - s)), s = sigmoid(x)."""
    s = sigmoid(x)
    return dy * s * (1.0 + x * (1.0 - s))


def softplus_fwd(x: FloatArray) -> FloatArray:
    """log(1 + exp(x)), overflow-free."""
    return np.logaddexp(0.0, x)


def softplus_bwd(dy: FloatArray, x: FloatArray) -> FloatArray:
    """Gradient of softplus: dy * sigmoid(x)."""
    return dy * sigmoid(x)


# ---- RMSNorm ---------------------------------------------------------------------------------


def rmsnorm_fwd(x: FloatArray, weight: FloatArray, eps: float) -> tuple[FloatArray, FloatArray]:
    """RMSNorm over the last axis: y = x * rsqrt(mean(x^2) + eps) * weight.

    Args:
        x: Input, shape (..., D).
        weight: Gain, shape (D,).
        eps: Added to the mean square before the square root.

    Returns:
        (y, rstd): y of shape (..., D) and the reciprocal RMS of shape (..., 1) for the backward.
    """
    rstd = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)  # (..., 1)
    return x * rstd * weight, rstd


def rmsnorm_bwd(
    dy: FloatArray, x: FloatArray, weight: FloatArray, rstd: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Backward of :func:`rmsnorm_fwd`.

    With xhat = x * rstd: dweight = sum(dy * xhat), and since d(rstd)/dx = -rstd^3 x / D,
    dx = rstd * (g - xhat * mean(g * xhat)) where g = dy * weight.

    Returns:
        (dx of shape (..., D), dweight of shape (D,)).
    """
    xhat = x * rstd  # (..., D)
    g = dy * weight  # (..., D)
    dx = rstd * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    dweight = (dy * xhat).reshape(-1, x.shape[-1]).sum(axis=0)
    return dx, dweight


# ---- causal depthwise conv1d -----------------------------------------------------------------


def conv1d_fwd(x: FloatArray, weight: FloatArray, bias: FloatArray) -> FloatArray:
    """Causal depthwise 1-D convolution along time, as PyTorch's padded ``Conv1d`` truncated to L.

    y[b, t, c] = bias[c] + sum_k weight[c, k] * x[b, t - (K - 1) + k, c], x = 0 before t = 0.

    Args:
        x: Input, shape (B, L, I).
        weight: Per-channel taps, shape (I, K); tap K-1 multiplies the current step.
        bias: Shape (I,).

    Returns:
        y, shape (B, L, I).
    """
    length, taps = x.shape[1], weight.shape[1]
    x_pad = np.pad(x, ((0, 0), (taps - 1, 0), (0, 0)))  # (B, L+K-1, I)
    y = np.broadcast_to(bias, x.shape).copy()  # (B, L, I)
    # A loop over the K (= 4) taps, each a whole-array multiply-add.
    for k in range(taps):
        y += weight[:, k] * x_pad[:, k : k + length]
    return y


def conv1d_bwd(
    dy: FloatArray, x: FloatArray, weight: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Backward of :func:`conv1d_fwd`.

    Returns:
        (dx of shape (B, L, I), dweight of shape (I, K), dbias of shape (I,)).
    """
    length, taps = x.shape[1], weight.shape[1]
    x_pad = np.pad(x, ((0, 0), (taps - 1, 0), (0, 0)))  # (B, L+K-1, I)
    dx_pad = np.zeros_like(x_pad)
    dweight = np.empty_like(weight)
    for k in range(taps):
        dx_pad[:, k : k + length] += dy * weight[:, k]
        dweight[:, k] = np.sum(dy * x_pad[:, k : k + length], axis=(0, 1))
    return dx_pad[:, taps - 1 :], dweight, dy.sum(axis=(0, 1))


# ---- selective scan --------------------------------------------------------------------------


@dataclass
class ScanCache:
    """What the scan's backward needs from its forward.

    Attributes:
        decay: exp(delta * A), shape (B, L, I, N).
        states: h_t after step t, shape (B, L, I, N).
    """

    decay: FloatArray
    states: FloatArray


def selective_scan_fwd(
    u: FloatArray,
    delta: FloatArray,
    A: FloatArray,
    B: FloatArray,
    C: FloatArray,
    D: FloatArray,
) -> tuple[FloatArray, ScanCache]:
    """The Mamba-1 selective scan (zero-order hold on A, Euler on B), a plain loop over time.

    h_t = exp(delta_t * A) * h_{t-1} + delta_t * B_t * u_t, h_{-1} = 0;
    y_t = h_t . C_t + D * u_t.

    Args:
        u: Input, shape (B, L, I).
        delta: Positive time steps, shape (B, L, I).
        A: Negative state matrix (diagonal per channel), shape (I, N).
        B: Input projection, shape (B, L, N).
        C: Output projection, shape (B, L, N).
        D: Skip gain, shape (I,).

    Returns:
        (y of shape (B, L, I), cache for :func:`selective_scan_bwd`).
    """
    decay = np.exp(delta[..., None] * A)  # (B, L, I, N)
    drive = (delta * u)[..., None] * B[:, :, None, :]  # (B, L, I, N)
    states = np.empty_like(decay)  # (B, L, I, N)
    h = np.zeros_like(decay[:, 0])  # (B, I, N)
    for t in range(u.shape[1]):
        h = decay[:, t] * h + drive[:, t]
        states[:, t] = h
    y = (states @ C[..., None])[..., 0] + u * D  # (B, L, I)
    return y, ScanCache(decay=decay, states=states)


def selective_scan_bwd(
    dy: FloatArray,
    u: FloatArray,
    delta: FloatArray,
    A: FloatArray,
    B: FloatArray,
    C: FloatArray,
    D: FloatArray,
    cache: ScanCache,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """Backward of :func:`selective_scan_fwd`, with a reverse loop over time.

    g_t = dL/dh_t (total) obeys g_t = dy_t C_t^T + exp(delta_{t+1} A) * g_{t+1}; every
    parameter gradient then follows from g_t and h_{t-1} without further recurrences.

    Returns:
        (du, ddelta, dA, dB, dC, dD) with the shapes of (u, delta, A, B, C, D).
    """
    decay, states = cache.decay, cache.states
    length = u.shape[1]
    dC = (dy[:, :, None, :] @ states)[:, :, 0]  # (B, L, N)
    from_output = dy[..., None] * C[:, :, None, :]  # (B, L, I, N): dy_t C_t^T
    grad_states = np.empty_like(states)  # (B, L, I, N): g_t
    g = from_output[:, length - 1].copy()  # (B, I, N)
    grad_states[:, length - 1] = g
    for t in range(length - 2, -1, -1):
        g = from_output[:, t] + decay[:, t + 1] * g
        grad_states[:, t] = g
    prev_states = np.zeros_like(states)  # (B, L, I, N): h_{t-1}
    prev_states[:, 1:] = states[:, :-1]

    # Through decay = exp(delta * A): d(delta*A) = g * h_{t-1} * decay.
    d_exponent = grad_states * prev_states * decay  # (B, L, I, N)
    ddelta = np.sum(d_exponent * A, axis=-1)  # (B, L, I)
    dA = np.einsum("blin,bli->in", d_exponent, delta)  # (I, N)
    # Through drive = (delta * u) B^T.
    d_delta_u = (grad_states @ B[..., None])[..., 0]  # (B, L, I)
    ddelta += d_delta_u * u
    du = d_delta_u * delta + dy * D
    dB = ((delta * u)[:, :, None, :] @ grad_states)[:, :, 0]  # (B, L, N)
    dD = np.sum(dy * u, axis=(0, 1))  # (I,)
    return du, ddelta, dA, dB, dC, dD


# ---- softmax cross-entropy -------------------------------------------------------------------


def _valid_targets(targets: IntArray, vocab_size: int, ignore_index: int) -> npt.NDArray[np.bool_]:
    valid: npt.NDArray[np.bool_] = targets != ignore_index
    bad = valid & ((targets < 0) | (targets >= vocab_size))
    if bad.any():
        raise ShapeError(
            f"cross_entropy: expected targets in [0, {vocab_size}) or {ignore_index} (ignored), "
            f"got {targets[bad][:5].tolist()}; hint: check the tokenizer's vocab_size"
        )
    if not valid.any():
        raise ShapeError(
            f"cross_entropy: expected at least one target != ignore_index={ignore_index}, got "
            f"none of {targets.size}; hint: the mean over zero targets is undefined"
        )
    return valid


def cross_entropy_fwd(
    logits: FloatArray, targets: IntArray, ignore_index: int = -100
) -> tuple[float, FloatArray]:
    """Mean softmax cross-entropy over the targets that are not ``ignore_index``.

    Args:
        logits: Shape (M, V).
        targets: Integer ids, shape (M,).
        ignore_index: Target value whose rows do not count.

    Returns:
        (loss, probs): the mean loss as a Python float and the softmax probabilities (M, V)
        that :func:`cross_entropy_bwd` needs.

    Raises:
        ShapeError: A target is out of range, or every target is ignored.
    """
    valid = _valid_targets(targets, logits.shape[1], ignore_index)
    shifted = logits - logits.max(axis=1, keepdims=True)  # (M, V), max 0: no overflow
    log_norm = np.log(np.exp(shifted).sum(axis=1))  # (M,)
    rows = np.nonzero(valid)[0]
    nll = log_norm[rows] - shifted[rows, targets[rows]]  # (M_valid,)
    probs = np.exp(shifted - log_norm[:, None])  # (M, V)
    return float(np.mean(nll, dtype=np.float64)), probs


def cross_entropy_bwd(probs: FloatArray, targets: IntArray, ignore_index: int = -100) -> FloatArray:
    """Gradient of the mean loss of :func:`cross_entropy_fwd` with respect to the logits.

    Returns:
        dlogits, shape (M, V): (softmax - onehot) / n_valid on counted rows, 0 on ignored ones.
    """
    valid = _valid_targets(targets, probs.shape[1], ignore_index)
    rows = np.nonzero(valid)[0]
    dlogits = np.zeros_like(probs)
    dlogits[rows] = probs[rows]
    dlogits[rows, targets[rows]] -= 1.0
    dlogits /= rows.size
    return dlogits
