"""The cortex sublayer of :class:`~evermind.model.cpu.CpuMamba`: forward, backward, the
load-balancing loss over the model's cortex layers, and the routing statistics.

NATIVE-ONLY: imports numpy; never imported by browser code.

A layer that carries the cortex (``MambaConfig.moe_layers``) runs, after its mixer's
residual, ``h = h + moe(rmsnorm(h) * moe_norm.weight)`` with :mod:`evermind.ops.moe` (the one
reference; this module only gathers the layer's weights under the op's names, flattens
(B, L, D) to (M, D) rows and writes the gradients back under the parameter names). The
load-balancing loss is HF's pooled one: every cortex layer's rows stacked, as
``load_balancing_loss_func`` does with a tuple of gate logits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from evermind.model.config import MambaConfig
from evermind.ops._dtype import Floats, Ints
from evermind.ops.moe import (
    MoeWeights,
    expert_fractions,
    load_balance_bwd,
    load_balance_loss,
    moe_bwd,
    moe_fwd,
)
from evermind.ops.rmsnorm import rmsnorm_bwd, rmsnorm_fwd

__all__ = ["CortexCache", "cortex_aux", "cortex_bwd", "cortex_fwd", "routing_stats"]

#: MoeWeights field -> the parameter suffix after ``backbone.layers.{i}.moe.`` (experts: the
#: part after ``experts.{e}.``).
_SHARED = {
    "router": "gate.weight",
    "shared_gate": "shared_expert.gate_proj.weight",
    "shared_up": "shared_expert.up_proj.weight",
    "shared_down": "shared_expert.down_proj.weight",
    "shared_expert_gate": "shared_expert_gate.weight",
}
_EXPERT = {
    "gate_proj": "gate_proj.weight",
    "up_proj": "up_proj.weight",
    "down_proj": "down_proj.weight",
}


@dataclass
class CortexCache:
    """What one cortex layer's backward reads of its forward."""

    h_in: Floats  # (B, L, D) residual stream before the cortex
    x_norm: Floats  # (M, D)    rmsnorm(h_in) * moe_norm.weight, rows flattened
    probs: Floats  # (M, E)    router probabilities
    idx: Ints  # (M, k)    the routed experts


def cortex_weights(params: Mapping[str, Any], index: int, n_experts: int) -> MoeWeights:
    """Layer ``index``'s cortex weights with the routed experts stacked on a leading E axis."""
    prefix = f"backbone.layers.{index}.moe."
    stacked = {
        name: np.stack([params[f"{prefix}experts.{e}.{suffix}"] for e in range(n_experts)])
        for name, suffix in _EXPERT.items()
    }
    return MoeWeights(**{name: params[prefix + s] for name, s in _SHARED.items()}, **stacked)


def cortex_fwd(
    params: Mapping[str, Any], config: MambaConfig, index: int, h: Floats
) -> tuple[Floats, CortexCache]:
    """Layer ``index``'s cortex on the residual stream h (..., D): (its output, the cache)."""
    norm = params[f"backbone.layers.{index}.moe_norm.weight"]
    x_norm, _ = rmsnorm_fwd(h, norm, config.rms_eps)  # (..., D)
    rows = x_norm.reshape(-1, config.d_model)  # (M, D)
    weights = cortex_weights(params, index, config.moe_experts)
    y, probs, idx = moe_fwd(rows, weights, config.moe_top_k)  # (M, D), (M, E), (M, k)
    return y.reshape(h.shape), CortexCache(h_in=h, x_norm=rows, probs=probs, idx=idx)


def cortex_bwd(
    params: Mapping[str, Any],
    config: MambaConfig,
    index: int,
    dout: Floats,
    cache: CortexCache,
    dprobs: Floats | None,
    grads: dict[str, Floats],
) -> Floats:
    """Backward of layer ``index``'s cortex; writes its grads and returns d(its input).

    Args:
        params: The model's weights.
        config: The model's hyperparameters.
        index: The layer.
        dout: d(loss)/d(cortex output), shaped like the residual stream.
        cache: From :func:`cortex_fwd`.
        dprobs: The load-balancing loss's gradient on this layer's probabilities (times its
            coefficient), (M, E), or None.
        grads: Filled with this layer's cortex gradients, under the parameter names.
    """
    prefix = f"backbone.layers.{index}."
    weights = cortex_weights(params, index, config.moe_experts)
    flat = dout.reshape(-1, config.d_model)  # (M, D)
    dx, got = moe_bwd(flat, cache.x_norm, weights, config.moe_top_k, dprobs)
    for name, suffix in _SHARED.items():
        grads[prefix + "moe." + suffix] = getattr(got, name)
    for name, suffix in _EXPERT.items():
        stacked = getattr(got, name)  # (E, ...)
        for e in range(config.moe_experts):
            grads[f"{prefix}moe.experts.{e}.{suffix}"] = stacked[e]
    dh, grads[prefix + "moe_norm.weight"] = rmsnorm_bwd(
        cache.h_in, params[prefix + "moe_norm.weight"], dx.reshape(cache.h_in.shape), config.rms_eps
    )
    return dh


def cortex_aux(caches: Mapping[int, CortexCache]) -> tuple[float, dict[int, Floats]]:
    """The load-balancing loss over every cortex layer's rows and its gradient per layer.

    Returns:
        ``(loss, {layer: d loss / d probs (M, E)})``; (0.0, {}) when there is no cortex.
    """
    if not caches:
        return 0.0, {}
    layers = sorted(caches)
    probs = np.concatenate([caches[i].probs for i in layers])  # (R, E), R = layers * M
    idx = np.concatenate([caches[i].idx for i in layers])  # (R, k)
    grad = load_balance_bwd(probs, idx)  # (R, E)
    rows = np.cumsum([0] + [caches[i].probs.shape[0] for i in layers])
    return load_balance_loss(probs, idx), {
        layer: grad[rows[n] : rows[n + 1]] for n, layer in enumerate(layers)
    }


def routing_stats(caches: Mapping[int, CortexCache], n_experts: int) -> dict[str, Any]:
    """Per cortex layer, the fraction of tokens routed to each expert and its own aux loss.

    Returns:
        ``{"aux_loss": pooled loss, "layers": {"<i>": {"fractions": [E floats, summing to k],
        "aux_loss": the layer's own loss}}}`` (JSON-able).
    """
    aux, _ = cortex_aux(caches)
    return {
        "aux_loss": aux,
        "layers": {
            str(i): {
                "fractions": [round(float(v), 6) for v in expert_fractions(c.idx, n_experts)],
                "aux_loss": load_balance_loss(c.probs, c.idx),
            }
            for i, c in sorted(caches.items())
        },
    }
