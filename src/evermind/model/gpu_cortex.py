"""The cortex sublayer of :class:`~evermind.model.gpu.GpuMamba`: forward, backward, the pooled
load-balancing loss and the routing statistics read back from the GPU (browser-safe).

A layer that carries the cortex (``MambaConfig.moe_layers``) runs, after its mixer's
residual (``h_mid = h_l + mixer(rmsnorm(h_l))``)::

    xn      = rmsnorm(h_mid) · moe_norm                       (M, d_model)
    h_l+1   = h_mid + moe(xn)                                 (kernels.moe.Moe)

as :mod:`evermind.model.cpu_cortex` (its reference). The backward runs before the mixer's:
the MoE's d xn through the norm is added into dh, which then holds d loss / d h_mid, the
mixer's output gradient. Every cortex layer's router rows are stacked in one
:class:`~evermind.kernels.moe.MoeRouting`, so the load-balancing loss is HF's pooled value;
it is recorded after the last layer's forward and before the first backward reads its
gradient.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from evermind.gpu import Buffer, Device, Dispatch
from evermind.kernels.elementwise import Elementwise
from evermind.kernels.matmul import Matmul
from evermind.kernels.moe import (
    Moe,
    MoeActivations,
    MoeRouting,
    MoeScratch,
    MoeSizes,
    MoeWeightBuffers,
)
from evermind.kernels.rmsnorm import RMSNorm
from evermind.model.config import MambaConfig

__all__ = ["CortexBlock"]

#: A layer's buffer by slot key suffix (``"moe.router"``, ``"moe_norm"``...).
Pick = Callable[[str], Buffer]


class _LayerActs:
    """One cortex layer's forward state kept for its backward."""

    def __init__(self, dev: Device, layer: int, sizes: MoeSizes) -> None:
        m, d = sizes.rows, sizes.dim
        self.h_mid = dev.buffer(4 * m * d, label=f"L{layer}.moe.h_mid")
        self.xn = dev.buffer(4 * m * d, label=f"L{layer}.moe.xn")
        self.rstd = dev.buffer(4 * m, label=f"L{layer}.moe.rstd")
        self.moe = MoeActivations.allocate(dev, sizes)


