"""The GPU training backend: :class:`~evermind.model.gpu.GpuMamba` with AdamW (browser-safe).

:class:`GpuBackend` is the GPU twin of :class:`~evermind.train.cpu_backend.CpuBackend`: the
model (:class:`~evermind.model.gpu.GpuMamba`, built with gradients) records the forward, the
loss and the backward; this backend adds each weight's AdamW moments and records the rest of
the step as plans, so per step Python writes the token ids, the targets and the learning rate,
then runs

    zero grads → [forward + loss + backward] × grad_accum → global-norm clip → AdamW

The clip is :class:`~evermind.kernels.grad_norm.GradNorm` and the update
:class:`~evermind.kernels.adamw.AdamW`, tested against the functions CpuBackend calls
(:mod:`evermind.ops.grad_norm`, :mod:`evermind.ops.adamw`). Checkpoints hold the same keys as
CpuBackend's (weights by HF name, ``adam.m.<name>``, ``adam.v.<name>``).

With ``embed_dim=E`` a second training step is recorded beside the LM step: the embedding
objective (cosine distillation of ``z = W · (pool(h_f) − μ)`` against teacher vectors T,
``evermind.ops.embed_loss``), whose backward enters the model's graph at the final norm::

    h_f = rmsnorm_f(h_L)  (no LM head)
    p   = normalize(mean-pool(h_f over each text's valid tokens)) ;  z = (p − μ) · Wᵀ
    L   = mean_b (1 − cos(z_b, T_b))
    dW  = dzᵀ (p − μ) ;  dp = dz · W ;  dh_f = pool_bwd(dp)  (``Pool.mean_l2_bwd``) → the blocks

then the global-norm clip and AdamW over the model's weights and W. ``p`` is the package's
raw vector (``evermind.package.head``: the L2-normalised mean pool), so the μ and W trained
here are the package's embedding head as they stand. Per step Python writes the token ids,
the lengths and the targets (:meth:`GpuBackend.embed_train_step`).
"""

from __future__ import annotations

import struct
from array import array
from typing import Any

from evermind.errors import ShapeError
from evermind.gpu import Buffer, Device, Dispatch, Plan
from evermind.kernels.adamw import AdamW
from evermind.kernels.embed_loss import EmbedLoss
from evermind.kernels.grad_norm import GradNorm
from evermind.kernels.pool import Pool
from evermind.model.config import MambaConfig
from evermind.model.gpu import GpuMamba, Slot
from evermind.model.gpu_layout import embed_head_spec
from evermind.types import Batch, TrainConfig

#: One embedding micro-batch: (B·L token ids, B valid lengths, B·E target floats).
EmbedBatch = tuple[Any, Any, Any]
#: A trained tensor's AdamW moments: (exp_avg, exp_avg_sq).
Moments = tuple[Buffer, Buffer]


