"""Launchers for ``shaders/rmsnorm.wgsl``: RMSNorm forward and backward.

``y = x * rsqrt(mean(x^2) + eps) * w`` over the last axis of ``x (M, D)``. The forward also
writes ``rstd (M,)``, which the backward reads. The backward is three dispatches: ``dx``,
then ``dw`` as fixed-order partial sums over chunks of rows and a fixed-order sum of the
partials, so the result is bit-for-bit reproducible.

The forward and ``dx`` have two strategies (``strategy=``): ``"tree"`` runs a workgroup per
row and reduces it through workgroup memory (GPUs); ``"row_serial"`` runs an invocation per
row that loops over ``D`` (no barriers: on SwiftShader it is several times faster);
``"auto"`` (the default) picks row-serial on CPU adapters (:attr:`Device.is_cpu_adapter`).

The gated, grouped variant (Mamba-2's ``MambaRMSNormGated``): :meth:`RMSNorm.gated_forward`
normalises ``u = x * silu(z)`` over groups of ``group_size`` columns and scales by one weight
over the whole row; :meth:`RMSNorm.gated_backward` returns ``dx``, ``dz`` and ``dw``. Both run
an invocation per (row, group) on every adapter (a group is d_inner / n_groups columns).

Browser-safe (standard library and ``evermind`` only).
The numpy reference is ``evermind.ops.rmsnorm``.
"""

from __future__ import annotations

from evermind.errors import ConfigError, ShapeError
from evermind.gpu import Buffer, Device, Dispatch, grid_1d, pack_params
from evermind.kernels._launch import check_power_of_two, need_f32, resolve_row_strategy

SHADER = "rmsnorm"
#: Invocations per workgroup (the WGSL ``override WG``): a power of two <= 256. 64 measured
#: fastest on lavapipe at the nano shape (fewer barrier rounds and idle lanes than 128/256).
WORKGROUP_SIZE = 64
#: Rows summed by one invocation of the ``dw`` partial pass.
ROWS_PER_CHUNK = 32
#: The largest number of row chunks (the y extent of the ``dw`` partial grid).
_MAX_CHUNKS = 65535

# Binding slots of rmsnorm.wgsl.
_X, _W, _Y, _RSTD, _DY, _DX, _DW, _PARTIAL, _PARAMS, _GATE, _DGATE = range(11)


