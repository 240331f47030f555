"""Launchers for ``shaders/matmul.wgsl``: the Linear layer's forward and both backward matmuls.

Every method records one dispatch ``C (+)= op(A) · op(B) (+ bias)`` and returns it. The
transposes are pipeline ``override`` constants (one compiled pipeline per mode), the sizes
and the bias/accumulate flags live in the dispatch's ``Params`` uniform. The numpy reference
is ``evermind.ops.matmul``.

With ``vector_loads`` (the default on CPU adapters, :attr:`Device.is_cpu_adapter`), a mode
whose sizes divide by 4 runs a vectorised entry point (``main_nt_k4``, ``main_nn_v4``,
``main_tn_v4``) that reads vec4s instead of scalars and gives bit-identical results; other
sizes fall back to ``main``.
"""

from __future__ import annotations

from evermind.errors import ConfigError, ShapeError
from evermind.gpu import Buffer, Device, Dispatch, pack_params
from evermind.gpu.base import MAX_GROUPS_PER_DIM
from evermind.kernels._launch import need_f32

SHADER = "matmul"
#: Rows and columns of C each invocation owns (the WGSL const TILE: an 8 x 8 register tile).
TILE = 8
#: Default workgroup shape (x along N, y along M): a 64-row x 128-column tile of C per workgroup.
WORKGROUP = (16, 8)

# Binding slots of matmul.wgsl.
_A, _B, _BIAS, _C, _PARAMS = range(5)


#: Fewest workgroups a matmul should spread over, so that every core of a CPU adapter (and
#: every compute unit of a small GPU) gets work even when C is small.
MIN_GROUPS = 8