class GpuBackend:
    """Trains :class:`GpuMamba` with AdamW on a WebGPU device at one (B, L).

    The :class:`~evermind.train.loop.Backend` protocol (``train_step``, ``eval_batch``,
    ``state``, ``load_state``); the weights are :attr:`model`'s (``model.load_params``,
    ``model.read_params``).

    Args:
        device: The device (either transport).
        config: Model hyperparameters.
        batch_size: Sequences per micro-batch, B.
        seq_len: Tokens per sequence, L.
        train: Optimiser settings.
        weights: Train the weight buffers of another model (e.g. the embedding objective on
            the language model's weights) instead of allocating new ones.
        embed_dim: Also record the embedding training step with a projection head W of
            E = ``embed_dim`` rows (see the module docstring); W starts as the identity
            (``eye(E, d_model)``) and μ as zero until :meth:`load_embedder`.

    Raises:
        ShapeError: ``embed_dim`` < 1.
    """

    def __init__(
        self,
        device: Device,
        config: MambaConfig,
        batch_size: int,
        seq_len: int,
        train: TrainConfig,
        weights: dict[str, Slot] | None = None,
        embed_dim: int | None = None,
    ) -> None:
        if embed_dim is not None and embed_dim < 1:
            raise ShapeError(f"GpuBackend: embed_dim must be >= 1, got {embed_dim}")
        self.device = dev = device
        self.config, self.train = config, train
        self.batch_size, self.seq_len = batch_size, seq_len
        self.model = model = GpuMamba(dev, config, batch_size, seq_len, train, weights)
        self.moments: dict[str, Moments] = {
            key: (
                dev.buffer(4 * slot.spec.count, label=f"m.{key}"),
                dev.buffer(4 * slot.spec.count, label=f"v.{key}"),
            )
            for key, slot in model.slots.items()
        }
        self.opt = AdamW(
            dev,
            lr=train.lr,
            beta1=train.beta1,
            beta2=train.beta2,
            eps=train.eps,
            weight_decay=train.weight_decay,
        )
        self.grad_norm = dev.buffer(4, label="grad_norm")
        self.clip_scale, self.opt_plan = self._record_optimizer(
            "optimizer", list(model.slots.values()), self.moments, self.grad_norm
        )
        self.embed_dim = embed_dim
        self.head: Slot | None = None
        if embed_dim is not None:
            self._record_embedding(embed_dim)

    @property
    def routing(self) -> dict[str, Any] | None:
        """The cortex's routing statistics of the last micro-batch (None without the cortex):
        what :class:`~evermind.train.loop.Trainer` puts in each ``Progress``."""
        return self.model.routing

    def _record_optimizer(
        self, name: str, slots: list[Slot], moments: dict[str, Moments], norm: Buffer
    ) -> tuple[Buffer, Plan]:
        """The plan ``name``: global-norm clip over ``slots``' gradients (when
        ``train.grad_clip`` > 0), then AdamW on each; returns (its clip-scale buffer, plan)."""
        dev, train = self.device, self.train
        grads = [s.grad for s in slots if s.grad is not None]
        if train.grad_clip > 0:
            scale = dev.buffer(4, label=f"{name}.clip_scale")
            clip = GradNorm(dev).record(grads, norm, scale, train.grad_clip)
        else:
            scale, clip = self.opt.unit_clip(), []
        plan = dev.plan(name).add(clip)
        for s in slots:
            assert s.grad is not None  # the model was built with gradients
            exp_avg, exp_avg_sq = moments[s.spec.key]
            plan.add(
                self.opt.update(
                    s.param, s.grad, exp_avg, exp_avg_sq, s.spec.count, scale, decay=s.spec.decay
                )
            )
        return scale, plan

    # -- the evermind.train.loop.Backend protocol --------------------------------------------
    async def train_step(self, micro_batches: list[Batch], lr: float, step: int) -> float:
        self.model.zero_plan.run()
        total = 0.0
        for batch in micro_batches:
            total += await self.model.forward_backward(batch)
        self.opt.set_step(step, lr)
        self.opt_plan.run()
        # The CE scale is 1/(M·grad_accum): the sum over micro-batches is the mean loss.
        return total

    async def eval_batch(self, batch: Batch) -> tuple[float, int]:
        return await self.model.eval_batch(batch)

    async def state(self) -> dict[str, array[float]]:
        out = await self.model.read_params()
        for prefix, part in (("adam.m.", 0), ("adam.v.", 1)):

            def moment(slot: Slot, part: int = part) -> Buffer:
                return self.moments[slot.spec.key][part]

            for name, values in (await self.model.gather(moment)).items():
                out[prefix + name] = values
        return out

    async def load_state(self, tensors: dict[str, array[float]]) -> None:
        self.model.load_params(tensors)
        for key, slot in self.model.slots.items():
            for prefix, buf in zip(("adam.m.", "adam.v."), self.moments[key], strict=True):
                self.model.write_slot(buf, slot.spec, tensors, prefix)

    # -- the embedding objective -------------------------------------------------------------
    def _record_embedding(self, embed_dim: int) -> None:
        """Records the embedding step: forward to h_f, pool, centre, W, cosine, backward."""
        dev, cfg, model, train = self.device, self.config, self.model, self.train
        mm = model.mm
        b, length, dm, e = self.batch_size, self.seq_len, cfg.d_model, embed_dim
        spec = embed_head_spec(cfg, e)
        self.head = head = Slot(
            spec,
            dev.upload(_eye(e, dm), label=spec.key),
            dev.buffer(4 * spec.count, label=f"grad.{spec.key}"),
        )
        assert head.grad is not None
        self.centre = dev.buffer(4 * dm, label="embed.centre")
        self.lengths = dev.buffer(4 * b, label="embed.lengths")
        self.embed_targets = dev.buffer(4 * b * e, label="embed.targets")

        def buf(name: str, count: int) -> Buffer:
            return dev.buffer(4 * count, label=f"embed.{name}")

        self.pooled, self.centred = buf("pooled", b * dm), buf("centred", b * dm)
        self.pool_scratch = buf("pool_scratch", b * dm)
        self.z, self.dz = buf("z", b * e), buf("dz", b * e)
        self.dpooled, self.embed_row_loss = buf("dpooled", b * dm), buf("row_loss", b)
        self.embed_loss = buf("loss", 1)
        pool, el = Pool(dev), EmbedLoss(dev)
        #: Each text's weight in the loss: the mean over the texts of all micro-batches.
        self.embed_scale = 1.0 / (b * train.grad_accum)
        scratch = model.backward_scratch()
        head_bwd = [
            mm.linear_bwd_weight(self.dz, self.centred, head.grad, b, dm, e, accumulate=True),
            mm.linear_bwd_input(self.dz, head.param, self.dpooled, b, dm, e),
            pool.mean_l2_bwd(
                model.hf, self.lengths, self.dpooled, self.pool_scratch, scratch["dhf"],
                b, length, dm,
            ),
        ]  # fmt: skip

        def embed_head() -> list[Dispatch]:
            return [
                pool.mean_l2(model.hf, self.lengths, self.pooled, b, length, dm),
                el.centre(self.pooled, self.centre, self.centred, b, dm),
                mm.linear(self.centred, head.param, self.z, b, dm, e),
            ]

        # Inference: pooled states and z, without stored states, loss or backward.
        self.embed_eval_plan = dev.plan("embedding forward").add(
            model.forward_dispatches(store_states=False, logits=False)
        )
        self.embed_eval_plan.add(embed_head())
        # The embedding objective leaves the load-balancing loss out (aux_coef 0).
        self.embed_plan = dev.plan("embedding step").add(
            model.forward_dispatches(store_states=True, logits=False, aux_coef=0.0)
        )
        self.embed_plan.add(embed_head())
        self.embed_plan.add(
            el.loss_and_grad(
                self.z, self.embed_targets, self.embed_row_loss, self.dz, self.embed_loss,
                b, e, self.embed_scale,
            )
        )  # fmt: skip
        self.embed_plan.add(model.backward_dispatches(head=head_bwd))
        trained = [*model.slots.values(), head]
        self.embed_zero_plan = dev.plan("zero embedding grads").add(
            model.ew.fill(s.grad, s.spec.count) for s in trained if s.grad is not None
        )
        self.head_moments: Moments = (
            dev.buffer(4 * spec.count, label=f"m.{spec.key}"),
            dev.buffer(4 * spec.count, label=f"v.{spec.key}"),
        )
        self.embed_grad_norm = dev.buffer(4, label="embed.grad_norm")
        self.embed_clip_scale, self.embed_opt_plan = self._record_optimizer(
            "embedding optimizer",
            trained,
            {**self.moments, spec.key: self.head_moments},
            self.embed_grad_norm,
        )

    def _embed_head(self) -> Slot:
        if self.head is None:
            raise ShapeError(
                "GpuBackend: no embedding step was recorded; build the backend with embed_dim=E"
            )
        return self.head

    def load_embedder(self, centre: Any, head: Any | None = None) -> None:
        """Uploads μ (d_model floats) and, if given, W (E · d_model floats, row-major)."""
        slot = self._embed_head()
        dm = self.config.d_model
        for name, values, count, buf in (
            ("centre", centre, dm, self.centre),
            ("head", head, slot.spec.count, slot.param),
        ):
            if values is None:
                continue
            data = memoryview(values).cast("B")
            if len(data) != 4 * count:
                raise ShapeError(
                    f"GpuBackend.load_embedder: {name} has {len(data) // 4} floats, expected "
                    f"{count}"
                )
            self.device.write(buf, data)

    async def read_embedder(self) -> tuple[array[float], array[float]]:
        """Downloads ``(μ, W)`` as flat ``array('f')``."""
        slot = self._embed_head()
        centre = array("f", await self.device.read(self.centre, 4 * self.config.d_model))
        head = array("f", await self.device.read(slot.param, 4 * slot.spec.count))
        return centre, head

    async def read_embed_head_grad(self) -> array[float]:
        """Downloads W's accumulated gradient (for tests)."""
        slot = self._embed_head()
        assert slot.grad is not None
        return array("f", await self.device.read(slot.grad, 4 * slot.spec.count))

    def _write_embed_batch(self, batch: EmbedBatch) -> None:
        ids, lengths, targets = batch
        b, e, m = self.batch_size, self.embed_dim, self.model.m
        if len(ids) != m or len(lengths) != b or e is None or len(targets) != b * e:
            raise ShapeError(
                f"GpuBackend: an embedding batch holds B·L = {m} ids (texts padded on the "
                f"right), B = {b} lengths and B·E = {b * (e or 0)} target floats, got "
                f"{len(ids)}, {len(lengths)} and {len(targets)}"
            )
        self.model.write_ids(ids)
        self.device.write(self.lengths, array("I", lengths))
        self.device.write(self.embed_targets, array("f", targets))

    async def embed_forward(self, ids: Any, lengths: Any) -> tuple[array[float], array[float]]:
        """The pooled unit vectors p (B·D floats) and ``z = W · (p − μ)`` (B·E floats) of a batch.

        Args:
            ids: B·L token ids, each text's tokens first (right padding).
            lengths: B valid lengths.
        """
        slot = self._embed_head()
        e = slot.spec.count // self.config.d_model
        self._write_embed_batch((ids, lengths, array("f", bytes(4 * self.batch_size * e))))
        self.embed_eval_plan.run()
        b, dm = self.batch_size, self.config.d_model
        pooled = array("f", await self.device.read(self.pooled, 4 * b * dm))
        return pooled, array("f", await self.device.read(self.z, 4 * b * e))

    async def embed_forward_backward(self, batch: EmbedBatch) -> float:
        """Accumulates one embedding micro-batch's gradients; returns its loss contribution.

        Args:
            batch: ``(ids, lengths, targets)``: B·L token ids (each text's tokens first, then
                any padding id), B valid lengths, and B·E teacher vectors row by row.
        """
        self._embed_head()
        self._write_embed_batch(batch)
        self.embed_plan.run()
        (loss,) = struct.unpack("<f", await self.device.read(self.embed_loss))
        return float(loss)

    async def embed_train_step(
        self, micro_batches: list[EmbedBatch], lr: float, step: int
    ) -> float:
        """One optimiser step of the embedding objective; returns the mean loss.

        Zero grads → [forward + loss + backward] per micro-batch → clip → AdamW on the
        model's weights and W (pass ``train.grad_accum`` micro-batches for the mean).
        """
        self._embed_head()
        self.embed_zero_plan.run()
        total = 0.0
        for batch in micro_batches:
            total += await self.embed_forward_backward(batch)
        self.opt.set_step(step, lr)
        self.embed_opt_plan.run()
        return total


def _eye(rows: int, cols: int) -> array[float]:
    """``eye(rows, cols)`` as a flat row-major ``array('f')``."""
    out = array("f", bytes(4 * rows * cols))
    for i in range(min(rows, cols)):
        out[i * cols + i] = 1.0
    return out