class CortexBlock:
    """Records the cortex layers of one GpuMamba at a fixed M = B·L.

    Args:
        device: The device.
        config: The model's config (``moe_experts > 0``, Mamba-1 blocks).
        m: Rows per micro-batch, B·L.
        kernels: The model's (Matmul, Elementwise, RMSNorm) launchers.
        training: Allocate the backward's scratch.
    """

    def __init__(
        self,
        device: Device,
        config: MambaConfig,
        m: int,
        kernels: tuple[Matmul, Elementwise, RMSNorm],
        training: bool,
    ) -> None:
        self.device, self.config = device, config
        self.mm, self.ew, self.rn = kernels
        self.layers = list(config.moe_layers)
        #: Layer -> its position in the stacked router buffers.
        self.position = {layer: n for n, layer in enumerate(self.layers)}
        self.sizes = MoeSizes(
            rows=m,
            dim=config.d_model,
            experts=config.moe_experts,
            inner=config.moe_intermediate,
            shared=config.moe_shared_intermediate,
            top_k=config.moe_top_k,
            layers=len(self.layers),
        )
        self.moe = Moe(device, self.mm)
        self.routing = MoeRouting.allocate(device, self.sizes)
        self.acts = {layer: _LayerActs(device, layer, self.sizes) for layer in self.layers}
        self.y = device.buffer(4 * m * config.d_model, label="moe.y")
        self.scratch = MoeScratch.allocate(device, self.sizes) if training else None
        self.dxn = device.buffer(4 * m * config.d_model, label="moe.dxn") if training else None

    def __contains__(self, layer: int) -> bool:
        return layer in self.position

    @staticmethod
    def _weights(pick: Pick) -> MoeWeightBuffers:
        return MoeWeightBuffers(**{f.name: pick(f"moe.{f.name}") for f in fields(MoeWeightBuffers)})

    def forward(self, layer: int, h_mid: Buffer, h_out: Buffer, p: Pick) -> list[Dispatch]:
        """``h_out = h_mid + moe(rmsnorm(h_mid) · moe_norm)``; ``h_mid`` must be the layer's
        :attr:`mid` buffer (the backward reads it)."""
        a, s = self.acts[layer], self.sizes
        m, d = s.rows, s.dim
        return [
            self.rn.forward(h_mid, p("moe_norm"), a.xn, a.rstd, m, d, self.config.rms_eps),
            *self.moe.forward(
                a.xn, self._weights(p), a.moe, self.routing, self.y, s, self.position[layer]
            ),
            self.ew.add(h_mid, self.y, h_out, m * d),
        ]

    def residual(self, layer: int, h: Buffer, p: Pick) -> list[Dispatch]:
        """``h += moe(rmsnorm(h) · moe_norm)`` in place, for decoding (no backward reads it)."""
        a, s = self.acts[layer], self.sizes
        m, d = s.rows, s.dim
        return [
            self.rn.forward(h, p("moe_norm"), a.xn, a.rstd, m, d, self.config.rms_eps),
            *self.moe.forward(
                a.xn, self._weights(p), a.moe, self.routing, self.y, s, self.position[layer]
            ),
            self.ew.accumulate(self.y, h, m * d),
        ]

    def mid(self, layer: int) -> Buffer:
        """Layer ``layer``'s residual stream between the mixer and the cortex, (M, d_model)."""
        return self.acts[layer].h_mid

    def aux(self, coef: float) -> list[Dispatch]:
        """The pooled load-balancing loss; its probability gradient weighted by ``coef``."""
        return self.moe.aux(self.routing, self.sizes, coef)

    def backward(self, layer: int, dh: Buffer, p: Pick, g: Pick) -> list[Dispatch]:
        """dh from d loss / d h_out to d loss / d h_mid; the layer's gradients accumulate."""
        assert self.scratch is not None and self.dxn is not None  # training blocks only
        a, s = self.acts[layer], self.sizes
        m, d = s.rows, s.dim
        return [
            *self.moe.backward(
                dh,
                a.xn,
                self._weights(p),
                self._weights(g),
                a.moe,
                self.routing,
                self.scratch,
                self.dxn,
                s,
                self.position[layer],
                accumulate=True,
            ),
            # Accumulating into dh adds the residual path: dh_mid = dh_out + d norm.
            *self.rn.backward(
                a.h_mid, p("moe_norm"), a.rstd, self.dxn, dh, g("moe_norm"), m, d, accumulate=True
            ),
        ]

    async def read_routing(self) -> dict[str, Any]:
        """The last forward's routing statistics, as ``cpu_cortex.routing_stats`` shapes them.

        Returns:
            ``{"aux_loss": pooled loss, "layers": {"<i>": {"fractions": [E floats, summing to
            k], "aux_loss": the layer's own loss}}}``.
        """
        s = self.sizes
        e, rows = s.experts, s.rows
        stats = struct.unpack(
            f"<{2 * s.layers * e}f", await self.device.read(self.routing.stats, 8 * s.layers * e)
        )
        (aux,) = struct.unpack("<f", await self.device.read(self.routing.aux_out, 4))
        layers = {}
        for n, layer in enumerate(self.layers):
            counts = stats[2 * n * e : 2 * (n + 1) * e : 2]
            mass = stats[2 * n * e + 1 : 2 * (n + 1) * e : 2]
            fractions = [c / rows for c in counts]
            own = e * sum(f * (p / rows) for f, p in zip(fractions, mass, strict=True))
            layers[str(layer)] = {
                "fractions": [round(f, 6) for f in fractions],
                "aux_loss": own,
            }
        return {"aux_loss": float(aux), "layers": layers}