class RMSNorm:
    """Records RMSNorm dispatches on one device.

    Args:
        device: The GPU device.
        workgroup_size: Override for ``WG``; a power of two <= 256.
        rows_per_chunk: Rows one invocation sums in the ``dw`` partial pass (>= 1).
        strategy: ``"auto"``, ``"tree"`` or ``"row_serial"`` for the forward and ``dx``
            (see the module docstring); the resolved choice is kept in ``self.strategy``.
    """

    def __init__(
        self,
        device: Device,
        workgroup_size: int = WORKGROUP_SIZE,
        rows_per_chunk: int = ROWS_PER_CHUNK,
        strategy: str = "auto",
    ) -> None:
        self.device = device
        self.strategy = resolve_row_strategy("rmsnorm", device, strategy)
        self.workgroup_size = check_power_of_two("rmsnorm", workgroup_size)
        if rows_per_chunk < 1:
            raise ConfigError(f"rmsnorm: rows_per_chunk must be >= 1, got {rows_per_chunk}")
        self.rows_per_chunk = rows_per_chunk

    def _params(
        self,
        name: str,
        m: int,
        d: int,
        eps: float,
        accumulate: bool,
        chunks: int,
        group_size: int = 0,
    ) -> Buffer:
        return self.device.uniform(
            pack_params(
                ("u32", m),
                ("u32", d),
                ("f32", eps),
                ("u32", int(accumulate)),
                ("u32", self.rows_per_chunk),
                ("u32", chunks),
                ("u32", group_size),
            ),
            label=f"rmsnorm.{name}.params",
        )

    def _check(self, m: int, d: int, eps: float) -> None:
        if m < 0 or d < 1:
            raise ShapeError(f"rmsnorm: expected M >= 0 rows of D >= 1 values, got M={m}, D={d}")
        if not eps > 0.0:
            raise ConfigError(f"rmsnorm: eps must be > 0 (it keeps rstd finite), got {eps}")

    def _kernel_overrides(self) -> dict[str, float]:
        return {"WG": self.workgroup_size}

    def forward(
        self, x: Buffer, weight: Buffer, y: Buffer, rstd: Buffer, m: int, d: int, eps: float = 1e-5
    ) -> Dispatch:
        """``y = x * rstd * weight`` with ``rstd = 1 / sqrt(mean(x^2) + eps)`` per row.

        Args:
            x: Input, (M, D) f32.
            weight: Gain, (D,) f32.
            y: Output, (M, D) f32.
            rstd: Output, (M,) f32: the reciprocal RMS per row, kept for the backward.
            m: Rows M (B * L).
            d: Columns D.
            eps: Added to the mean square (the model config's ``norm_eps``).
        """
        self._check(m, d, eps)
        op = "rmsnorm.forward"
        need_f32(op, "x", x, m * d)
        need_f32(op, "weight", weight, d)
        need_f32(op, "y", y, m * d)
        need_f32(op, "rstd", rstd, m)
        params = self._params("fwd", m, d, eps, False, 0)
        entry, grid = self._row_entry("rmsnorm_fwd", m)
        kernel = self.device.kernel(SHADER, entry, self._kernel_overrides())
        return self.device.dispatch(
            kernel,
            {_X: x, _W: weight, _Y: y, _RSTD: rstd, _PARAMS: params},
            grid,
            label=entry,
        )

    def _row_entry(self, tree_entry: str, m: int) -> tuple[str, tuple[int, int, int]]:
        """The entry point and grid of a per-row pass under this launcher's strategy."""
        if self.strategy == "row_serial":
            return f"{tree_entry}_rows", grid_1d(m, self.workgroup_size)
        return tree_entry, grid_1d(m, 1)  # one workgroup per row

    def backward(
        self,
        x: Buffer,
        weight: Buffer,
        rstd: Buffer,
        grad_y: Buffer,
        grad_x: Buffer,
        grad_weight: Buffer,
        m: int,
        d: int,
        accumulate: bool = False,
    ) -> list[Dispatch]:
        """Gradients of :meth:`forward`: ``grad_x`` (M, D) and ``grad_weight`` (D,).

        Allocates the ``dw`` scratch (``ceil(M / rows_per_chunk) * D`` f32) once, here.

        Args:
            x: The forward's input, (M, D) f32.
            weight: Gain, (D,) f32.
            rstd: The forward's ``rstd`` output, (M,) f32.
            grad_y: Upstream gradient, (M, D) f32.
            grad_x: Output, (M, D) f32.
            grad_weight: Output, (D,) f32.
            m: Rows M.
            d: Columns D.
            accumulate: Add into ``grad_x`` and ``grad_weight`` instead of overwriting them
                (a residual stream's gradient, micro-batch accumulation).

        Returns:
            Three dispatches to run in order: dx, dw partial sums, dw final sum.
        """
        self._check(m, d, 1.0)
        op = "rmsnorm.backward"
        for name, buf, count in (
            ("x", x, m * d),
            ("weight", weight, d),
            ("rstd", rstd, m),
            ("grad_y", grad_y, m * d),
            ("grad_x", grad_x, m * d),
            ("grad_weight", grad_weight, d),
        ):
            need_f32(op, name, buf, count)
        chunks = max(1, -(-m // self.rows_per_chunk))
        if chunks > _MAX_CHUNKS:
            raise ShapeError(
                f"{op}: M={m} rows make {chunks} chunks of {self.rows_per_chunk}, over "
                f"{_MAX_CHUNKS}; hint: raise rows_per_chunk"
            )
        partial = self.device.buffer(4 * chunks * d, label="rmsnorm.dw_partial")
        params = self._params("bwd", m, d, 1.0, accumulate, chunks)
        wg = self.workgroup_size
        dev = self.device
        dx_entry, dx_grid = self._row_entry("rmsnorm_bwd_dx", m)
        dx = dev.dispatch(
            dev.kernel(SHADER, dx_entry, self._kernel_overrides()),
            {_X: x, _W: weight, _RSTD: rstd, _DY: grad_y, _DX: grad_x, _PARAMS: params},
            dx_grid,
            label=dx_entry,
        )
        dw_partial = dev.dispatch(
            dev.kernel(SHADER, "rmsnorm_bwd_dw_partial", self._kernel_overrides()),
            {_X: x, _RSTD: rstd, _DY: grad_y, _PARTIAL: partial, _PARAMS: params},
            (-(-d // wg), chunks, 1),
            label="rmsnorm_bwd_dw_partial",
        )
        dw_finish = dev.dispatch(
            dev.kernel(SHADER, "rmsnorm_bwd_dw_finish", self._kernel_overrides()),
            {_DW: grad_weight, _PARTIAL: partial, _PARAMS: params},
            grid_1d(d, wg),
            label="rmsnorm_bwd_dw_finish",
        )
        return [dx, dw_partial, dw_finish]

    # -- the gated, grouped variant ----------------------------------------------------------
    def _check_gated(self, op: str, m: int, d: int, group_size: int, eps: float) -> int:
        """The number of groups G = D / group_size, or ShapeError / ConfigError."""
        self._check(m, d, eps)
        if group_size < 1 or d % group_size:
            raise ShapeError(
                f"{op}: the row of {d} columns does not split into groups of {group_size}; "
                "hint: group_size = d_inner / n_groups"
            )
        return d // group_size

    def gated_forward(
        self,
        x: Buffer,
        gate: Buffer,
        weight: Buffer,
        y: Buffer,
        rstd: Buffer,
        m: int,
        d: int,
        group_size: int,
        eps: float = 1e-5,
    ) -> Dispatch:
        """``y = weight * rmsnorm_groups(x * silu(gate))`` (``ops.rmsnorm.rmsnorm_gated_fwd``).

        Args:
            x: Input, (M, D) f32.
            gate: The gate z, (M, D) f32.
            weight: Gain over the whole row, (D,) f32.
            y: Output, (M, D) f32.
            rstd: Output, (M, D / group_size) f32: one reciprocal RMS per row and group.
            m: Rows M.
            d: Columns D.
            group_size: Columns normalised together; divides D.
            eps: Added to each group's mean square.

        Raises:
            ShapeError: ``group_size`` does not divide D, or a buffer is too small.
            ConfigError: ``eps`` is not positive.
        """
        op = "rmsnorm.gated_forward"
        groups = self._check_gated(op, m, d, group_size, eps)
        for name, buf, count in (
            ("x", x, m * d),
            ("gate", gate, m * d),
            ("weight", weight, d),
            ("y", y, m * d),
            ("rstd", rstd, m * groups),
        ):
            need_f32(op, name, buf, count)
        params = self._params("gated_fwd", m, d, eps, False, 0, group_size)
        kernel = self.device.kernel(SHADER, "gated_fwd_rows", self._kernel_overrides())
        return self.device.dispatch(
            kernel,
            {_X: x, _GATE: gate, _W: weight, _Y: y, _RSTD: rstd, _PARAMS: params},
            grid_1d(m * groups, self.workgroup_size),
            label="gated_fwd_rows",
        )

    def gated_backward(
        self,
        x: Buffer,
        gate: Buffer,
        weight: Buffer,
        rstd: Buffer,
        grad_y: Buffer,
        grad_x: Buffer,
        grad_gate: Buffer,
        grad_weight: Buffer,
        m: int,
        d: int,
        group_size: int,
        accumulate_weight: bool = False,
    ) -> list[Dispatch]:
        """Gradients of :meth:`gated_forward` (``ops.rmsnorm.rmsnorm_gated_bwd``).

        ``grad_x`` and ``grad_gate`` are overwritten; ``grad_weight`` too unless
        ``accumulate_weight``. Allocates the ``dw`` scratch once, here.

        Args:
            x, gate, weight: The forward's inputs.
            rstd: The forward's ``rstd`` output, (M, D / group_size) f32.
            grad_y: Upstream gradient, (M, D) f32.
            grad_x, grad_gate: Outputs, (M, D) f32.
            grad_weight: Output, (D,) f32.
            m, d, group_size: As in the forward.
            accumulate_weight: Add into ``grad_weight`` (micro-batch accumulation).

        Returns:
            Three dispatches to run in order: dx and dz, dw partial sums, dw final sum.

        Raises:
            ShapeError: ``group_size`` does not divide D, or a buffer is too small.
        """
        op = "rmsnorm.gated_backward"
        groups = self._check_gated(op, m, d, group_size, 1.0)
        for name, buf, count in (
            ("x", x, m * d),
            ("gate", gate, m * d),
            ("weight", weight, d),
            ("rstd", rstd, m * groups),
            ("grad_y", grad_y, m * d),
            ("grad_x", grad_x, m * d),
            ("grad_gate", grad_gate, m * d),
            ("grad_weight", grad_weight, d),
        ):
            need_f32(op, name, buf, count)
        chunks = max(1, -(-m // self.rows_per_chunk))
        if chunks > _MAX_CHUNKS:
            raise ShapeError(
                f"{op}: M={m} rows make {chunks} chunks of {self.rows_per_chunk}, over "
                f"{_MAX_CHUNKS}; hint: raise rows_per_chunk"
            )
        partial = self.device.buffer(4 * chunks * d, label="rmsnorm.gated_dw_partial")
        params = self._params("gated_bwd", m, d, 1.0, accumulate_weight, chunks, group_size)
        dev, wg = self.device, self.workgroup_size

        def record(entry: str, bindings: dict[int, Buffer], grid: tuple[int, int, int]) -> Dispatch:
            kernel = dev.kernel(SHADER, entry, self._kernel_overrides())
            return dev.dispatch(kernel, {**bindings, _PARAMS: params}, grid, label=entry)

        return [
            record(
                "gated_bwd_dx_rows",
                {
                    _X: x,
                    _GATE: gate,
                    _W: weight,
                    _RSTD: rstd,
                    _DY: grad_y,
                    _DX: grad_x,
                    _DGATE: grad_gate,
                },
                grid_1d(m * groups, wg),
            ),
            record(
                "gated_bwd_dw_partial",
                {_X: x, _GATE: gate, _RSTD: rstd, _DY: grad_y, _PARTIAL: partial},
                (-(-d // wg), chunks, 1),
            ),
            record("rmsnorm_bwd_dw_finish", {_DW: grad_weight, _PARTIAL: partial}, grid_1d(d, wg)),
        ]
