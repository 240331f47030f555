"""The numpy :class:`~evermind.model.decode.Decoder`: batched recurrent decoding on the CPU.

NATIVE-ONLY: imports numpy; never imported by browser code.

:class:`CpuDecoder` keeps the decoding states of ``slots`` sequences in preallocated arrays
(per layer a (slots, I, K) conv register and a (slots, I, N) SSM state). :meth:`~CpuDecoder.step`
gathers the given slots' rows, advances them with one batched :meth:`CpuMamba.step` (one
matrix–matrix product per projection for the whole batch instead of one matrix–vector product
per sequence) and scatters them back; :meth:`~CpuDecoder.prefill` runs the prompts through the
parallel forward (:meth:`CpuMamba.prefill`, the scan), padded on the right in groups of
similar length, and stores each prompt's state after its own last token; prompts of at
most :data:`STEP_PREFILL_TOKENS` tokens are stepped through instead (batched together), which
costs a few float32 steps instead of the scan's fixed cost. :meth:`~CpuDecoder.reset` zeroes
slots without a step (a :class:`~evermind.model.decode.ZeroStartDecoder`): the scheduler then
feeds a short prompt's every token through the batch's own steps.

Exactness: every op is row-wise except the float32 matrix products, where OpenBLAS picks
kernels by the number of rows, so a row's logits may differ from the same row decoded alone
by a few float32 ulps (tests/unit/test_cpu_decode.py measures the largest difference and
checks that generated text is identical).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from evermind.errors import ConfigError, ShapeError
from evermind.model.cpu import CpuMamba, MambaState

__all__ = ["CpuDecoder"]

#: A prefill group is cut when padding would exceed this share of its token positions.
PAD_SHARE = 0.25
#: Prompts up to this many tokens are prefilled by stepping through them (batched over the
#: short prompts), longer ones by the parallel scan: for a few tokens the scan's fixed cost
#: (its float64 forward through every layer) is several times that of a few float32 steps.
STEP_PREFILL_TOKENS = 6


class CpuDecoder:
    """Decoder over ``slots`` state slots of a :class:`CpuMamba` (or a loaded ``Model``).

    Args:
        model: A :class:`CpuMamba`, or anything with a ``cpu`` attribute holding one (e.g.
            :class:`evermind.model.inference.Model`).
        slots: Sequences decoded at once.
    """

    def __init__(self, model: Any, slots: int = 32) -> None:
        cpu = model if isinstance(model, CpuMamba) else getattr(model, "cpu", None)
        if not isinstance(cpu, CpuMamba):
            raise ConfigError(
                f"CpuDecoder: expected a CpuMamba or a Model, got {type(model).__name__}"
            )
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ConfigError(f"CpuDecoder: expected slots >= 1, got {slots!r}")
        self.cpu = cpu
        self.slots = slots
        self.vocab_size = cpu.config.vocab_size
        self._state = cpu.init_state(slots)
        self._ready = np.zeros(slots, bool)  # slots whose state holds a prefilled sequence

    def _slot_index(self, slots: Sequence[int], what: str, ready: bool) -> np.ndarray:
        index = np.asarray(list(slots), np.int64)
        if index.ndim != 1 or not index.size:
            raise ShapeError(f"CpuDecoder.{what}: expected a non-empty list of slot ids")
        if index.min() < 0 or index.max() >= self.slots:
            raise ShapeError(
                f"CpuDecoder.{what}: slot ids must be in [0, {self.slots}), got {index.tolist()}"
            )
        if len(set(index.tolist())) != index.size:
            raise ShapeError(f"CpuDecoder.{what}: slot ids repeat: {index.tolist()}")
        if ready and not self._ready[index].all():
            raise ShapeError(
                f"CpuDecoder.{what}: slots {index[~self._ready[index]].tolist()} hold no "
                "sequence; hint: prefill a slot before stepping it"
            )
        return index

    def prefill(self, slots: Sequence[int], prompts: Sequence[Sequence[int]]) -> np.ndarray:
        """Resets each slot to the state after its prompt; the logits after each prompt.

        Returns:
            float32 (len(slots), vocab), in the order given.
        """
        index = self._slot_index(slots, "prefill", ready=False)
        if len(prompts) != index.size or any(len(p) < 1 for p in prompts):
            raise ShapeError(
                "CpuDecoder.prefill: expected one non-empty prompt per slot, got "
                f"{len(prompts)} prompts (lengths {[len(p) for p in prompts][:8]}) for "
                f"{index.size} slots"
            )
        logits = np.zeros((index.size, self.vocab_size), np.float32)
        short = [i for i, p in enumerate(prompts) if len(p) <= STEP_PREFILL_TOKENS]
        if short:
            self._prefill_by_steps(index, prompts, short, logits)
        long = [i for i, p in enumerate(prompts) if len(p) > STEP_PREFILL_TOKENS]
        for cut in _length_groups([len(prompts[i]) for i in long]):
            group = [long[j] for j in cut]
            width = max(len(prompts[i]) for i in group)
            ids = np.zeros((len(group), width), np.int64)
            lengths = np.zeros(len(group), np.int64)
            for row, i in enumerate(group):
                ids[row, : len(prompts[i])] = prompts[i]
                lengths[row] = len(prompts[i])
            rows, state = self.cpu.prefill(ids, lengths)
            logits[group] = rows
            target = index[group]
            for layer in range(self.cpu.config.n_layer):
                self._state.conv[layer][target] = state.conv[layer]
                self._state.ssm[layer][target] = state.ssm[layer]
        self._ready[index] = True
        return logits

    def reset(self, slots: Sequence[int]) -> None:
        """Zeroes each slot's state (as a prefill starts) and marks it ready to step: the next
        :meth:`step` feeds the sequence's first token, exactly as :meth:`prefill` would by steps.

        Raises:
            ShapeError: A slot id is out of range or repeats.
        """
        index = self._slot_index(slots, "reset", ready=False)
        for layer in range(self.cpu.config.n_layer):
            self._state.conv[layer][index] = 0
            self._state.ssm[layer][index] = 0
        self._ready[index] = True

    def _prefill_by_steps(
        self,
        index: np.ndarray,
        prompts: Sequence[Sequence[int]],
        short: list[int],
        logits: np.ndarray,
    ) -> None:
        """Prefills ``prompts[i]`` for i in ``short`` token by token from a zero state, all of
        them together (a prompt leaves the batch after its last token); writes their logits."""
        layers = range(self.cpu.config.n_layer)
        for layer in layers:
            self._state.conv[layer][index[short]] = 0
            self._state.ssm[layer][index[short]] = 0
        for t in range(max(len(prompts[i]) for i in short)):
            going = [i for i in short if len(prompts[i]) > t]
            rows = self._advance(index[going], np.array([prompts[i][t] for i in going]))
            for row, i in enumerate(going):
                if len(prompts[i]) == t + 1:
                    logits[i] = rows[row]

    def step(self, slots: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        """Feeds ``tokens[i]`` to ``slots[i]``; the next-token logits, float32 (n, vocab)."""
        index = self._slot_index(slots, "step", ready=True)
        ids = np.asarray(list(tokens), np.int64)
        if ids.shape != index.shape:
            raise ShapeError(
                f"CpuDecoder.step: expected one token per slot ({index.size}), got {ids.shape}"
            )
        return self._advance(index, ids)

    def _advance(self, index: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """One batched step of the slots ``index`` (checked) on tokens ``ids``."""
        layers = range(self.cpu.config.n_layer)
        first = int(index[0])
        if int(index[-1]) - first + 1 == index.size and bool((np.diff(index) == 1).all()):
            # Consecutive ascending slots (the scheduler's usual batch): views, which the step
            # updates in place; no gathered copies to write back.
            rows = slice(first, first + index.size)
            views = MambaState(
                conv=[self._state.conv[layer][rows] for layer in layers],
                ssm=[self._state.ssm[layer][rows] for layer in layers],
            )
            return np.asarray(self.cpu.step(ids, views)[0], np.float32)
        state = MambaState(
            conv=[self._state.conv[layer][index] for layer in layers],  # gathered copies
            ssm=[self._state.ssm[layer][index] for layer in layers],
        )
        logits, state = self.cpu.step(ids, state)
        for layer in layers:
            self._state.conv[layer][index] = state.conv[layer]
            self._state.ssm[layer][index] = state.ssm[layer]
        return np.asarray(logits, np.float32)

    def release(self, slot: int) -> None:
        """Frees ``slot`` (its state is dropped; the next prefill resets it)."""
        if not 0 <= slot < self.slots:
            raise ShapeError(f"CpuDecoder.release: slot {slot} not in [0, {self.slots})")
        self._ready[slot] = False


def _length_groups(lengths: Sequence[int]) -> list[list[int]]:
    """Indices of ``lengths`` in groups of similar length (sorted, cut where the padding to
    the group's longest would exceed :data:`PAD_SHARE` of its positions)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        candidate = [*current, i]
        width = lengths[i]  # the longest so far (sorted ascending)
        real = sum(lengths[j] for j in candidate)
        if current and (width * len(candidate) - real) > PAD_SHARE * width * len(candidate):
            groups.append(current)
            candidate = [i]
        current = candidate
    if current:
        groups.append(current)
    return groups
