"""The Mamba-2 side of :class:`~evermind.model.config.MambaConfig`: its parameter layout and
its mapping to and from a ``transformers`` ``Mamba2Config`` dictionary.

Browser-safe: imports only the standard library and ``evermind``.

A config with ``block="mamba2"`` follows ``Mamba2ForCausalLM``'s state dict (the layout is
drawn in :mod:`evermind.model.config`'s docstring); ``MambaConfig`` calls these functions for
such a config and keeps its Mamba-1 code paths as they were.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from evermind.errors import ConfigError

__all__ = [
    "Mamba2Fields",
    "check_mamba2_heads",
    "mamba2_from_hf",
    "mamba2_param_shapes",
    "mamba2_to_hf",
]


class Mamba2Fields(Protocol):
    """What these functions read of a ``MambaConfig`` (a protocol, so that this module does
    not import ``config``, which imports it)."""

    @property
    def d_model(self) -> int: ...
    @property
    def n_layer(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def d_state(self) -> int: ...
    @property
    def d_conv(self) -> int: ...
    @property
    def expand(self) -> int: ...
    @property
    def dt_rank(self) -> int: ...
    @property
    def rms_eps(self) -> float: ...
    @property
    def dt_min(self) -> float: ...
    @property
    def dt_max(self) -> float: ...
    @property
    def dt_init_floor(self) -> float: ...
    @property
    def pad_token_id(self) -> int: ...
    @property
    def bos_token_id(self) -> int: ...
    @property
    def eos_token_id(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def n_groups(self) -> int: ...
    @property
    def chunk_size(self) -> int: ...
    @property
    def d_inner(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def conv_dim(self) -> int: ...


# Per-layer tensors in Mamba2ForCausalLM.state_dict() order, after "backbone.layers.{i}.".
_LAYER_SUFFIXES = (
    "norm.weight",
    "mixer.dt_bias",
    "mixer.A_log",
    "mixer.D",
    "mixer.conv1d.weight",
    "mixer.conv1d.bias",
    "mixer.in_proj.weight",
    "mixer.norm.weight",
    "mixer.out_proj.weight",
)

# config.json values Evermind's Mamba-2 block assumes (from_hf refuses others, but
# residual_in_fp32, a precision hint).
_HF_FIXED: dict[str, object] = {
    "model_type": "mamba2",
    "use_bias": False,
    "use_conv_bias": True,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "residual_in_fp32": True,
}


def mamba2_param_shapes(config: Mamba2Fields) -> dict[str, tuple[int, ...]]:
    """``param_shapes()`` of a Mamba-2 config, in ``Mamba2ForCausalLM.state_dict()`` order."""
    d_model, d_inner, heads = config.d_model, config.d_inner, config.n_heads
    conv_dim = config.conv_dim
    per_layer: dict[str, tuple[int, ...]] = {
        "norm.weight": (d_model,),
        "mixer.dt_bias": (heads,),
        "mixer.A_log": (heads,),
        "mixer.D": (heads,),
        "mixer.conv1d.weight": (conv_dim, 1, config.d_conv),
        "mixer.conv1d.bias": (conv_dim,),
        "mixer.in_proj.weight": (d_inner + conv_dim + heads, d_model),
        "mixer.norm.weight": (d_inner,),
        "mixer.out_proj.weight": (d_model, d_inner),
    }
    shapes: dict[str, tuple[int, ...]] = {
        "backbone.embeddings.weight": (config.vocab_size, d_model)
    }
    for layer in range(config.n_layer):
        for suffix in _LAYER_SUFFIXES:
            shapes[f"backbone.layers.{layer}.{suffix}"] = per_layer[suffix]
    shapes["backbone.norm_f.weight"] = (d_model,)
    return shapes


def mamba2_to_hf(config: Mamba2Fields) -> dict[str, Any]:
    """``to_hf_config()`` of a Mamba-2 config: ``transformers.Mamba2Config``'s keywords.

    ``time_step_limit`` is left out (HF's default, (0, inf): no clamp), which keeps the JSON
    free of ``Infinity``; :func:`mamba2_from_hf` refuses any other limit.
    """
    return {
        **_HF_FIXED,
        "architectures": ["Mamba2ForCausalLM"],
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "num_hidden_layers": config.n_layer,
        "state_size": config.d_state,
        "conv_kernel": config.d_conv,
        "expand": config.expand,
        "num_heads": config.n_heads,
        "head_dim": config.head_dim,
        "n_groups": config.n_groups,
        "chunk_size": config.chunk_size,
        "time_step_rank": config.dt_rank,
        "layer_norm_epsilon": config.rms_eps,
        "time_step_min": config.dt_min,
        "time_step_max": config.dt_max,
        "time_step_floor": config.dt_init_floor,
        "rescale_prenorm_residual": False,  # as Mamba-1's: init-time only in HF
        "use_cache": True,
        "pad_token_id": config.pad_token_id,
        "bos_token_id": config.bos_token_id,
        "eos_token_id": config.eos_token_id,
    }


def mamba2_from_hf(hf: dict[str, Any]) -> dict[str, Any]:
    """``MambaConfig`` keyword arguments (all but the token ids) of a ``Mamba2Config`` dict.

    Defaults are ``Mamba2Config``'s own, for keys a ``config.json`` leaves out.

    Raises:
        ConfigError: A required key is missing or the dict describes a variant Evermind does
            not run (biases, another activation, untied head, a time-step clamp).
    """
    missing = [k for k in ("hidden_size", "num_hidden_layers", "vocab_size") if k not in hf]
    if missing:
        raise ConfigError(
            f"from_hf_config: expected keys {missing} in the Mamba-2 config dict, got keys "
            f"{sorted(hf)}; hint: is this a transformers Mamba2Config?"
        )
    for key, value in _HF_FIXED.items():
        if key != "residual_in_fp32" and key in hf and hf[key] != value:
            raise ConfigError(
                f"from_hf_config: expected {key}={value!r}, got {hf[key]!r}; hint: Evermind "
                "runs the plain Mamba-2 block (no biases, SiLU) with a tied LM head only"
            )
    limit = hf.get("time_step_limit", [0.0, math.inf])
    if list(limit) != [0.0, math.inf]:
        raise ConfigError(
            f"from_hf_config: expected time_step_limit [0.0, inf] (no clamp), got {limit!r}; "
            "hint: Evermind's Mamba-2 model does not clamp the time step yet"
        )
    return {
        "block": "mamba2",
        "d_model": hf["hidden_size"],
        "n_layer": hf["num_hidden_layers"],
        "vocab_size": hf["vocab_size"],
        "d_state": hf.get("state_size", 128),
        "d_conv": hf.get("conv_kernel", 4),
        "expand": hf.get("expand", 2),
        "head_dim": hf.get("head_dim", 64),
        "n_groups": hf.get("n_groups", 8),
        "chunk_size": hf.get("chunk_size", 256),
        "dt_rank": hf.get("time_step_rank", "auto"),
        "rms_eps": hf.get("layer_norm_epsilon", 1e-5),
        "dt_min": hf.get("time_step_min", 0.001),
        "dt_max": hf.get("time_step_max", 0.1),
        "dt_init_floor": hf.get("time_step_floor", 1e-4),
    }


def check_mamba2_heads(hf: dict[str, Any], n_heads: int) -> None:
    """Refuse a ``config.json`` whose ``num_heads`` disagrees with the heads it implies.

    Raises:
        ConfigError: ``num_heads`` != expand * hidden_size / head_dim.
    """
    if "num_heads" in hf and hf["num_heads"] != n_heads:
        raise ConfigError(
            f"from_hf_config: expected num_heads == expand * hidden_size / head_dim = "
            f"{n_heads}, got {hf['num_heads']}; hint: the config is inconsistent"
        )
