"""The one contract of batched recurrent decoding (browser-safe: standard library only).

A state-space model's state per sequence has a fixed size (the conv window and the SSM state
of each layer; no cache growing with length), so B sequences decode as one step of
matrix–matrix products. A :class:`Decoder` holds ``slots`` such states; the runtime's
scheduler puts each active sequence in a slot, advances all of them together one token per
:meth:`Decoder.step`, and frees a slot the moment its sequence finishes or is cancelled
(continuous batching: sequences join and leave between steps).

Implementations: the numpy one beside :class:`~evermind.model.cpu.CpuMamba` and the wgpu-py one
beside :class:`~evermind.model.gpu_infer.GpuDecoder` (one plan replay per step for the whole
batch). Both are called from one scheduler thread; their methods are synchronous and not
thread-safe. Logits come back as a sequence of rows of floats (numpy: a float32 array of shape
``(n, vocab)``).

Every row is computed as if its sequence decoded alone: a sequence's logits do not depend on
which other sequences share the step (the equality tests check this against one-by-one
decoding).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Decoder(Protocol):
    """Batched recurrent decoding over a fixed number of state slots.

    Attributes:
        slots: How many sequences can be decoded at once (slot ids are ``0 … slots-1``).
        vocab_size: Width of each logits row.
    """

    slots: int
    vocab_size: int

    def prefill(self, slots: Sequence[int], prompts: Sequence[Sequence[int]]) -> Any:
        """Resets each slot, runs its prompt (token ids, at least one) through the model and
        leaves its state after the prompt; returns the logits after each prompt's last token,
        one row per slot, in the order given."""
        ...

    def step(self, slots: Sequence[int], tokens: Sequence[int]) -> Any:
        """Feeds ``tokens[i]`` to the sequence in ``slots[i]`` (all at once), advancing each
        state by one token; returns the next-token logits, one row per slot, in that order."""
        ...

    def release(self, slot: int) -> None:
        """Marks ``slot`` free (its state is dropped; the next ``prefill`` resets it)."""
        ...


@runtime_checkable
class ZeroStartDecoder(Decoder, Protocol):
    """A :class:`Decoder` whose slots can start from the state before any token.

    The scheduler feeds a short prompt that joins a busy batch through the batch's own steps
    from its first token on (a row of a big step instead of a separate prefill step). Optional:
    the numpy decoder has it; the scheduler checks for it once per decoder.
    """

    def reset(self, slots: Sequence[int]) -> None:
        """Sets each slot to the state before any token (what :meth:`Decoder.prefill` starts
        from); the next :meth:`Decoder.step` of a slot feeds its first token."""
        ...
