"""The model definition: hyperparameters, presets and the parameter layout.

This module owns :class:`MambaConfig` (the hyperparameters under their mamba names, for a
Mamba-1 or a Mamba-2 block: ``block``),
the size presets, the mapping to and from a Hugging Face ``transformers`` ``MambaConfig``
dictionary, and the parameter layout (names, shapes and order) every other part of Evermind
agrees on: the WGSL kernels, the numpy CPU model, the optimizer and the ``.evermind`` package.

Browser-safe: imports only the standard library and ``evermind``.

Tensor names and shapes follow ``transformers``' ``MambaForCausalLM`` state dict (the LM head
is tied to the embedding and not stored)::

    backbone.embeddings.weight                 (vocab_size, d_model)
    backbone.layers.{i}.norm.weight            (d_model,)
    backbone.layers.{i}.mixer.A_log            (d_inner, d_state)
    backbone.layers.{i}.mixer.D                (d_inner,)
    backbone.layers.{i}.mixer.conv1d.weight    (d_inner, 1, d_conv)
    backbone.layers.{i}.mixer.conv1d.bias      (d_inner,)
    backbone.layers.{i}.mixer.in_proj.weight   (2 * d_inner, d_model)
    backbone.layers.{i}.mixer.x_proj.weight    (dt_rank + 2 * d_state, d_inner)
    backbone.layers.{i}.mixer.dt_proj.weight   (d_inner, dt_rank)
    backbone.layers.{i}.mixer.dt_proj.bias     (d_inner,)
    backbone.layers.{i}.mixer.out_proj.weight  (d_model, d_inner)
    backbone.norm_f.weight                     (d_model,)

The order above is the order of ``transformers``' own ``state_dict()``. With
``block="mamba2"`` the layout is ``Mamba2ForCausalLM``'s (H = n_heads = d_inner / head_dim,
G = n_groups; in_proj's rows are [gate z (d_inner), conv input x B C (conv_dim), dt (H)] and
conv_dim = d_inner + 2 G d_state)::

    backbone.layers.{i}.norm.weight            (d_model,)
    backbone.layers.{i}.mixer.dt_bias          (H,)
    backbone.layers.{i}.mixer.A_log            (H,)
    backbone.layers.{i}.mixer.D                (H,)
    backbone.layers.{i}.mixer.conv1d.weight    (conv_dim, 1, d_conv)
    backbone.layers.{i}.mixer.conv1d.bias      (conv_dim,)
    backbone.layers.{i}.mixer.in_proj.weight   (d_inner + conv_dim + H, d_model)
    backbone.layers.{i}.mixer.norm.weight      (d_inner,)   the gated RMSNorm's gain
    backbone.layers.{i}.mixer.out_proj.weight  (d_model, d_inner)

With ``moe_experts > 0`` (the cortex, :mod:`evermind.model.config_moe`) the layers that carry
it add ``moe_norm.weight`` and the ``moe.*`` tensors after their mixer's; the ``config.json``
is then Evermind's own ``evermind_mamba_moe`` type, which no ``transformers`` class loads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from evermind.errors import ConfigError
from evermind.model.config_mamba2 import (
    check_mamba2_heads,
    mamba2_from_hf,
    mamba2_param_shapes,
    mamba2_to_hf,
)
from evermind.model.config_moe import (
    MOE_MODEL_TYPE,
    check_moe,
    moe_from_hf,
    moe_layer_shapes,
    moe_layers,
    moe_to_hf,
)

__all__ = ["BLOCKS", "PRESETS", "MambaConfig"]

#: The block types: Mamba-1 (selective scan, HF ``MambaForCausalLM``) and Mamba-2 (SSD, HF
#: ``Mamba2ForCausalLM``).
BLOCKS = ("mamba1", "mamba2")

# Size presets; the vocabulary size comes from the tokenizer, so it is not part of a preset.
PRESETS: dict[str, dict[str, int]] = {
    "nano": {"d_model": 128, "n_layer": 4},
    "small": {"d_model": 256, "n_layer": 6},
    "base": {"d_model": 512, "n_layer": 8},
}

# Per-layer tensors in state-dict order, as suffixes after "backbone.layers.{i}.".
_LAYER_SUFFIXES = (
    "norm.weight",
    "mixer.A_log",
    "mixer.D",
    "mixer.conv1d.weight",
    "mixer.conv1d.bias",
    "mixer.in_proj.weight",
    "mixer.x_proj.weight",
    "mixer.dt_proj.weight",
    "mixer.dt_proj.bias",
    "mixer.out_proj.weight",
)


def _check_int(name: str, value: object, minimum: int = 1) -> int:
    # bool is an int subclass; a config value of True is a bug, not the number 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"MambaConfig.{name}: expected an int >= {minimum}, got {value!r} "
            f"({type(value).__name__}); hint: pass a plain integer"
        )
    if value < minimum:
        raise ConfigError(
            f"MambaConfig.{name}: expected an int >= {minimum}, got {value}; "
            f"hint: use a value of at least {minimum}"
        )
    return value


def _check_float(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"MambaConfig.{name}: expected a number, got {value!r} ({type(value).__name__})"
        )
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        raise ConfigError(
            f"MambaConfig.{name}: expected a finite number {bound}, got {value!r}; "
            f"hint: see the Mamba defaults (rms_eps 1e-5, dt_min 1e-3, dt_max 0.1)"
        )
    return number


@dataclass(frozen=True, init=False)
class MambaConfig:
    """Hyperparameters of a Mamba language model (Mamba-1 or Mamba-2 blocks, tied LM head).

    Attributes:
        d_model: Width of the residual stream (HF ``hidden_size``).
        n_layer: Number of Mamba blocks (HF ``num_hidden_layers``).
        vocab_size: Number of token ids; rows of the tied embedding.
        d_state: SSM state size per channel, N (HF ``state_size``).
        d_conv: Causal depthwise convolution width (HF ``conv_kernel``).
        expand: d_inner = expand * d_model.
        dt_rank: Rank of the time-step projection (HF ``time_step_rank``); always an int once
            constructed ("auto" resolves to ceil(d_model / 16)).
        rms_eps: RMSNorm epsilon (HF ``layer_norm_epsilon``).
        dt_min: Smallest initial time step (HF ``time_step_min``).
        dt_max: Largest initial time step (HF ``time_step_max``).
        dt_init_floor: Lower clamp of the initial time step (HF ``time_step_floor``).
        dt_scale: Scale of the dt_proj weight init (HF ``time_step_scale``).
        pad_token_id: Padding token id (from the tokenizer).
        bos_token_id: Beginning-of-sequence token id (from the tokenizer).
        eos_token_id: End-of-sequence token id (from the tokenizer).
        block: "mamba1" (default; the selective scan) or "mamba2" (the SSD scan).
        head_dim: Mamba-2 only: channels per head, P (HF ``head_dim``); divides d_inner.
        n_groups: Mamba-2 only: groups of heads sharing B and C, G (HF ``n_groups``); divides
            the number of heads.
        chunk_size: Mamba-2 only: steps per chunk of the SSD scan (HF ``chunk_size``).
        moe_experts: The cortex's routed experts, E (HF ``num_experts``); 0 (default): no
            cortex, and the model is exactly the plain Mamba one.
        moe_top_k: Routed experts per token, k (HF ``num_experts_per_tok``).
        moe_intermediate: Width of each routed expert's SwiGLU, F (HF
            ``moe_intermediate_size``); 0 given means d_model.
        moe_shared_intermediate: Width of the shared expert's SwiGLU, S (HF
            ``shared_expert_intermediate_size``); 0 given means 2 * d_model.
        moe_every: Layer i carries the cortex when (i + 1) % moe_every == 0 (HF
            ``decoder_sparse_step``); 1: every layer.
        router_aux_loss_coef: Weight of the load-balancing loss added to the LM loss.
    """

    d_model: int
    n_layer: int
    vocab_size: int
    d_state: int
    d_conv: int
    expand: int
    dt_rank: int
    rms_eps: float
    dt_min: float
    dt_max: float
    dt_init_floor: float
    dt_scale: float
    pad_token_id: int
    bos_token_id: int
    eos_token_id: int
    block: str
    head_dim: int
    n_groups: int
    chunk_size: int
    moe_experts: int
    moe_top_k: int
    moe_intermediate: int
    moe_shared_intermediate: int
    moe_every: int
    router_aux_loss_coef: float

    # Written by hand (not generated) so that dt_rank may be given as "auto" while the
    # attribute is always an int for every reader.
    def __init__(
        self,
        d_model: int,
        n_layer: int,
        vocab_size: int,
        d_state: int = 16,
        d_conv: int = 4,
        expand: int = 2,
        dt_rank: int | str = "auto",
        rms_eps: float = 1e-5,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dt_init_floor: float = 1e-4,
        dt_scale: float = 1.0,
        pad_token_id: int = 0,
        bos_token_id: int = 0,
        eos_token_id: int = 0,
        block: str = "mamba1",
        head_dim: int = 64,
        n_groups: int = 1,
        chunk_size: int = 256,
        moe_experts: int = 0,
        moe_top_k: int = 2,
        moe_intermediate: int = 0,
        moe_shared_intermediate: int = 0,
        moe_every: int = 1,
        router_aux_loss_coef: float = 0.01,
    ) -> None:
        """Validate and store the hyperparameters.

        Raises:
            ConfigError: A value has the wrong type or is out of range.
        """
        d_model = _check_int("d_model", d_model)
        if dt_rank == "auto":
            dt_rank = math.ceil(d_model / 16)
        elif isinstance(dt_rank, str):
            raise ConfigError(
                f"MambaConfig.dt_rank: expected an int >= 1 or 'auto', got {dt_rank!r}; "
                "hint: 'auto' means ceil(d_model / 16)"
            )
        low = _check_float("dt_min", dt_min, positive=True)
        high = _check_float("dt_max", dt_max, positive=True)
        if low > high:
            raise ConfigError(
                f"MambaConfig: expected dt_min <= dt_max, got dt_min={low} > dt_max={high}; "
                "hint: swap them"
            )
        values: dict[str, object] = {
            "d_model": d_model,
            "n_layer": _check_int("n_layer", n_layer),
            "vocab_size": _check_int("vocab_size", vocab_size),
            "d_state": _check_int("d_state", d_state),
            "d_conv": _check_int("d_conv", d_conv),
            "expand": _check_int("expand", expand),
            "dt_rank": _check_int("dt_rank", dt_rank),
            "rms_eps": _check_float("rms_eps", rms_eps, positive=True),
            "dt_min": low,
            "dt_max": high,
            "dt_init_floor": _check_float("dt_init_floor", dt_init_floor, positive=False),
            "dt_scale": _check_float("dt_scale", dt_scale, positive=True),
        }
        for name, token_id in (
            ("pad_token_id", pad_token_id),
            ("bos_token_id", bos_token_id),
            ("eos_token_id", eos_token_id),
        ):
            checked = _check_int(name, token_id, minimum=0)
            if checked >= vocab_size:
                raise ConfigError(
                    f"MambaConfig.{name}: expected an id in [0, {vocab_size}), got {checked}; "
                    "hint: take the special token ids from the tokenizer that set vocab_size"
                )
            values[name] = checked
        d_inner = d_model * _check_int("expand", expand)
        values.update(_check_block(block, d_inner, head_dim, n_groups, chunk_size))
        values.update(
            check_moe(
                d_model=d_model, n_layer=_check_int("n_layer", n_layer), block=block,
                experts=moe_experts,
                top_k=moe_top_k, intermediate=moe_intermediate,
                shared_intermediate=moe_shared_intermediate, every=moe_every,
                aux_coef=router_aux_loss_coef,
            )
        )  # fmt: skip
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @classmethod
    def preset(cls, name: str, vocab_size: int, **overrides: Any) -> MambaConfig:
        """Build the config of a named size preset.

        Args:
            name: One of ``PRESETS`` ("nano", "small", "base").
            vocab_size: The tokenizer's vocabulary size.
            **overrides: Any other constructor argument (e.g. ``eos_token_id=0``).

        Returns:
            The validated config.

        Raises:
            ConfigError: Unknown preset name or invalid override.
        """
        if name not in PRESETS:
            raise ConfigError(
                f"MambaConfig.preset: expected one of {sorted(PRESETS)}, got {name!r}; "
                "hint: presets differ only in d_model and n_layer"
            )
        return cls(**{**PRESETS[name], **overrides, "vocab_size": vocab_size})

    @property
    def d_inner(self) -> int:
        """Width of the mixer's inner stream: expand * d_model."""
        return self.expand * self.d_model

    @property
    def n_heads(self) -> int:
        """Mamba-2's number of heads H = d_inner / head_dim (HF ``num_heads``)."""
        return self.d_inner // self.head_dim

    @property
    def conv_dim(self) -> int:
        """Mamba-2's conv channels: x, B and C together, d_inner + 2 * n_groups * d_state."""
        return self.d_inner + 2 * self.n_groups * self.d_state

    @property
    def moe_layers(self) -> list[int]:
        """The layers that carry the cortex, in order (empty when ``moe_experts == 0``)."""
        return moe_layers(self.n_layer, self.moe_experts, self.moe_every)

    # ---- Hugging Face transformers interop -------------------------------------------------

    _HF_FIXED: ClassVar[dict[str, object]] = {
        "model_type": "mamba",
        "architectures": ["MambaForCausalLM"],
        "use_bias": False,
        "use_conv_bias": True,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "residual_in_fp32": True,
        "time_step_init_scheme": "random",
    }

    def to_hf_config(self) -> dict[str, Any]:
        """Return the ``transformers`` ``MambaConfig`` keyword dictionary for this model.

        ``transformers.MambaConfig(**cfg.to_hf_config())`` builds the same architecture, and the
        dictionary is what the package writes as ``config.json``. A Mamba-2 config gives
        ``transformers.Mamba2Config``'s dictionary instead.
        """
        if self.block == "mamba2":
            return mamba2_to_hf(self)
        if self.moe_experts:
            return moe_to_hf(self._mamba1_hf(), self._moe_fields())
        return self._mamba1_hf()

    def _moe_fields(self) -> dict[str, Any]:
        """The cortex fields under their constructor names."""
        names = ("moe_experts", "moe_top_k", "moe_intermediate", "moe_shared_intermediate")
        return {name: getattr(self, name) for name in (*names, "moe_every", "router_aux_loss_coef")}

    def _mamba1_hf(self) -> dict[str, Any]:
        """``to_hf_config()`` of the Mamba-1 part (the whole of it without the cortex)."""
        return {
            **self._HF_FIXED,
            "architectures": ["MambaForCausalLM"],  # a fresh list: callers may edit the dict
            "vocab_size": self.vocab_size,
            "hidden_size": self.d_model,
            "num_hidden_layers": self.n_layer,
            "state_size": self.d_state,
            "conv_kernel": self.d_conv,
            "expand": self.expand,
            "intermediate_size": self.d_inner,
            "time_step_rank": self.dt_rank,
            "layer_norm_epsilon": self.rms_eps,
            "time_step_min": self.dt_min,
            "time_step_max": self.dt_max,
            "time_step_floor": self.dt_init_floor,
            "time_step_scale": self.dt_scale,
            # Init-time only in HF, and harmful to a trained model: transformers 5 re-runs
            # _init_weights in from_pretrained and re-initialises out_proj when this is true.
            # Our own init already divides out_proj by sqrt(n_layer).
            "rescale_prenorm_residual": False,
            "use_cache": True,
            "pad_token_id": self.pad_token_id,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
        }

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any]) -> MambaConfig:
        """Build a config from a ``transformers`` ``MambaConfig`` dictionary (``config.json``).

        Keys that do not change the computation (``use_cache``, ``transformers_version``, ...) are
        ignored; keys that select an architecture Evermind does not run are rejected.

        Args:
            hf: The dictionary, e.g. ``json.load`` of a ``config.json``.

        Returns:
            The validated config.

        Raises:
            ConfigError: A required key is missing or describes an unsupported variant.
        """
        if not isinstance(hf, dict):
            raise ConfigError(
                f"from_hf_config: expected a dict, got {type(hf).__name__}; "
                "hint: pass json.load(open('config.json'))"
            )
        cortex: dict[str, Any] = {}
        if hf.get("model_type") == MOE_MODEL_TYPE:
            cortex = moe_from_hf(hf)
            hf = {**hf, "model_type": "mamba", "architectures": ["MambaForCausalLM"]}
        if hf.get("model_type") == "mamba2":
            config = cls(
                **mamba2_from_hf(hf),
                pad_token_id=_token_id(hf, "pad_token_id"),
                bos_token_id=_token_id(hf, "bos_token_id"),
                eos_token_id=_token_id(hf, "eos_token_id"),
            )
            check_mamba2_heads(hf, config.n_heads)
            return config
        missing = [k for k in ("hidden_size", "num_hidden_layers", "vocab_size") if k not in hf]
        if missing:
            raise ConfigError(
                f"from_hf_config: expected keys {missing} in the config dict, got keys "
                f"{sorted(hf)}; hint: is this a transformers MambaConfig?"
            )
        for key, value in cls._HF_FIXED.items():
            if key in ("architectures", "time_step_init_scheme", "residual_in_fp32"):
                continue  # naming / init-only / precision hints; they do not change the math
            if key in hf and hf[key] != value:
                raise ConfigError(
                    f"from_hf_config: expected {key}={value!r}, got {hf[key]!r}; "
                    "hint: Evermind runs the plain Mamba-1 block with a tied LM head only"
                )
        config = cls(
            d_model=hf["hidden_size"],
            n_layer=hf["num_hidden_layers"],
            vocab_size=hf["vocab_size"],
            d_state=hf.get("state_size", 16),
            d_conv=hf.get("conv_kernel", 4),
            expand=hf.get("expand", 2),
            dt_rank=hf.get("time_step_rank", "auto"),
            rms_eps=hf.get("layer_norm_epsilon", 1e-5),
            dt_min=hf.get("time_step_min", 0.001),
            dt_max=hf.get("time_step_max", 0.1),
            dt_init_floor=hf.get("time_step_floor", 1e-4),
            dt_scale=hf.get("time_step_scale", 1.0),
            pad_token_id=_token_id(hf, "pad_token_id"),
            bos_token_id=_token_id(hf, "bos_token_id"),
            eos_token_id=_token_id(hf, "eos_token_id"),
            **cortex,
        )
        if "intermediate_size" in hf and hf["intermediate_size"] != config.d_inner:
            raise ConfigError(
                f"from_hf_config: expected intermediate_size == expand * hidden_size = "
                f"{config.d_inner}, got {hf['intermediate_size']}; hint: the config is inconsistent"
            )
        return config

    # ---- parameter layout -------------------------------------------------------------------

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Return every stored tensor's name and PyTorch weight shape, in the fixed layout order."""
        if self.block == "mamba2":
            return mamba2_param_shapes(self)
        d_model, d_inner, d_state = self.d_model, self.d_inner, self.d_state
        per_layer: dict[str, tuple[int, ...]] = {
            "norm.weight": (d_model,),
            "mixer.A_log": (d_inner, d_state),
            "mixer.D": (d_inner,),
            "mixer.conv1d.weight": (d_inner, 1, self.d_conv),
            "mixer.conv1d.bias": (d_inner,),
            "mixer.in_proj.weight": (2 * d_inner, d_model),
            "mixer.x_proj.weight": (self.dt_rank + 2 * d_state, d_inner),
            "mixer.dt_proj.weight": (d_inner, self.dt_rank),
            "mixer.dt_proj.bias": (d_inner,),
            "mixer.out_proj.weight": (d_model, d_inner),
        }
        shapes: dict[str, tuple[int, ...]] = {
            "backbone.embeddings.weight": (self.vocab_size, d_model)
        }
        cortex = set(self.moe_layers)
        moe_shapes = moe_layer_shapes(
            d_model, self.moe_experts, self.moe_intermediate, self.moe_shared_intermediate
        )
        for layer in range(self.n_layer):
            for suffix in _LAYER_SUFFIXES:
                shapes[f"backbone.layers.{layer}.{suffix}"] = per_layer[suffix]
            if layer in cortex:
                for suffix, shape in moe_shapes.items():
                    shapes[f"backbone.layers.{layer}.{suffix}"] = shape
        shapes["backbone.norm_f.weight"] = (d_model,)
        return shapes

    @property
    def n_params(self) -> int:
        """Total number of scalar parameters (the tied LM head counted once)."""
        return sum(math.prod(shape) for shape in self.param_shapes().values())

    def no_decay(self, name: str) -> bool:
        """Say whether a parameter is exempt from weight decay.

        Norm weights, biases, ``A_log`` and ``D`` are exempt; the embedding and the projection
        matrices are decayed.

        Args:
            name: A parameter name from :meth:`param_shapes`.

        Raises:
            ConfigError: ``name`` is not a parameter of this config.
        """
        if name not in self.param_shapes():
            raise ConfigError(
                f"no_decay: expected a parameter name of this model, got {name!r}; "
                "hint: see MambaConfig.param_shapes()"
            )
        return name.endswith(("norm.weight", "norm_f.weight", ".bias", ".A_log", ".D", ".dt_bias"))


