"""Launchers for ``shaders/recurrent_step.wgsl``: one generation step of the Mamba mixer's core.

Two dispatches per layer and token, both O(1) in the sequence length:

- :meth:`RecurrentStep.conv_step`: the causal depthwise conv1d + SiLU on a (B, D, d_conv)
  shift register of the last inputs;
- :meth:`RecurrentStep.ssm_step`: the selective-scan recurrence on the (B, D, N) state;
- :meth:`RecurrentStep.gather_rows` / :meth:`RecurrentStep.scatter_rows`: batched decoding
  over state slots copies the rows of a step's slots (a ``u32`` slot list written per step)
  out of the (S, R) states of all slots and back.

Both are recorded once and replayed for every generated token: the per-token inputs (x, delta,
B_t, C_t) are written into the same buffers by the kernels that produce them, and the states
are updated in place, so nothing in a uniform changes between steps. Start a new sequence by
zeroing ``conv_state`` and ``h`` (``device.write`` of zeros).
The numpy reference is ``evermind.ops.recurrent_step``.
"""

from __future__ import annotations

from evermind.errors import ConfigError, ShapeError
from evermind.gpu import Buffer, Device, Dispatch, grid_1d, pack_params
from evermind.kernels._launch import need_f32

SHADER = "recurrent_step"
#: Invocations per workgroup (WGSL ``override WG``).
WORKGROUP_SIZE = 64

# Binding slots of recurrent_step.wgsl.
(
    _CONV_STATE,
    _X_IN,
    _CONV_WEIGHT,
    _CONV_BIAS,
    _X_CONV,
    _H,
    _X_C,
    _DELTA,
    _A_LOG,
    _B_T,
    _C_T,
    _D,
    _Y,
    _PARAMS,
    _ROWS_IN,
    _ROWS_OUT,
    _SLOT_OF,
) = range(17)


