"""How the model's Hugging Face tensors are laid out as GPU buffers (browser-safe).

Most tensors map to one buffer. Two are split by rows, because the kernels want their
outputs contiguous: ``in_proj.weight`` (2·d_inner, d_model) becomes ``in_x`` and ``in_z``
(the x and gate halves), and ``x_proj.weight`` (dt_rank + 2·d_state, d_inner) becomes
``xp_dt``, ``xp_B`` and ``xp_C``. Row blocks of a row-major matrix are contiguous, so a
slot is just (HF name, float offset, float count).

A Mamba-2 block (``block="mamba2"``) splits the same way, so that every kernel reads and
writes dense buffers: ``in_proj.weight`` (I + conv_dim + H, d_model) becomes ``in_z``,
``in_x``, ``in_B``, ``in_C`` and ``in_dt`` (z | x B C | dt, conv_dim = I + 2·G·N), and the
depthwise ``conv1d.weight`` (conv_dim, 1, K) and ``conv1d.bias`` (conv_dim,) become one
weight and one bias slot for each of the x, B and C channel blocks (the conv is per channel,
so three convolutions over the blocks are the one over xBC).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evermind.errors import ConfigError
from evermind.model.config import MambaConfig


@dataclass(frozen=True)
class SlotSpec:
    """One GPU tensor: where its floats live inside a Hugging Face tensor."""

    key: str
    hf_name: str
    offset: int
    count: int
    decay: bool


def slot_specs(config: MambaConfig) -> list[SlotSpec]:
    """Every GPU tensor of the model, in a fixed order.

    Raises:
        ConfigError: The config's block type has no GPU layout, or it has the cortex (no
            WebGPU kernels for it yet).
    """
    if config.block not in ("mamba1", "mamba2"):
        raise ConfigError(f"slot_specs: expected block 'mamba1' or 'mamba2', got {config.block!r}")
    if config.moe_experts:
        raise ConfigError(
            f"slot_specs: the WebGPU kernels have no cortex yet, got moe_experts="
            f"{config.moe_experts}; hint: train and run a model with the cortex on the CPU "
            "(CpuBackend, CpuMamba)"
        )
    if config.block == "mamba2":
        return _mamba2_slot_specs(config)
    shapes = config.param_shapes()
    di, dm, r, n = config.d_inner, config.d_model, config.dt_rank, config.d_state
    specs: list[SlotSpec] = []

    def whole(key: str, hf: str) -> None:
        specs.append(SlotSpec(key, hf, 0, math.prod(shapes[hf]), not config.no_decay(hf)))

    whole("embeddings", "backbone.embeddings.weight")
    for i in range(config.n_layer):
        pre = f"backbone.layers.{i}."
        mix = pre + "mixer."
        whole(f"{i}.norm", pre + "norm.weight")
        decay_in = not config.no_decay(mix + "in_proj.weight")
        specs.append(SlotSpec(f"{i}.in_x", mix + "in_proj.weight", 0, di * dm, decay_in))
        specs.append(SlotSpec(f"{i}.in_z", mix + "in_proj.weight", di * dm, di * dm, decay_in))
        whole(f"{i}.conv_w", mix + "conv1d.weight")
        whole(f"{i}.conv_b", mix + "conv1d.bias")
        decay_x = not config.no_decay(mix + "x_proj.weight")
        specs.append(SlotSpec(f"{i}.xp_dt", mix + "x_proj.weight", 0, r * di, decay_x))
        specs.append(SlotSpec(f"{i}.xp_B", mix + "x_proj.weight", r * di, n * di, decay_x))
        specs.append(SlotSpec(f"{i}.xp_C", mix + "x_proj.weight", (r + n) * di, n * di, decay_x))
        whole(f"{i}.dt_w", mix + "dt_proj.weight")
        whole(f"{i}.dt_b", mix + "dt_proj.bias")
        whole(f"{i}.A_log", mix + "A_log")
        whole(f"{i}.D", mix + "D")
        whole(f"{i}.out", mix + "out_proj.weight")
    whole("norm_f", "backbone.norm_f.weight")
    return specs


def _mamba2_slot_specs(config: MambaConfig) -> list[SlotSpec]:
    """:func:`slot_specs` of a Mamba-2 config (see the module docstring)."""
    shapes = config.param_shapes()
    di, dm, heads, k = config.d_inner, config.d_model, config.n_heads, config.d_conv
    gn = config.n_groups * config.d_state
    specs: list[SlotSpec] = []

    def whole(key: str, hf: str) -> None:
        specs.append(SlotSpec(key, hf, 0, math.prod(shapes[hf]), not config.no_decay(hf)))

    def rows(hf: str, parts: tuple[tuple[str, int], ...], width: int) -> None:
        """Consecutive row blocks of ``hf``: (key, rows) each, ``width`` floats a row."""
        decay, offset = not config.no_decay(hf), 0
        for key, count in parts:
            specs.append(SlotSpec(key, hf, offset, count * width, decay))
            offset += count * width

    whole("embeddings", "backbone.embeddings.weight")
    for i in range(config.n_layer):
        pre = f"backbone.layers.{i}."
        mix = pre + "mixer."
        whole(f"{i}.norm", pre + "norm.weight")
        parts = (("x", di), ("B", gn), ("C", gn))  # the conv's channel blocks x | B | C
        in_rows = (
            (f"{i}.in_z", di),
            *((f"{i}.in_{p}", n) for p, n in parts),
            (f"{i}.in_dt", heads),
        )
        rows(mix + "in_proj.weight", in_rows, dm)
        rows(mix + "conv1d.weight", tuple((f"{i}.conv_w{p}", n) for p, n in parts), k)
        rows(mix + "conv1d.bias", tuple((f"{i}.conv_b{p}", n) for p, n in parts), 1)
        whole(f"{i}.dt_bias", mix + "dt_bias")
        whole(f"{i}.A_log", mix + "A_log")
        whole(f"{i}.D", mix + "D")
        whole(f"{i}.gate_norm", mix + "norm.weight")
        whole(f"{i}.out", mix + "out_proj.weight")
    whole("norm_f", "backbone.norm_f.weight")
    return specs


#: Package names of the embedding head's tensors: the projection W (E, d_model) and the
#: centring vector μ (d_model,) of ``e = normalize(W · (pool(h) − μ))``.
EMBED_HEAD_NAME = "embedder.head.weight"
EMBED_CENTRE_NAME = "embedder.centre"


def embed_head_spec(config: MambaConfig, embed_dim: int) -> SlotSpec:
    """The trainable projection head W (E, d_model) of the embedding objective.

    Not weight-decayed: the cosine loss ignores the scale of ``W``, so decay would only
    shrink it and raise the effective learning rate.
    """
    return SlotSpec("embed_head", EMBED_HEAD_NAME, 0, embed_dim * config.d_model, False)
