"""The Mamba-2 (SSD) block of :class:`~evermind.model.gpu.GpuMamba`: its activations and the
dispatches of its forward and backward (browser-safe).

The block follows ``evermind.model.cpu_mamba2.CpuMamba2._block_fwd`` op for op (that model is
its reference), with in_proj and the conv split into dense row blocks as
``evermind.model.gpu_layout`` lays them out. Layer l, M = B·L, I = d_inner, H heads of P
channels, G groups, GN = G·N::

    xn         = rmsnorm(h_l) · w                                (M, D)
    z, xp      = xn · in_zᵀ, xn · in_xᵀ                          (M, I) each
    Bp, Cp     = xn · in_Bᵀ, xn · in_Cᵀ                          (M, GN) each
    dt_raw     = xn · in_dtᵀ                                     (M, H)
    x, Bm, Cm  = silu(conv1d(xp)), silu(conv1d(Bp)), silu(conv1d(Cp))   (a per-channel conv)
    y          = ssd(x, dt_raw, A_log, Bm, Cm, D, dt_bias)       (chunked; keeps dt and the
                                                                  chunk states)
    gated      = rmsnorm_gated(y, z) · gate_norm                 (groups of I / G)
    h_l+1      = h_l + gated · outᵀ

The backward runs the same ops in reverse; every weight gradient is accumulated into its
buffer (the step zeroes them first), as in the Mamba-1 block. :class:`Mamba2DecodeLayers` is
the block's recurrent step (conv registers and SSD state), which ``GpuDecoder`` replays per token.
"""

from __future__ import annotations

from collections.abc import Callable

from evermind.gpu import Buffer, Device, Dispatch
from evermind.kernels.conv1d import Conv1d
from evermind.kernels.elementwise import Elementwise
from evermind.kernels.matmul import Matmul
from evermind.kernels.recurrent_step import RecurrentStep
from evermind.kernels.rmsnorm import RMSNorm
from evermind.kernels.ssd import SSD, chunk_states_count
from evermind.model.config import MambaConfig

#: A layer's buffer by its short slot name ("in_x", "A_log", ...).
Lookup = Callable[[str], Buffer]

#: The conv's channel blocks, in xBC order.
_PARTS = ("x", "B", "C")


class Mamba2Acts:
    """Per-layer activations of a Mamba-2 block kept for the backward pass."""

    def __init__(
        self, dev: Device, layer: int, cfg: MambaConfig, batch_size: int, seq_len: int
    ) -> None:
        m = batch_size * seq_len
        di, dm, heads, gn = cfg.d_inner, cfg.d_model, cfg.n_heads, cfg.n_groups * cfg.d_state

        def buf(name: str, count: int) -> Buffer:
            return dev.buffer(4 * count, label=f"L{layer}.{name}")

        self.xn, self.rstd = buf("xn", m * dm), buf("rstd", m)
        self.z, self.dt_raw = buf("z", m * di), buf("dt_raw", m * heads)
        width = {"x": di, "B": gn, "C": gn}
        #: The conv's input, its pre-activation and its SiLU output, per channel block.
        self.conv_in = {p: buf(f"in_{p}", m * width[p]) for p in _PARTS}
        self.conv_pre = {p: buf(f"{p}_pre", m * width[p]) for p in _PARTS}
        self.conv_out = {p: buf(p, m * width[p]) for p in _PARTS}
        self.y, self.gated = buf("y", m * di), buf("gated", m * di)
        self.rstd_gate = buf("rstd_gate", m * cfg.n_groups)
        self.dt = buf("dt", m * heads)
        count = chunk_states_count(
            batch_size, seq_len, heads, cfg.head_dim, cfg.d_state, cfg.chunk_size
        )
        self.chunk_states = buf("chunk_states", count)


