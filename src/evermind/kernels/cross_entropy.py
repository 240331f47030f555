"""Launchers for ``shaders/cross_entropy.wgsl``: fused softmax cross-entropy and its mean.

:meth:`CrossEntropy.forward_backward` records one dispatch (a workgroup per row) that writes
each row's loss and the gradient of the MEAN loss with respect to the logits;
:meth:`CrossEntropy.mean` records the tiny deterministic reduction of the row losses to
that mean, so a training step needs no per-step readback of ``M`` values. The mean's
``scale`` (1 / number of valid targets) changes with the padding of each batch: rewrite it
in the recorded dispatches with :meth:`CrossEntropy.set_scale` instead of recording again.
The numpy reference is ``evermind.ops.cross_entropy``.

Two strategies (``strategy=``): ``"tree"`` reduces each row in a workgroup through
workgroup memory (GPUs); ``"row_serial"`` gives each row to one invocation that loops over
the vocabulary (no barriers, one exp per logit: several times faster on SwiftShader);
``"auto"`` (the default) picks row-serial on CPU adapters (:attr:`Device.is_cpu_adapter`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from evermind.errors import ConfigError, ShapeError
from evermind.gpu import Buffer, Device, Dispatch, grid_1d, pack_params
from evermind.kernels._launch import check_power_of_two, need_f32, resolve_row_strategy

SHADER = "cross_entropy"
#: Invocations per workgroup (the WGSL ``override WG``); a power of two up to 256.
WORKGROUP_SIZE = 256
#: Rows per workgroup of the row-serial strategy (its ``WG``): small, so that even a short
#: batch spreads over several workgroups (the CPU adapters run workgroups in parallel).
ROW_SERIAL_WORKGROUP_SIZE = 16
#: The target value whose rows do not count (PyTorch's default).
IGNORE_INDEX = -100

# Binding slots of cross_entropy.wgsl.
_LOGITS, _TARGETS, _ROW_LOSS, _DLOGITS, _LOSS, _PARAMS = range(6)
# Byte offset of Params.scale (after m: u32, v: u32, ignore_index: i32).
_SCALE_OFFSET = 12


class CrossEntropy:
    """Records fused softmax cross-entropy dispatches on one device.

    Args:
        device: The GPU device.
        workgroup_size: Override for ``WG`` of the tree strategy: a power of two in
            [1, 256]. The row-serial strategy uses :data:`ROW_SERIAL_WORKGROUP_SIZE`.
        strategy: ``"auto"``, ``"tree"`` or ``"row_serial"`` (see the module docstring);
            the resolved choice is kept in ``self.strategy``.
    """

    def __init__(
        self, device: Device, workgroup_size: int = WORKGROUP_SIZE, strategy: str = "auto"
    ) -> None:
        check_power_of_two("cross_entropy", workgroup_size)
        self.device = device
        self.workgroup_size = workgroup_size
        self.strategy = resolve_row_strategy("cross_entropy", device, strategy)

    def _params(self, m: int, v: int, ignore_index: int, scale: float, label: str) -> Buffer:
        return self.device.uniform(
            pack_params(("u32", m), ("u32", v), ("i32", ignore_index), ("f32", scale)),
            label=label,
        )

    def forward_backward(
        self,
        logits: Buffer,
        targets: Buffer,
        row_loss: Buffer,
        dlogits: Buffer,
        m: int,
        v: int,
        scale: float,
        ignore_index: int = IGNORE_INDEX,
    ) -> Dispatch:
        """Per-row loss and ``dlogits = (softmax - onehot) * scale`` in one pass per row.

        Args:
            logits: (M, V) f32.
            targets: (M,) int32 token ids; ``ignore_index`` (and any id outside [0, V))
                marks a row that does not count: its loss and gradient are 0.
            row_loss: (M,) f32 output.
            dlogits: (M, V) f32 output; must not be the logits buffer.
            m: Rows (tokens).
            v: Vocabulary size.
            scale: 1 / number of valid targets (the gradient of the mean loss).
            ignore_index: Target value of padding rows.

        Raises:
            ShapeError: A size is not positive or a buffer is too small.
        """
        op = "cross_entropy.forward_backward"
        if m < 1 or v < 1:
            raise ShapeError(f"{op}: expected M >= 1 and V >= 1, got M={m}, V={v}")
        need_f32(op, "logits", logits, m * v)
        need_f32(op, "targets (int32)", targets, m)
        need_f32(op, "row_loss", row_loss, m)
        need_f32(op, "dlogits", dlogits, m * v)
        if dlogits is logits:
            raise ShapeError(f"{op}: dlogits must be a different buffer from logits")
        params = self._params(m, v, ignore_index, scale, "cross_entropy.params")
        if self.strategy == "row_serial":
            entry, wg, grid = (
                "softmax_xent_rows",
                ROW_SERIAL_WORKGROUP_SIZE,
                grid_1d(m, ROW_SERIAL_WORKGROUP_SIZE),
            )
        else:  # one workgroup per row: grid_1d with a "workgroup size" of 1 folds M into 2-D
            entry, wg, grid = "softmax_xent", self.workgroup_size, grid_1d(m, 1)
        kernel = self.device.kernel(SHADER, entry, {"WG": wg})
        bindings = {
            _LOGITS: logits,
            _TARGETS: targets,
            _ROW_LOSS: row_loss,
            _DLOGITS: dlogits,
            _PARAMS: params,
        }
        return self.device.dispatch(kernel, bindings, grid, label=f"{entry} {m}x{v}")

    def mean(self, row_loss: Buffer, loss: Buffer, m: int, scale: float) -> Dispatch:
        """``loss[0] = scale * sum(row_loss)`` — the mean over valid targets, deterministic.

        Args:
            row_loss: (M,) f32 from :meth:`forward_backward`.
            loss: Output, at least one f32.
            m: Rows.
            scale: 1 / number of valid targets (the same value as the forward's).
        """
        op = "cross_entropy.mean"
        if m < 1:
            raise ShapeError(f"{op}: expected M >= 1, got {m}")
        need_f32(op, "row_loss", row_loss, m)
        need_f32(op, "loss", loss, 1)
        params = self._params(m, 1, IGNORE_INDEX, scale, "cross_entropy.mean.params")
        if self.strategy == "row_serial":  # one invocation sums the rows in order
            entry, wg = "loss_mean_serial", 1
        else:
            entry, wg = "loss_mean", self.workgroup_size
        kernel = self.device.kernel(SHADER, entry, {"WG": wg})
        return self.device.dispatch(
            kernel, {_ROW_LOSS: row_loss, _LOSS: loss, _PARAMS: params}, 1, label=entry
        )

    def loss_and_grad(
        self,
        logits: Buffer,
        targets: Buffer,
        row_loss: Buffer,
        dlogits: Buffer,
        loss: Buffer,
        m: int,
        v: int,
        scale: float,
        ignore_index: int = IGNORE_INDEX,
    ) -> list[Dispatch]:
        """Both passes in order: :meth:`forward_backward` then :meth:`mean`."""
        return [
            self.forward_backward(logits, targets, row_loss, dlogits, m, v, scale, ignore_index),
            self.mean(row_loss, loss, m, scale),
        ]

    def set_scale(self, dispatches: Dispatch | Iterable[Dispatch], scale: float) -> None:
        """Rewrites ``scale`` in recorded dispatches of this launcher (no re-recording).

        Call it before replaying a step whose batch has a different number of valid
        targets; the write is ordered before the next submitted work.

        Raises:
            ConfigError: A dispatch does not come from this shader.
        """
        items = [dispatches] if isinstance(dispatches, Dispatch) else list(dispatches)
        payload = struct.pack("<f", scale)
        for dispatch in items:
            if dispatch.kernel.shader != SHADER:
                raise ConfigError(
                    f"cross_entropy.set_scale: dispatch {dispatch.label!r} runs "
                    f"{dispatch.kernel.shader}.wgsl, expected {SHADER}.wgsl"
                )
            params = dict(dispatch.bindings)[_PARAMS]
            self.device.write(params, payload, offset=_SCALE_OFFSET)
