"""The Mamba language model on the CPU in numpy: forward, full backward, recurrent decoding.

NATIVE-ONLY: imports numpy; never imported by browser code.

This module owns :class:`CpuMamba`, the model-level reference (the GPU model's training step
and decoding, and the ``transformers`` port, are tested against it) and the model the native
runtime serves when no GPU is around. It is
built from the one numpy reference of each op in :mod:`evermind.ops` (the functions the kernel
tests compare the WGSL kernels with), in the kernels' conventions: the scan takes the time step
before softplus and ``A_log``, the decoding state is the kernels' (B, I, K) conv register and
(B, I, N) SSM state. Only the matmuls are numpy's ``@`` directly (the forward's products with
a weight through :func:`evermind.model.quantize.linear_rows`: ``x @ W.T`` for float weights,
the per-row scale on the output for int8 ones). The ops compute in float64
and return the model's dtype; their Python loops are over time inside the scan and over the K
conv taps. Training's scan (forward and backward) is the exception: it runs the scan's fast
path, :mod:`evermind.ops.selective_scan_fast` (tested against the reference, forward and every
gradient), in the model's dtype, as the GPU trains; ``reference_scan = True`` runs the
reference instead. The rest of the training step (RMSNorm, the conv, SiLU, forward and
backward, and the loss with dlogits from one softmax,
:func:`~evermind.ops.cross_entropy.cross_entropy_loss_and_grad`) also runs in the model's
dtype, through the ops' ``compute`` argument: float32 to train, float64 for the
finite-difference checks (the cortex's MoE stays float64 inside).

    h = E[ids]                                   # (B, L, D)
    for each layer: h = h + mixer(rmsnorm(h))    # (B, L, D)
        (cortex layers: h = h + moe(rmsnorm(h)))  # (B, L, D), :mod:`evermind.model.cpu_cortex`
    logits = rmsnorm_f(h) @ E^T                  # (B, L, V), LM head tied to the embedding

Shape letters: B batch, L length, D d_model, I d_inner, N d_state, R dt_rank, K d_conv, V vocab.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from evermind.errors import ConfigError, ShapeError
from evermind.model.config import MambaConfig
from evermind.model.cpu_cortex import CortexCache, cortex_aux, cortex_bwd, cortex_fwd, routing_stats
from evermind.model.quantize import QuantizedRows, embedding_rows, linear_rows
from evermind.ops._dtype import Floats as FloatArray
from evermind.ops._dtype import Ints as IntArray
from evermind.ops.conv1d import conv1d_bwd, conv1d_fwd
from evermind.ops.cross_entropy import cross_entropy_loss_and_grad, valid_count
from evermind.ops.elementwise import silu_bwd, silu_fwd
from evermind.ops.embedding import embedding_bwd
from evermind.ops.pool import lengths_of_mask, pool_fwd
from evermind.ops.recurrent_step import conv_step, ssm_step
from evermind.ops.rmsnorm import rmsnorm_bwd, rmsnorm_fwd
from evermind.ops.selective_scan import selective_scan_bwd, selective_scan_fwd, selective_scan_y
from evermind.ops.selective_scan_fast import selective_scan_fast_bwd, selective_scan_fast_fwd

__all__ = ["CpuMamba", "ForwardCache", "LayerCache", "MambaState", "conv_register"]

logger = logging.getLogger(__name__)


def conv_register(inputs: FloatArray, last: IntArray, d_conv: int) -> FloatArray:
    """The decoding conv register after each row's last token: its last K inputs, oldest
    first, zero before t = 0.

    Args:
        inputs: The conv's inputs, (B, L, C).
        last: Each row's length, (B,), in [1, L].
        d_conv: K.

    Returns:
        (B, C, K), the layout of :class:`MambaState`'s ``conv``.
    """
    taps = last[:, None] - d_conv + np.arange(d_conv)[None, :]  # (B, K): register positions
    window = inputs[np.arange(inputs.shape[0])[:, None], np.maximum(taps, 0)]  # (B, K, C)
    window[taps < 0] = 0
    register: FloatArray = window.transpose(0, 2, 1)
    return register


@dataclass
class LayerCache:
    """Activations of one block's forward that its backward reads (names as in the forward)."""

    h_in: FloatArray  # (B, L, D)  block input (residual stream)
    x_norm: FloatArray  # (B, L, D)  rmsnorm(h_in)
    rstd: FloatArray  # (B, L)
    x_in: FloatArray  # (B, L, I)  first half of in_proj
    z: FloatArray  # (B, L, I)  gate, second half of in_proj
    conv: FloatArray  # (B, L, I)  conv1d output before SiLU
    x_conv: FloatArray  # (B, L, I)  silu(conv): the scan input x
    dt_low: FloatArray  # (B, L, R)
    dt_pre: FloatArray  # (B, L, I)  the scan's delta_raw (softplus is the scan's)
    B: FloatArray  # (B, L, N)
    C: FloatArray  # (B, L, N)
    states: FloatArray  # (B, L, I, N)  every scan state h_t
    y: FloatArray  # (B, L, I)  scan output before the gate


