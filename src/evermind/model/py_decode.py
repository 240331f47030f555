"""Recurrent decoding in pure Python: the tab's CPU path when there is no WebGPU (browser-safe).

The tab has no numpy (Pyodide's offline core ships none), so without WebGPU the Studio
generates with :class:`PyDecoder`: one token at a time through the recurrent form of the
model (per layer a (I, K) conv register and an (I, N) SSM state), standard library only.
It is slow (a few small-model tokens per second) but exact up to float rounding: the numpy
decoder (:meth:`evermind.model.cpu.CpuMamba.step`) is the reference, and
tests/unit/test_py_decode.py compares the logits. Weights come as flat float32 ``array``
rows, the shapes of :mod:`evermind.model.config`'s parameter table.
"""

from __future__ import annotations

import math
import operator
from array import array
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from evermind.errors import ConfigError
from evermind.model.config import MambaConfig
from evermind.model.sampling import stream_tokens
from evermind.package.head import EmbedderHead, apply_head

__all__ = ["PyDecoder"]

#: Past this, softplus(x) is x to float precision (ops.elementwise uses the same cut).
_LINEAR_FROM = 20.0

Rows = list["array[float]"]


def _dot_fallback(a: Sequence[float], b: Sequence[float]) -> float:
    total: float = sum(map(operator.mul, a, b))
    return total


#: The dot product: ``math.sumprod`` (Python 3.12+, Pyodide's 3.14: one C loop), else a map.
_dot: Callable[[Sequence[float], Sequence[float]], float] = getattr(math, "sumprod", _dot_fallback)


def _rows(flat: Sequence[float], width: int) -> Rows:
    """A (rows, width) matrix as a list of float32 rows."""
    return [array("f", flat[i : i + width]) for i in range(0, len(flat), width)]


def _matvec(rows: Rows, vector: Sequence[float]) -> list[float]:
    """``rows @ vector``."""
    return [_dot(row, vector) for row in rows]


def _norm(x: Sequence[float], weight: Sequence[float], eps: float) -> list[float]:
    scale = 1.0 / math.sqrt(_dot(x, x) / len(x) + eps)
    return [v * scale * w for v, w in zip(x, weight, strict=True)]


def _gate(x: float) -> float:
    """x times the logistic of x (overflow-safe)."""
    if x >= 0:
        return x / (1.0 + math.exp(-x))
    e = math.exp(x)
    return x * e / (1.0 + e)


def _positive(x: float) -> float:
    """log(1 + e^x), the time step's positivity map."""
    return x if x > _LINEAR_FROM else math.log1p(math.exp(x))


class _Layer:
    def __init__(self, cfg: MambaConfig, p: Mapping[str, Sequence[float]], index: int) -> None:
        pre = f"backbone.layers.{index}."
        d, i, n, r, k = cfg.d_model, cfg.d_inner, cfg.d_state, cfg.dt_rank, cfg.d_conv
        self.norm = array("f", p[pre + "norm.weight"])
        self.in_proj = _rows(p[pre + "mixer.in_proj.weight"], d)  # (2I, D)
        self.conv_w = _rows(p[pre + "mixer.conv1d.weight"], k)  # (I, K)
        self.conv_b = array("f", p[pre + "mixer.conv1d.bias"])
        self.x_proj = _rows(p[pre + "mixer.x_proj.weight"], i)  # (R + 2N, I)
        self.dt_w = _rows(p[pre + "mixer.dt_proj.weight"], r)  # (I, R)
        self.dt_b = array("f", p[pre + "mixer.dt_proj.bias"])
        # The decay rates -exp(log_a), once (the state matrix is fixed while decoding).
        log_a = _rows(p[pre + "mixer.A_log"], n)
        self.decay = [[-math.exp(v) for v in row] for row in log_a]  # (I, N)
        self.skip = array("f", p[pre + "mixer.D"])
        self.out_proj = _rows(p[pre + "mixer.out_proj.weight"], i)  # (D, I)


