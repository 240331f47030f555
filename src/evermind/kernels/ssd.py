"""Launchers for ``shaders/ssd.wgsl``: the Mamba-2 SSD scan, chunked forward and backward.

Conventions (``ops.ssd``, HF's ``Mamba2Mixer``): the scan takes the RAW time step ``dt_raw``
(in_proj's dt part) and the per-head ``dt_bias``, and applies ``clamp(softplus(dt_raw +
dt_bias), lo, hi)`` inside; A is passed as ``A_log`` (A = -exp(A_log), one scalar per head)
and the backward returns ``dA_log = dA * A``. Layouts are row-major and tokens-major::

    x, y (B, L, H, P)   dt_raw, dt (B, L, H)   B, C (B, L, G, N)   A_log, D, dt_bias (H,)
    chunk_states (B, ceil(L / Q), H, P, N)

The forward is the chunked state-space-dual algorithm (four passes: dt; each chunk's own
state; the states passed across chunks; the output, the intra-chunk quadratic part plus the
entering state's part plus D x). It keeps ``dt`` and the chunk-boundary states, which the
backward reads: instead of storing every h_t as the Mamba-1 scan does (B·L·H·P·N floats per
layer), the backward recomputes h_t chunk by chunk from those checkpoints, into one scratch
buffer the launcher shares between every backward it records (the dispatches run in order).
The backward is then eight passes (recompute; dC; the reverse recurrence per (b, h, p) lane;
per-lane dx; ddt_raw; dB; dA_log and ddt_bias; dD and the skip's dx), split so that no pass
binds more than the 8 storage buffers a WebGPU stage gets by default. :meth:`SSD.decode_step`
is the recurrent step the GPU decoder runs (``ops.ssd.ssd_decode_step``).

Browser-safe (standard library and ``evermind`` only). The numpy reference is ``evermind.ops.ssd``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from evermind.errors import ConfigError, ShapeError
from evermind.gpu import Buffer, Device, Dispatch, grid_1d, pack_params
from evermind.kernels._launch import need_f32

SHADER = "ssd"
#: Invocations per workgroup (WGSL ``override WG``).
WORKGROUP_SIZE = 64
#: The largest state size N the shader's register arrays hold (WGSL ``MAX_STATE``).
MAX_STATE = 128
#: The largest head_dim P (WGSL ``MAX_HEAD_DIM``: the output pass keeps a head in registers).
MAX_HEAD_DIM = 128
#: HF's default ``time_step_limit``: no clamp (as ``ops.ssd.DT_LIMIT_NONE``).
DT_LIMIT_NONE: tuple[float, float] = (0.0, math.inf)

# Binding slots of ssd.wgsl.
(
    _X,
    _DT_RAW,
    _A_LOG,
    _B,
    _C,
    _D,
    _DT_BIAS,
    _Y,
    _DT,
    _CHUNK_STATES,
    _STATES,
    _DY,
    _DX,
    _DDT,
    _D_BC,
    _LANE_DA,
    _DA_PART,
    _DA_LOG,
    _DD,
    _DDT_BIAS,
    _PARAMS,
) = range(21)


def n_chunks(length: int, chunk_size: int) -> int:
    """Chunks of ``chunk_size`` steps covering ``length`` steps: ceil(L / Q)."""
    return -(-length // chunk_size)


def chunk_states_count(
    batch: int, length: int, heads: int, head_dim: int, d_state: int, chunk_size: int
) -> int:
    """Float32 values of the ``chunk_states`` buffer: B * ceil(L / Q) * H * P * N."""
    return batch * n_chunks(length, chunk_size) * heads * head_dim * d_state


class SSD:
    """Records SSD-scan dispatches on one device.

    Args:
        device: The GPU device.
        workgroup_size: Invocations per workgroup, 1..256 (every pass guards its flat index).

    Raises:
        ConfigError: The workgroup size is out of range.
    """

    def __init__(self, device: Device, workgroup_size: int = WORKGROUP_SIZE) -> None:
        if not 1 <= workgroup_size <= 256:
            raise ConfigError(f"ssd: workgroup_size must be in 1..256, got {workgroup_size}")
        self.device = device
        self.workgroup_size = workgroup_size
        self._scratch: dict[tuple[str, int], Buffer] = {}

    # -- validation ----------------------------------------------------------------------------
    def _check_sizes(
        self,
        op: str,
        sizes: tuple[int, int, int, int, int, int],
        chunk_size: int,
        dt_limit: tuple[float, float],
    ) -> None:
        batch, length, heads, head_dim, groups, d_state = sizes
        for name, value in (
            ("batch", batch),
            ("length", length),
            ("heads", heads),
            ("head_dim", head_dim),
            ("groups", groups),
            ("chunk_size", chunk_size),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ShapeError(f"{op}: {name} must be an int >= 1, got {value!r}")
        if heads % groups:
            raise ShapeError(
                f"{op}: {heads} heads do not split into {groups} groups; hint: n_groups must "
                "divide the number of heads"
            )
        if not 1 <= d_state <= MAX_STATE:
            raise ShapeError(
                f"{op}: d_state must be in 1..{MAX_STATE}, got {d_state}; raise MAX_STATE in "
                "ssd.wgsl and ssd.py for larger states"
            )
        if head_dim > MAX_HEAD_DIM:
            raise ShapeError(
                f"{op}: head_dim must be <= {MAX_HEAD_DIM}, got {head_dim}; raise MAX_HEAD_DIM "
                "in ssd.wgsl and ssd.py for wider heads"
            )
        low, high = dt_limit
        if not 0.0 <= low <= high:
            raise ShapeError(f"{op}: dt_limit must be (lo, hi) with 0 <= lo <= hi, got {dt_limit}")
        limit = self.device.limits.get("max_storage_buffer_binding_size", 1 << 27)
        need = 4 * batch * length * heads * head_dim * d_state
        if need > limit:
            raise ShapeError(
                f"{op}: the backward's states scratch (B*L*H*P*N = {need // 4} floats, {need} "
                f"bytes) exceeds this device's {limit}-byte storage binding limit; use a smaller "
                "batch or length"
            )

    def _params(
        self,
        label: str,
        sizes: tuple[int, int, int, int, int, int],
        chunk_size: int,
        dt_limit: tuple[float, float],
    ) -> Buffer:
        batch, length, heads, head_dim, groups, _ = sizes
        fields = pack_params(
            ("u32", batch),
            ("u32", length),
            ("u32", heads),
            ("u32", head_dim),
            ("u32", groups),
            ("u32", chunk_size),
            ("u32", n_chunks(length, chunk_size)),
            ("u32", 0),
            ("f32", dt_limit[0]),
            ("f32", dt_limit[1]),
        )
        return self.device.uniform(fields, label=label)

    def _recorder(
        self, params: Buffer, d_state: int
    ) -> Callable[[str, dict[int, Buffer], int], Dispatch]:
        """``record(entry, bindings, count)``: one dispatch of ``entry`` over ``count`` lanes
        with ``params`` bound, the shader specialised to this launcher's workgroup and
        ``d_state``."""
        dev, wg = self.device, self.workgroup_size
        overrides = {"WG": wg, "N_STATE": d_state}

        def record(entry: str, bindings: dict[int, Buffer], count: int) -> Dispatch:
            kernel = dev.kernel(SHADER, entry, overrides)
            return dev.dispatch(
                kernel, {**bindings, _PARAMS: params}, grid_1d(count, wg), label=entry
            )

        return record

    def _scratch_buffer(self, name: str, count: int) -> Buffer:
        """A scratch buffer of at least ``count`` floats, shared by every recorded backward."""
        key = (name, count)
        if key not in self._scratch:
            self._scratch[key] = self.device.buffer(4 * count, label=f"ssd_bwd.{name}")
        return self._scratch[key]

    # -- forward -------------------------------------------------------------------------------
    def forward(
        self,
        x: Buffer,
        dt_raw: Buffer,
        A_log: Buffer,
        B: Buffer,
        C: Buffer,
        D: Buffer,
        dt_bias: Buffer,
        y: Buffer,
        dt: Buffer,
        chunk_states: Buffer,
        sizes: tuple[int, int, int, int, int, int],
        chunk_size: int,
        dt_limit: tuple[float, float] = DT_LIMIT_NONE,
    ) -> list[Dispatch]:
        """Records the chunked forward ``y = ssd(x, dt_raw, A_log, B, C, D, dt_bias)``.

        Args:
            x: Input, (B, L, H, P) float32.
            dt_raw: Time step before bias and softplus, (B, L, H).
            A_log, D, dt_bias: Per head, (H,).
            B, C: Input / output projections, (B, L, G, N).
            y: Output, (B, L, H, P).
            dt: Written: the clamped softplus time step (B, L, H), which :meth:`backward` reads.
            chunk_states: Written: the state after each chunk, (B, ceil(L / Q), H, P, N) (see
                :func:`chunk_states_count`), which :meth:`backward` reads; the last chunk's is
                the final state.
            sizes: ``(batch, length, heads, head_dim, groups, d_state)``: B, L, H, P, G, N (a
                list is accepted too: the browser harness passes JSON).
            chunk_size: Steps per chunk, Q >= 1 (L need not be a multiple of it).
            dt_limit: ``(lo, hi)`` clamp of dt; ``hi`` may be ``math.inf``.

        Returns:
            The dispatches ``[fwd_dt, fwd_chunk_state, fwd_state_pass, fwd_output]``.

        Raises:
            ShapeError: A size is out of range or a buffer is too small.
        """
        op = "ssd.forward"
        self._check_sizes(op, sizes, chunk_size, dt_limit)
        batch, length, heads, head_dim, groups, n = sizes
        lanes, steps = batch * length * heads * head_dim, batch * length * heads
        chunk_count = chunk_states_count(batch, length, heads, head_dim, n, chunk_size)
        for name, buf, count in (
            ("x", x, lanes),
            ("dt_raw", dt_raw, steps),
            ("A_log", A_log, heads),
            ("B", B, batch * length * groups * n),
            ("C", C, batch * length * groups * n),
            ("D", D, heads),
            ("dt_bias", dt_bias, heads),
            ("y", y, lanes),
            ("dt", dt, steps),
            ("chunk_states", chunk_states, chunk_count),
        ):
            need_f32(op, name, buf, count)
        params = self._params("ssd_fwd.params", sizes, chunk_size, dt_limit)
        chunk_lanes = batch * n_chunks(length, chunk_size) * heads * head_dim

        record = self._recorder(params, n)

        return [
            record("fwd_dt", {_DT_RAW: dt_raw, _DT_BIAS: dt_bias, _DT: dt}, steps),
            record(
                "fwd_chunk_state",
                {_X: x, _DT: dt, _A_LOG: A_log, _B: B, _CHUNK_STATES: chunk_states},
                chunk_lanes,
            ),
            record(
                "fwd_state_pass",
                {_DT: dt, _A_LOG: A_log, _CHUNK_STATES: chunk_states},
                batch * heads * head_dim,
            ),
            record(
                "fwd_output",
                {
                    _X: x,
                    _DT: dt,
                    _A_LOG: A_log,
                    _B: B,
                    _C: C,
                    _D: D,
                    _CHUNK_STATES: chunk_states,
                    _Y: y,
                },
                steps,
            ),
        ]

    # -- backward ------------------------------------------------------------------------------
    def backward(
        self,
        dy: Buffer,
        x: Buffer,
        dt_raw: Buffer,
        A_log: Buffer,
        B: Buffer,
        C: Buffer,
        D: Buffer,
        dt_bias: Buffer,
        dt: Buffer,
        chunk_states: Buffer,
        dx: Buffer,
        ddt_raw: Buffer,
        dA_log: Buffer,
        dB: Buffer,
        dC: Buffer,
        dD: Buffer,
        ddt_bias: Buffer,
        sizes: tuple[int, int, int, int, int, int],
        chunk_size: int,
        dt_limit: tuple[float, float] = DT_LIMIT_NONE,
    ) -> list[Dispatch]:
        """Records the backward: eight passes, run in the returned order, after :meth:`forward`.

        Every output is overwritten (not accumulated into). Each reduction loops in a fixed
        order: the results are bitwise reproducible.

        Args:
            dy: Upstream gradient dL/dy, (B, L, H, P).
            x, dt_raw, A_log, B, C, D, dt_bias: The forward's inputs.
            dt, chunk_states: What the forward wrote (read only).
            dx, ddt_raw, dA_log, dB, dC, dD, ddt_bias: The gradients, shaped like ``(x, dt_raw,
                A_log, B, C, D, dt_bias)``: what ``ops.ssd.ssd_bwd`` returns.
            sizes, chunk_size, dt_limit: As in the forward.

        Returns:
            The dispatches ``[bwd_recompute, bwd_dc, bwd_scan, bwd_dx, bwd_ddt, bwd_db,
            bwd_head_grads, bwd_skip]``.

        Raises:
            ShapeError: A size is out of range or a buffer is too small.
        """
        op = "ssd.backward"
        self._check_sizes(op, sizes, chunk_size, dt_limit)
        batch, length, heads, head_dim, groups, n = sizes
        lanes, steps = batch * length * heads * head_dim, batch * length * heads
        rows = batch * length * groups * n
        for name, buf, count in (
            ("dy", dy, lanes),
            ("x", x, lanes),
            ("dt_raw", dt_raw, steps),
            ("A_log", A_log, heads),
            ("B", B, rows),
            ("C", C, rows),
            ("D", D, heads),
            ("dt_bias", dt_bias, heads),
            ("dt", dt, steps),
            ("chunk_states", chunk_states, chunk_states_count(*sizes[:4], n, chunk_size)),
            ("dx", dx, lanes),
            ("ddt_raw", ddt_raw, steps),
            ("dA_log", dA_log, heads),
            ("dB", dB, rows),
            ("dC", dC, rows),
            ("dD", dD, heads),
            ("ddt_bias", ddt_bias, heads),
        ):
            need_f32(op, name, buf, count)
        params = self._params("ssd_bwd.params", sizes, chunk_size, dt_limit)
        states = self._scratch_buffer("states", lanes * n)
        lane_da = self._scratch_buffer("lane_da", lanes)
        da_part = self._scratch_buffer("da_part", batch * heads * head_dim)
        chunk_lanes = batch * n_chunks(length, chunk_size) * heads * head_dim
        head_lanes = batch * heads * head_dim

        record = self._recorder(params, n)

        return [
            record(
                "bwd_recompute",
                {
                    _X: x,
                    _DT: dt,
                    _A_LOG: A_log,
                    _B: B,
                    _CHUNK_STATES: chunk_states,
                    _STATES: states,
                },
                chunk_lanes,
            ),
            record("bwd_dc", {_DY: dy, _STATES: states, _D_BC: dC}, rows),
            record(
                "bwd_scan",
                {
                    _DT: dt,
                    _A_LOG: A_log,
                    _C: C,
                    _DY: dy,
                    _STATES: states,
                    _LANE_DA: lane_da,
                    _DA_PART: da_part,
                },
                head_lanes,
            ),
            record(
                "bwd_dx",
                {
                    _X: x,
                    _DT: dt,
                    _A_LOG: A_log,
                    _B: B,
                    _STATES: states,
                    _DX: dx,
                    _LANE_DA: lane_da,
                },
                lanes,
            ),
            record(
                "bwd_ddt",
                {_DT_RAW: dt_raw, _DT_BIAS: dt_bias, _LANE_DA: lane_da, _DDT: ddt_raw},
                steps,
            ),
            record("bwd_db", {_STATES: states, _D_BC: dB}, rows),
            record(
                "bwd_head_grads",
                {
                    _DA_PART: da_part,
                    _A_LOG: A_log,
                    _DDT: ddt_raw,
                    _DA_LOG: dA_log,
                    _DDT_BIAS: ddt_bias,
                },
                heads,
            ),
            record("bwd_skip", {_D: D, _DY: dy, _X: x, _DX: dx, _DD: dD}, heads),
        ]

    # -- recurrent decoding --------------------------------------------------------------------
    def decode_step(
        self,
        state: Buffer,
        x: Buffer,
        dt_raw: Buffer,
        A_log: Buffer,
        B: Buffer,
        C: Buffer,
        D: Buffer,
        dt_bias: Buffer,
        y: Buffer,
        sizes: tuple[int, int, int, int, int],
        dt_limit: tuple[float, float] = DT_LIMIT_NONE,
    ) -> list[Dispatch]:
        """Records one decoding step (``ops.ssd.ssd_decode_step``), the state updated in place.

        Args:
            state: The decoding state, (B, H, P, N) float32; read and overwritten.
            x: Input (the conv step's x part), (B, H, P).
            dt_raw: Time step before bias and softplus, (B, H).
            A_log, D, dt_bias: Per head, (H,).
            B, C: (B, G, N).
            y: Output, (B, H, P).
            sizes: ``(batch, heads, head_dim, groups, d_state)``: B, H, P, G, N.
            dt_limit: As in :meth:`forward`.

        Returns:
            The dispatches ``[fwd_dt, decode_step]`` (dt goes through a launcher-owned scratch).

        Raises:
            ShapeError: A size is out of range or a buffer is too small.
        """
        op = "ssd.decode_step"
        batch, heads, head_dim, groups, n = sizes
        full = (batch, 1, heads, head_dim, groups, n)
        self._check_sizes(op, full, 1, dt_limit)
        lanes, steps = batch * heads * head_dim, batch * heads
        for name, buf, count in (
            ("state", state, lanes * n),
            ("x", x, lanes),
            ("dt_raw", dt_raw, steps),
            ("A_log", A_log, heads),
            ("B", B, batch * groups * n),
            ("C", C, batch * groups * n),
            ("D", D, heads),
            ("dt_bias", dt_bias, heads),
            ("y", y, lanes),
        ):
            need_f32(op, name, buf, count)
        params = self._params("ssd_decode.params", full, 1, dt_limit)
        dt = self._scratch_buffer("decode_dt", steps)

        record = self._recorder(params, n)

        return [
            record("fwd_dt", {_DT_RAW: dt_raw, _DT_BIAS: dt_bias, _DT: dt}, steps),
            record(
                "decode_step",
                {
                    _X: x,
                    _DT: dt,
                    _A_LOG: A_log,
                    _B: B,
                    _C: C,
                    _D: D,
                    _Y: y,
                    _STATES: state,
                },
                lanes,
            ),
        ]
