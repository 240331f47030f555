"""Launchers for ``shaders/selective_scan.wgsl``: the Mamba-1 selective scan, forward and backward.

Conventions (Mamba's ``delta_softplus``): the scan takes the RAW time step ``delta_raw``
(dt_proj output, bias included) and applies a stable softplus inside; its backward returns the
gradient with respect to that raw value. A is passed as ``A_log`` (A = -exp(A_log)) and the
backward returns ``dA_log = dA * A``. Layouts are row-major and tokens-major::

    x, delta_raw, y (B, L, D)   B, C (B, L, N)   A_log (D, N)   D (D,)   states (B, L, D, N)

Why the forward stores every state: the backward's reverse recurrence needs h_{t-1} at each
step. Storing all of them costs B*L*D*N floats (8 MiB per layer at the nano shape) and one
write per state in the forward; checkpointing per chunk would cut the memory by the chunk length
but recompute the forward (one more exp per state, the scan's dominant cost) inside the
backward, and dC needs every h_t anyway. Measured on lavapipe at B4 L128 D256 N16 the store
makes the forward ~1.6x slower (~7 ms -> ~11 ms), while a recompute would put the same exp work
back into the backward. The backward reuses the same buffer in place for g_t = dL/dh_t, so no
second (B, L, D, N) buffer is needed. ``evermind.studio.bench.kernels_scan`` reports both forwards.

The backward is five passes (dC; the reverse recurrence; per-token dx/ddelta; dB; dA_log, dD)
because one pass would need more than the 8 storage buffers a WebGPU stage gets by default.

The numpy reference is ``evermind.ops.selective_scan``.
"""

from __future__ import annotations

from evermind.errors import ConfigError, ShapeError
from evermind.gpu import Buffer, Device, Dispatch, grid_1d, pack_params
from evermind.kernels._launch import need_f32

SHADER = "selective_scan"
#: Invocations per workgroup (WGSL ``override WG``).
WORKGROUP_SIZE = 64
#: The largest state size N the shader's register arrays hold (WGSL ``MAX_STATE``).
MAX_STATE = 64

# Binding slots of selective_scan.wgsl.
(
    _X,
    _DELTA,
    _A_LOG,
    _B,
    _C,
    _D,
    _Y,
    _STATES,
    _DY,
    _DDELTA,
    _DX,
    _D_BC,
    _DA_PART,
    _DA_LOG,
    _DD,
    _PARAMS,
) = range(16)


def states_count(batch: int, length: int, dim: int, d_state: int) -> int:
    """Number of float32 values of the ``states`` buffer: B * L * D * N."""
    return batch * length * dim * d_state


