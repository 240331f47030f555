"""Launchers for ``shaders/conv1d.wgsl``: Mamba's causal depthwise conv1d, fwd and bwd.

``y[b, t, d] = bias[d] + sum_k w[d, k] * x[b, t - (K - 1) + k, d]`` with zero padding before
``t = 0`` (torch ``F.conv1d(padding=K-1, groups=D)[..., :L]`` on channels-last data). The
weight is PyTorch's ``(D, 1, K)``. The backward is three dispatches: ``dx``, then ``dw``/``db``
as fixed-order partial sums over chunks of (b, t) rows and a fixed-order sum of the partials.

``x`` (and ``dx``) may be a column slice of a wider row-major buffer, e.g. the x half of
in_proj's ``(B, L, 2 * d_inner)`` output: pass ``x_stride`` (floats between consecutive
rows) and ``x_offset`` (floats before element (0, 0)).

Browser-safe (standard library and ``evermind`` only).
The numpy reference is ``evermind.ops.conv1d``.
"""

from __future__ import annotations

from evermind.errors import ConfigError, ShapeError
from evermind.gpu import Buffer, Device, Dispatch, grid_1d, pack_params
from evermind.kernels._launch import need_f32

SHADER = "conv1d"
#: Invocations per workgroup (the WGSL ``override WG``); any value 1..256.
WORKGROUP_SIZE = 256
#: Rows (b, t) summed by one invocation of the ``dw`` partial pass.
ROWS_PER_CHUNK = 64
#: The widest kernel the partial pass supports (its register array is MAX_TAPS + 1 long).
MAX_TAPS = 8
_MAX_CHUNKS = 65535

# Binding slots of conv1d.wgsl.
_X, _W, _BIAS, _Y, _DY, _DX, _DW, _DB, _PARTIAL, _PARAMS = range(10)


