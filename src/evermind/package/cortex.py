"""The cortex's tensor layout in a package: which layers carry it, their tensors' shapes, and
the ``config.json`` model type and architecture that name it (browser-safe).

:mod:`evermind.package.schema` checks packages against this layout and
:mod:`evermind.model.config_moe` (the ``MambaConfig`` side) re-exports it; the layout itself is
drawn in ``config_moe``'s docstring.
"""

from __future__ import annotations

__all__ = ["MOE_ARCHITECTURE", "MOE_MODEL_TYPE", "moe_layer_shapes", "moe_layers"]

#: ``config.json``'s model_type and architecture of a model with the cortex (ours, not HF's).
MOE_MODEL_TYPE = "evermind_mamba_moe"
MOE_ARCHITECTURE = "EvermindMambaMoeForCausalLM"


def moe_layers(n_layer: int, experts: int, every: int) -> list[int]:
    """The layers that carry the cortex (none when ``experts == 0``)."""
    if experts == 0:
        return []
    return [i for i in range(n_layer) if (i + 1) % every == 0]


def moe_layer_shapes(
    d_model: int, experts: int, intermediate: int, shared: int
) -> dict[str, tuple[int, ...]]:
    """One cortex layer's tensors (suffixes after ``backbone.layers.{i}.``), in layout order."""
    shapes: dict[str, tuple[int, ...]] = {
        "moe_norm.weight": (d_model,),
        "moe.gate.weight": (experts, d_model),
    }
    for e in range(experts):
        shapes[f"moe.experts.{e}.gate_proj.weight"] = (intermediate, d_model)
        shapes[f"moe.experts.{e}.up_proj.weight"] = (intermediate, d_model)
        shapes[f"moe.experts.{e}.down_proj.weight"] = (d_model, intermediate)
    shapes["moe.shared_expert.gate_proj.weight"] = (shared, d_model)
    shapes["moe.shared_expert.up_proj.weight"] = (shared, d_model)
    shapes["moe.shared_expert.down_proj.weight"] = (d_model, shared)
    shapes["moe.shared_expert_gate.weight"] = (1, d_model)
    return shapes