def fit_workgroup(m: int, n: int, workgroup: tuple[int, int]) -> tuple[int, int]:
    """Shrinks ``(WG_X, WG_Y)`` (powers of two) to the shape of C (M, N).

    A workgroup covers ``(WG_X·8) x (WG_Y·8)`` outputs. For the model's thin matmuls
    (N = 8 or 16 for x_proj, M = 1 for decoding) the default 128 x 64 span would compute
    mostly clamped, discarded values in a single workgroup; halving a side while its span
    still covers C loses nothing, and halving further until there are ``MIN_GROUPS``
    workgroups spreads the work over the adapter's cores.
    """
    wg_x, wg_y = workgroup
    while wg_x > 1 and (wg_x // 2) * TILE >= n:
        wg_x //= 2
    while wg_y > 1 and (wg_y // 2) * TILE >= m:
        wg_y //= 2

    def count(x: int, y: int) -> int:
        return -(-n // (x * TILE)) * -(-m // (y * TILE))

    while count(wg_x, wg_y) < MIN_GROUPS and wg_x * wg_y > 4:
        if wg_y >= wg_x:
            wg_y //= 2
        else:
            wg_x //= 2
    return wg_x, wg_y


class Matmul:
    """Records register-blocked matmul dispatches on one device.

    Args:
        device: The GPU device.
        workgroup: ``(WG_X, WG_Y)`` overrides; their product must be at most 256.
        vector_loads: Use the vectorised entry points where the sizes allow; ``None`` (the
            default) picks them on CPU adapters, where they measured faster, and the scalar
            ``main`` elsewhere. Kept, resolved, in ``self.vector_loads``.
    """

    def __init__(
        self,
        device: Device,
        workgroup: tuple[int, int] = WORKGROUP,
        vector_loads: bool | None = None,
    ) -> None:
        wg_x, wg_y = workgroup
        if wg_x < 1 or wg_y < 1 or wg_x * wg_y > 256:
            raise ConfigError(
                f"matmul: workgroup {workgroup} must be two positive sizes with a product of "
                "at most 256 (the default WebGPU limit); try (16, 8)"
            )
        self.device = device
        self.workgroup = (wg_x, wg_y)
        self.vector_loads = device.is_cpu_adapter if vector_loads is None else vector_loads
        self._no_bias: Buffer | None = None

    def _placeholder(self) -> Buffer:
        # Binding 2 is statically used by the shader, so something must be bound there even
        # when params.has_bias = 0 (the shader then never reads it).
        if self._no_bias is None:
            self._no_bias = self.device.buffer(4, label="matmul.no-bias")
        return self._no_bias

    def matmul(
        self,
        a: Buffer,
        b: Buffer,
        c: Buffer,
        m: int,
        n: int,
        k: int,
        *,
        trans_a: bool = False,
        trans_b: bool = False,
        bias: Buffer | None = None,
        accumulate: bool = False,
    ) -> Dispatch:
        """``C (M,N) (+)= op(A) · op(B) (+ bias)``, the general form.

        Args:
            a: A stored (M, K), or (K, M) when ``trans_a``.
            b: B stored (K, N), or (N, K) when ``trans_b``.
            c: Output (M, N); read too when ``accumulate``.
            m: Rows of C.
            n: Columns of C.
            k: The summed dimension.
            trans_a: A is stored transposed.
            trans_b: B is stored transposed.
            bias: Optional (N,) added to every row.
            accumulate: Add into C instead of overwriting it.

        Raises:
            ShapeError: A buffer is too small, a size is not positive, or the grid is too
                large for one dispatch.
        """
        op = "matmul"
        for name, size in (("M", m), ("N", n), ("K", k)):
            if size < 1:
                raise ShapeError(f"{op}: expected {name} >= 1, got {size}")
        need_f32(op, "A", a, m * k)
        need_f32(op, "B", b, k * n)
        need_f32(op, "C", c, m * n)
        if bias is not None:
            need_f32(op, "bias", bias, n)
        wg_x, wg_y = fit_workgroup(m, n, self.workgroup)
        groups = (-(-n // (wg_x * TILE)), -(-m // (wg_y * TILE)), 1)
        if groups[0] > MAX_GROUPS_PER_DIM or groups[1] > MAX_GROUPS_PER_DIM:
            raise ShapeError(
                f"{op}: C of shape ({m}, {n}) needs a {groups[:2]} workgroup grid, over the "
                f"{MAX_GROUPS_PER_DIM} limit; split the matmul into row blocks"
            )
        params = self.device.uniform(
            pack_params(
                ("u32", m),
                ("u32", n),
                ("u32", k),
                ("u32", int(bias is not None)),
                ("u32", int(accumulate)),
            ),
            label="matmul.params",
        )
        kernel = self.device.kernel(
            SHADER,
            self.entry_point(m, n, k, trans_a, trans_b),
            {
                "WG_X": wg_x,
                "WG_Y": wg_y,
                "TRANS_A": float(trans_a),
                "TRANS_B": float(trans_b),
            },
        )
        bindings = {
            _A: a,
            _B: b,
            _BIAS: bias if bias is not None else self._placeholder(),
            _C: c,
            _PARAMS: params,
        }
        mode = f"{'T' if trans_a else 'N'}{'T' if trans_b else 'N'}"
        return self.device.dispatch(kernel, bindings, groups, label=f"matmul.{mode} {m}x{n}x{k}")

    def entry_point(self, m: int, n: int, k: int, trans_a: bool, trans_b: bool) -> str:
        """The WGSL entry point :meth:`matmul` records for this shape and mode."""
        if not self.vector_loads:
            return "main"
        if trans_b and not trans_a and k % 4 == 0:
            return "main_nt_k4"  # A and B' columns read four k at a time
        if not trans_a and not trans_b and k % 4 == 0 and n % 4 == 0:
            return "main_nn_v4"  # A four k at a time, B four columns at a time
        if trans_a and not trans_b and m % 4 == 0 and n % 4 == 0:
            return "main_tn_v4"  # A' four rows, B four columns at a time
        return "main"

    def linear(
        self,
        x: Buffer,
        w: Buffer,
        y: Buffer,
        m: int,
        k: int,
        n: int,
        bias: Buffer | None = None,
        accumulate: bool = False,
    ) -> Dispatch:
        """Linear forward ``Y (M,N) = X (M,K) · W (N,K)ᵀ (+ bias (N))``."""
        return self.matmul(x, w, y, m, n, k, trans_b=True, bias=bias, accumulate=accumulate)

    def linear_bwd_input(
        self, dy: Buffer, w: Buffer, dx: Buffer, m: int, k: int, n: int, accumulate: bool = False
    ) -> Dispatch:
        """Input gradient of :meth:`linear`: ``dX (M,K) (+)= dY (M,N) · W (N,K)``."""
        return self.matmul(dy, w, dx, m, k, n, accumulate=accumulate)

    def linear_bwd_weight(
        self, dy: Buffer, x: Buffer, dw: Buffer, m: int, k: int, n: int, accumulate: bool = False
    ) -> Dispatch:
        """Weight gradient of :meth:`linear`: ``dW (N,K) (+)= dY (M,N)ᵀ · X (M,K)``."""
        return self.matmul(dy, x, dw, n, k, m, trans_a=True, accumulate=accumulate)