class Conv1d:
    """Records causal depthwise conv1d dispatches on one device.

    Args:
        device: The GPU device.
        workgroup_size: Override for ``WG`` (any value 1..256).
        rows_per_chunk: Rows one invocation sums in the ``dw`` partial pass (>= 1).
    """

    def __init__(
        self,
        device: Device,
        workgroup_size: int = WORKGROUP_SIZE,
        rows_per_chunk: int = ROWS_PER_CHUNK,
    ) -> None:
        if not 1 <= workgroup_size <= 256:
            raise ConfigError(f"conv1d: workgroup_size must be in [1, 256], got {workgroup_size}")
        if rows_per_chunk < 1:
            raise ConfigError(f"conv1d: rows_per_chunk must be >= 1, got {rows_per_chunk}")
        self.device = device
        self.workgroup_size = workgroup_size
        self.rows_per_chunk = rows_per_chunk

    def _layout(
        self,
        op: str,
        batch: int,
        length: int,
        d: int,
        taps: int,
        x_stride: int | None,
        x_offset: int,
    ) -> tuple[int, int]:
        if batch < 0 or length < 1 or d < 1:
            raise ShapeError(
                f"{op}: expected x of shape (B >= 0, L >= 1, D >= 1), got ({batch}, {length}, {d})"
            )
        if not 1 <= taps <= MAX_TAPS:
            raise ShapeError(f"{op}: d_conv must be in [1, {MAX_TAPS}], got {taps}")
        stride = d if x_stride is None else x_stride
        if stride < d or x_offset < 0:
            raise ShapeError(
                f"{op}: x_stride ({stride}) must be >= D ({d}) and x_offset ({x_offset}) >= 0; "
                "hint: x_stride is the row length of the buffer x lives in"
            )
        rows = batch * length
        x_floats = x_offset + (rows - 1) * stride + d if rows else 0
        return stride, x_floats

    def _params(
        self,
        name: str,
        dims: tuple[int, int, int, int],
        stride: int,
        x_offset: int,
        chunks: int,
        accumulate: bool,
    ) -> Buffer:
        batch, length, d, taps = dims
        return self.device.uniform(
            pack_params(
                ("u32", batch),
                ("u32", length),
                ("u32", d),
                ("u32", taps),
                ("u32", stride),
                ("u32", x_offset),
                ("u32", self.rows_per_chunk),
                ("u32", chunks),
                ("u32", int(accumulate)),
            ),
            label=f"conv1d.{name}.params",
        )

    def forward(
        self,
        x: Buffer,
        weight: Buffer,
        bias: Buffer,
        y: Buffer,
        batch: int,
        length: int,
        d: int,
        taps: int,
        x_stride: int | None = None,
        x_offset: int = 0,
    ) -> Dispatch:
        """Causal depthwise convolution with bias.

        Args:
            x: Input (B, L, D) f32, possibly strided (see the module docstring).
            weight: (D, 1, K) f32, PyTorch's Conv1d layout; tap K-1 multiplies step t.
            bias: (D,) f32.
            y: Output (B, L, D) f32, dense.
            batch: B.
            length: L.
            d: Channels D (d_inner).
            taps: Kernel width K (d_conv), 1..8.
            x_stride: Floats between consecutive (b, t) rows of ``x``; default D.
            x_offset: Floats before x[0, 0, 0] in its buffer.
        """
        op = "conv1d.forward"
        stride, x_floats = self._layout(op, batch, length, d, taps, x_stride, x_offset)
        n = batch * length * d
        for name, buf, count in (
            ("x", x, x_floats),
            ("weight", weight, d * taps),
            ("bias", bias, d),
            ("y", y, n),
        ):
            need_f32(op, name, buf, count)
        params = self._params("fwd", (batch, length, d, taps), stride, x_offset, 0, False)
        kernel = self.device.kernel(SHADER, "conv1d_fwd", {"WG": self.workgroup_size})
        return self.device.dispatch(
            kernel,
            {_X: x, _W: weight, _BIAS: bias, _Y: y, _PARAMS: params},
            grid_1d(n, self.workgroup_size),
            label="conv1d_fwd",
        )

    def backward(
        self,
        x: Buffer,
        weight: Buffer,
        grad_y: Buffer,
        grad_x: Buffer,
        grad_weight: Buffer,
        grad_bias: Buffer,
        batch: int,
        length: int,
        d: int,
        taps: int,
        x_stride: int | None = None,
        x_offset: int = 0,
        accumulate: bool = False,
    ) -> list[Dispatch]:
        """Gradients of :meth:`forward` with respect to x, weight and bias.

        Allocates the ``dw`` scratch (``ceil(B*L / rows_per_chunk) * (K+1) * D`` f32) here.

        Args:
            x: The forward's input, laid out as in :meth:`forward`.
            weight: (D, 1, K) f32.
            grad_y: Upstream gradient (B, L, D) f32, dense.
            grad_x: Output, laid out like ``x`` (same stride and offset).
            grad_weight: Output (D, 1, K) f32.
            grad_bias: Output (D,) f32.
            batch: B.
            length: L.
            d: D.
            taps: K.
            x_stride: As in :meth:`forward`; applies to ``grad_x`` too.
            x_offset: As in :meth:`forward`; applies to ``grad_x`` too.
            accumulate: Add into the three outputs instead of overwriting them.

        Returns:
            Three dispatches to run in order: dx, dw/db partial sums, dw/db final sums.
        """
        op = "conv1d.backward"
        stride, x_floats = self._layout(op, batch, length, d, taps, x_stride, x_offset)
        n = batch * length * d
        for name, buf, count in (
            ("x", x, x_floats),
            ("weight", weight, d * taps),
            ("grad_y", grad_y, n),
            ("grad_x", grad_x, x_floats),
            ("grad_weight", grad_weight, d * taps),
            ("grad_bias", grad_bias, d),
        ):
            need_f32(op, name, buf, count)
        chunks = max(1, -(-(batch * length) // self.rows_per_chunk))
        if chunks > _MAX_CHUNKS:
            raise ShapeError(
                f"{op}: B*L={batch * length} rows make {chunks} chunks of "
                f"{self.rows_per_chunk}, over {_MAX_CHUNKS}; hint: raise rows_per_chunk"
            )
        partial = self.device.buffer(4 * chunks * (taps + 1) * d, label="conv1d.dw_partial")
        params = self._params("bwd", (batch, length, d, taps), stride, x_offset, chunks, accumulate)
        dev, wg = self.device, self.workgroup_size
        overrides = {"WG": wg}
        return [
            dev.dispatch(
                dev.kernel(SHADER, "conv1d_bwd_dx", overrides),
                {_W: weight, _DY: grad_y, _DX: grad_x, _PARAMS: params},
                grid_1d(n, wg),
                label="conv1d_bwd_dx",
            ),
            dev.dispatch(
                dev.kernel(SHADER, "conv1d_bwd_dw_partial", overrides),
                {_X: x, _DY: grad_y, _PARTIAL: partial, _PARAMS: params},
                (-(-d // wg), chunks, 1),
                label="conv1d_bwd_dw_partial",
            ),
            dev.dispatch(
                dev.kernel(SHADER, "conv1d_bwd_dw_finish", overrides),
                {_DW: grad_weight, _DB: grad_bias, _PARTIAL: partial, _PARAMS: params},
                grid_1d((taps + 1) * d, wg),
                label="conv1d_bwd_dw_finish",
            ),
        ]
