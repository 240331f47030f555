"""The Mamba model as a recorded graph of WGSL kernels: forward, loss, backward (browser-safe).

:class:`GpuMamba` allocates every weight, gradient and activation once for a fixed
(batch, seq_len) and records the forward and backward as lists of dispatches; built with a
:class:`~evermind.types.TrainConfig` it records one micro-batch's

    [forward + loss + backward]  (gradients added into their buffers)

and the plan that zeroes the gradients first, so gradient accumulation over micro-batches is
the same plan run again. The optimiser (global-norm clip, AdamW, its moments) and the
embedding objective are the training backend's, :class:`evermind.train.gpu_backend.GpuBackend`,
which builds on :meth:`GpuMamba.forward_dispatches` and :meth:`GpuMamba.backward_dispatches`
(the numpy twin: :class:`~evermind.model.cpu.CpuMamba` and
:class:`~evermind.train.cpu_backend.CpuBackend`).

The graph follows ``evermind.model.cpu`` op for op (that model is its reference; the tests
compare one step's loss and every gradient, then 20 steps of losses). Layer l, M = B·L::

    xn     = rmsnorm(h_l) · w                       (M, d_model)
    x_in   = xn · in_xᵀ ;  z = xn · in_zᵀ            (M, d_inner) each
    xc     = silu(conv1d(x_in) + b)                 (M, d_inner)
    dt_low = xc · xp_dtᵀ ; Bm = xc · xp_Bᵀ ; Cm = xc · xp_Cᵀ
    delta  = dt_low · dt_wᵀ + dt_b                   (raw; the scan applies softplus)
    y      = selective_scan(xc, delta, A_log, Bm, Cm, D)
    h_l+1  = h_l + (y ⊙ silu(z)) · outᵀ
    logits = rmsnorm_f(h_L) · Eᵀ                    (tied LM head)

A Mamba-2 config (``block="mamba2"``) records the SSD block of
:mod:`evermind.model.gpu_mamba2` in place of this one (its reference is
``evermind.model.cpu_mamba2``); the embedding, final norm, head and loss are shared.
A config with the cortex (``moe_experts``) adds, in each of its ``moe_layers`` after the
mixer's residual, ``h = h + moe(rmsnorm(h))`` (:mod:`evermind.model.gpu_cortex`, reference
``evermind.model.cpu_cortex``); the training loss is then LM + ``router_aux_loss_coef`` × the
pooled load-balancing loss, and :attr:`GpuMamba.routing` holds the routing statistics.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evermind.errors import ShapeError
from evermind.gpu import Buffer, Device, Dispatch
from evermind.kernels.conv1d import Conv1d
from evermind.kernels.cross_entropy import CrossEntropy
from evermind.kernels.elementwise import Elementwise
from evermind.kernels.embedding import Embedding
from evermind.kernels.matmul import Matmul
from evermind.kernels.rmsnorm import RMSNorm
from evermind.kernels.selective_scan import SelectiveScan, states_count
from evermind.model.config import MambaConfig
from evermind.model.gpu_cortex import CortexBlock
from evermind.model.gpu_layout import SlotSpec, slot_specs
from evermind.model.gpu_mamba2 import Mamba2Acts, Mamba2Block
from evermind.types import Batch, TrainConfig


@dataclass(eq=False)
class Slot:
    """One GPU tensor and its gradient (None when not training)."""

    spec: SlotSpec
    param: Buffer
    grad: Buffer | None = None


class _Acts:
    """Per-layer activations kept for the backward pass."""

    def __init__(self, dev: Device, layer: int, m: int, cfg: MambaConfig, states: int) -> None:
        di, dm = cfg.d_inner, cfg.d_model

        def buf(name: str, count: int) -> Buffer:
            return dev.buffer(4 * count, label=f"L{layer}.{name}")

        self.xn, self.rstd = buf("xn", m * dm), buf("rstd", m)
        self.x_in, self.z = buf("x_in", m * di), buf("z", m * di)
        self.xc_pre, self.xc = buf("xc_pre", m * di), buf("xc", m * di)
        self.dt_low = buf("dt_low", m * cfg.dt_rank)
        self.Bm, self.Cm = buf("B", m * cfg.d_state), buf("C", m * cfg.d_state)
        self.delta, self.y = buf("delta", m * di), buf("y", m * di)
        self.zs, self.g = buf("silu_z", m * di), buf("gated", m * di)
        self.states = buf("states", states) if states else None


class GpuMamba:
    """A Mamba model on a WebGPU device at one (B, L): evaluation, and with ``train`` the
    gradients of a micro-batch (the training backend, ``GpuBackend``, adds the optimiser).

    Args:
        device: The device (either transport).
        config: Model hyperparameters.
        batch_size: Sequences per micro-batch, B.
        seq_len: Tokens per sequence, L.
        train: With it, gradient buffers and the loss + backward plan, the loss scaled for its
            ``grad_accum``; None builds an inference-only model (no gradients).
        weights: Share the weight buffers of another model (e.g. an evaluation or embedding
            model beside the training one) instead of allocating new ones.
    """

    def __init__(
        self,
        device: Device,
        config: MambaConfig,
        batch_size: int,
        seq_len: int,
        train: TrainConfig | None = None,
        weights: dict[str, Slot] | None = None,
    ) -> None:
        self.device = dev = device
        self.config = cfg = config
        self.train_config = train
        self.batch_size, self.seq_len = batch_size, seq_len
        self.m = m = batch_size * seq_len
        training = train is not None
        self.slots: dict[str, Slot] = {}
        for spec in slot_specs(cfg):
            shared = weights[spec.key].param if weights is not None else None
            slot = Slot(spec, shared or dev.buffer(4 * spec.count, label=spec.key))
            if training:
                slot.grad = dev.buffer(4 * spec.count, label=f"grad.{spec.key}")
            self.slots[spec.key] = slot

        self.ew, self.mm = Elementwise(dev), Matmul(dev)
        self.rn, self.emb, self.conv = RMSNorm(dev), Embedding(dev), Conv1d(dev)
        self.scan, self.ce = SelectiveScan(dev), CrossEntropy(dev)

        dm, v = cfg.d_model, cfg.vocab_size
        mamba1 = cfg.block == "mamba1"
        n_states = (
            states_count(batch_size, seq_len, cfg.d_inner, cfg.d_state)
            if training and mamba1
            else 0
        )
        self.ids = self.emb.ids_buffer(m)
        self.csr = self.emb.csr_buffer(m)
        self.targets = dev.buffer(4 * m, label="targets")
        self.h = [dev.buffer(4 * m * dm, label=f"h{i}") for i in range(cfg.n_layer + 1)]
        self.acts: list[_Acts | Mamba2Acts] = [
            _Acts(dev, i, m, cfg, n_states)
            if mamba1
            else Mamba2Acts(dev, i, cfg, batch_size, seq_len)
            for i in range(cfg.n_layer)
        ]
        self.mamba2 = (
            None
            if mamba1
            else Mamba2Block(dev, cfg, batch_size, seq_len, (self.mm, self.ew, self.rn, self.conv))
        )
        #: The cortex layers (None without ``moe_experts``), :mod:`evermind.model.gpu_cortex`.
        self.cortex = (
            CortexBlock(dev, cfg, m, (self.mm, self.ew, self.rn), training)
            if cfg.moe_experts
            else None
        )
        #: The cortex's routing statistics of the last micro-batch (None without the cortex).
        self.routing: dict[str, Any] | None = None
        self.out_tmp = dev.buffer(4 * m * dm, label="mixer_out")
        self.hf, self.rstd_f = (
            dev.buffer(4 * m * dm, label="h_final"),
            dev.buffer(4 * m, label="rstd_f"),
        )
        self.logits = dev.buffer(4 * m * v, label="logits")
        self.dlogits = dev.buffer(4 * m * v, label="dlogits")
        self.row_loss = dev.buffer(4 * m, label="row_loss")
        self.loss = dev.buffer(4, label="loss")

        # Evaluation: forward without stored states, loss as a per-token mean.
        self.eval_plan = dev.plan("eval").add(self.forward_dispatches(store_states=False))
        self.eval_plan.add(
            self.ce.loss_and_grad(
                self.logits, self.targets, self.row_loss, self.dlogits, self.loss, m, v, 1.0 / m
            )
        )
        self._scratch: dict[str, Buffer] | None = None
        if train is not None:
            self._record_gradients(train)

    # -- recording ---------------------------------------------------------------------------
    def _p(self, key: str) -> Buffer:
        return self.slots[key].param

    def _g(self, key: str) -> Buffer:
        grad = self.slots[key].grad
        assert grad is not None  # training models always have gradients
        return grad

    def forward_dispatches(
        self, store_states: bool, logits: bool = True, aux_coef: float | None = None
    ) -> list[Dispatch]:
        """The forward from ``ids`` to ``logits`` (or to ``hf``, the final norm's output,
        when not ``logits``); ``store_states`` keeps the scan states the backward reads.
        With the cortex and ``aux_coef`` not None, then its load-balancing loss, whose
        probability gradient ``aux_coef`` weights."""
        cfg, m, mm, ew = self.config, self.m, self.mm, self.ew
        dm, di, r, n = cfg.d_model, cfg.d_inner, cfg.dt_rank, cfg.d_state
        b, length = self.batch_size, self.seq_len
        d: list[Dispatch] = [
            self.emb.forward(self.ids, self._p("embeddings"), self.h[0], m, cfg.vocab_size, dm)
        ]
        for i, a in enumerate(self.acts):
            if isinstance(a, Mamba2Acts):
                d += self._block_fwd_mamba2(i, a)
                continue

            def p(key: str, i: int = i) -> Buffer:
                return self._p(f"{i}.{key}")

            d.append(self.rn.forward(self.h[i], p("norm"), a.xn, a.rstd, m, dm, cfg.rms_eps))
            d.append(mm.linear(a.xn, p("in_x"), a.x_in, m, dm, di))
            d.append(mm.linear(a.xn, p("in_z"), a.z, m, dm, di))
            d.append(
                self.conv.forward(
                    a.x_in, p("conv_w"), p("conv_b"), a.xc_pre, b, length, di, cfg.d_conv
                )
            )
            d.append(ew.silu_fwd(a.xc_pre, a.xc, m * di))
            d.append(mm.linear(a.xc, p("xp_dt"), a.dt_low, m, di, r))
            d.append(mm.linear(a.xc, p("xp_B"), a.Bm, m, di, n))
            d.append(mm.linear(a.xc, p("xp_C"), a.Cm, m, di, n))
            d.append(mm.linear(a.dt_low, p("dt_w"), a.delta, m, r, di, bias=p("dt_b")))
            d.append(
                self.scan.forward(
                    a.xc,
                    a.delta,
                    p("A_log"),
                    a.Bm,
                    a.Cm,
                    p("D"),
                    a.y,
                    b,
                    length,
                    di,
                    n,
                    states=a.states if store_states else None,
                )
            )
            d.append(ew.silu_fwd(a.z, a.zs, m * di))
            d.append(ew.mul(a.y, a.zs, a.g, m * di))
            d.append(mm.linear(a.g, p("out"), self.out_tmp, m, di, dm))
            if self.cortex is not None and i in self.cortex:
                mid = self.cortex.mid(i)
                d.append(ew.add(self.h[i], self.out_tmp, mid, m * dm))
                d += self.cortex.forward(i, mid, self.h[i + 1], p)
            else:
                d.append(ew.add(self.h[i], self.out_tmp, self.h[i + 1], m * dm))
        if self.cortex is not None and aux_coef is not None:
            d += self.cortex.aux(aux_coef)
        d.append(
            self.rn.forward(self.h[-1], self._p("norm_f"), self.hf, self.rstd_f, m, dm, cfg.rms_eps)
        )
        if logits:
            d.append(mm.linear(self.hf, self._p("embeddings"), self.logits, m, dm, cfg.vocab_size))
        return d

    def _block_fwd_mamba2(self, i: int, a: Mamba2Acts) -> list[Dispatch]:
        """Layer i's Mamba-2 block: h[i + 1] = h[i] + mixer(rmsnorm(h[i]))."""
        assert self.mamba2 is not None
        return self.mamba2.forward(
            self.h[i], self.h[i + 1], self.out_tmp, a, lambda key: self._p(f"{i}.{key}")
        )

    def _block_bwd_mamba2(self, i: int, a: Mamba2Acts, dh: Buffer, dxn: Buffer) -> list[Dispatch]:
        """Layer i's Mamba-2 backward: dh from dL/dh[i + 1] to dL/dh[i]; grads accumulate."""
        assert self.mamba2 is not None
        return self.mamba2.backward(
            self.h[i],
            dh,
            dxn,
            a,
            lambda key: self._p(f"{i}.{key}"),
            lambda key: self._g(f"{i}.{key}"),
        )

    def backward_scratch(self) -> dict[str, Buffer]:
        """The backward's scratch buffers, allocated once and shared by every backward
        recorded on this model (``dhf``: d(loss)/d(h_final), where a head's backward writes)."""
        if self._scratch is not None:
            return self._scratch
        cfg, m, dev = self.config, self.m, self.device
        dm, di, r, n = cfg.d_model, cfg.d_inner, cfg.dt_rank, cfg.d_state
        shared = (("dh", m * dm), ("dhf", m * dm), ("dxn", m * dm))
        if self.mamba2 is not None:  # the Mamba-2 block keeps its own scratch
            self._scratch = {
                name: dev.buffer(4 * size, label=f"bwd.{name}") for name, size in shared
            }
            return self._scratch
        self._scratch = t = {
            name: dev.buffer(4 * size, label=f"bwd.{name}")
            for name, size in (
                *shared,
                ("dg", m * di),
                ("dy", m * di),
                ("dzs", m * di),
                ("dz", m * di),
                ("dxc", m * di),
                ("dxc_pre", m * di),
                ("dx_in", m * di),
                ("ddelta", m * di),
                ("ddt_low", m * r),
                ("dB", m * n),
                ("dC", m * n),
                ("dA_log", di * n),
                ("dD", di),
            )
        }
        self.ones_m = dev.upload(array("f", [1.0]) * m, label="ones")
        return t

    def backward_dispatches(self, head: list[Dispatch] | None = None) -> list[Dispatch]:
        """The backward from the LM head's logits gradient, or from ``head``'s dispatches.

        Args:
            head: Dispatches that write d(loss)/d(h_final) into the ``dhf`` scratch buffer
                (the embedding objective); None starts from ``self.dlogits`` through the tied
                LM head.
        """
        cfg, m, mm, ew = self.config, self.m, self.mm, self.ew
        dm, di, r, n, v = cfg.d_model, cfg.d_inner, cfg.dt_rank, cfg.d_state, cfg.vocab_size
        b, length = self.batch_size, self.seq_len
        t = self.backward_scratch()
        d: list[Dispatch] = [ew.fill(t["dh"], m * dm)]
        if head is None:
            # Tied LM head.
            d.append(mm.linear_bwd_input(self.dlogits, self._p("embeddings"), t["dhf"], m, dm, v))
            d.append(
                mm.linear_bwd_weight(
                    self.dlogits, self.hf, self._g("embeddings"), m, dm, v, accumulate=True
                )
            )
        else:
            d += head
        # The final norm.
        d += self.rn.backward(
            self.h[-1],
            self._p("norm_f"),
            self.rstd_f,
            t["dhf"],
            t["dh"],
            self._g("norm_f"),
            m,
            dm,
            accumulate=True,
        )
        for i in reversed(range(cfg.n_layer)):
            a = self.acts[i]
            if isinstance(a, Mamba2Acts):
                d += self._block_bwd_mamba2(i, a, t["dh"], t["dxn"])
                continue
            assert a.states is not None

            def p(key: str, i: int = i) -> Buffer:
                return self._p(f"{i}.{key}")

            def g(key: str, i: int = i) -> Buffer:
                return self._g(f"{i}.{key}")

            if self.cortex is not None and i in self.cortex:
                # The cortex ran after the mixer: its backward first, dh -> d loss / d h_mid.
                d += self.cortex.backward(i, t["dh"], p, g)
            # out_proj and the gate: out = (y ⊙ silu(z)) · outᵀ, its gradient is dh.
            d.append(mm.linear_bwd_input(t["dh"], p("out"), t["dg"], m, di, dm))
            d.append(mm.linear_bwd_weight(t["dh"], a.g, g("out"), m, di, dm, accumulate=True))
            d.append(ew.mul_bwd(a.y, a.zs, t["dg"], t["dy"], t["dzs"], m * di))
            d.append(ew.silu_bwd(a.z, t["dzs"], t["dz"], m * di))
            # The scan; its parameter gradients are overwritten, so go through scratch.
            d += self.scan.backward(
                t["dy"],
                a.xc,
                a.delta,
                p("A_log"),
                a.Bm,
                a.Cm,
                p("D"),
                a.states,
                t["dxc"],
                t["ddelta"],
                t["dA_log"],
                t["dB"],
                t["dC"],
                t["dD"],
                b,
                length,
                di,
                n,
            )
            d.append(ew.accumulate(t["dA_log"], g("A_log"), di * n))
            d.append(ew.accumulate(t["dD"], g("D"), di))
            # dt_proj (bias gradient = column sums of ddelta, as ddeltaᵀ · 1).
            d.append(
                mm.linear_bwd_weight(t["ddelta"], a.dt_low, g("dt_w"), m, r, di, accumulate=True)
            )
            d.append(
                mm.matmul(
                    t["ddelta"], self.ones_m, g("dt_b"), di, 1, m, trans_a=True, accumulate=True
                )
            )
            d.append(mm.linear_bwd_input(t["ddelta"], p("dt_w"), t["ddt_low"], m, r, di))
            # x_proj, split in three.
            for part, grad_out, width in (
                ("xp_dt", "ddt_low", r),
                ("xp_B", "dB", n),
                ("xp_C", "dC", n),
            ):
                d.append(
                    mm.linear_bwd_input(
                        t[grad_out], p(part), t["dxc"], m, di, width, accumulate=True
                    )
                )
                d.append(
                    mm.linear_bwd_weight(t[grad_out], a.xc, g(part), m, di, width, accumulate=True)
                )
            # SiLU after the conv, then the conv.
            d.append(ew.silu_bwd(a.xc_pre, t["dxc"], t["dxc_pre"], m * di))
            d.append(ew.fill(t["dx_in"], m * di))
            d += self.conv.backward(
                a.x_in,
                p("conv_w"),
                t["dxc_pre"],
                t["dx_in"],
                g("conv_w"),
                g("conv_b"),
                b,
                length,
                di,
                cfg.d_conv,
                accumulate=True,
            )
            # in_proj, split in two.
            d.append(mm.linear_bwd_input(t["dx_in"], p("in_x"), t["dxn"], m, dm, di))
            d.append(mm.linear_bwd_input(t["dz"], p("in_z"), t["dxn"], m, dm, di, accumulate=True))
            d.append(mm.linear_bwd_weight(t["dx_in"], a.xn, g("in_x"), m, dm, di, accumulate=True))
            d.append(mm.linear_bwd_weight(t["dz"], a.xn, g("in_z"), m, dm, di, accumulate=True))
            # The norm; accumulating into dh adds the residual path: dh_l = dh_l+1 + ∂norm.
            d += self.rn.backward(
                self.h[i], p("norm"), a.rstd, t["dxn"], t["dh"], g("norm"), m, dm, accumulate=True
            )
        d.append(self.emb.backward(self.csr, t["dh"], self._g("embeddings"), m, v, dm))
        return d

    def _record_gradients(self, train: TrainConfig) -> None:
        """The plan of one micro-batch's forward, loss and backward, and the zeroing plan."""
        dev, m, v = self.device, self.m, self.config.vocab_size
        self.grad_scale = 1.0 / (m * train.grad_accum)
        self.ce_dispatches = self.ce.loss_and_grad(
            self.logits, self.targets, self.row_loss, self.dlogits, self.loss, m, v, self.grad_scale
        )
        #: The load-balancing loss's weight per micro-batch (the CE's mean over micro-batches).
        self.aux_scale = self.config.router_aux_loss_coef / train.grad_accum
        self.step_plan = dev.plan("train step").add(
            self.forward_dispatches(store_states=True, aux_coef=self.aux_scale)
        )
        self.step_plan.add(self.ce_dispatches).add(self.backward_dispatches())
        self.zero_plan = dev.plan("zero grads").add(
            self.ew.fill(s.grad, s.spec.count) for s in self.slots.values() if s.grad is not None
        )

    # -- weights -----------------------------------------------------------------------------
    def load_params(self, params: dict[str, Any]) -> None:
        """Uploads weights given by Hugging Face name (flat ``array('f')`` or buffer objects)."""
        shapes = self.config.param_shapes()
        for name in shapes:
            if name not in params:
                raise ShapeError(f"GpuMamba.load_params: missing {name}")
        for name, shape in shapes.items():
            got = len(memoryview(params[name]).cast("B")) // 4
            if got != _numel(shape):
                raise ShapeError(
                    f"GpuMamba.load_params: {name} has {got} floats, expected "
                    f"{_numel(shape)}; was the config built with the same vocab_size and preset?"
                )
        for slot in self.slots.values():
            self.write_slot(slot.param, slot.spec, params, "")

    def write_slot(self, buf: Buffer, spec: SlotSpec, tensors: Any, prefix: str) -> None:
        """Writes ``spec``'s floats of ``tensors[prefix + HF name]`` (each piece) into buf
        (a slot's weights, or an optimiser's tensor of the slot's layout)."""
        for hf, src, dst, count in spec.pieces():
            data = memoryview(tensors[prefix + hf]).cast("B")
            self.device.write(buf, data[4 * src : 4 * (src + count)], 4 * dst)

    async def read_params(self) -> dict[str, array[float]]:
        """Downloads weights as flat ``array('f')`` by Hugging Face name."""
        return await self.gather(lambda s: s.param)

    async def gather(self, pick: Callable[[Slot], Buffer]) -> dict[str, array[float]]:
        """Downloads the buffer ``pick`` names for each slot (of the slot's layout), as flat
        ``array('f')`` by Hugging Face name."""
        shapes = self.config.param_shapes()
        out = {name: array("f", bytes(4 * _numel(shape))) for name, shape in shapes.items()}
        for slot in self.slots.values():
            raw = await self.device.read(pick(slot), 4 * slot.spec.count)
            for hf, src, dst, count in slot.spec.pieces():
                view = memoryview(out[hf]).cast("B")
                view[4 * src : 4 * (src + count)] = raw[4 * dst : 4 * (dst + count)]
        return out

    async def read_grads(self) -> dict[str, array[float]]:
        """Downloads the accumulated gradients by Hugging Face name (for tests)."""
        return await self.gather(lambda s: self._g(s.spec.key))

    # -- gradients and evaluation -------------------------------------------------------------
    def write_ids(self, ids: Any) -> None:
        """Writes B·L token ids (and the embedding backward's index) for the next plan run."""
        self.emb.write_step(self.ids, self.csr, ids, self.config.vocab_size)

    def _write_batch(self, batch: Batch) -> None:
        inputs, targets = batch
        if len(inputs) != self.m or len(targets) != self.m:
            raise ShapeError(
                f"GpuMamba: a batch must hold B·L = {self.m} ids, got {len(inputs)} inputs and "
                f"{len(targets)} targets"
            )
        self.write_ids(inputs)
        self.device.write(self.targets, array("i", targets))

    async def forward_backward(self, batch: Batch) -> float:
        """Accumulates one micro-batch's gradients; returns its loss contribution."""
        self._write_batch(batch)
        self.step_plan.run()
        (loss,) = struct.unpack("<f", await self.device.read(self.loss))
        if self.cortex is None:
            return float(loss)
        # As CpuMamba: the loss is LM + coef · aux, the routing that of this micro-batch.
        routing = await self.cortex.read_routing()
        routing["lm_loss"] = float(loss) * self.train_config.grad_accum  # type: ignore[union-attr]
        self.routing = routing
        return float(loss) + self.aux_scale * float(routing["aux_loss"])

    async def eval_batch(self, batch: Batch) -> tuple[float, int]:
        """(sum of the token losses in nats, tokens) of one batch; no gradients."""
        self._write_batch(batch)
        self.eval_plan.run()
        (loss,) = struct.unpack("<f", await self.device.read(self.loss))
        return float(loss) * self.m, self.m


def _numel(shape: tuple[int, ...]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total