def _check_block(
    block: object, d_inner: int, head_dim: object, n_groups: object, chunk: object
) -> dict[str, object]:
    """The validated block fields; a Mamba-2 block's heads and groups must divide evenly."""
    if block not in BLOCKS:
        raise ConfigError(
            f"MambaConfig.block: expected one of {list(BLOCKS)}, got {block!r}; "
            "hint: 'mamba1' is the selective scan, 'mamba2' the SSD block"
        )
    head = _check_int("head_dim", head_dim)
    groups = _check_int("n_groups", n_groups)
    fields = {"block": block, "head_dim": head, "n_groups": groups}
    fields["chunk_size"] = _check_int("chunk_size", chunk)
    if block == "mamba2" and d_inner % head:
        raise ConfigError(
            f"MambaConfig.head_dim: expected a divisor of d_inner = expand * d_model = "
            f"{d_inner}, got {head}; hint: heads are d_inner / head_dim"
        )
    if block == "mamba2" and (d_inner // head) % groups:
        raise ConfigError(
            f"MambaConfig.n_groups: expected a divisor of the {d_inner // head} heads, got "
            f"{groups}; hint: each group of heads shares one B and one C"
        )
    return fields


def _token_id(hf: dict[str, Any], key: str) -> int:
    # transformers allows None (no such token); our tokenizer always has one, and 0 is both
    # HF's default and our tokenizer's <|endoftext|>.
    value = hf.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, list):
        if len(value) == 1:
            return int(value[0])
        raise ConfigError(
            f"from_hf_config: expected a single int for {key}, got {value!r}; "
            "hint: Evermind models have one end-of-sequence token"
        )
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"from_hf_config: expected an int for {key}, got {value!r}")
    return value