class Mamba2Block:
    """Records the Mamba-2 block's forward and backward with the model's launchers.

    Args:
        device: The GPU device.
        config: A ``block="mamba2"`` config.
        batch_size, seq_len: B and L.
        launchers: The model's ``(Matmul, Elementwise, RMSNorm, Conv1d)``.
    """

    def __init__(
        self,
        device: Device,
        config: MambaConfig,
        batch_size: int,
        seq_len: int,
        launchers: tuple[Matmul, Elementwise, RMSNorm, Conv1d],
    ) -> None:
        self.device, self.config = device, config
        self.batch_size, self.seq_len = batch_size, seq_len
        self.m = batch_size * seq_len
        self.mm, self.ew, self.rn, self.conv = launchers
        self.ssd = SSD(device)
        cfg = config
        self.width = {"x": cfg.d_inner, "B": cfg.n_groups * cfg.d_state}
        self.width["C"] = self.width["B"]
        #: (B, L, H, P, G, N) of the scan.
        self.sizes = (
            batch_size,
            seq_len,
            cfg.n_heads,
            cfg.head_dim,
            cfg.n_groups,
            cfg.d_state,
        )
        self._scratch: dict[str, Buffer] | None = None

    def forward(
        self, h_in: Buffer, h_out: Buffer, out_tmp: Buffer, a: Mamba2Acts, p: Lookup
    ) -> list[Dispatch]:
        """The block's dispatches: ``h_out = h_in + mixer(rmsnorm(h_in))``."""
        cfg, m, mm, ew = self.config, self.m, self.mm, self.ew
        dm, di, heads = cfg.d_model, cfg.d_inner, cfg.n_heads
        b, length = self.batch_size, self.seq_len
        d = [self.rn.forward(h_in, p("norm"), a.xn, a.rstd, m, dm, cfg.rms_eps)]
        d.append(mm.linear(a.xn, p("in_z"), a.z, m, dm, di))
        for part in _PARTS:
            width = self.width[part]
            d.append(mm.linear(a.xn, p(f"in_{part}"), a.conv_in[part], m, dm, width))
            d.append(
                self.conv.forward(
                    a.conv_in[part],
                    p(f"conv_w{part}"),
                    p(f"conv_b{part}"),
                    a.conv_pre[part],
                    b,
                    length,
                    width,
                    cfg.d_conv,
                )
            )
            d.append(ew.silu_fwd(a.conv_pre[part], a.conv_out[part], m * width))
        d.append(mm.linear(a.xn, p("in_dt"), a.dt_raw, m, dm, heads))
        d += self.ssd.forward(
            a.conv_out["x"],
            a.dt_raw,
            p("A_log"),
            a.conv_out["B"],
            a.conv_out["C"],
            p("D"),
            p("dt_bias"),
            a.y,
            a.dt,
            a.chunk_states,
            self.sizes,
            cfg.chunk_size,
        )
        group = di // cfg.n_groups
        d.append(
            self.rn.gated_forward(
                a.y, a.z, p("gate_norm"), a.gated, a.rstd_gate, m, di, group, cfg.rms_eps
            )
        )
        d.append(mm.linear(a.gated, p("out"), out_tmp, m, di, dm))
        d.append(ew.add(h_in, out_tmp, h_out, m * dm))
        return d

    def _backward_scratch(self) -> dict[str, Buffer]:
        """Scratch gradients of one block, allocated once and shared by every layer."""
        if self._scratch is None:
            cfg, m = self.config, self.m
            di, heads = cfg.d_inner, cfg.n_heads
            sizes = {"dgated": m * di, "dy": m * di, "dz": m * di, "ddt_raw": m * heads}
            for part in _PARTS:
                sizes[f"d{part}"] = m * self.width[part]  # dL/d(SiLU output)
                sizes[f"d{part}_pre"] = m * self.width[part]
                sizes[f"d{part}_in"] = m * self.width[part]
            sizes.update({"dA_log": heads, "dD": heads, "ddt_bias": heads})
            self._scratch = {
                name: self.device.buffer(4 * size, label=f"bwd2.{name}")
                for name, size in sizes.items()
            }
        return self._scratch

    def backward(
        self, h_in: Buffer, dh: Buffer, dxn: Buffer, a: Mamba2Acts, p: Lookup, g: Lookup
    ) -> list[Dispatch]:
        """The block's backward: on entry ``dh`` holds dL/dh_out, on exit dL/dh_in (the
        residual path plus the mixer's); weight gradients are accumulated; ``dxn`` is scratch."""
        cfg, m, mm, ew = self.config, self.m, self.mm, self.ew
        dm, di, heads = cfg.d_model, cfg.d_inner, cfg.n_heads
        b, length = self.batch_size, self.seq_len
        t = self._backward_scratch()
        # out_proj, then the gated norm (its weight gradient accumulates, dy and dz overwrite).
        d = [mm.linear_bwd_input(dh, p("out"), t["dgated"], m, di, dm)]
        d.append(mm.linear_bwd_weight(dh, a.gated, g("out"), m, di, dm, accumulate=True))
        d += self.rn.gated_backward(
            a.y,
            a.z,
            p("gate_norm"),
            a.rstd_gate,
            t["dgated"],
            t["dy"],
            t["dz"],
            g("gate_norm"),
            m,
            di,
            di // cfg.n_groups,
            accumulate_weight=True,
        )
        # The scan; its per-head gradients are overwritten, so they go through scratch.
        d += self.ssd.backward(
            t["dy"],
            a.conv_out["x"],
            a.dt_raw,
            p("A_log"),
            a.conv_out["B"],
            a.conv_out["C"],
            p("D"),
            p("dt_bias"),
            a.dt,
            a.chunk_states,
            t["dx"],
            t["ddt_raw"],
            t["dA_log"],
            t["dB"],
            t["dC"],
            t["dD"],
            t["ddt_bias"],
            self.sizes,
            cfg.chunk_size,
        )
        for name in ("A_log", "D", "dt_bias"):
            d.append(ew.accumulate(t[f"d{name}"], g(name), heads))
        # The SiLU and the conv of each channel block (conv's backward accumulates all three
        # outputs, so its input gradient starts from zero).
        for part in _PARTS:
            width = self.width[part]
            d.append(ew.silu_bwd(a.conv_pre[part], t[f"d{part}"], t[f"d{part}_pre"], m * width))
            d.append(ew.fill(t[f"d{part}_in"], m * width))
            d += self.conv.backward(
                a.conv_in[part],
                p(f"conv_w{part}"),
                t[f"d{part}_pre"],
                t[f"d{part}_in"],
                g(f"conv_w{part}"),
                g(f"conv_b{part}"),
                b,
                length,
                width,
                cfg.d_conv,
                accumulate=True,
            )
        # in_proj, split in five row blocks: dxn sums their input gradients.
        grads_out = [("in_z", t["dz"], di), ("in_dt", t["ddt_raw"], heads)]
        grads_out += [(f"in_{part}", t[f"d{part}_in"], self.width[part]) for part in _PARTS]
        for k, (key, grad_out, width) in enumerate(grads_out):
            d.append(mm.linear_bwd_input(grad_out, p(key), dxn, m, dm, width, accumulate=k > 0))
            d.append(mm.linear_bwd_weight(grad_out, a.xn, g(key), m, dm, width, accumulate=True))
        # The norm; accumulating into dh adds the residual path: dh_l = dh_l+1 + ∂norm.
        d += self.rn.backward(h_in, p("norm"), a.rstd, dxn, dh, g("norm"), m, dm, accumulate=True)
        return d


