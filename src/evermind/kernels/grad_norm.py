"""Launchers for ``shaders/grad_norm.wgsl``: global gradient norm and the clip factor.

:meth:`GradNorm.record` takes every gradient tensor of the model and returns one
sum-of-squares dispatch per tensor plus one final dispatch that writes ``norm`` (1 f32) and
``clip_scale = min(1, max_norm / (norm + 1e-6))`` (1 f32), torch ``clip_grad_norm_``'s
factor. :class:`evermind.kernels.adamw.AdamW` reads ``clip_scale`` on the GPU, so a step
needs no readback; read ``norm`` only when logging. Every sum has an order fixed at
recording time, so the result is bit-for-bit reproducible.

A tensor is a whole buffer, or a ``(buffer, float_offset, count)`` view into a larger one
(a flat gradient arena). :meth:`GradNorm.segments` covers the arena case in one call.

Browser-safe (standard library and ``evermind`` only).
The numpy reference is ``evermind.ops.grad_norm``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from evermind.errors import ConfigError, ShapeError
from evermind.gpu import Buffer, Device, Dispatch, pack_params
from evermind.kernels._launch import check_power_of_two, need_f32

SHADER = "grad_norm"
#: Invocations per workgroup (the WGSL ``override WG``): a power of two <= 256.
WORKGROUP_SIZE = 64
#: The most workgroups (partial-sum slots) one tensor gets; larger tensors loop. With WG 64
#: this gives 4,096 lanes per tensor: on lavapipe the nano model's 42 tensors took 8 ms
#: against 43 ms at 256 x 256 (barrier workgroups are costly on CPU adapters), and 16M
#: floats took the same time.
MAX_GROUPS = 64

# Binding slots of grad_norm.wgsl.
_GRAD, _PARTIAL, _NORM, _CLIP, _PARAMS = range(5)

#: A gradient tensor: a whole buffer (its every float) or (buffer, float offset, count).
GradView = Buffer | tuple[Buffer, int, int]


class GradNorm:
    """Records the global-norm reduction and clip factor on one device.

    Args:
        device: The GPU device.
        workgroup_size: Override for ``WG``; a power of two <= 256.
        max_groups: Partial-sum slots per tensor at most (1..65535).
    """

    def __init__(
        self, device: Device, workgroup_size: int = WORKGROUP_SIZE, max_groups: int = MAX_GROUPS
    ) -> None:
        self.device = device
        self.workgroup_size = check_power_of_two("grad_norm", workgroup_size)
        if not 1 <= max_groups <= 65535:
            raise ConfigError(f"grad_norm: max_groups must be in [1, 65535], got {max_groups}")
        self.max_groups = max_groups

    def groups_for(self, n: int) -> int:
        """Workgroups (and partial slots) one tensor of ``n`` floats gets."""
        return max(1, min(-(-n // self.workgroup_size), self.max_groups))

    def record(
        self, grads: Sequence[GradView], norm: Buffer, clip_scale: Buffer, max_norm: float
    ) -> list[Dispatch]:
        """Records the norm of all ``grads`` together and the clip factor.

        Allocates the partial-sum scratch (one f32 per workgroup of every tensor) here.

        Args:
            grads: Gradient tensors, each a Buffer (all its floats) or ``(buffer, offset,
                count)`` in floats.
            norm: Output, 1 f32: the global L2 norm (inf/NaN if a gradient is).
            clip_scale: Output, 1 f32: ``min(1, max_norm / (norm + 1e-6))``, 0 if the norm
                is not finite.
            max_norm: The clipping threshold (> 0 and finite; to log the norm without
                clipping, pass a huge value such as 1e30).

        Returns:
            One dispatch per tensor, then the final one; run them in order, after the
            backward and before AdamW.
        """
        op = "grad_norm"
        if not (max_norm > 0.0 and math.isfinite(max_norm)):
            raise ConfigError(
                f"{op}: max_norm must be a finite number > 0, got {max_norm}; "
                "hint: pass 1e30 to compute the norm without clipping"
            )
        if not grads:
            raise ShapeError(f"{op}: expected at least one gradient tensor, got none")
        need_f32(op, "norm", norm, 1)
        need_f32(op, "clip_scale", clip_scale, 1)
        views = [self._view(op, index, view) for index, view in enumerate(grads)]
        slots = sum(self.groups_for(n) for _, _, n in views)
        partial = self.device.buffer(4 * slots, label="grad_norm.partial")
        overrides = {"WG": self.workgroup_size}
        dispatches: list[Dispatch] = []
        slot = 0
        kernel = self.device.kernel(SHADER, "sumsq_partial", overrides)
        for index, (buf, offset, n) in enumerate(views):
            groups = self.groups_for(n)
            params = self.device.uniform(
                pack_params(
                    ("u32", n), ("u32", offset), ("u32", slot), ("u32", slots), ("f32", max_norm)
                ),
                label=f"grad_norm.tensor{index}.params",
            )
            dispatches.append(
                self.device.dispatch(
                    kernel,
                    {_GRAD: buf, _PARTIAL: partial, _PARAMS: params},
                    (groups, 1, 1),
                    label=f"grad_norm.sumsq[{index}]",
                )
            )
            slot += groups
        params = self.device.uniform(
            pack_params(("u32", 0), ("u32", 0), ("u32", 0), ("u32", slots), ("f32", max_norm)),
            label="grad_norm.finish.params",
        )
        dispatches.append(
            self.device.dispatch(
                self.device.kernel(SHADER, "norm_finish", overrides),
                {_PARTIAL: partial, _NORM: norm, _CLIP: clip_scale, _PARAMS: params},
                (1, 1, 1),
                label="grad_norm.finish",
            )
        )
        return dispatches

    def segments(
        self, grads: Buffer, norm: Buffer, clip_scale: Buffer, sizes: Sequence[int], max_norm: float
    ) -> list[Dispatch]:
        """:meth:`record` for tensors stored back to back in one buffer (a flat arena).

        Args:
            grads: The arena, ``sum(sizes)`` f32.
            norm: Output, 1 f32.
            clip_scale: Output, 1 f32.
            sizes: Floats of each tensor, in arena order.
            max_norm: The clipping threshold.
        """
        views: list[GradView] = []
        offset = 0
        for n in sizes:
            views.append((grads, offset, n))
            offset += n
        return self.record(views, norm, clip_scale, max_norm)

    def _view(self, op: str, index: int, view: GradView) -> tuple[Buffer, int, int]:
        if isinstance(view, Buffer):
            return view, 0, view.nbytes // 4
        buf, offset, n = view
        if offset < 0 or n < 0:
            raise ShapeError(
                f"{op}: tensor {index} has offset {offset} and count {n}; both must be >= 0"
            )
        need_f32(op, f"tensor {index}", buf, offset + n)
        return buf, offset, n
