"""Inference on the GPU: recurrent decoding and embeddings (browser-safe).

:class:`GpuDecoder` runs the O(1)-per-token recurrent step of every layer as one recorded
plan (conv state shift + SSM state update, see ``shaders/recurrent_step.wgsl``); each token
costs one plan replay and one readback of the logits. :class:`GpuEmbedder` runs the
parallel forward (no LM head) on a padded batch and mean-pools the final normed hidden
state over each text's valid prefix, L2-normalised, with ``shaders/pool.wgsl`` (then the
package's embedding head, if any, see :mod:`evermind.package.head`). Both share
the weight buffers of a :class:`~evermind.model.gpu.GpuMamba` (e.g. the one training).
Both run either block type: the embedder replays ``GpuMamba``'s forward, the decoder a
Mamba-2 config's recurrent step from :mod:`evermind.model.gpu_mamba2`.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import AsyncIterator, Sequence

from evermind.errors import ConfigError
from evermind.gpu import Buffer, Device, Dispatch
from evermind.kernels.elementwise import Elementwise
from evermind.kernels.embedding import Embedding
from evermind.kernels.matmul import Matmul
from evermind.kernels.pool import Pool
from evermind.kernels.recurrent_step import RecurrentStep
from evermind.kernels.rmsnorm import RMSNorm
from evermind.model.config import MambaConfig
from evermind.model.gpu import GpuMamba, Slot
from evermind.model.gpu_cortex import CortexBlock
from evermind.model.gpu_mamba2 import Mamba2DecodeLayers
from evermind.model.sampling import stream_tokens
from evermind.package.head import EmbedderHead, apply_head


class GpuDecoder:
    """Recurrent single-token decoding on the GPU (batch 1).

    Args:
        device: The device holding ``weights``.
        config: Model hyperparameters.
        weights: The model's weight slots (``GpuMamba.slots``).

    A Mamba-2 config replays :class:`~evermind.model.gpu_mamba2.Mamba2DecodeLayers`' step
    (conv registers of x, B and C, and one (P, N) state per head) instead.
    """

    def __init__(self, device: Device, config: MambaConfig, weights: dict[str, Slot]) -> None:
        self.device, self.config, self.weights = device, config, weights
        dev, cfg = device, config
        dm, di, r, n, k = cfg.d_model, cfg.d_inner, cfg.dt_rank, cfg.d_state, cfg.d_conv
        ew, mm, rn, step = Elementwise(dev), Matmul(dev), RMSNorm(dev), RecurrentStep(dev)
        emb = Embedding(dev)
        if cfg.block == "mamba2":
            self._init_mamba2(emb, (mm, ew, rn, step))
            return

        def buf(name: str, count: int) -> Buffer:
            return dev.buffer(4 * count, label=f"decode.{name}")

        self.ids = emb.ids_buffer(1, label="decode.id")
        self.logits = buf("logits", cfg.vocab_size)
        self.conv_states = [buf(f"conv{i}", di * k) for i in range(cfg.n_layer)]
        self.ssm_states = [buf(f"ssm{i}", di * n) for i in range(cfg.n_layer)]
        h, xn, rstd, out = buf("h", dm), buf("xn", dm), buf("rstd", 1), buf("out", dm)
        x_in, z, xc, zs, g = (buf(s, di) for s in ("x_in", "z", "xc", "silu_z", "gated"))
        dt_low, bm, cm, delta, y = (
            buf("dt_low", r),
            buf("B", n),
            buf("C", n),
            buf("delta", di),
            buf("y", di),
        )

        def p(key: str) -> Buffer:
            return weights[key].param

        #: The cortex layers at one row (None without the cortex).
        cortex = CortexBlock(dev, cfg, 1, (mm, ew, rn), False) if cfg.moe_experts else None
        d: list[Dispatch] = [emb.forward(self.ids, p("embeddings"), h, 1, cfg.vocab_size, dm)]
        for i in range(cfg.n_layer):
            d.append(rn.forward(h, p(f"{i}.norm"), xn, rstd, 1, dm, cfg.rms_eps))
            d.append(mm.linear(xn, p(f"{i}.in_x"), x_in, 1, dm, di))
            d.append(mm.linear(xn, p(f"{i}.in_z"), z, 1, dm, di))
            d.append(
                step.conv_step(
                    self.conv_states[i], x_in, p(f"{i}.conv_w"), p(f"{i}.conv_b"), xc, 1, di, k
                )
            )
            d.append(mm.linear(xc, p(f"{i}.xp_dt"), dt_low, 1, di, r))
            d.append(mm.linear(xc, p(f"{i}.xp_B"), bm, 1, di, n))
            d.append(mm.linear(xc, p(f"{i}.xp_C"), cm, 1, di, n))
            d.append(mm.linear(dt_low, p(f"{i}.dt_w"), delta, 1, r, di, bias=p(f"{i}.dt_b")))
            d.append(
                step.ssm_step(
                    self.ssm_states[i], xc, delta, p(f"{i}.A_log"), bm, cm, p(f"{i}.D"), y, 1, di, n
                )
            )
            d.append(ew.silu_fwd(z, zs, di))
            d.append(ew.mul(y, zs, g, di))
            d.append(mm.linear(g, p(f"{i}.out"), out, 1, di, dm))
            d.append(ew.accumulate(out, h, dm))  # residual, in place
            if cortex is not None and i in cortex:  # per token: the same FFN as training's

                def layer_p(key: str, i: int = i) -> Buffer:
                    return p(f"{i}.{key}")

                d += cortex.residual(i, h, layer_p)
        d.append(rn.forward(h, p("norm_f"), xn, rstd, 1, dm, cfg.rms_eps))
        d.append(mm.linear(xn, p("embeddings"), self.logits, 1, dm, cfg.vocab_size))
        self.step_plan = dev.plan("decode step").add(d)
        self.reset_plan = dev.plan("decode reset").add(
            [ew.fill(s, di * k) for s in self.conv_states]
            + [ew.fill(s, di * n) for s in self.ssm_states]
        )

    def _init_mamba2(
        self, emb: Embedding, launchers: tuple[Matmul, Elementwise, RMSNorm, RecurrentStep]
    ) -> None:
        """The step and reset plans of a Mamba-2 model (``Mamba2DecodeLayers``' blocks)."""
        dev, cfg = self.device, self.config
        dm = cfg.d_model
        self.ids = emb.ids_buffer(1, label="decode.id")
        self.logits = dev.buffer(4 * cfg.vocab_size, label="decode.logits")
        h = dev.buffer(4 * dm, label="decode.h")
        layers = Mamba2DecodeLayers(dev, cfg, lambda key: self.weights[key].param, launchers)
        sizes = layers.state_sizes()
        #: Per layer the conv registers of x, B and C and the SSD state (see Mamba2DecodeLayers).
        self.mamba2_states = [
            {name: dev.buffer(4 * size, label=f"decode.{name}{i}") for name, size in sizes.items()}
            for i in range(cfg.n_layer)
        ]
        mm, ew, rn, _ = launchers
        embeddings = self.weights["embeddings"].param
        d = [emb.forward(self.ids, embeddings, h, 1, cfg.vocab_size, dm)]
        for i, state in enumerate(self.mamba2_states):
            d += layers.layer_dispatches(i, h, 1, state)
        norm_f = self.weights["norm_f"].param
        d.append(rn.forward(h, norm_f, layers.xn, layers.rstd, 1, dm, cfg.rms_eps))
        d.append(mm.linear(layers.xn, embeddings, self.logits, 1, dm, cfg.vocab_size))
        self.step_plan = dev.plan("decode step").add(d)
        self.reset_plan = dev.plan("decode reset").add(
            ew.fill(buf, sizes[name]) for state in self.mamba2_states for name, buf in state.items()
        )

    def reset(self) -> None:
        """Starts a new sequence (zero conv and SSM states)."""
        self.reset_plan.run()

    async def step(self, token: int) -> array[float]:
        """Feeds one token; returns the logits (V,) of the next one."""
        if not 0 <= token < self.config.vocab_size:
            raise ConfigError(
                f"token id {token} outside the vocabulary 0..{self.config.vocab_size - 1}"
            )
        self.device.write(self.ids, array("i", [token]))
        self.step_plan.run()
        logits = array("f")
        logits.frombytes(await self.device.read(self.logits))
        return logits

    async def generate(
        self,
        prompt_ids: Sequence[int],
        max_new_tokens: int = 64,
        temperature: float = 0.8,
        top_k: int | None = 40,
        top_p: float | None = 0.95,
        seed: int | None = None,
        eos_id: int | None = None,
    ) -> list[int]:
        """Generates token ids after ``prompt_ids`` (stops at ``eos_id``)."""
        return [
            t
            async for t in self.stream(
                prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, eos_id
            )
        ]

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
        """Yields generated token ids one at a time (:func:`~evermind.model.sampling.stream_tokens`
        over :meth:`step`)."""
        return stream_tokens(
            self.step, self.reset, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
            eos_id,
        )  # fmt: skip


class GpuEmbedder:
    """Sentence embeddings on the GPU: mean-pooled final hidden state, L2-normalised.

    Args:
        device: The device holding ``weights``.
        config: Model hyperparameters.
        weights: The model's weight slots.
        batch_size: Texts per forward pass.
        max_tokens: Tokens per text (longer texts are cut).
        head: The package's embedding head, applied in pure Python after the pooled
            readback (``normalize(W · (p − μ))``); None: the raw pooled vector.
    """

    def __init__(
        self,
        device: Device,
        config: MambaConfig,
        weights: dict[str, Slot],
        batch_size: int = 8,
        max_tokens: int = 128,
        head: EmbedderHead | None = None,
    ) -> None:
        self.device, self.config, self.head = device, config, head
        self.batch_size, self.max_tokens = batch_size, max_tokens
        self.model = GpuMamba(device, config, batch_size, max_tokens, weights=weights)
        self.lengths = device.buffer(4 * batch_size, label="embed.lengths")
        self.out = device.buffer(4 * batch_size * config.d_model, label="embed.out")
        pool = Pool(device).mean_l2(
            self.model.hf, self.lengths, self.out, batch_size, max_tokens, config.d_model
        )
        self.plan = device.plan("embed").add(
            self.model.forward_dispatches(store_states=False, logits=False)
        )
        self.plan.add(pool)

    async def embed_ids(self, texts_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        """Embeds token-id sequences; returns one unit vector per sequence."""
        d = self.config.d_model
        vectors: list[list[float]] = []
        for start in range(0, len(texts_ids), self.batch_size):
            chunk = [
                list(ids[: self.max_tokens]) for ids in texts_ids[start : start + self.batch_size]
            ]
            ids = array("i", [0] * (self.batch_size * self.max_tokens))
            lengths = array("I", [0] * self.batch_size)
            for row, seq in enumerate(chunk):
                ids[row * self.max_tokens : row * self.max_tokens + len(seq)] = array("i", seq)
                lengths[row] = len(seq)
            self.model.emb.write_ids(self.model.ids, ids, self.config.vocab_size)
            self.device.write(self.lengths, lengths)
            self.plan.run()
            raw = await self.device.read(self.out, 4 * d * len(chunk))
            flat = struct.unpack(f"<{d * len(chunk)}f", raw)
            vectors.extend(
                apply_head(self.head, flat[r * d : (r + 1) * d], chunk[r])
                for r in range(len(chunk))
            )
        return vectors
