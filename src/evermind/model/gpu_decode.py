"""Batched recurrent decoding on the GPU: the wgpu-py :class:`~evermind.model.decode.Decoder`
(native-only: numpy logits, a synchronous wrapper over the async port).

:class:`GpuBatchDecoder` keeps the conv and SSM states of ``slots`` sequences on the GPU, one
(S, R) buffer per layer and kind. A :meth:`~GpuBatchDecoder.step` of B sequences is one plan
replay for the whole batch: the token ids and the slot list are written into two buffers, and
per layer the plan gathers the B rows of those slots into dense (B, R) buffers
(``recurrent_step.wgsl:gather_rows``), runs the matmuls over B rows and the recurrent-step
kernels on them, and scatters the updated rows back (``scatter_rows``); one readback returns
the (B, vocab) logits. A plan is recorded once per batch size B (lazily, then cached), so no
uniform changes between steps and no row is computed for an idle slot; a second plan per B
without the final norm and LM head serves the prefill steps that end no prompt. Every kernel works
row by row, so a row does not depend on its batch mates.

:meth:`~GpuBatchDecoder.prefill` zeroes the slots' states and steps the prompt tokens through
the same batched plans: step t feeds token t of every prompt longer than t (rows sorted by
length, longest first, so the prompts ending at step t are the last rows and their logits are
one contiguous readback). Cost: ``max(len(prompt))`` plan replays (the LM head only where a
prompt ends) and one readback per distinct prompt length — O(L) steps of matrix–matrix
products rather than the parallel scan.

The bridge to the async port: the native transport's ``read`` (``queue.read_buffer`` of
wgpu-py) completes without suspending, so each coroutine is driven by one ``send(None)`` in
the calling (scheduler) thread; no event loop is needed and a running one is not disturbed.
A transport that suspends (the browser's) is refused with :class:`~evermind.errors.GPUError`.
"""

from __future__ import annotations

from array import array
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import numpy as np

