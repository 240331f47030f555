"""Launcher for ``shaders/pool.wgsl``: mean-pool over valid positions, then L2-normalise.

This is the embedding head: the final hidden states (B, L, D) of a batch of texts become
(B, D) unit vectors for the memory store and the semantic cache. :meth:`Pool.mean` and
:meth:`Pool.mean_bwd` are the plain mean and its backward; :meth:`Pool.mean_l2_bwd` is the
backward of :meth:`Pool.mean_l2`, which the embedding objective trains through
(``evermind.kernels.embed_loss``): the package's head applies to the unit vectors.
The numpy reference is ``evermind.ops.pool``.
"""

from __future__ import annotations

from evermind.errors import ShapeError
from evermind.gpu import Buffer, Device, Dispatch, grid_1d, pack_params
from evermind.kernels._launch import check_power_of_two, need_f32

SHADER = "pool"
#: Invocations per workgroup (the WGSL ``override WG``): one per model dimension at D=128.
WORKGROUP_SIZE = 128
#: Default norm floor, as ``torch.nn.functional.normalize``.
EPS = 1e-12

# Binding slots of pool.wgsl.
_HIDDEN, _LENGTHS, _OUT, _PARAMS, _GRAD_POOLED, _DHIDDEN = range(6)


class Pool:
    """Records mean-pool + L2-normalise dispatches on one device.

    Args:
        device: The GPU device.
        workgroup_size: Override for ``WG``: a power of two in [1, 256].
    """

    def __init__(self, device: Device, workgroup_size: int = WORKGROUP_SIZE) -> None:
        check_power_of_two("pool", workgroup_size)
        self.device = device
        self.workgroup_size = workgroup_size

    def mean_l2(
        self,
        hidden: Buffer,
        lengths: Buffer,
        out: Buffer,
        b: int,
        seq_len: int,
        d: int,
        eps: float = EPS,
    ) -> Dispatch:
        """``out[b] = normalize(mean(hidden[b, :lengths[b]]))``.

        Args:
            hidden: (B, L, D) f32 hidden states.
            lengths: (B,) uint32 valid prefix lengths; values above L count as L, 0 gives a
                zero vector. Rewrite it with ``device.write`` and replay for a new batch.
            out: (B, D) f32 output.
            b: Batch size B.
            seq_len: Sequence length L.
            d: Model dimension D.
            eps: Norm floor: ``out = pooled / max(||pooled||, eps)``.

        Raises:
            ShapeError: A size is not positive or a buffer is too small.
        """
        op = "pool.mean_l2"
        if b < 1 or seq_len < 1 or d < 1:
            raise ShapeError(f"{op}: expected B, L, D >= 1, got B={b}, L={seq_len}, D={d}")
        if not eps > 0.0:
            raise ShapeError(f"{op}: expected eps > 0, got {eps}")
        need_f32(op, "hidden", hidden, b * seq_len * d)
        need_f32(op, "lengths (uint32)", lengths, b)
        need_f32(op, "out", out, b * d)
        params = self.device.uniform(
            pack_params(("u32", b), ("u32", seq_len), ("u32", d), ("f32", eps)),
            label="pool.params",
        )
        kernel = self.device.kernel(SHADER, "mean_l2", {"WG": self.workgroup_size})
        bindings = {_HIDDEN: hidden, _LENGTHS: lengths, _OUT: out, _PARAMS: params}
        # One workgroup per batch row, folded into 2-D past 65,535 rows.
        return self.device.dispatch(
            kernel, bindings, grid_1d(b, 1), label=f"mean_l2 {b}x{seq_len}x{d}"
        )

    def _params(self, b: int, seq_len: int, d: int, eps: float, label: str) -> Buffer:
        return self.device.uniform(
            pack_params(("u32", b), ("u32", seq_len), ("u32", d), ("f32", eps)), label=label
        )

    @staticmethod
    def _check_sizes(op: str, b: int, seq_len: int, d: int) -> None:
        if b < 1 or seq_len < 1 or d < 1:
            raise ShapeError(f"{op}: expected B, L, D >= 1, got B={b}, L={seq_len}, D={d}")

    def mean(
        self, hidden: Buffer, lengths: Buffer, out: Buffer, b: int, seq_len: int, d: int
    ) -> Dispatch:
        """``out[b] = mean(hidden[b, :lengths[b]])`` (B, D), not normalised (0 when empty).

        Args: as :meth:`mean_l2`, without ``eps``.
        """
        op = "pool.mean"
        self._check_sizes(op, b, seq_len, d)
        need_f32(op, "hidden", hidden, b * seq_len * d)
        need_f32(op, "lengths (uint32)", lengths, b)
        need_f32(op, "out", out, b * d)
        params = self._params(b, seq_len, d, EPS, "pool.mean.params")
        kernel = self.device.kernel(SHADER, "mean", {"WG": self.workgroup_size})
        bindings = {_HIDDEN: hidden, _LENGTHS: lengths, _OUT: out, _PARAMS: params}
        return self.device.dispatch(
            kernel, bindings, grid_1d(b, 1), label=f"mean {b}x{seq_len}x{d}"
        )

    def mean_bwd(
        self,
        grad_pooled: Buffer,
        lengths: Buffer,
        dhidden: Buffer,
        b: int,
        seq_len: int,
        d: int,
    ) -> Dispatch:
        """``dhidden[b, t] = grad_pooled[b] / n_b`` on the valid prefix, 0 elsewhere.

        Args:
            grad_pooled: (B, D) f32 gradient of the means.
            lengths: (B,) uint32, the forward's.
            dhidden: (B, L, D) f32 output, overwritten (padding positions get 0).
            b: Batch size B.
            seq_len: Sequence length L.
            d: Model dimension D.
        """
        op = "pool.mean_bwd"
        self._check_sizes(op, b, seq_len, d)
        need_f32(op, "grad_pooled", grad_pooled, b * d)
        need_f32(op, "lengths (uint32)", lengths, b)
        need_f32(op, "dhidden", dhidden, b * seq_len * d)
        params = self._params(b, seq_len, d, EPS, "pool.mean_bwd.params")
        kernel = self.device.kernel(SHADER, "mean_bwd", {"WG": self.workgroup_size})
        bindings = {
            _GRAD_POOLED: grad_pooled,
            _LENGTHS: lengths,
            _DHIDDEN: dhidden,
            _PARAMS: params,
        }
        return self.device.dispatch(
            kernel,
            bindings,
            grid_1d(b * seq_len * d, self.workgroup_size),
            label=f"mean_bwd {b}x{seq_len}x{d}",
        )

    def mean_l2_bwd(
        self,
        hidden: Buffer,
        lengths: Buffer,
        grad_out: Buffer,
        scratch: Buffer,
        dhidden: Buffer,
        b: int,
        seq_len: int,
        d: int,
        eps: float = EPS,
    ) -> Dispatch:
        """The backward of :meth:`mean_l2`: ``dhidden`` given the unit vectors' gradient.

        With ``u = out[b]`` and ``r = max(||mean_b||, eps)``:
        ``dhidden[b, t] = (g_b − u (u · g_b)) / (r · n_b)`` on the valid prefix, 0 elsewhere
        (``evermind.ops.pool.pool_bwd``).

        Args:
            hidden: (B, L, D) f32, the forward's hidden states.
            lengths: (B,) uint32, the forward's.
            grad_out: (B, D) f32 gradient of the unit vectors.
            scratch: (B, D) f32, overwritten with the raw means.
            dhidden: (B, L, D) f32 output, overwritten (padding positions get 0).
            b: Batch size B.
            seq_len: Sequence length L.
            d: Model dimension D.
            eps: The forward's norm floor.
        """
        op = "pool.mean_l2_bwd"
        self._check_sizes(op, b, seq_len, d)
        if not eps > 0.0:
            raise ShapeError(f"{op}: expected eps > 0, got {eps}")
        need_f32(op, "hidden", hidden, b * seq_len * d)
        need_f32(op, "lengths (uint32)", lengths, b)
        need_f32(op, "grad_out", grad_out, b * d)
        need_f32(op, "scratch", scratch, b * d)
        need_f32(op, "dhidden", dhidden, b * seq_len * d)
        params = self._params(b, seq_len, d, eps, "pool.mean_l2_bwd.params")
        kernel = self.device.kernel(SHADER, "mean_l2_bwd", {"WG": self.workgroup_size})
        bindings = {
            _HIDDEN: hidden,
            _LENGTHS: lengths,
            _OUT: scratch,
            _PARAMS: params,
            _GRAD_POOLED: grad_out,
            _DHIDDEN: dhidden,
        }
        return self.device.dispatch(
            kernel, bindings, grid_1d(b, 1), label=f"mean_l2_bwd {b}x{seq_len}x{d}"
        )
