"""The Mamba-2 (SSD) language model on the CPU in numpy: forward and full backward.

NATIVE-ONLY: imports numpy; never imported by browser code.

This module owns :class:`CpuMamba2`, the model-level reference of a ``block="mamba2"`` config,
in ``transformers``' ``Mamba2ForCausalLM`` layout (``tests/unit/test_mamba2_interop.py``
loads our export there and compares logits). It is :class:`~evermind.model.cpu.CpuMamba` with
the block replaced: the embedding, residual stream, final norm, tied LM head, loss and the
backward's outer loop are inherited; the block is built from the one reference of each op
(``ops.ssd`` for the scan, ``ops.rmsnorm``'s gated variant, ``ops.conv1d``, ``ops.elementwise``).
Training's scan, forward and backward, is the SSD's fast path :mod:`evermind.ops.ssd_fast`
(tested against ``ops.ssd``, forward and every gradient) in the model's dtype;
``reference_scan = True`` runs the reference instead.
Recurrent decoding (``prefill`` / ``step``) keeps per layer the conv register of x, B and C
(B, conv_dim, K) and one (P, N) state per head (B, H, P, N); ``evermind.load`` generates with
it. ``prefill`` is :class:`CpuMamba`'s; this block gives it each layer's state
(:meth:`CpuMamba2._prefill_state`).

One block, as ``Mamba2Mixer.torch_forward`` (H heads of P channels, G groups, I = H P)::

    x_norm         = rmsnorm(h)                              # (B, L, D)
    z | xBC | dt   = x_norm @ in_proj^T                      # (B, L, I | I + 2GN | H)
    x | B | C      = silu(conv1d(xBC))                       # (B, L, I | GN | GN)
    y              = ssd(x, dt, A_log, B, C, D, dt_bias)     # (B, L, H, P) -> (B, L, I)
    out            = rmsnorm_gated(y, z) @ out_proj^T        # (B, L, D)

Shape letters: B batch, L length, D d_model, I d_inner, H heads, P head_dim, G n_groups,
N d_state, K d_conv, V vocab.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from evermind.errors import ConfigError, ShapeError
from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba, MambaState, conv_register
from evermind.ops._dtype import Floats as FloatArray
from evermind.ops.conv1d import conv1d_bwd, conv1d_fwd
from evermind.ops.elementwise import silu_bwd, silu_fwd
from evermind.ops.embedding import embedding_fwd
from evermind.ops.recurrent_step import conv_step
from evermind.ops.rmsnorm import rmsnorm_bwd, rmsnorm_fwd, rmsnorm_gated_bwd, rmsnorm_gated_fwd
from evermind.ops.ssd import ssd_bwd, ssd_decode_step, ssd_fwd, ssd_scan_sequential
from evermind.ops.ssd_fast import ssd_fast_bwd, ssd_fast_fwd

__all__ = ["CpuMamba2", "Mamba2LayerCache"]


@dataclass
class Mamba2LayerCache:
    """Activations of one Mamba-2 block's forward that its backward reads."""

    h_in: FloatArray  # (B, L, D)  block input (residual stream)
    x_norm: FloatArray  # (B, L, D)  rmsnorm(h_in)
    z: FloatArray  # (B, L, I)  the gate
    xbc: FloatArray  # (B, L, I + 2GN)  conv input
    conv: FloatArray  # (B, L, I + 2GN)  conv output before SiLU
    x: FloatArray  # (B, L, H, P)  the scan's input
    B: FloatArray  # (B, L, G, N)
    C: FloatArray  # (B, L, G, N)
    dt_raw: FloatArray  # (B, L, H)  before dt_bias and softplus (the scan's)
    y: FloatArray  # (B, L, I)  scan output before the gated norm
    gated: FloatArray  # (B, L, I)  rmsnorm_gated(y, z), out_proj's input