@dataclass
class ForwardCache:
    """Everything the backward pass reads from the forward pass (see :meth:`CpuMamba.backward`)."""

    ids: IntArray  # (B, L)
    layers: list[LayerCache]  # one per block, in order
    h_final: FloatArray  # (B, L, D) residual stream before norm_f
    rstd_final: FloatArray  # (B, L)
    hidden: FloatArray  # (B, L, D) rmsnorm_f output
    cortex: dict[int, CortexCache] = field(default_factory=dict)  # per cortex layer


@dataclass
class MambaState:
    """Recurrent decoding state: O(1) per sequence, whatever the length decoded so far.

    Attributes:
        conv: Per layer, the register of the last K conv inputs, oldest first, shape (B, I, K)
            (the kernel's layout; the next step shifts the oldest out).
        ssm: Per layer, the SSM state h, shape (B, I, N).
    """

    conv: list[FloatArray]
    ssm: list[FloatArray]

    def copy(self) -> MambaState:
        """Return an independent copy (``step`` updates a state in place)."""
        return MambaState(conv=[c.copy() for c in self.conv], ssm=[s.copy() for s in self.ssm])


class CpuMamba:
    """Mamba-1 language model in numpy.

    The model owns copies of its weights in ``self.params`` (PyTorch shapes, ``dtype``); an
    optimizer may update those arrays in place. A 2-D weight may instead be int8
    (:class:`~evermind.model.quantize.QuantizedRows`, from an int8 package): it stays int8 and
    every product with it is :func:`~evermind.model.quantize.linear_rows`; such a model
    generates, embeds and evaluates but does not train.

    Args:
        config: The hyperparameters.
        params: One array per name of ``config.param_shapes()``, either in that shape or flat
            (e.g. the ``array('f')`` of :func:`evermind.model.init.init_params`), or
            :class:`~evermind.model.quantize.QuantizedRows` of that shape (float32 models).
        dtype: np.float32 (default, for serving) or np.float64 (for gradient checks).

    Attributes:
        reference_scan: False (default): training's forward and backward run the fast scan
            (:mod:`evermind.ops.selective_scan_fast`, computing in ``dtype``, as the GPU
            trains); True: the reference (:mod:`evermind.ops.selective_scan`, float64
            inside), for benchmarks and cross-checks.

    Raises:
        ConfigError: A parameter is missing or unknown, or dtype is not a float type.
        ShapeError: A parameter has the wrong number of elements or shape.
    """

    def __init__(
        self,
        config: MambaConfig,
        params: Mapping[str, Any],
        dtype: npt.DTypeLike = np.float32,
    ) -> None:
        self.config = config
        self.dtype = np.dtype(dtype)
        self.reference_scan = False
        #: The layers that carry the cortex (empty for a plain Mamba model).
        self.cortex = frozenset(config.moe_layers)
        #: Routing statistics of the last :meth:`loss_and_grads` (None without the cortex).
        self.last_routing: dict[str, Any] | None = None
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ConfigError(
                f"CpuMamba: expected dtype float32 or float64, got {self.dtype}; "
                "hint: float32 to serve, float64 for finite-difference checks"
            )
        shapes = config.param_shapes()
        missing = [name for name in shapes if name not in params]
        unknown = [name for name in params if name not in shapes]
        if missing or unknown:
            raise ConfigError(
                f"CpuMamba: expected exactly the parameters of config.param_shapes(); missing "
                f"{missing[:4]}{'...' if len(missing) > 4 else ''}, unknown {unknown[:4]}; "
                "hint: the LM head is tied to backbone.embeddings.weight and not stored"
            )
        self.params: dict[str, Any] = {}
        for name, shape in shapes.items():
            given = params[name]
            if isinstance(given, QuantizedRows):
                # int8 weights (an int8 package): kept int8, multiplied by linear_rows.
                if given.shape != shape or self.dtype != np.dtype(np.float32):
                    raise ShapeError(
                        f"CpuMamba: int8 {name} has shape {given.shape}, expected {shape} in a "
                        f"float32 model (this one is {self.dtype}); hint: load the package "
                        "with evermind.load"
                    )
                self.params[name] = QuantizedRows(given.values.copy(), given.scale.copy())
                continue
            value = np.array(given, dtype=self.dtype)  # always a private copy
            if value.shape != shape:
                if value.ndim != 1 or value.size != int(np.prod(shape)):
                    raise ShapeError(
                        f"CpuMamba: {name} has shape {value.shape}, expected {shape} "
                        f"(or flat with {int(np.prod(shape))} elements); "
                        "hint: was the config built with the same vocab_size and preset?"
                    )
                value = value.reshape(shape)
            self.params[name] = value

    # ---- parameters --------------------------------------------------------------------------

    @property
    def quantized(self) -> list[str]:
        """Names of the weights held as int8 (:class:`QuantizedRows`); empty for float."""
        return [name for name, value in self.params.items() if isinstance(value, QuantizedRows)]

    def _require_float(self, what: str) -> None:
        """Refuse training on int8 weights: their gradients have no int8 form."""
        if self.quantized:
            raise ConfigError(
                f"CpuMamba.{what}: {len(self.quantized)} weights are int8 (e.g. "
                f"{self.quantized[0]!r}); int8 models are for inference. Hint: train or tune "
                "from the float32 package and export int8 afterwards"
            )

    def _layer(self, index: int) -> dict[str, Any]:
        """Views of one layer's weights under short names."""
        prefix = f"backbone.layers.{index}."
        p = self.params
        return {
            "norm": p[prefix + "norm.weight"],  # (D,)
            "in_proj": p[prefix + "mixer.in_proj.weight"],  # (2I, D)
            "conv_w": p[prefix + "mixer.conv1d.weight"],  # (I, 1, K)
            "conv_b": p[prefix + "mixer.conv1d.bias"],  # (I,)
            "x_proj": p[prefix + "mixer.x_proj.weight"],  # (R + 2N, I)
            "dt_w": p[prefix + "mixer.dt_proj.weight"],  # (I, R)
            "dt_b": p[prefix + "mixer.dt_proj.bias"],  # (I,)
            "A_log": p[prefix + "mixer.A_log"],  # (I, N)
            "D": p[prefix + "mixer.D"],  # (I,)
            "out_proj": p[prefix + "mixer.out_proj.weight"],  # (D, I)
        }

    def _check_ids(self, ids: Any, ndim: int, what: str) -> IntArray:
        array = np.asarray(ids)
        if array.ndim != ndim or not np.issubdtype(array.dtype, np.integer):
            raise ShapeError(
                f"CpuMamba.{what}: expected an integer array of {ndim} dims, got shape "
                f"{array.shape} dtype {array.dtype}; hint: token ids shaped "
                f"{'(B, L)' if ndim == 2 else '(B,)'}"
            )
        if array.size and (array.min() < 0 or array.max() >= self.config.vocab_size):
            raise ShapeError(
                f"CpuMamba.{what}: expected ids in [0, {self.config.vocab_size}), got range "
                f"[{array.min()}, {array.max()}]; hint: tokenizer and model disagree on vocab"
            )
        return array

    # ---- parallel forward --------------------------------------------------------------------

    def _block_fwd(self, w: dict[str, FloatArray], h: FloatArray) -> tuple[FloatArray, LayerCache]:
        """One block's mixer path on the residual stream h (B, L, D): (out (B, L, D), cache)."""
        cfg = self.config
        d_inner, rank, d_state = cfg.d_inner, cfg.dt_rank, cfg.d_state
        x_norm, rstd = rmsnorm_fwd(h, w["norm"], cfg.rms_eps, self.dtype)  # (B, L, D), (B, L)
        xz = linear_rows(x_norm, w["in_proj"])  # (B, L, 2I)
        x_in, z = xz[..., :d_inner], xz[..., d_inner:]  # (B, L, I) each
        conv = conv1d_fwd(x_in, w["conv_w"], w["conv_b"], self.dtype)  # (B, L, I)
        x_conv = silu_fwd(conv, self.dtype)  # (B, L, I)
        dbc = linear_rows(x_conv, w["x_proj"])  # (B, L, R + 2N)
        dt_low = dbc[..., :rank]  # (B, L, R)
        B = dbc[..., rank : rank + d_state]  # (B, L, N)
        C = dbc[..., rank + d_state :]  # (B, L, N)
        dt_pre = linear_rows(dt_low, w["dt_w"]) + w["dt_b"]  # (B, L, I), before softplus
        # (B, L, I), (B, L, I, N); delta = softplus(dt_pre) and A = -exp(A_log) < 0 inside.
        y, states = self._scan_fwd(x_conv, dt_pre, w["A_log"], B, C, w["D"])
        out = linear_rows(y * silu_fwd(z, self.dtype), w["out_proj"])  # (B, L, D)
        cache = LayerCache(
            h_in=h, x_norm=x_norm, rstd=rstd, x_in=x_in, z=z, conv=conv, x_conv=x_conv,
            dt_low=dt_low, dt_pre=dt_pre, B=B, C=C, states=states, y=y,
        )  # fmt: skip
        return out, cache

    def _scan_fwd(
        self, x: FloatArray, dt: FloatArray, A_log: FloatArray, B: FloatArray, C: FloatArray,
        D: FloatArray,
    ) -> tuple[FloatArray, FloatArray]:  # fmt: skip
        """The training forward's scan, ``(y, states)``: fast, or the reference when asked."""
        if self.reference_scan:
            return selective_scan_fwd(x, dt, A_log, B, C, D)
        return selective_scan_fast_fwd(x, dt, A_log, B, C, D, self.dtype)

    def _scan_bwd(
        self, dy: FloatArray, x: FloatArray, dt: FloatArray, A_log: FloatArray, B: FloatArray,
        C: FloatArray, D: FloatArray, states: FloatArray,
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:  # fmt: skip
        """The scan's gradients (dx, ddelta_raw, dA_log, dB, dC, dD), as :meth:`_scan_fwd`."""
        if self.reference_scan:
            return selective_scan_bwd(dy, x, dt, A_log, B, C, D, states)
        return selective_scan_fast_bwd(dy, x, dt, A_log, B, C, D, states, self.dtype)

    def _block_infer(self, w: dict[str, FloatArray], h: FloatArray) -> FloatArray:
        """:meth:`_block_fwd`'s output alone, for inference (embeddings, logits): in the
        model's dtype, as :meth:`step`, without the activations or the scan's states."""
        cfg = self.config
        d_inner, rank, d_state, compute = cfg.d_inner, cfg.dt_rank, cfg.d_state, self.dtype
        x_norm, _ = rmsnorm_fwd(h, w["norm"], cfg.rms_eps, compute)  # (B, L, D)
        xz = linear_rows(x_norm, w["in_proj"])  # (B, L, 2I)
        x_in, z = xz[..., :d_inner], xz[..., d_inner:]  # (B, L, I) each
        x_conv = silu_fwd(conv1d_fwd(x_in, w["conv_w"], w["conv_b"], compute), compute)
        dbc = linear_rows(x_conv, w["x_proj"])  # (B, L, R + 2N)
        B, C = dbc[..., rank : rank + d_state], dbc[..., rank + d_state :]  # (B, L, N) each
        dt_pre = linear_rows(dbc[..., :rank], w["dt_w"]) + w["dt_b"]  # (B, L, I), before softplus
        y = selective_scan_y(x_conv, dt_pre, w["A_log"], B, C, w["D"], compute)  # (B, L, I)
        out: FloatArray = linear_rows(y * silu_fwd(z, compute), w["out_proj"])  # (B, L, D)
        return out

    def _forward(self, ids: IntArray, keep: bool) -> tuple[FloatArray, ForwardCache | None]:
        """Final normed hidden state (B, L, D), and the activations when ``keep`` (else the
        inference path, :meth:`_block_infer`)."""
        cfg = self.config
        layers: list[LayerCache] = []
        embedding = self.params["backbone.embeddings.weight"]  # (V, D)
        h = embedding_rows(ids, embedding).reshape(*ids.shape, cfg.d_model)  # (B, L, D)
        norm_f = self.params["backbone.norm_f.weight"]
        if not keep:
            for index in range(cfg.n_layer):
                h = h + self._block_infer(self._layer(index), h)  # (B, L, D)
                if index in self.cortex:
                    h = h + cortex_fwd(self.params, cfg, index, h)[0]  # (B, L, D)
            return rmsnorm_fwd(h, norm_f, cfg.rms_eps, self.dtype)[0], None
        cortex: dict[int, CortexCache] = {}
        for index in range(cfg.n_layer):
            out, layer_cache = self._block_fwd(self._layer(index), h)
            layers.append(layer_cache)
            h = h + out  # (B, L, D) residual; a new array, so the cached h_in stays intact
            if index in self.cortex:
                out, cortex[index] = cortex_fwd(self.params, cfg, index, h)
                h = h + out  # (B, L, D)
        hidden, rstd_final = rmsnorm_fwd(h, norm_f, cfg.rms_eps, self.dtype)
        return hidden, ForwardCache(
            ids, layers, h_final=h, rstd_final=rstd_final, hidden=hidden, cortex=cortex
        )

    def hidden(self, ids: Any) -> FloatArray:
        """Final normed hidden states.

        Args:
            ids: Token ids, shape (B, L).

        Returns:
            Shape (B, L, D), in the model's dtype.
        """
        return self._forward(self._check_ids(ids, 2, "hidden"), keep=False)[0]

    def forward(self, ids: Any) -> FloatArray:
        """Next-token logits at every position.

        Args:
            ids: Token ids, shape (B, L).

        Returns:
            Logits, shape (B, L, V).
        """
        return linear_rows(self.hidden(ids), self.params["backbone.embeddings.weight"])  # (B, L, V)

    def embed(self, ids: Any, mask: Any) -> FloatArray:
        """Sentence embeddings: mean final normed hidden state over valid positions, L2-normalised.

        The model is causal, so pad on the right: padding never changes earlier positions.

        Args:
            ids: Token ids, shape (B, L).
            mask: Booleans, shape (B, L); True where a position belongs to the text.

        Returns:
            Unit vectors, shape (B, D).

        Raises:
            ShapeError: Mask shape differs from ids, a row has no valid position, or a row is
                not a prefix (True after False).
        """
        ids = self._check_ids(ids, 2, "embed")
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != ids.shape:
            raise ShapeError(
                f"CpuMamba.embed: mask has shape {mask.shape}, expected ids' shape {ids.shape}"
            )
        counts = mask.sum(axis=1)  # (B,)
        if (counts == 0).any():
            raise ShapeError(
                f"CpuMamba.embed: expected at least one True in every mask row, rows "
                f"{np.nonzero(counts == 0)[0].tolist()} have none; hint: do not embed empty texts"
            )
        lengths = lengths_of_mask(mask)  # (B,); raises unless every row is a prefix
        hidden, _ = self._forward(ids, keep=False)  # (B, L, D)
        return pool_fwd(hidden, lengths)

    # ---- training: loss and full backward ----------------------------------------------------

    def loss_and_grads(
        self, ids: Any, targets: Any, ignore_index: int = -100
    ) -> tuple[float, dict[str, FloatArray]]:
        """Mean cross-entropy of ``targets`` given ``ids`` and its gradient for every parameter.

        With the cortex the loss is the LM loss plus ``router_aux_loss_coef`` times the
        load-balancing loss (HF's, pooled over the cortex layers), and :attr:`last_routing`
        holds the step's routing statistics.

        Args:
            ids: Input token ids, shape (B, L).
            targets: Target ids, shape (B, L); ``ignore_index`` entries do not count.
            ignore_index: Target value to skip.

        Returns:
            (loss, grads): the mean loss and one gradient array per parameter, in
            ``config.param_shapes()`` order and shapes.

        Raises:
            ShapeError: ids/targets shapes differ or hold out-of-range values.
        """
        self._require_float("loss_and_grads")
        ids = self._check_ids(ids, 2, "loss_and_grads")
        targets = np.asarray(targets)
        if targets.shape != ids.shape or not np.issubdtype(targets.dtype, np.integer):
            raise ShapeError(
                f"CpuMamba.loss_and_grads: targets have shape {targets.shape} dtype "
                f"{targets.dtype}, expected integers shaped like ids {ids.shape}"
            )
        vocab = self.config.vocab_size
        flat_targets = targets.reshape(-1)
        counted = flat_targets != ignore_index
        bad = counted & ((flat_targets < 0) | (flat_targets >= vocab))
        if bad.any():
            raise ShapeError(
                f"cross_entropy: expected targets in [0, {vocab}) or {ignore_index} (ignored), "
                f"got {flat_targets[bad][:5].tolist()}; hint: check the tokenizer's vocab_size"
            )
        count = valid_count(flat_targets, vocab, ignore_index)
        if count == 0:
            raise ShapeError(
                f"cross_entropy: expected at least one target != ignore_index={ignore_index}, "
                f"got none of {flat_targets.size}; hint: the mean over zero targets is undefined"
            )
        logits, cache = self.forward_train(ids)  # (B, L, V)
        flat_logits = logits.reshape(-1, vocab)  # (M, V)
        # One softmax for both, in the model's dtype (float32 to train, float64 for checks).
        loss, dlogits = cross_entropy_loss_and_grad(
            flat_logits, flat_targets, 1.0 / count, ignore_index, self.dtype
        )
        coef = self.config.router_aux_loss_coef
        if cache.cortex:
            self.last_routing = routing_stats(cache.cortex, self.config.moe_experts)
            self.last_routing["lm_loss"] = loss
            loss += coef * self.last_routing["aux_loss"]
        return loss, self.backward(cache, dlogits.reshape(logits.shape), aux_coef=coef)

    def forward_train(self, ids: Any) -> tuple[FloatArray, ForwardCache]:
        """Logits (B, L, V) plus every activation the backward needs (for step-by-step checks).

        Args:
            ids: Token ids, shape (B, L).
        """
        hidden, cache = self.hidden_train(ids)
        return linear_rows(hidden, self.params["backbone.embeddings.weight"]), cache

    def hidden_train(self, ids: Any) -> tuple[FloatArray, ForwardCache]:
        """Final normed hidden states (B, L, D) plus every activation the backward needs.

        Args:
            ids: Token ids, shape (B, L).
        """
        ids = self._check_ids(ids, 2, "hidden_train")
        hidden, cache = self._forward(ids, keep=True)
        if cache is None:  # pragma: no cover - keep=True always returns a cache
            raise RuntimeError("forward cache missing")
        return hidden, cache

    def backward(
        self, cache: ForwardCache, dlogits: FloatArray, aux_coef: float = 0.0
    ) -> dict[str, FloatArray]:
        """Gradient of every parameter given the gradient of the logits.

        Args:
            cache: From :meth:`forward_train` on the current weights.
            dlogits: d(loss)/d(logits), shape (B, L, V).
            aux_coef: Weight of the cortex's load-balancing loss in the loss (0: not in it).

        Returns:
            One gradient per parameter, in ``config.param_shapes()`` order and shapes.
        """
        self._require_float("backward")
        cfg = self.config
        embedding = self.params["backbone.embeddings.weight"]  # (V, D)
        if dlogits.shape != (*cache.ids.shape, cfg.vocab_size):
            raise ShapeError(
                f"CpuMamba.backward: dlogits has shape {dlogits.shape}, expected "
                f"{(*cache.ids.shape, cfg.vocab_size)}; hint: one row of V per input position"
            )
        # Tied LM head: the embedding's first gradient contribution.
        flat_dlogits = dlogits.reshape(-1, cfg.vocab_size)  # (M, V)
        head_grad = flat_dlogits.T @ cache.hidden.reshape(-1, cfg.d_model)  # (V, D)
        grads = self.backward_hidden(cache, dlogits @ embedding, aux_coef)  # dhidden: (B, L, D)
        grads["backbone.embeddings.weight"] += head_grad
        return grads

    def backward_hidden(
        self, cache: ForwardCache, dhidden: FloatArray, aux_coef: float = 0.0
    ) -> dict[str, FloatArray]:
        """Gradient of every parameter given the gradient of the final normed hidden states.

        The entry for losses that read the hidden states rather than the logits (the
        contrastive embedding objective of ``evermind.train.contrastive``).

        Args:
            cache: From :meth:`forward_train` (or :meth:`hidden_train`) on the current weights.
            dhidden: d(loss)/d(hidden), shape (B, L, D).
            aux_coef: Weight of the cortex's load-balancing loss in the loss (0: not in it).

        Returns:
            One gradient per parameter, in ``config.param_shapes()`` order and shapes.
        """
        self._require_float("backward_hidden")
        cfg = self.config
        if dhidden.shape != (*cache.ids.shape, cfg.d_model):
            raise ShapeError(
                f"CpuMamba.backward_hidden: dhidden has shape {dhidden.shape}, expected "
                f"{(*cache.ids.shape, cfg.d_model)}; hint: one row of d_model per input position"
            )
        grads = {name: np.zeros_like(value) for name, value in self.params.items()}
        dh, grads["backbone.norm_f.weight"] = rmsnorm_bwd(
            cache.h_final, self.params["backbone.norm_f.weight"], dhidden, cfg.rms_eps, self.dtype
        )
        aux_grads = cortex_aux(cache.cortex)[1] if aux_coef else {}
        for index in reversed(range(cfg.n_layer)):
            if index in cache.cortex:  # the cortex runs after the mixer: its backward first
                dprobs = aux_grads[index] * aux_coef if index in aux_grads else None
                dh = dh + cortex_bwd(
                    self.params, cfg, index, dh, cache.cortex[index], dprobs, grads
                )
            # The residual passes dh through unchanged and adds the mixer's path.
            dh = dh + self._block_bwd(index, dh, cache.layers[index], grads)
        # The embedding's second contribution: the gather h = E[ids] (repeated ids accumulate).
        grads["backbone.embeddings.weight"] = embedding_bwd(
            cache.ids, dh.reshape(-1, cfg.d_model), grads["backbone.embeddings.weight"]
        )
        return grads

    def _block_bwd(
        self, index: int, dout: FloatArray, c: LayerCache, grads: dict[str, FloatArray]
    ) -> FloatArray:
        """Backward of one block's mixer path; writes its grads and returns d(block input)."""
        w = self._layer(index)
        prefix = f"backbone.layers.{index}.mixer."

        def flat(a: FloatArray) -> FloatArray:
            return a.reshape(-1, a.shape[-1])  # (M, last)

        compute = self.dtype
        gate = silu_fwd(c.z, compute)  # (B, L, I)
        gated = c.y * gate  # (B, L, I)
        grads[prefix + "out_proj.weight"] = flat(dout).T @ flat(gated)  # (D, I)
        dgated = dout @ w["out_proj"]  # (B, L, I)
        dy = dgated * gate  # (B, L, I)
        dz = silu_bwd(c.z, dgated * c.y, compute)  # (B, L, I)

        du, ddt_pre, grads[prefix + "A_log"], dB, dC, grads[prefix + "D"] = self._scan_bwd(
            dy, c.x_conv, c.dt_pre, w["A_log"], c.B, c.C, w["D"], c.states
        )
        grads[prefix + "dt_proj.weight"] = flat(ddt_pre).T @ flat(c.dt_low)  # (I, R)
        grads[prefix + "dt_proj.bias"] = flat(ddt_pre).sum(axis=0)  # (I,)
        ddbc = np.concatenate([ddt_pre @ w["dt_w"], dB, dC], axis=-1)  # (B, L, R + 2N)
        grads[prefix + "x_proj.weight"] = flat(ddbc).T @ flat(c.x_conv)  # (R + 2N, I)
        dx_conv = du + ddbc @ w["x_proj"]  # (B, L, I)

        dconv = silu_bwd(c.conv, dx_conv, compute)  # (B, L, I)
        dx_in, grads[prefix + "conv1d.weight"], grads[prefix + "conv1d.bias"] = conv1d_bwd(
            c.x_in, w["conv_w"], dconv, compute
        )
        dxz = np.concatenate([dx_in, dz], axis=-1)  # (B, L, 2I)
        grads[prefix + "in_proj.weight"] = flat(dxz).T @ flat(c.x_norm)  # (2I, D)
        dx_norm = dxz @ w["in_proj"]  # (B, L, D)

        dh_in, grads[f"backbone.layers.{index}.norm.weight"] = rmsnorm_bwd(
            c.h_in, w["norm"], dx_norm, self.config.rms_eps, compute
        )
        return dh_in

    # ---- recurrent decoding ------------------------------------------------------------------

    def init_state(self, batch: int) -> MambaState:
        """Zero decoding state for ``batch`` sequences (equivalent to an empty prefix)."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ShapeError(f"CpuMamba.init_state: expected a batch size >= 1, got {batch!r}")
        cfg = self.config
        return MambaState(
            conv=[
                np.zeros((batch, cfg.d_inner, cfg.d_conv), self.dtype) for _ in range(cfg.n_layer)
            ],
            ssm=[
                np.zeros((batch, cfg.d_inner, cfg.d_state), self.dtype) for _ in range(cfg.n_layer)
            ],
        )

    def prefill(self, ids: Any, lengths: Any = None) -> tuple[FloatArray, MambaState]:
        """Run prompts through the parallel forward (the scan) and return each one's decoding
        state after its last token: what :meth:`step` would reach token by token.

        Rows may be padded on the right: the model is causal, so a row's state and logits at
        its own last position never read the padding.

        Args:
            ids: Token ids, shape (B, L), each row's prompt first (padding after it).
            lengths: Tokens of each row's prompt, shape (B,), each in [1, L]; None: all L.

        Returns:
            (logits (B, V) after each row's last prompt token, the state (B rows) after it).
        """
        ids, last = self._prefill_rows(ids, lengths)
        cfg = self.config
        batch, length = ids.shape
        rows = np.arange(batch)
        state = self.init_state(batch)
        embedding = self.params["backbone.embeddings.weight"]  # (V, D)
        h = embedding_rows(ids, embedding).reshape(batch, length, cfg.d_model)  # (B, L, D)
        for index in range(cfg.n_layer):
            w = self._layer(index)
            out, cache = self._block_fwd(w, h)
            state.conv[index][...], state.ssm[index][...] = self._prefill_state(
                w, cache, rows, last
            )
            h = h + out
            if index in self.cortex:  # per token: the parallel pass is the recurrent one
                h = h + cortex_fwd(self.params, cfg, index, h)[0]
        h_last = h[rows, last - 1]  # (B, D)
        hidden, _ = rmsnorm_fwd(h_last, self.params["backbone.norm_f.weight"], cfg.rms_eps)
        return linear_rows(hidden, embedding), state  # (B, V)

    def _prefill_state(
        self, w: dict[str, Any], cache: LayerCache, rows: np.ndarray, last: np.ndarray
    ) -> tuple[FloatArray, FloatArray]:
        """One layer's decoding state after each row's last prompt token, from its block's
        forward on the prompts: (conv register (B, I, K), SSM state (B, I, N))."""
        conv = conv_register(cache.x_in, last, self.config.d_conv)  # (B, I, K)
        return conv, cache.states[rows, last - 1]  # (B, I, N)

    def _prefill_rows(self, ids: Any, lengths: Any) -> tuple[np.ndarray, np.ndarray]:
        """``prefill``'s checked (B, L) ids and each row's prompt length (None: all L).

        Raises:
            ShapeError: An empty batch, or a length outside [1, L] or not one per row.
        """
        name = f"{type(self).__name__}.prefill"
        ids = self._check_ids(ids, 2, "prefill")
        batch, length = ids.shape
        if batch < 1 or length < 1:
            raise ShapeError(f"{name}: expected a non-empty (B, L) batch, got {ids.shape}")
        last = np.full(batch, length, np.int64) if lengths is None else np.asarray(lengths)
        if last.shape != (batch,) or last.min() < 1 or last.max() > length:
            raise ShapeError(f"{name}: expected one length in [1, {length}] per row, got {last!r}")
        return ids, last

    def step(self, token_ids: Any, state: MambaState) -> tuple[FloatArray, MambaState]:
        """Advance every sequence by one token: O(1) work per token, whatever came before.

        Args:
            token_ids: The next token of each sequence, shape (B,).
            state: From :meth:`init_state` or a previous ``step``; updated IN PLACE and returned
                (``state.copy()`` first to branch).

        Returns:
            (logits of shape (B, V) for the token after ``token_ids``, the same state object).
        """
        ids = self._check_ids(token_ids, 1, "step")
        cfg = self.config
        if len(state.ssm) != cfg.n_layer or state.ssm[0].shape[0] != ids.shape[0]:
            raise ShapeError(
                f"CpuMamba.step: state holds {len(state.ssm)} layers x batch "
                f"{state.ssm[0].shape[0] if state.ssm else 0}, expected {cfg.n_layer} x "
                f"{ids.shape[0]}; hint: init_state(batch) with the batch of token_ids"
            )
        d_inner, rank, d_state = cfg.d_inner, cfg.dt_rank, cfg.d_state
        embedding = self.params["backbone.embeddings.weight"]  # (V, D)
        # The step's arithmetic runs in the model's dtype (float32 to serve, as the GPU step;
        # float64 for gradient checks), the parallel forward's in float64.
        compute = self.dtype
        h = embedding_rows(ids, embedding)  # (B, D)
        for index in range(cfg.n_layer):
            w = self._layer(index)
            conv_state, ssm = state.conv[index], state.ssm[index]  # (B, I, K), (B, I, N)
            x_norm, _ = rmsnorm_fwd(h, w["norm"], cfg.rms_eps, compute)  # (B, D)
            xz = linear_rows(x_norm, w["in_proj"])  # (B, 2I)
            x_in, z = xz[:, :d_inner], xz[:, d_inner:]  # (B, I) each
            x_conv, conv_state[...] = conv_step(conv_state, x_in, w["conv_w"], w["conv_b"], compute)
            dbc = linear_rows(x_conv, w["x_proj"])  # (B, R + 2N)
            B, C = dbc[:, rank : rank + d_state], dbc[:, rank + d_state :]  # (B, N) each
            dt_pre = linear_rows(dbc[:, :rank], w["dt_w"]) + w["dt_b"]  # (B, I), before softplus
            # The state is updated in place (no new (B, I, N) array to copy back).
            y, _ = ssm_step(ssm, x_conv, dt_pre, w["A_log"], B, C, w["D"], compute, out=ssm)
            h = h + linear_rows(y * silu_fwd(z, compute), w["out_proj"])  # (B, D)
            if index in self.cortex:
                h = h + cortex_fwd(self.params, cfg, index, h)[0]  # (B, D)
        hidden, _ = rmsnorm_fwd(h, self.params["backbone.norm_f.weight"], cfg.rms_eps, compute)
        return linear_rows(hidden, embedding), state  # (B, V)
