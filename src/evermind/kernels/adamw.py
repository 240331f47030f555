"""Launchers for ``shaders/adamw.wgsl``: the AdamW update, one dispatch per tensor.

The update is torch ``optim.AdamW``'s (decoupled weight decay, bias correction). Whether a
tensor decays is the caller's choice per tensor (norms, biases, ``A_log`` and ``D`` usually
do not). Gradients are multiplied by ``clip_scale[0]``, a 1-float GPU buffer written by
:class:`evermind.kernels.grad_norm.GradNorm`, so clipping needs no readback.

Per-step values without re-recording: every dispatch an :class:`AdamW` records binds the
same small uniform, ``AdamW.step_params``. :meth:`AdamW.set_step` rewrites it with
``device.write`` (learning rate, bias corrections for the step number); call it once
before submitting each step's plan. Everything else is fixed at recording time.

Browser-safe (standard library and ``evermind`` only).
The numpy reference is ``evermind.ops.adamw``.
"""

from __future__ import annotations

import math
from array import array

from evermind.errors import ConfigError, ShapeError
from evermind.gpu import Buffer, Device, Dispatch, grid_1d, pack_params
from evermind.kernels._launch import need_f32

SHADER = "adamw"
#: Invocations per workgroup (the WGSL ``override WG``); any value 1..256.
WORKGROUP_SIZE = 256

# Binding slots of adamw.wgsl.
_PARAM, _GRAD, _EXP_AVG, _EXP_AVG_SQ, _CLIP, _PARAMS, _STEP = range(7)


def step_values(
    step: int, lr: float, beta1: float, beta2: float, weight_decay: float
) -> tuple[float, float, float]:
    """The per-step scalars of the update, in float64: ``(1 - lr*wd, lr/bc1, sqrt(bc2))``.

    Args:
        step: The 1-based step number t (bias corrections ``1 - beta^t``).
        lr: Learning rate of this step.
        beta1: First-moment decay.
        beta2: Second-moment decay.
        weight_decay: Decoupled weight decay.
    """
    bias_correction1 = 1.0 - beta1**step
    bias_correction2 = 1.0 - beta2**step
    return 1.0 - lr * weight_decay, lr / bias_correction1, math.sqrt(bias_correction2)


class AdamW:
    """Records AdamW dispatches on one device; all share one per-step uniform.

    Args:
        device: The GPU device.
        lr: Learning rate until the first :meth:`set_step`.
        beta1: First-moment decay, in [0, 1).
        beta2: Second-moment decay, in [0, 1).
        eps: Added to the denominator, > 0.
        weight_decay: Decoupled weight decay for tensors recorded with ``decay=True``.
        step: The step number until the first :meth:`set_step` (1-based).
        workgroup_size: Override for ``WG`` (any value 1..256).
    """

    def __init__(
        self,
        device: Device,
        lr: float = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        step: int = 1,
        workgroup_size: int = WORKGROUP_SIZE,
    ) -> None:
        for name, value in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"adamw: {name} must be in [0, 1), got {value}")
        if not eps > 0.0:
            raise ConfigError(f"adamw: eps must be > 0, got {eps}")
        if not weight_decay >= 0.0:
            raise ConfigError(f"adamw: weight_decay must be >= 0, got {weight_decay}")
        if not 1 <= workgroup_size <= 256:
            raise ConfigError(f"adamw: workgroup_size must be in [1, 256], got {workgroup_size}")
        self.device = device
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.weight_decay = weight_decay
        self.workgroup_size = workgroup_size
        #: The per-step uniform every recorded dispatch reads; rewritten by :meth:`set_step`.
        self.step_params = device.uniform(self._step_bytes(step, lr), label="adamw.step")
        self._unit_clip: Buffer | None = None

    def _step_bytes(self, step: int, lr: float) -> bytes:
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise ConfigError(f"adamw: step must be an int >= 1 (1-based), got {step!r}")
        if not (lr >= 0.0 and math.isfinite(lr)):
            raise ConfigError(f"adamw: lr must be a finite number >= 0, got {lr}")
        decay_factor, step_size, sqrt_bc2 = step_values(
            step, lr, self.beta1, self.beta2, self.weight_decay
        )
        return pack_params(
            ("f32", decay_factor), ("f32", step_size), ("f32", sqrt_bc2), ("u32", step)
        )

    def set_step(self, step: int, lr: float) -> None:
        """Sets the step number (1-based) and learning rate for the next submitted update.

        Rewrites :attr:`step_params` in place; the recorded dispatches see the new values.
        """
        self.device.write(self.step_params, self._step_bytes(step, lr))

    def unit_clip(self) -> Buffer:
        """A 1-float buffer holding 1.0, for updates without gradient clipping."""
        if self._unit_clip is None:
            self._unit_clip = self.device.upload(array("f", [1.0]), label="adamw.unit_clip")
        return self._unit_clip

    def update(
        self,
        param: Buffer,
        grad: Buffer,
        exp_avg: Buffer,
        exp_avg_sq: Buffer,
        n: int,
        clip_scale: Buffer | None = None,
        decay: bool = True,
        offset: int = 0,
    ) -> Dispatch:
        """Records one tensor's update (in place on ``param``, ``exp_avg``, ``exp_avg_sq``).

        Args:
            param: The parameter, f32.
            grad: Its gradient, f32 (not modified; the clip factor is applied on the fly).
            exp_avg: First moment, f32, zero before step 1.
            exp_avg_sq: Second moment, f32, zero before step 1.
            n: Floats in the tensor.
            clip_scale: 1 f32 buffer multiplying the gradient (GradNorm's output); None
                for no clipping.
            decay: Apply weight decay to this tensor.
            offset: Float offset of the tensor in all four buffers (a flat arena).
        """
        op = "adamw.update"
        if n < 0 or offset < 0:
            raise ShapeError(f"{op}: expected n >= 0 and offset >= 0, got n={n}, offset={offset}")
        for name, buf in (
            ("param", param),
            ("grad", grad),
            ("exp_avg", exp_avg),
            ("exp_avg_sq", exp_avg_sq),
        ):
            need_f32(op, name, buf, offset + n)
        clip = self.unit_clip() if clip_scale is None else clip_scale
        need_f32(op, "clip_scale", clip, 1)
        params = self.device.uniform(
            pack_params(
                ("u32", n),
                ("u32", offset),
                ("u32", int(decay)),
                ("f32", 1.0 - self.beta1),
                ("f32", self.beta2),
                ("f32", 1.0 - self.beta2),
                ("f32", self.eps),
            ),
            label="adamw.params",
        )
        kernel = self.device.kernel(SHADER, "adamw_step", {"WG": self.workgroup_size})
        return self.device.dispatch(
            kernel,
            {
                _PARAM: param,
                _GRAD: grad,
                _EXP_AVG: exp_avg,
                _EXP_AVG_SQ: exp_avg_sq,
                _CLIP: clip,
                _PARAMS: params,
                _STEP: self.step_params,
            },
            grid_1d(n, self.workgroup_size),
            label="adamw_step",
        )