from evermind.errors import ConfigError, GPUError, ShapeError
from evermind.gpu import Buffer, Device, Dispatch, Plan
from evermind.kernels.elementwise import Elementwise
from evermind.kernels.embedding import Embedding
from evermind.kernels.matmul import Matmul
from evermind.kernels.recurrent_step import RecurrentStep
from evermind.kernels.rmsnorm import RMSNorm
from evermind.model.config import MambaConfig
from evermind.model.gpu import GpuMamba, Slot
from evermind.model.gpu_cortex import CortexBlock
from evermind.model.gpu_mamba2 import Mamba2DecodeLayers

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine of the native port that never suspends; returns its value.

    Raises:
        GPUError: The coroutine suspended (a transport whose reads are asynchronous).
    """
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise GPUError(
        "GpuBatchDecoder needs a transport whose reads complete synchronously (wgpu-py); "
        "this one suspended"
    )


class GpuBatchDecoder:
    """Batched recurrent decoding over ``slots`` state slots on the GPU.

    Args:
        device: The (native) device holding ``weights``.
        config: Model hyperparameters.
        weights: The model's weight slots (``GpuMamba.slots``).
        slots: How many sequences can be decoded at once.

    A Mamba-2 config keeps per layer and slot the conv registers of x, B and C and the SSD
    state instead, and steps them with :class:`~evermind.model.gpu_mamba2.Mamba2DecodeLayers`
    between the same gather and scatter.

    Raises:
        ConfigError: ``slots`` < 1.
    """

    def __init__(
        self, device: Device, config: MambaConfig, weights: dict[str, Slot], slots: int
    ) -> None:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ConfigError(f"GpuBatchDecoder: slots must be an integer >= 1, got {slots!r}")
        self.device, self.config, self.weights = device, config, weights
        self.slots, self.vocab_size = slots, config.vocab_size
        cfg, s = config, slots
        dm, di, r, n, k = cfg.d_model, cfg.d_inner, cfg.dt_rank, cfg.d_state, cfg.d_conv
        self._conv_row, self._ssm_row = di * k, di * n

        def buf(name: str, count: int) -> Buffer:
            return device.buffer(4 * count, label=f"batch_decode.{name}")

        self.emb = Embedding(device)
        self.ids = self.emb.ids_buffer(s, label="batch_decode.ids")
        self.slot_of = buf("slot_of", s)  # u32, same width as f32
        self.logits = buf("logits", s * cfg.vocab_size)
        self.conv_states = [buf(f"conv{i}", s * di * k) for i in range(cfg.n_layer)]
        self.ssm_states = [buf(f"ssm{i}", s * di * n) for i in range(cfg.n_layer)]
        self._acts = {
            "conv": buf("conv_rows", s * di * k),
            "ssm": buf("ssm_rows", s * di * n),
            **{name: buf(name, s * dm) for name in ("h", "xn", "out")},
            "rstd": buf("rstd", s),
            **{name: buf(name, s * di) for name in ("x_in", "z", "xc", "silu_z", "gated")},
            **{name: buf(name, s * di) for name in ("delta", "y")},
            "dt_low": buf("dt_low", s * r),
            "B": buf("B", s * n),
            "C": buf("C", s * n),
        }
        self._mamba2: Mamba2DecodeLayers | None = None
        if cfg.block == "mamba2":
            self._init_mamba2()
        self._plans: dict[tuple[int, bool], Plan] = {}
        self._cortex_blocks: dict[int, CortexBlock] = {}
        self._live: set[int] = set()
        self._model: GpuMamba | None = None  # the owner of the weights, from from_params

    @classmethod
    def from_params(
        cls, device: Device, config: MambaConfig, params: dict[str, Any], slots: int
    ) -> GpuBatchDecoder:
        """Uploads weights by Hugging Face name (float32 arrays) and builds the decoder."""
        model = GpuMamba(device, config, 1, 1)
        model.load_params(
            {name: np.ascontiguousarray(value, np.float32) for name, value in params.items()}
        )
        decoder = cls(device, config, model.slots, slots)
        decoder._model = model  # keeps the weight buffers alive
        return decoder

    def _init_mamba2(self) -> None:
        """The Mamba-2 block's per-slot states and their gathered rows."""
        dev, cfg, s = self.device, self.config, self.slots
        launchers = (Matmul(dev), Elementwise(dev), RMSNorm(dev), RecurrentStep(dev))
        weights = self.weights
        self._mamba2 = layers = Mamba2DecodeLayers(
            dev, cfg, lambda key: weights[key].param, launchers, rows=s
        )
        self._mamba2_sizes = sizes = layers.state_sizes()

        def buf(name: str, count: int) -> Buffer:
            return dev.buffer(4 * count, label=f"batch_decode.{name}")

        self._mamba2_slots = [
            {name: buf(f"{name}{i}", s * size) for name, size in sizes.items()}
            for i in range(cfg.n_layer)
        ]
        self._mamba2_rows = {name: buf(f"{name}_rows", s * size) for name, size in sizes.items()}

    def _record_mamba2_layer(self, i: int, b: int, h: Buffer) -> list[Dispatch]:
        """Layer i of a Mamba-2 model: gather the b slots' states, step, scatter them back."""
        assert self._mamba2 is not None
        rs, s = RecurrentStep(self.device), self.slots
        slots, rows = self._mamba2_slots[i], self._mamba2_rows
        d = [
            rs.gather_rows(slots[name], self.slot_of, rows[name], b, size, s)
            for name, size in self._mamba2_sizes.items()
        ]
        d += self._mamba2.layer_dispatches(i, h, b, rows)
        d += [
            rs.scatter_rows(rows[name], self.slot_of, slots[name], b, size, s)
            for name, size in self._mamba2_sizes.items()
        ]
        return d

    # -- recording -------------------------------------------------------------------------
    def _record(self, b: int, logits: bool) -> Plan:
        dev, cfg, a, s = self.device, self.config, self._acts, self.slots
        dm, di, r, n, k = cfg.d_model, cfg.d_inner, cfg.dt_rank, cfg.d_state, cfg.d_conv
        ew, mm, rn, rs = Elementwise(dev), Matmul(dev), RMSNorm(dev), RecurrentStep(dev)

        def p(key: str) -> Buffer:
            return self.weights[key].param

        h, xn, rstd, out = a["h"], a["xn"], a["rstd"], a["out"]
        d: list[Dispatch] = [self.emb.forward(self.ids, p("embeddings"), h, b, cfg.vocab_size, dm)]
        for i in range(cfg.n_layer):
            if self._mamba2 is not None:
                d += self._record_mamba2_layer(i, b, h)
                continue
            conv, ssm = self.conv_states[i], self.ssm_states[i]
            d.append(rs.gather_rows(conv, self.slot_of, a["conv"], b, self._conv_row, s))
            d.append(rs.gather_rows(ssm, self.slot_of, a["ssm"], b, self._ssm_row, s))
            d.append(rn.forward(h, p(f"{i}.norm"), xn, rstd, b, dm, cfg.rms_eps))
            d.append(mm.linear(xn, p(f"{i}.in_x"), a["x_in"], b, dm, di))
            d.append(mm.linear(xn, p(f"{i}.in_z"), a["z"], b, dm, di))
            d.append(
                rs.conv_step(
                    a["conv"], a["x_in"], p(f"{i}.conv_w"), p(f"{i}.conv_b"), a["xc"], b, di, k
                )
            )
            d.append(mm.linear(a["xc"], p(f"{i}.xp_dt"), a["dt_low"], b, di, r))
            d.append(mm.linear(a["xc"], p(f"{i}.xp_B"), a["B"], b, di, n))
            d.append(mm.linear(a["xc"], p(f"{i}.xp_C"), a["C"], b, di, n))
            d.append(
                mm.linear(a["dt_low"], p(f"{i}.dt_w"), a["delta"], b, r, di, bias=p(f"{i}.dt_b"))
            )
            d.append(
                rs.ssm_step(
                    a["ssm"],
                    a["xc"],
                    a["delta"],
                    p(f"{i}.A_log"),
                    a["B"],
                    a["C"],
                    p(f"{i}.D"),
                    a["y"],
                    b,
                    di,
                    n,
                )
            )
            d.append(rs.scatter_rows(a["conv"], self.slot_of, conv, b, self._conv_row, s))
            d.append(rs.scatter_rows(a["ssm"], self.slot_of, ssm, b, self._ssm_row, s))
            d.append(ew.silu_fwd(a["z"], a["silu_z"], b * di))
            d.append(ew.mul(a["y"], a["silu_z"], a["gated"], b * di))
            d.append(mm.linear(a["gated"], p(f"{i}.out"), out, b, di, dm))
            d.append(ew.accumulate(out, h, b * dm))  # residual, in place
            if self.config.moe_experts and i in self.config.moe_layers:
                # The cortex is per token: no state to gather or scatter.

                def layer_p(key: str, i: int = i) -> Buffer:
                    return p(f"{i}.{key}")

                d += self._cortex(b).residual(i, h, layer_p)
        if logits:  # prefill steps that end no prompt skip the norm and the LM head
            d.append(rn.forward(h, p("norm_f"), xn, rstd, b, dm, cfg.rms_eps))
            d.append(mm.linear(xn, p("embeddings"), self.logits, b, dm, cfg.vocab_size))
        return dev.plan(f"batch decode step x{b}{'' if logits else ' (no logits)'}").add(d)

    def _cortex(self, b: int) -> CortexBlock:
        """The cortex layers at ``b`` rows (one block per row count, as the plans)."""
        block = self._cortex_blocks.get(b)
        if block is None:
            dev = self.device
            kernels = (Matmul(dev), Elementwise(dev), RMSNorm(dev))
            block = self._cortex_blocks[b] = CortexBlock(dev, self.config, b, kernels, False)
        return block

    def _plan(self, b: int, logits: bool) -> Plan:
        plan = self._plans.get((b, logits))
        if plan is None:
            plan = self._plans[b, logits] = self._record(b, logits)
        return plan

    # -- checks ----------------------------------------------------------------------------
    def _check_slots(self, op: str, slots: Sequence[int], width: int) -> list[int]:
        rows = [int(x) for x in slots]
        if len(rows) != width:
            raise ShapeError(f"GpuBatchDecoder.{op}: {len(rows)} slots for {width} inputs")
        if not rows:
            raise ShapeError(f"GpuBatchDecoder.{op}: expected at least one slot")
        if len(set(rows)) != len(rows):
            raise ConfigError(f"GpuBatchDecoder.{op}: a slot appears twice in {rows}")
        bad = [x for x in rows if not 0 <= x < self.slots]
        if bad:
            raise ConfigError(f"GpuBatchDecoder.{op}: slot(s) {bad} outside 0..{self.slots - 1}")
        return rows

    def _check_tokens(self, op: str, tokens: Sequence[int]) -> None:
        bad = [t for t in tokens if not 0 <= t < self.vocab_size]
        if bad:
            raise ConfigError(
                f"GpuBatchDecoder.{op}: token id(s) {bad[:5]} outside the vocabulary "
                f"0..{self.vocab_size - 1}"
            )

    # -- the Decoder contract --------------------------------------------------------------
    def _run(self, rows: Sequence[int], tokens: Sequence[int], logits: bool = True) -> None:
        self.device.write(self.ids, array("i", tokens))
        self.device.write(self.slot_of, array("I", rows))
        self._plan(len(rows), logits).run()

    def _read_rows(self, start: int, count: int) -> np.ndarray:
        v = self.vocab_size
        raw = run_sync(self.device.read(self.logits, 4 * v * count, 4 * v * start))
        return np.frombuffer(raw, np.float32).reshape(count, v).copy()

    def step(self, slots: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        """Feeds ``tokens[i]`` to slot ``slots[i]``; returns the (n, vocab) float32 logits.

        Raises:
            ShapeError: ``slots`` and ``tokens`` differ in length, or are empty.
            ConfigError: A slot repeats, is out of range or holds no prefilled sequence; a
                token is outside the vocabulary.
        """
        toks = [int(t) for t in tokens]
        rows = self._check_slots("step", slots, len(toks))
        idle = [x for x in rows if x not in self._live]
        if idle:
            raise ConfigError(
                f"GpuBatchDecoder.step: slot(s) {idle} hold no sequence; hint: prefill first"
            )
        self._check_tokens("step", toks)
        self._run(rows, toks)
        return self._read_rows(0, len(rows))

    def prefill(self, slots: Sequence[int], prompts: Sequence[Sequence[int]]) -> np.ndarray:
        """Resets each slot and steps its prompt through; returns the (n, vocab) logits after
        each prompt's last token, in the order given.

        Raises:
            ShapeError: ``slots`` and ``prompts`` differ in length, or a prompt is empty.
            ConfigError: A slot repeats or is out of range; a token is outside the vocabulary.
        """
        ids = [[int(t) for t in prompt] for prompt in prompts]
        rows = self._check_slots("prefill", slots, len(ids))
        if any(not prompt for prompt in ids):
            raise ShapeError("GpuBatchDecoder.prefill: every prompt needs at least one token")
        for prompt in ids:
            self._check_tokens("prefill", prompt)
        zeros_conv, zeros_ssm = bytes(4 * self._conv_row), bytes(4 * self._ssm_row)
        for slot in rows:
            for conv, ssm in zip(self.conv_states, self.ssm_states, strict=True):
                self.device.write(conv, zeros_conv, 4 * self._conv_row * slot)
                self.device.write(ssm, zeros_ssm, 4 * self._ssm_row * slot)
            if self._mamba2 is not None:
                for layer in self._mamba2_slots:
                    for name, size in self._mamba2_sizes.items():
                        self.device.write(layer[name], bytes(4 * size), 4 * size * slot)
            self._live.add(slot)
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))  # stable: longest first
        out = np.empty((len(ids), self.vocab_size), np.float32)
        for t in range(len(ids[order[0]])):
            active = [i for i in order if len(ids[i]) > t]  # a prefix of ``order``
            ending = [i for i in active if len(ids[i]) == t + 1]  # the tail of ``active``
            self._run([rows[i] for i in active], [ids[i][t] for i in active], bool(ending))
            if ending:
                out[ending] = self._read_rows(len(active) - len(ending), len(ending))
        return out

    def release(self, slot: int) -> None:
        """Marks ``slot`` free (its state stays on the GPU until the next prefill zeroes it).

        Raises:
            ConfigError: ``slot`` is out of range.
        """
        if not 0 <= slot < self.slots:
            raise ConfigError(f"GpuBatchDecoder.release: slot {slot} outside 0..{self.slots - 1}")
        self._live.discard(slot)
