"""Training data: a held-out split and reproducible batches of token windows (browser-safe).

Token ids live in ``array('i')``. Batches are random windows of ``seq_len + 1`` tokens
(inputs and next-token targets), drawn by a seeded ``random.Random`` whose state is part
of every checkpoint, so a resumed run draws exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Sequence
from typing import Any

from evermind.errors import ConfigError


def split_held_out(ids: Sequence[int], fraction: float = 0.1) -> tuple[array[int], array[int]]:
    """Splits token ids into (train, held-out): the held-out part is the contiguous tail.

    A contiguous tail (not random windows) keeps held-out text unseen by training even
    though training windows overlap.
    """
    if not 0 < fraction < 1:
        raise ConfigError(f"held-out fraction must be in (0, 1), got {fraction}")
    cut = len(ids) - max(1, int(len(ids) * fraction))
    return array("i", ids[:cut]), array("i", ids[cut:])


class BatchSampler:
    """Draws (inputs, targets) batches of random windows from a token array.

    Args:
        tokens: The training token ids.
        batch_size: Sequences per batch, B.
        seq_len: Tokens per sequence, L.
        seed: Seed of the window positions.
    """

    def __init__(self, tokens: array[int], batch_size: int, seq_len: int, seed: int) -> None:
        if batch_size < 1 or seq_len < 1:
            raise ConfigError(f"batch_size and seq_len must be >= 1, got {batch_size}, {seq_len}")
        if len(tokens) < seq_len + 1:
            raise ConfigError(
                f"the training text has {len(tokens)} tokens but one sequence needs seq_len + 1 = "
                f"{seq_len + 1}; add more text or lower seq_len"
            )
        self.tokens = tokens
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.seed = seed
        self.rng = random.Random(seed)
        self.batches_drawn = 0

    def next(self) -> tuple[array[int], array[int]]:
        """The next batch as flat row-major (B·L) input ids and target ids."""
        length = self.seq_len
        inputs, targets = array("i"), array("i")
        for _ in range(self.batch_size):
            start = self.rng.randrange(0, len(self.tokens) - length)
            window = self.tokens[start : start + length + 1]
            inputs.extend(window[:-1])
            targets.extend(window[1:])
        self.batches_drawn += 1
        return inputs, targets

    def state_dict(self) -> dict[str, Any]:
        """JSON-able position of the sampler (seed, batches drawn, RNG state)."""
        version, internal, gauss = self.rng.getstate()
        return {
            "seed": self.seed,
            "batches_drawn": self.batches_drawn,
            "rng": [version, list(internal), gauss],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a position saved by :meth:`state_dict`."""
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.seed = int(state["seed"])
        self.batches_drawn = int(state["batches_drawn"])


def eval_windows(
    tokens: array[int], batch_size: int, seq_len: int, max_batches: int
) -> list[tuple[array[int], array[int]]]:
    """Fixed, non-overlapping held-out batches (the same every evaluation)."""
    batches: list[tuple[array[int], array[int]]] = []
    start = 0
    while len(batches) < max_batches:
        inputs, targets = array("i"), array("i")
        for _ in range(batch_size):
            if start + seq_len + 1 > len(tokens):
                return batches
            inputs.extend(tokens[start : start + seq_len])
            targets.extend(tokens[start + 1 : start + seq_len + 1])
            start += seq_len
        batches.append((inputs, targets))
    return batches