class CpuMamba2(CpuMamba):
    """Mamba-2 (SSD) language model in numpy (forward, loss, every gradient, decoding).

    Args:
        config: The hyperparameters; ``config.block`` must be "mamba2".
        params: One array per name of ``config.param_shapes()`` (see :class:`CpuMamba`).
        dtype: np.float32 (default) or np.float64 (for gradient checks).

    Raises:
        ConfigError: The config is not a Mamba-2 one, a parameter is missing or unknown.
        ShapeError: A parameter has the wrong shape.
    """

    def __init__(
        self, config: MambaConfig, params: Mapping[str, Any], dtype: npt.DTypeLike = np.float32
    ) -> None:
        if config.block != "mamba2":
            raise ConfigError(
                f"CpuMamba2: expected a config with block='mamba2', got {config.block!r}; "
                "hint: CpuMamba runs Mamba-1 configs"
            )
        super().__init__(config, params, dtype)

    def _layer(self, index: int) -> dict[str, FloatArray]:
        """Views of one layer's weights under short names."""
        prefix = f"backbone.layers.{index}."
        p = self.params
        return {
            "norm": p[prefix + "norm.weight"],  # (D,)
            "in_proj": p[prefix + "mixer.in_proj.weight"],  # (I + conv_dim + H, D)
            "conv_w": p[prefix + "mixer.conv1d.weight"],  # (conv_dim, 1, K)
            "conv_b": p[prefix + "mixer.conv1d.bias"],  # (conv_dim,)
            "dt_bias": p[prefix + "mixer.dt_bias"],  # (H,)
            "A_log": p[prefix + "mixer.A_log"],  # (H,)
            "D": p[prefix + "mixer.D"],  # (H,)
            "gate_norm": p[prefix + "mixer.norm.weight"],  # (I,)
            "out_proj": p[prefix + "mixer.out_proj.weight"],  # (D, I)
        }

    def _block_fwd(  # type: ignore[override]
        self, w: dict[str, FloatArray], h: FloatArray
    ) -> tuple[FloatArray, Mamba2LayerCache]:
        """One block's mixer path on the residual stream h (B, L, D): (out (B, L, D), cache)."""
        cfg = self.config
        batch, length, _ = h.shape
        d_inner, heads, group_n = cfg.d_inner, cfg.n_heads, cfg.n_groups * cfg.d_state
        x_norm, _ = rmsnorm_fwd(h, w["norm"], cfg.rms_eps, self.dtype)  # (B, L, D)
        proj = x_norm @ w["in_proj"].T  # (B, L, I + conv_dim + H)
        z, xbc = proj[..., :d_inner], proj[..., d_inner : d_inner + cfg.conv_dim]
        dt_raw = proj[..., d_inner + cfg.conv_dim :]  # (B, L, H)
        conv = conv1d_fwd(xbc, w["conv_w"], w["conv_b"], self.dtype)  # (B, L, conv_dim)
        act = silu_fwd(
            conv, self.dtype
        )  # x, B and C all pass the conv and the SiLU (HF's conv_dim)
        x = act[..., :d_inner].reshape(batch, length, heads, cfg.head_dim)  # (B, L, H, P)
        groups = (batch, length, cfg.n_groups, cfg.d_state)
        B = act[..., d_inner : d_inner + group_n].reshape(groups)  # (B, L, G, N)
        C = act[..., d_inner + group_n :].reshape(groups)  # (B, L, G, N)
        # (B, L, H, P); dt = softplus(dt_raw + dt_bias), A = -exp(A_log) inside.
        scan = ssd_fwd if self.reference_scan else partial(ssd_fast_fwd, compute=self.dtype)
        y, _ = scan(x, dt_raw, w["A_log"], B, C, w["D"], w["dt_bias"], cfg.chunk_size)
        y = y.reshape(batch, length, d_inner)
        gated = rmsnorm_gated_fwd(
            y, z, w["gate_norm"], d_inner // cfg.n_groups, cfg.rms_eps, self.dtype
        )
        out = gated @ w["out_proj"].T  # (B, L, D)
        cache = Mamba2LayerCache(
            h_in=h, x_norm=x_norm, z=z, xbc=xbc, conv=conv, x=x, B=B, C=C, dt_raw=dt_raw,
            y=y, gated=gated,
        )  # fmt: skip
        return out, cache

    def _block_infer(self, w: dict[str, FloatArray], h: FloatArray) -> FloatArray:
        """:meth:`_block_fwd`'s output alone (inference: logits, embeddings)."""
        out, _ = self._block_fwd(w, h)
        return out.astype(self.dtype)

    def _block_bwd(  # type: ignore[override]
        self, index: int, dout: FloatArray, c: Mamba2LayerCache, grads: dict[str, FloatArray]
    ) -> FloatArray:
        """Backward of one block's mixer path; writes its grads and returns d(block input)."""
        cfg = self.config
        w = self._layer(index)
        prefix = f"backbone.layers.{index}.mixer."
        batch, length, _ = dout.shape

        def flat(a: FloatArray) -> FloatArray:
            return a.reshape(-1, a.shape[-1])  # (M, last)

        grads[prefix + "out_proj.weight"] = flat(dout).T @ flat(c.gated)  # (D, I)
        dgated = dout @ w["out_proj"]  # (B, L, I)
        dy, dz, grads[prefix + "norm.weight"] = rmsnorm_gated_bwd(
            c.y, c.z, w["gate_norm"], cfg.d_inner // cfg.n_groups, dgated, cfg.rms_eps, self.dtype
        )
        args = (dy.reshape(c.x.shape), c.x, c.dt_raw, w["A_log"], c.B, c.C, w["D"], w["dt_bias"])
        if self.reference_scan:  # the states are recomputed by the reference's loop
            dx, ddt_raw, dA_log, dB, dC, dD, ddt_bias = ssd_bwd(*args)
        else:
            dx, ddt_raw, dA_log, dB, dC, dD, ddt_bias = ssd_fast_bwd(
                *args, cfg.chunk_size, compute=self.dtype
            )
        grads[prefix + "A_log"], grads[prefix + "D"], grads[prefix + "dt_bias"] = (
            dA_log,
            dD,
            ddt_bias,
        )
        dact = np.concatenate(
            [a.reshape(batch, length, -1) for a in (dx, dB, dC)], axis=-1
        )  # (B, L, conv_dim)
        dxbc, grads[prefix + "conv1d.weight"], grads[prefix + "conv1d.bias"] = conv1d_bwd(
            c.xbc, w["conv_w"], silu_bwd(c.conv, dact, self.dtype), self.dtype
        )
        dproj = np.concatenate([dz, dxbc, ddt_raw], axis=-1)  # (B, L, I + conv_dim + H)
        grads[prefix + "in_proj.weight"] = flat(dproj).T @ flat(c.x_norm)  # (.., D)
        dh_in, grads[f"backbone.layers.{index}.norm.weight"] = rmsnorm_bwd(
            c.h_in, w["norm"], dproj @ w["in_proj"], cfg.rms_eps, self.dtype
        )
        return dh_in

    # ---- recurrent decoding ------------------------------------------------------------------

    def init_state(self, batch: int) -> MambaState:
        """Zero decoding state for ``batch`` sequences: per layer a conv register
        (B, conv_dim, K) and an SSD state (B, H, P, N)."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ShapeError(f"CpuMamba2.init_state: expected a batch size >= 1, got {batch!r}")
        cfg = self.config
        conv = (batch, cfg.conv_dim, cfg.d_conv)
        ssm = (batch, cfg.n_heads, cfg.head_dim, cfg.d_state)
        return MambaState(
            conv=[np.zeros(conv, self.dtype) for _ in range(cfg.n_layer)],
            ssm=[np.zeros(ssm, self.dtype) for _ in range(cfg.n_layer)],
        )

    def _prefill_state(  # type: ignore[override]
        self, w: dict[str, FloatArray], c: Mamba2LayerCache, rows: np.ndarray, last: np.ndarray
    ) -> tuple[FloatArray, FloatArray]:
        """One layer's decoding state after each row's last prompt token (what the inherited
        :meth:`~evermind.model.cpu.CpuMamba.prefill` keeps): (conv register of x, B and C
        (B, conv_dim, K), SSD state (B, H, P, N))."""
        conv = conv_register(c.xbc, last, self.config.d_conv)  # (B, conv_dim, K)
        # The state at each row's own end: the loop's states (the chunked forward keeps only
        # chunk ends).
        _, states = ssd_scan_sequential(
            c.x, c.dt_raw, w["A_log"], c.B, c.C, w["D"], w["dt_bias"]
        )  # (B, L, H, P, N)
        return conv, states[rows, last - 1]

    def step(self, token_ids: Any, state: MambaState) -> tuple[FloatArray, MambaState]:
        """Advance every sequence by one token: O(1) work per token, whatever came before.

        Args:
            token_ids: The next token of each sequence, shape (B,).
            state: From :meth:`init_state`, :meth:`prefill` or a previous ``step``; updated IN
                PLACE and returned.

        Returns:
            (logits of shape (B, V) for the token after ``token_ids``, the same state object).
        """
        ids = self._check_ids(token_ids, 1, "step")
        cfg = self.config
        if len(state.ssm) != cfg.n_layer or state.ssm[0].shape[0] != ids.shape[0]:
            raise ShapeError(
                f"CpuMamba2.step: state holds {len(state.ssm)} layers x batch "
                f"{state.ssm[0].shape[0] if state.ssm else 0}, expected {cfg.n_layer} x "
                f"{ids.shape[0]}; hint: init_state(batch) with the batch of token_ids"
            )
        batch, d_inner, group_n = ids.shape[0], cfg.d_inner, cfg.n_groups * cfg.d_state
        embedding = self.params["backbone.embeddings.weight"]  # (V, D)
        compute = self.dtype  # the model's dtype, as CpuMamba's step
        h = embedding_fwd(ids, embedding)  # (B, D)
        for index in range(cfg.n_layer):
            w = self._layer(index)
            conv_state, ssm = state.conv[index], state.ssm[index]
            x_norm, _ = rmsnorm_fwd(h, w["norm"], cfg.rms_eps, compute)  # (B, D)
            proj = x_norm @ w["in_proj"].T  # (B, I + conv_dim + H)
            z, xbc = proj[:, :d_inner], proj[:, d_inner : d_inner + cfg.conv_dim]
            act, conv_state[...] = conv_step(conv_state, xbc, w["conv_w"], w["conv_b"], compute)
            groups = (batch, cfg.n_groups, cfg.d_state)
            y, ssm[...] = ssd_decode_step(
                ssm,
                act[:, :d_inner].reshape(batch, cfg.n_heads, cfg.head_dim),  # x (B, H, P)
                proj[:, d_inner + cfg.conv_dim :],  # dt_raw (B, H)
                w["A_log"],
                act[:, d_inner : d_inner + group_n].reshape(groups),  # B (B, G, N)
                act[:, d_inner + group_n :].reshape(groups),  # C (B, G, N)
                w["D"],
                w["dt_bias"],
                compute=compute,
            )
            gated = rmsnorm_gated_fwd(
                y.reshape(batch, d_inner), z, w["gate_norm"], d_inner // cfg.n_groups, cfg.rms_eps
            )
            h = h + gated @ w["out_proj"].T  # (B, D)
        hidden, _ = rmsnorm_fwd(h, self.params["backbone.norm_f.weight"], cfg.rms_eps, compute)
        return hidden @ embedding.T, state  # (B, V)