class Mamba2DecodeLayers:
    """The recurrent step of the Mamba-2 blocks, for the GPU decoders (``GpuDecoder``, one
    sequence; ``GpuBatchDecoder``, up to ``rows`` gathered slots). A layer's decoding state is
    the conv registers of the x, B and C blocks ((rows, width, K) each, oldest first) and the
    SSD state (rows, H, P, N), as ``CpuMamba2.step`` keeps them; the caller owns those buffers
    (:meth:`state_sizes` gives their floats per row).

    Args:
        device: The GPU device.
        config: A ``block="mamba2"`` config.
        weights: A weight buffer by slot key (``"0.in_x"``, ...).
        launchers: ``(Matmul, Elementwise, RMSNorm, RecurrentStep)``.
        rows: The most rows one step runs (the activations are sized for it).
    """

    def __init__(
        self,
        device: Device,
        config: MambaConfig,
        weights: Lookup,
        launchers: tuple[Matmul, Elementwise, RMSNorm, RecurrentStep],
        rows: int = 1,
    ) -> None:
        self.device, self.config, self.weights = device, config, weights
        self.mm, self.ew, self.rn, self.step = launchers
        self.ssd = SSD(device)
        cfg = config
        gn = cfg.n_groups * cfg.d_state
        self.width = {"x": cfg.d_inner, "B": gn, "C": gn}

        def buf(name: str, count: int) -> Buffer:
            return device.buffer(4 * rows * count, label=f"decode2.{name}")

        di = cfg.d_inner
        self.xn, self.rstd = buf("xn", cfg.d_model), buf("rstd", 1)
        self.z, self.dt_raw = buf("z", di), buf("dt_raw", cfg.n_heads)
        self.conv_in = {part: buf(f"in_{part}", self.width[part]) for part in _PARTS}
        self.conv_out = {part: buf(part, self.width[part]) for part in _PARTS}
        self.y, self.gated = buf("y", di), buf("gated", di)
        self.rstd_gate, self.out = buf("rstd_gate", cfg.n_groups), buf("out", cfg.d_model)

    def state_sizes(self) -> dict[str, int]:
        """Floats per row of one layer's state buffers: ``conv_x``, ``conv_B``, ``conv_C`` and
        ``ssm`` (the keys :meth:`layer_dispatches` reads)."""
        cfg = self.config
        sizes = {f"conv_{part}": self.width[part] * cfg.d_conv for part in _PARTS}
        sizes["ssm"] = cfg.n_heads * cfg.head_dim * cfg.d_state
        return sizes

    def layer_dispatches(
        self, i: int, h: Buffer, b: int, state: dict[str, Buffer]
    ) -> list[Dispatch]:
        """Layer i's step on ``b`` rows of the residual stream ``h`` (b, d_model), updated in
        place, with the layer's ``state`` buffers (b rows each, see :meth:`state_sizes`)."""
        cfg, mm, ew = self.config, self.mm, self.ew
        dm, di, heads = cfg.d_model, cfg.d_inner, cfg.n_heads

        def p(key: str) -> Buffer:
            return self.weights(f"{i}.{key}")

        d = [self.rn.forward(h, p("norm"), self.xn, self.rstd, b, dm, cfg.rms_eps)]
        d.append(mm.linear(self.xn, p("in_z"), self.z, b, dm, di))
        d.append(mm.linear(self.xn, p("in_dt"), self.dt_raw, b, dm, heads))
        for part in _PARTS:
            width = self.width[part]
            d.append(mm.linear(self.xn, p(f"in_{part}"), self.conv_in[part], b, dm, width))
            d.append(
                self.step.conv_step(
                    state[f"conv_{part}"],
                    self.conv_in[part],
                    p(f"conv_w{part}"),
                    p(f"conv_b{part}"),
                    self.conv_out[part],
                    b,
                    width,
                    cfg.d_conv,
                )
            )
        d += self.ssd.decode_step(
            state["ssm"],
            self.conv_out["x"],
            self.dt_raw,
            p("A_log"),
            self.conv_out["B"],
            self.conv_out["C"],
            p("D"),
            p("dt_bias"),
            self.y,
            (b, heads, cfg.head_dim, cfg.n_groups, cfg.d_state),
        )
        group = di // cfg.n_groups
        d.append(
            self.rn.gated_forward(
                self.y, self.z, p("gate_norm"), self.gated, self.rstd_gate, b, di, group,
                cfg.rms_eps,
            )
        )  # fmt: skip
        d.append(mm.linear(self.gated, p("out"), self.out, b, di, dm))
        d.append(ew.accumulate(self.out, h, b * dm))  # residual, in place
        return d