class PyDecoder:
    """One sequence decoded token by token on the CPU, in pure Python.

    Args:
        config: Model hyperparameters.
        params: Every parameter by its HF name, flat (row-major) float sequences.

    Raises:
        ConfigError: The config is a Mamba-2 one or has the cortex (this decoder runs plain
            Mamba-1 blocks only).
    """

    def __init__(self, config: MambaConfig, params: Mapping[str, Sequence[float]]) -> None:
        if config.block != "mamba1":
            raise ConfigError(
                f"PyDecoder: decodes Mamba-1 blocks only, got block={config.block!r}; "
                "hint: decode a Mamba-2 model natively with CpuMamba2.step"
            )
        if config.moe_experts:
            raise ConfigError(
                f"PyDecoder: decodes plain Mamba-1 blocks only, got the cortex "
                f"(moe_experts={config.moe_experts}); hint: decode it natively with "
                "CpuMamba.step (or CpuDecoder)"
            )
        self.config = config
        self.embedding = _rows(params["backbone.embeddings.weight"], config.d_model)  # (V, D)
        self.norm_f = array("f", params["backbone.norm_f.weight"])
        self.layers = [_Layer(config, params, i) for i in range(config.n_layer)]
        self.reset()

    def reset(self) -> None:
        """Forgets the sequence: zero conv registers and SSM states."""
        cfg = self.config
        self.conv = [[[0.0] * cfg.d_conv for _ in range(cfg.d_inner)] for _ in self.layers]
        self.ssm = [[[0.0] * cfg.d_state for _ in range(cfg.d_inner)] for _ in self.layers]

    def step(self, token: int) -> list[float]:
        """Feeds one token; returns the logits (V,) of the next."""
        return _matvec(self.embedding, self._advance(token))

    def embed_ids(
        self, texts_ids: Sequence[Sequence[int]], head: EmbedderHead | None = None
    ) -> list[list[float]]:
        """Sentence embeddings, as the package embeds: the mean of the final normed hidden
        states over each text's tokens, L2-normalised, then ``head`` (if any) applied
        (:func:`evermind.package.head.apply_head`). Resets the decoding state."""
        vectors = []
        for ids in texts_ids:
            if not ids:
                raise ConfigError("embed needs at least one token per text")
            self.reset()
            total = [0.0] * self.config.d_model
            for token in ids:
                total = [a + b for a, b in zip(total, self._advance(token), strict=True)]
            norm = math.sqrt(math.fsum(v * v for v in total))
            pooled = [v / norm for v in total] if norm > 0 else total
            vectors.append(apply_head(head, pooled, ids))
        self.reset()
        return vectors

    def _advance(self, token: int) -> list[float]:
        """Feeds one token; returns the final normed hidden state (D,)."""
        cfg = self.config
        if not 0 <= token < cfg.vocab_size:
            raise ConfigError(f"token id {token} is outside the vocabulary 0..{cfg.vocab_size - 1}")
        i_dim, r, n = cfg.d_inner, cfg.dt_rank, cfg.d_state
        h = [float(v) for v in self.embedding[token]]
        for w, conv, ssm in zip(self.layers, self.conv, self.ssm, strict=True):
            xz = _matvec(w.in_proj, _norm(h, w.norm, cfg.rms_eps))
            x_in, z = xz[:i_dim], xz[i_dim:]
            x_c = []
            for c in range(i_dim):
                register = conv[c]
                register.pop(0)
                register.append(x_in[c])
                taps = w.conv_w[c]
                x_c.append(_gate(w.conv_b[c] + _dot(register, taps)))
            dbc = _matvec(w.x_proj, x_c)
            b_t, c_t = dbc[r : r + n], dbc[r + n :]
            dt_in = dbc[:r]
            y = []
            for c in range(i_dim):
                delta = _positive(w.dt_b[c] + _dot(w.dt_w[c], dt_in))
                drive = delta * x_c[c]
                exp = math.exp
                state = [
                    exp(delta * a) * h_s + drive * b
                    for a, h_s, b in zip(w.decay[c], ssm[c], b_t, strict=True)
                ]
                ssm[c] = state
                y.append((_dot(state, c_t) + w.skip[c] * x_c[c]) * _gate(z[c]))
            h = [a + b for a, b in zip(h, _matvec(w.out_proj, y), strict=True)]
        return _norm(h, self.norm_f, cfg.rms_eps)

    async def _step(self, token: int) -> list[float]:
        return self.step(token)

    def stream(
        self,
        prompt_ids: Sequence[int],
        max_new_tokens: int = 64,
        temperature: float = 0.8,
        top_k: int | None = 40,
        top_p: float | None = 0.95,
        seed: int | None = None,
        eos_id: int | None = None,
    ) -> AsyncIterator[int]:
        """Yields generated token ids one at a time (as :meth:`GpuDecoder.stream`: the one
        loop, :func:`~evermind.model.sampling.stream_tokens`)."""
        return stream_tokens(
            self._step, self.reset, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
            eos_id,
        )  # fmt: skip
