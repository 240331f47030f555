"""Whether an adapted model replaces the one served: held-out slice, rehearsal, rollback
(native-only, numpy).

The one set of rules both adapters of a served model follow — the full fine-tune of
:func:`evermind.agent.distillation.fine_tune` and the LoRA recipe of
:func:`evermind.train.adapt.adapt`:

- :func:`split_held_out`: a seeded share of the new texts is never trained on; its loss before
  and after judges the result;
- :func:`rehearsal_slices`: the original corpus's tail (a fifth, at most
  :data:`PROBE_TOKENS`) is never rehearsed — its loss measures forgetting — and a seeded window
  of the rest, as many tokens as asked, is mixed into the training stream;
- :func:`sequence_loss`: mean nats per token, windows of :data:`LOSS_WINDOW` (the same forward
  as ``Model.evaluate``);
- :func:`judge`: accepted only when the held-out loss fell by ``min_improvement`` and the
  corpus loss rose by at most ``max_forgetting``; otherwise rolled back, with the reason.
"""

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Iterable, Sequence

import numpy as np

from evermind.model.cpu import CpuMamba
from evermind.ops.cross_entropy import cross_entropy_fwd

__all__ = [
    "LOSS_WINDOW",
    "PROBE_TOKENS",
    "bump_version",
    "judge",
    "rehearsal_slices",
    "sequence_loss",
    "split_held_out",
]

#: The most corpus tokens kept aside to measure forgetting.
PROBE_TOKENS = 2048
#: Tokens per forward when measuring a loss.
LOSS_WINDOW = 256


def split_held_out(count: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(held-out indices, training indices) of ``count`` items: a seeded shuffle, at least one
    of each (``count`` >= 2), about ``fraction`` held out."""
    order = list(range(count))
    random.Random(seed).shuffle(order)
    n_held = min(count - 1, max(1, round(count * fraction)))
    return order[:n_held], order[n_held:]


def rehearsal_slices(corpus_ids: array[int], want: int, seed: int) -> tuple[array[int], array[int]]:
    """(rehearsed tokens, probe tokens) of the original corpus.

    Args:
        corpus_ids: The original corpus, tokenized.
        want: Rehearsal tokens wanted (0: none).
        seed: Seeds where the rehearsed window starts.
    """
    n_probe = min(PROBE_TOKENS, len(corpus_ids) // 5) if len(corpus_ids) >= 64 else 0
    probe = corpus_ids[len(corpus_ids) - n_probe :]
    rest = corpus_ids[: len(corpus_ids) - n_probe]
    if not want or not len(rest):
        return array("i"), probe
    start = random.Random(seed).randrange(0, max(1, len(rest) - want))
    return rest[start : start + want], probe


def sequence_loss(model: CpuMamba, sequences: Iterable[Sequence[int]]) -> float:
    """Mean next-token loss (nats/token) over token sequences."""
    total, count = 0.0, 0
    for ids in sequences:
        ids = list(ids)
        for lo in range(0, len(ids) - 1, LOSS_WINDOW):
            window = np.array(ids[lo : lo + LOSS_WINDOW + 1], np.int64)
            if window.size < 2:
                continue
            logits = model.forward(window[None, :-1])[0].astype(np.float64)
            total += float(np.sum(cross_entropy_fwd(logits, window[1:])))
            count += window.size - 1
    return total / max(1, count)


def judge(
    held_before: float,
    held_after: float,
    probe_before: float | None,
    probe_after: float | None,
    min_improvement: float,
    max_forgetting: float | None,
) -> tuple[bool, str]:
    """(accepted, reason): the rollback rule (module docstring)."""
    if not math.isfinite(held_after) or held_after > held_before - min_improvement:
        return False, (
            f"held-out loss {held_after:.4f} does not beat {held_before:.4f} by "
            f"{min_improvement}; the previous package stays"
        )
    forgot = None if probe_after is None or probe_before is None else probe_after - probe_before
    if forgot is not None and not math.isfinite(forgot):
        return False, "corpus loss is not finite; the previous package stays"
    if max_forgetting is not None and forgot is not None and forgot > max_forgetting:
        return False, (
            f"corpus loss rose {forgot:.4f} > {max_forgetting} nats/token (forgetting); "
            "the previous package stays"
        )
    return True, f"held-out loss fell {held_before:.4f} -> {held_after:.4f} nats/token; promoted"


def bump_version(version: str) -> str:
    """The next patch version: ``0.1.0`` -> ``0.1.1`` (``x`` -> ``x.1``)."""
    parts = version.split(".")
    if parts and parts[-1].isdigit():
        parts[-1] = str(int(parts[-1]) + 1)
        return ".".join(parts)
    return f"{version}.1"
