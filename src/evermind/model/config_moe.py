"""The cortex side of :class:`~evermind.model.config.MambaConfig`: which layers carry the
shared-expert mixture-of-experts FFN, its parameter layout, and its ``config.json`` keys.

Browser-safe: imports only the standard library and ``evermind``.

With ``moe_experts > 0`` a layer i with ``(i + 1) % moe_every == 0`` (Qwen2-MoE's
``decoder_sparse_step``) adds, after its mixer's residual, ``h = h + moe(rmsnorm(h) * w)``:
Qwen2-MoE's sparse block (:mod:`evermind.ops.moe`). Its tensors follow the mixer's, in this
order, after ``backbone.layers.{i}.`` (E experts, F = moe_intermediate, S =
moe_shared_intermediate)::

    moe_norm.weight                          (d_model,)
    moe.gate.weight                          (E, d_model)   the router
    moe.experts.{e}.gate_proj.weight         (F, d_model)   for e in 0..E-1
    moe.experts.{e}.up_proj.weight           (F, d_model)
    moe.experts.{e}.down_proj.weight         (d_model, F)
    moe.shared_expert.gate_proj.weight       (S, d_model)
    moe.shared_expert.up_proj.weight         (S, d_model)
    moe.shared_expert.down_proj.weight       (d_model, S)
    moe.shared_expert_gate.weight            (1, d_model)

No ``transformers`` class has a Mamba mixer followed by this FFN, so such a config does not
pretend to be one: its ``config.json`` says ``model_type: "evermind_mamba_moe"``,
``architectures: ["EvermindMambaMoeForCausalLM"]`` and ``transformers_class: null``; the
Mamba-1 keys stay ``MambaConfig``'s and the cortex's are Qwen2-MoE's names (``num_experts``,
``num_experts_per_tok``, ``moe_intermediate_size``, ``shared_expert_intermediate_size``,
``decoder_sparse_step``, ``router_aux_loss_coef``, ``norm_topk_prob: false``).
"""

from __future__ import annotations

import math
from typing import Any

from evermind.errors import ConfigError

# The tensor layout lives with the package schema, which checks packages against it (package
# sits below model in the layer order); re-exported here beside the config's other fields.
from evermind.package.cortex import (
    MOE_ARCHITECTURE,
    MOE_MODEL_TYPE,
    moe_layer_shapes,
    moe_layers,
)

__all__ = [
    "MOE_ARCHITECTURE",
    "MOE_MODEL_TYPE",
    "check_moe",
    "moe_from_hf",
    "moe_layer_shapes",
    "moe_layers",
    "moe_to_hf",
]

#: The note a cortex ``config.json`` carries beside ``transformers_class: null``.
MOE_NOTE = (
    "Mamba-1 blocks with a Qwen2-MoE-style shared-expert FFN after each mixer; no transformers "
    "class implements it: load with evermind.load"
)


def _int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(
            f"MambaConfig.{name}: expected an int >= {minimum}, got {value!r}; "
            "hint: see docs/architecture.md, 'The cortex'"
        )
    return value


