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

A cortex layer (``MambaConfig.moe_layers``) adds slots after its mixer's: ``moe_norm``, the
router and the shared expert's tensors one each, and the routed experts' ``gate_proj``,
``up_proj`` and ``down_proj`` each *stacked* over the E experts into one (E, ...) slot (the
MoE kernel gathers an expert's rows by index from one buffer): a stacked slot lists its E
Hugging Face tensors in ``SlotSpec.stacked``, each whole, one after the other.
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
    #: HF tensors stacked whole in this slot, in order (``hf_name`` is the first); empty: the
    #: slot is ``hf_name``'s floats ``[offset, offset + count)``.
    stacked: tuple[str, ...] = ()

    def pieces(self) -> list[tuple[str, int, int, int]]:
        """``(hf_name, float offset in it, float offset in the slot, floats)`` per piece."""
        if not self.stacked:
            return [(self.hf_name, self.offset, 0, self.count)]
        each = self.count // len(self.stacked)
        return [(name, 0, n * each, each) for n, name in enumerate(self.stacked)]


def slot_specs(config: MambaConfig) -> list[SlotSpec]:
    """Every GPU tensor of the model, in a fixed order.

    Raises:
        ConfigError: The config's block type has no GPU layout.
    """
    if config.block not in ("mamba1", "mamba2"):
        raise ConfigError(f"slot_specs: expected block 'mamba1' or 'mamba2', got {config.block!r}")
    if config.block == "mamba2":
        return _mamba2_slot_specs(config)
    shapes = config.param_shapes()
    cortex = set(config.moe_layers)
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
        if i in cortex:
            specs += _cortex_slot_specs(config, i)
    whole("norm_f", "backbone.norm_f.weight")
    return specs


#: The cortex's unstacked slots: key suffix after ``{i}.`` -> HF suffix after ``layers.{i}.``.
CORTEX_SLOTS = {
    "moe_norm": "moe_norm.weight",
    "moe.router": "moe.gate.weight",
    "moe.shared_gate": "moe.shared_expert.gate_proj.weight",
    "moe.shared_up": "moe.shared_expert.up_proj.weight",
    "moe.shared_down": "moe.shared_expert.down_proj.weight",
    "moe.shared_expert_gate": "moe.shared_expert_gate.weight",
}
#: The routed experts' stacked slots: key suffix -> the HF suffix after ``experts.{e}.``.
CORTEX_STACKED = {
    "moe.gate_proj": "gate_proj.weight",
    "moe.up_proj": "up_proj.weight",
    "moe.down_proj": "down_proj.weight",
}


def _cortex_slot_specs(config: MambaConfig, i: int) -> list[SlotSpec]:
    """Layer i's cortex slots (see the module docstring)."""
    shapes = config.param_shapes()
    pre = f"backbone.layers.{i}."
    specs = []
    for key, suffix in CORTEX_SLOTS.items():
        hf = pre + suffix
        specs.append(SlotSpec(f"{i}.{key}", hf, 0, math.prod(shapes[hf]), not config.no_decay(hf)))
    for key, suffix in CORTEX_STACKED.items():
        names = tuple(f"{pre}moe.experts.{e}.{suffix}" for e in range(config.moe_experts))
        count = math.prod(shapes[names[0]]) * len(names)
        specs.append(
            SlotSpec(f"{i}.{key}", names[0], 0, count, not config.no_decay(names[0]), names)
        )
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