class SelectiveScan:
    """Records selective-scan dispatches on one device.

    Args:
        device: The GPU device.
        workgroup_size: Invocations per workgroup, 1..256 (any value: every pass guards its
            flat index).

    Raises:
        ConfigError: The workgroup size is out of range.
    """

    def __init__(self, device: Device, workgroup_size: int = WORKGROUP_SIZE) -> None:
        if not 1 <= workgroup_size <= 256:
            raise ConfigError(
                f"selective_scan: workgroup_size must be in 1..256, got {workgroup_size}"
            )
        self.device = device
        self.workgroup_size = workgroup_size
        self._no_states: Buffer | None = None

    # -- validation ----------------------------------------------------------------------------
    def _check_sizes(self, op: str, batch: int, length: int, dim: int, d_state: int) -> None:
        for name, value in (("batch", batch), ("length", length), ("dim", dim)):
            if value < 1:
                raise ShapeError(f"{op}: {name} must be >= 1, got {value}")
        if not 1 <= d_state <= MAX_STATE:
            raise ShapeError(
                f"{op}: d_state must be in 1..{MAX_STATE}, got {d_state}; raise MAX_STATE in "
                "selective_scan.wgsl and selective_scan.py for larger states"
            )
        limit = self.device.limits.get("max_storage_buffer_binding_size", 1 << 27)
        need = 4 * states_count(batch, length, dim, d_state)
        if need > limit:
            raise ShapeError(
                f"{op}: the states buffer (B*L*D*N = {need // 4} floats, {need} bytes) exceeds "
                f"this device's {limit}-byte storage binding limit; use a smaller batch or length"
            )

    def _kernel_overrides(self, d_state: int, store_states: bool = True) -> dict[str, float]:
        return {
            "WG": self.workgroup_size,
            "N_STATE": d_state,
            "STORE_STATES": 1.0 if store_states else 0.0,
        }

    def _params(self, label: str, batch: int, length: int, dim: int) -> Buffer:
        fields = pack_params(("u32", batch), ("u32", length), ("u32", dim), ("u32", 0))
        return self.device.uniform(fields, label=label)

    # -- forward -------------------------------------------------------------------------------
    def forward(
        self,
        x: Buffer,
        delta_raw: Buffer,
        A_log: Buffer,
        B: Buffer,
        C: Buffer,
        D: Buffer,
        y: Buffer,
        batch: int,
        length: int,
        dim: int,
        d_state: int,
        states: Buffer | None = None,
    ) -> Dispatch:
        """Records the forward scan ``y = scan(x, softplus(delta_raw), -exp(A_log), B, C, D)``.

        Args:
            x: Input, (B, L, D) float32.
            delta_raw: Time step before softplus, (B, L, D).
            A_log: (D, N).
            B: Input projection, (B, L, N).
            C: Output projection, (B, L, N).
            D: Skip gain, (D,).
            y: Output, (B, L, D).
            batch, length, dim, d_state: The sizes B, L, D, N.
            states: Where to store every h_t, (B, L, D, N) (see :func:`states_count`), for
                :meth:`backward`; None for inference (nothing stored).

        Returns:
            One dispatch (one invocation per channel (b, d)).
        """
        op = "selective_scan.forward"
        self._check_sizes(op, batch, length, dim, d_state)
        tokens, n = batch * length * dim, d_state
        for name, buf, count in (
            ("x", x, tokens),
            ("delta_raw", delta_raw, tokens),
            ("A_log", A_log, dim * n),
            ("B", B, batch * length * n),
            ("C", C, batch * length * n),
            ("D", D, dim),
            ("y", y, tokens),
        ):
            need_f32(op, name, buf, count)
        if states is None:
            if self._no_states is None:
                self._no_states = self.device.buffer(4, label="selective_scan.no_states")
            store, states_buf = False, self._no_states
        else:
            need_f32(op, "states", states, states_count(batch, length, dim, d_state))
            store, states_buf = True, states
        kernel = self.device.kernel(SHADER, "scan_fwd", self._kernel_overrides(n, store))
        bindings = {
            _X: x,
            _DELTA: delta_raw,
            _A_LOG: A_log,
            _B: B,
            _C: C,
            _D: D,
            _Y: y,
            _STATES: states_buf,
            _PARAMS: self._params("scan_fwd.params", batch, length, dim),
        }
        groups = grid_1d(batch * dim, self.workgroup_size)
        return self.device.dispatch(kernel, bindings, groups, label="scan_fwd")

    # -- backward ------------------------------------------------------------------------------
    def backward(
        self,
        dy: Buffer,
        x: Buffer,
        delta_raw: Buffer,
        A_log: Buffer,
        B: Buffer,
        C: Buffer,
        D: Buffer,
        states: Buffer,
        dx: Buffer,
        ddelta_raw: Buffer,
        dA_log: Buffer,
        dB: Buffer,
        dC: Buffer,
        dD: Buffer,
        batch: int,
        length: int,
        dim: int,
        d_state: int,
    ) -> list[Dispatch]:
        """Records the backward scan: five passes, run in the returned order.

        Every output is overwritten (not accumulated into). ``dA_log`` and ``dD`` sum over batch
        and time, ``dB`` and ``dC`` over channels, each in a fixed order: the results are
        bitwise reproducible.

        Args:
            dy: Upstream gradient dL/dy, (B, L, D).
            x, delta_raw, A_log, B, C, D: The forward's inputs.
            states: The forward's stored states (B, L, D, N). CONSUMED: the backward overwrites
                it with dL/dh_t; run the forward again before another backward.
            dx: dL/dx, (B, L, D).
            ddelta_raw: dL/d delta_raw (through the softplus), (B, L, D).
            dA_log: dL/dA_log = dL/dA * A, (D, N).
            dB, dC: (B, L, N).
            dD: (D,).
            batch, length, dim, d_state: The sizes B, L, D, N.

        Returns:
            The dispatches ``[bwd_dc, bwd_scan, bwd_local, bwd_db, bwd_params]``. The launcher also
            allocates a (B, D, N) scratch buffer for per-batch dA partials, owned by them.
        """
        op = "selective_scan.backward"
        self._check_sizes(op, batch, length, dim, d_state)
        tokens, n, rows = batch * length * dim, d_state, batch * length
        for name, buf, count in (
            ("dy", dy, tokens),
            ("x", x, tokens),
            ("delta_raw", delta_raw, tokens),
            ("A_log", A_log, dim * n),
            ("B", B, rows * n),
            ("C", C, rows * n),
            ("D", D, dim),
            ("states", states, states_count(batch, length, dim, d_state)),
            ("dx", dx, tokens),
            ("ddelta_raw", ddelta_raw, tokens),
            ("dA_log", dA_log, dim * n),
            ("dB", dB, rows * n),
            ("dC", dC, rows * n),
            ("dD", dD, dim),
        ):
            need_f32(op, name, buf, count)
        dev = self.device
        overrides = self._kernel_overrides(n)
        params = self._params("scan_bwd.params", batch, length, dim)
        da_part = dev.buffer(4 * batch * dim * n, label="scan_bwd.dA_part")
        wg = self.workgroup_size
        channels, tokens_grid = grid_1d(batch * dim, wg), grid_1d(tokens, wg)
        states_grid = grid_1d(rows * n, wg)

        def record(
            entry: str, bindings: dict[int, Buffer], groups: tuple[int, int, int]
        ) -> Dispatch:
            kernel = dev.kernel(SHADER, entry, overrides)
            return dev.dispatch(kernel, {**bindings, _PARAMS: params}, groups, label=entry)

        return [
            record("bwd_dc", {_DY: dy, _STATES: states, _D_BC: dC}, states_grid),
            record(
                "bwd_scan",
                {
                    _DELTA: delta_raw,
                    _A_LOG: A_log,
                    _C: C,
                    _DY: dy,
                    _STATES: states,
                    _DDELTA: ddelta_raw,
                    _DA_PART: da_part,
                },
                channels,
            ),
            record(
                "bwd_local",
                {_X: x, _DELTA: delta_raw, _B: B, _STATES: states, _DDELTA: ddelta_raw, _DX: dx},
                tokens_grid,
            ),
            record("bwd_db", {_STATES: states, _D_BC: dB}, states_grid),
            record(
                "bwd_params",
                {
                    _DA_PART: da_part,
                    _A_LOG: A_log,
                    _D: D,
                    _DY: dy,
                    _X: x,
                    _DX: dx,
                    _DA_LOG: dA_log,
                    _DD: dD,
                },
                grid_1d(dim, wg),
            ),
        ]