def check_moe(
    *,
    d_model: int,
    n_layer: int,
    block: object,
    experts: object,
    top_k: object,
    intermediate: object,
    shared_intermediate: object,
    every: object,
    aux_coef: object,
) -> dict[str, object]:
    """The validated cortex fields; 0 widths mean d_model (experts) and 2 * d_model (shared).

    With ``experts == 0`` (the cortex off) the other fields are stored as their defaults so
    that a config without the cortex is the same whatever was passed.

    Raises:
        ConfigError: A value has the wrong type or range, k exceeds the experts, no layer
            would carry the cortex, or the block is not Mamba-1.
    """
    count = _int("moe_experts", experts, 0)
    if isinstance(aux_coef, bool) or not isinstance(aux_coef, int | float):
        raise ConfigError(f"MambaConfig.router_aux_loss_coef: expected a number, got {aux_coef!r}")
    coef = float(aux_coef)
    if not math.isfinite(coef) or coef < 0:
        raise ConfigError(
            f"MambaConfig.router_aux_loss_coef: expected a finite number >= 0, got {aux_coef!r}; "
            "hint: Qwen2-MoE uses 0.001, Evermind defaults to 0.01"
        )
    if count == 0:
        return {
            "moe_experts": 0, "moe_top_k": 2, "moe_intermediate": 0,
            "moe_shared_intermediate": 0, "moe_every": 1, "router_aux_loss_coef": 0.01,
        }  # fmt: skip
    if block != "mamba1":
        raise ConfigError(
            f"MambaConfig.moe_experts: the cortex runs after Mamba-1 mixers only, got "
            f"block={block!r}; hint: use block='mamba1' or moe_experts=0"
        )
    k = _int("moe_top_k", top_k, 1)
    if k > count:
        raise ConfigError(
            f"MambaConfig.moe_top_k: expected at most moe_experts = {count} experts per token, "
            f"got {k}; hint: k of N routed experts needs k <= N"
        )
    every_n = _int("moe_every", every, 1)
    if every_n > n_layer:
        raise ConfigError(
            f"MambaConfig.moe_every: expected at most n_layer = {n_layer} (layer i carries the "
            f"cortex when (i + 1) % moe_every == 0), got {every_n}; hint: no layer would have it"
        )
    return {
        "moe_experts": count,
        "moe_top_k": k,
        "moe_intermediate": _int("moe_intermediate", intermediate, 0) or d_model,
        "moe_shared_intermediate": _int("moe_shared_intermediate", shared_intermediate, 0)
        or 2 * d_model,
        "moe_every": every_n,
        "router_aux_loss_coef": coef,
    }


def moe_to_hf(mamba: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """A Mamba-1 ``config.json`` dict with the cortex's keys: our model type, not HF's.

    Args:
        mamba: ``MambaConfig.to_hf_config()`` of the Mamba-1 part.
        fields: The cortex fields (``moe_experts``, ...).
    """
    return {
        **mamba,
        "model_type": MOE_MODEL_TYPE,
        "architectures": [MOE_ARCHITECTURE],
        "transformers_class": None,
        "architecture_note": MOE_NOTE,
        "num_experts": fields["moe_experts"],
        "num_experts_per_tok": fields["moe_top_k"],
        "moe_intermediate_size": fields["moe_intermediate"],
        "shared_expert_intermediate_size": fields["moe_shared_intermediate"],
        "decoder_sparse_step": fields["moe_every"],
        "router_aux_loss_coef": fields["router_aux_loss_coef"],
        "norm_topk_prob": False,
        "shared_expert": True,
    }


def moe_from_hf(hf: dict[str, Any]) -> dict[str, Any]:
    """The cortex's ``MambaConfig`` keywords of an ``evermind_mamba_moe`` ``config.json``.

    Raises:
        ConfigError: A cortex key is missing, or it asks for what the cortex does not do
            (renormalised top-k gates, no shared expert).
    """
    required: tuple[str, ...] = ("num_experts", "num_experts_per_tok", "moe_intermediate_size")
    required += ("shared_expert_intermediate_size", "decoder_sparse_step")
    missing = [key for key in required if key not in hf]
    if missing:
        raise ConfigError(
            f"from_hf_config: expected cortex keys {missing} in a {MOE_MODEL_TYPE} config.json; "
            "hint: was it written by evermind export?"
        )
    if hf.get("norm_topk_prob", False) is not False or hf.get("shared_expert", True) is not True:
        raise ConfigError(
            f"from_hf_config: expected norm_topk_prob=false and shared_expert=true, got "
            f"{hf.get('norm_topk_prob')!r} and {hf.get('shared_expert')!r}; hint: the cortex "
            "keeps the k probabilities as gates and always runs its shared expert"
        )
    return {
        "moe_experts": hf["num_experts"],
        "moe_top_k": hf["num_experts_per_tok"],
        "moe_intermediate": hf["moe_intermediate_size"],
        "moe_shared_intermediate": hf["shared_expert_intermediate_size"],
        "moe_every": hf["decoder_sparse_step"],
        "router_aux_loss_coef": hf.get("router_aux_loss_coef", 0.01),
    }
