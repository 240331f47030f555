"""Launchers for ``shaders/embed_loss.wgsl``: the embedding objective's centring and cosine loss.

Training the served embedding ``normalize(W · (pool(h) − μ))`` by cosine distillation
against teacher vectors is, on the GPU::

    Pool.mean_l2 → EmbedLoss.centre → Matmul.linear (W) → EmbedLoss.loss_and_grad
    backward: Matmul.linear_bwd_weight (dW), Matmul.linear_bwd_input (dpooled)
              → Pool.mean_l2_bwd

``pool`` is the L2-normalised mean, the package head's raw vector (``evermind.package.head``).

:meth:`EmbedLoss.cosine` writes each row's ``1 − cos`` and ``dL/dz``; the scalar loss is
``cross_entropy.wgsl``'s deterministic scaled sum (:meth:`CrossEntropy.mean`), reused.
The numpy reference is ``evermind.ops.embed_loss``.
"""

from __future__ import annotations

from evermind.errors import ShapeError
from evermind.gpu import Buffer, Device, Dispatch, grid_1d, pack_params
from evermind.kernels._launch import check_power_of_two, need_f32
from evermind.kernels.cross_entropy import CrossEntropy

SHADER = "embed_loss"
#: Invocations per workgroup (the WGSL ``override WG``); a power of two up to 256.
WORKGROUP_SIZE = 64
#: Norm floor of both sides of the cosine.
EPS = 1e-12

# Binding slots of embed_loss.wgsl.
_Z, _TARGETS, _ROW_LOSS, _DZ, _PARAMS, _POOLED, _MU, _CENTRED = range(8)


class EmbedLoss:
    """Records the embedding objective's dispatches on one device.

    Args:
        device: The GPU device.
        workgroup_size: Override for ``WG``: a power of two in [1, 256].
    """

    def __init__(self, device: Device, workgroup_size: int = WORKGROUP_SIZE) -> None:
        check_power_of_two("embed_loss", workgroup_size)
        self.device = device
        self.workgroup_size = workgroup_size
        self.ce = CrossEntropy(device)

    def _params(self, b: int, d: int, scale: float, eps: float, label: str) -> Buffer:
        return self.device.uniform(
            pack_params(("u32", b), ("u32", d), ("f32", scale), ("f32", eps)), label=label
        )

    def centre(self, pooled: Buffer, mu: Buffer, centred: Buffer, b: int, d: int) -> Dispatch:
        """``centred[b] = pooled[b] − mu`` (B, D).

        Args:
            pooled: (B, D) f32 pooled unit vectors.
            mu: (D,) f32 centring vector.
            centred: (B, D) f32 output (may not alias ``pooled``).
            b: Rows B.
            d: Width D.
        """
        op = "embed_loss.centre"
        if b < 1 or d < 1:
            raise ShapeError(f"{op}: expected B, D >= 1, got B={b}, D={d}")
        need_f32(op, "pooled", pooled, b * d)
        need_f32(op, "mu", mu, d)
        need_f32(op, "centred", centred, b * d)
        params = self._params(b, d, 1.0, EPS, "embed_loss.centre.params")
        kernel = self.device.kernel(SHADER, "centre", {"WG": self.workgroup_size})
        bindings = {_POOLED: pooled, _MU: mu, _CENTRED: centred, _PARAMS: params}
        return self.device.dispatch(
            kernel, bindings, grid_1d(b * d, self.workgroup_size), label=f"centre {b}x{d}"
        )

    def cosine(
        self,
        z: Buffer,
        targets: Buffer,
        row_loss: Buffer,
        dz: Buffer,
        b: int,
        e: int,
        scale: float,
        eps: float = EPS,
    ) -> Dispatch:
        """Per-row ``1 − cos(z_b, T_b)`` and the loss's gradient ``dz`` (B, E).

        Args:
            z: (B, E) f32 projected embeddings.
            targets: (B, E) f32 teacher vectors (rewrite with ``device.write`` per step).
            row_loss: (B,) f32 output.
            dz: (B, E) f32 output, overwritten.
            b: Rows B.
            e: Embedding width E.
            scale: Weight of each row: 1 / B for the mean (1 / (B · micro-batches)).
            eps: Norm floor of both sides.

        Raises:
            ShapeError: A size is not positive, eps is not, or a buffer is too small.
        """
        op = "embed_loss.cosine"
        if b < 1 or e < 1:
            raise ShapeError(f"{op}: expected B, E >= 1, got B={b}, E={e}")
        if not eps > 0.0:
            raise ShapeError(f"{op}: expected eps > 0, got {eps}")
        need_f32(op, "z", z, b * e)
        need_f32(op, "targets", targets, b * e)
        need_f32(op, "row_loss", row_loss, b)
        need_f32(op, "dz", dz, b * e)
        params = self._params(b, e, scale, eps, "embed_loss.cosine.params")
        kernel = self.device.kernel(SHADER, "cosine", {"WG": self.workgroup_size})
        bindings = {_Z: z, _TARGETS: targets, _ROW_LOSS: row_loss, _DZ: dz, _PARAMS: params}
        return self.device.dispatch(kernel, bindings, grid_1d(b, 1), label=f"cosine {b}x{e}")

    def loss_and_grad(
        self,
        z: Buffer,
        targets: Buffer,
        row_loss: Buffer,
        dz: Buffer,
        loss: Buffer,
        b: int,
        e: int,
        scale: float,
        eps: float = EPS,
    ) -> list[Dispatch]:
        """:meth:`cosine`, then ``loss[0] = scale · Σ row_loss`` (cross_entropy's mean)."""
        return [
            self.cosine(z, targets, row_loss, dz, b, e, scale, eps),
            self.ce.mean(row_loss, loss, b, scale),
        ]