class RecurrentStep:
    """Records recurrent-step dispatches on one device.

    Args:
        device: The GPU device.
        workgroup_size: Invocations per workgroup, 1..256.

    Raises:
        ConfigError: The workgroup size is out of range.
    """

    def __init__(self, device: Device, workgroup_size: int = WORKGROUP_SIZE) -> None:
        if not 1 <= workgroup_size <= 256:
            raise ConfigError(
                f"recurrent_step: workgroup_size must be in 1..256, got {workgroup_size}"
            )
        self.device = device
        self.workgroup_size = workgroup_size

    def _record(
        self,
        entry: str,
        bindings: dict[int, Buffer],
        batch: int,
        dim: int,
        d_state: int,
        d_conv: int,
    ) -> Dispatch:
        fields = pack_params(("u32", batch), ("u32", dim), ("u32", d_state), ("u32", d_conv))
        params = self.device.uniform(fields, label=f"{entry}.params")
        kernel = self.device.kernel(SHADER, entry, {"WG": self.workgroup_size})
        groups = grid_1d(batch * dim, self.workgroup_size)
        return self.device.dispatch(kernel, {**bindings, _PARAMS: params}, groups, label=entry)

    @staticmethod
    def _check_positive(op: str, **sizes: int) -> None:
        for name, value in sizes.items():
            if value < 1:
                raise ShapeError(f"{op}: {name} must be >= 1, got {value}")

    def conv_step(
        self,
        conv_state: Buffer,
        x: Buffer,
        weight: Buffer,
        bias: Buffer,
        x_conv: Buffer,
        batch: int,
        dim: int,
        d_conv: int,
    ) -> Dispatch:
        """Records one causal-conv step: shift ``x`` into ``conv_state``, then ``silu(conv)``.

        Args:
            conv_state: The last ``d_conv`` inputs per channel, oldest first, (B, D, d_conv);
                updated in place. Zero at the start of a sequence.
            x: The new token's conv input, (B, D).
            weight: Depthwise conv weight in PyTorch layout, (D, 1, d_conv).
            bias: Conv bias, (D,).
            x_conv: Output ``silu(bias + sum_k state[k] * weight[k])``, (B, D).
            batch, dim, d_conv: The sizes B, D, d_conv.
        """
        op = "recurrent_step.conv_step"
        self._check_positive(op, batch=batch, dim=dim, d_conv=d_conv)
        channels = batch * dim
        for name, buf, count in (
            ("conv_state", conv_state, channels * d_conv),
            ("x", x, channels),
            ("weight", weight, dim * d_conv),
            ("bias", bias, dim),
            ("x_conv", x_conv, channels),
        ):
            need_f32(op, name, buf, count)
        bindings = {
            _CONV_STATE: conv_state,
            _X_IN: x,
            _CONV_WEIGHT: weight,
            _CONV_BIAS: bias,
            _X_CONV: x_conv,
        }
        return self._record("conv_step", bindings, batch, dim, 0, d_conv)

    def ssm_step(
        self,
        h: Buffer,
        x_c: Buffer,
        delta_raw: Buffer,
        A_log: Buffer,
        B_t: Buffer,
        C_t: Buffer,
        D: Buffer,
        y: Buffer,
        batch: int,
        dim: int,
        d_state: int,
    ) -> Dispatch:
        """Records one selective-scan step: update ``h`` in place and write ``y``.

        Args:
            h: The SSM state, (B, D, N); updated in place. Zero at the start of a sequence.
            x_c: The conv branch's output for this token, (B, D).
            delta_raw: Time step before softplus, (B, D).
            A_log: (D, N); A = -exp(A_log).
            B_t: Input projection of this token, (B, N).
            C_t: Output projection of this token, (B, N).
            D: Skip gain, (D,).
            y: Output, (B, D).
            batch, dim, d_state: The sizes B, D, N.
        """
        op = "recurrent_step.ssm_step"
        self._check_positive(op, batch=batch, dim=dim, d_state=d_state)
        channels = batch * dim
        for name, buf, count in (
            ("h", h, channels * d_state),
            ("x_c", x_c, channels),
            ("delta_raw", delta_raw, channels),
            ("A_log", A_log, dim * d_state),
            ("B_t", B_t, batch * d_state),
            ("C_t", C_t, batch * d_state),
            ("D", D, dim),
            ("y", y, channels),
        ):
            need_f32(op, name, buf, count)
        bindings = {
            _H: h,
            _X_C: x_c,
            _DELTA: delta_raw,
            _A_LOG: A_log,
            _B_T: B_t,
            _C_T: C_t,
            _D: D,
            _Y: y,
        }
        return self._record("ssm_step", bindings, batch, dim, d_state, 0)

    def _rows(
        self,
        entry: str,
        rows_in: Buffer,
        slot_of: Buffer,
        rows_out: Buffer,
        batch: int,
        row_size: int,
        slots: int,
    ) -> Dispatch:
        op = f"recurrent_step.{entry}"
        self._check_positive(op, batch=batch, row_size=row_size, slots=slots)
        if batch > slots:
            raise ShapeError(f"{op}: {batch} rows exceed the {slots} slots")
        dense, full = batch * row_size, slots * row_size
        gather = entry == "gather_rows"
        need_f32(op, "rows_in", rows_in, full if gather else dense)
        need_f32(op, "rows_out", rows_out, dense if gather else full)
        need_f32(op, "slot_of", slot_of, batch)  # u32, same width
        bindings = {_ROWS_IN: rows_in, _ROWS_OUT: rows_out, _SLOT_OF: slot_of}
        return self._record(entry, bindings, batch, row_size, 0, 0)

    def gather_rows(
        self, states: Buffer, slot_of: Buffer, rows: Buffer, batch: int, row_size: int, slots: int
    ) -> Dispatch:
        """Records ``rows[b, :] = states[slot_of[b], :]`` for b < ``batch``.

        Args:
            states: The states of all slots, (S, R) f32.
            slot_of: The slot of each row, (B,) u32, no slot twice, each < S (not checked on
                the GPU: the caller validates the list it writes).
            rows: Output, (B, R) f32.
            batch, row_size, slots: The sizes B, R, S.
        """
        return self._rows("gather_rows", states, slot_of, rows, batch, row_size, slots)

    def scatter_rows(
        self, rows: Buffer, slot_of: Buffer, states: Buffer, batch: int, row_size: int, slots: int
    ) -> Dispatch:
        """Records ``states[slot_of[b], :] = rows[b, :]`` for b < ``batch`` (other slots kept).

        Args:
            rows: The dense rows, (B, R) f32.
            slot_of: The slot of each row, (B,) u32, no slot twice, each < S.
            states: The states of all slots, (S, R) f32; updated in place.
            batch, row_size, slots: The sizes B, R, S.
        """
        return self._rows("scatter_rows", rows, slot_of, states, batch, row_size, slots)
