"""The cache replay's request set: what the gateway benchmark sends and the cache eval replays.

One definition, read by both measurements (``benchmarks`` may import ``evals``, never the
reverse): :mod:`benchmarks.gateway` sends these texts over HTTP through ``evermind serve
--upstreams``; :mod:`evals.cache_full` (``--replay --probes``) looks them up in one
in-process :class:`evermind.cache.SemanticCache`, so both see the same cache.

- :func:`load_triples`: the development set ``cache_pairs_dev.jsonl``'s (query,
  paraphrase, near_miss) triples (found by :func:`evals.require`);
- :func:`replay_set`: every query first, then each query again, its paraphrase and its
  near-miss in a seeded shuffle;
- :func:`prelude`: what goes through the cache before the replay: the warm-up requests,
  then the templated overhead probes (:func:`probe_text`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evals import require

#: The development set the replay is built from.
DATA_NAME = "cache_pairs_dev.jsonl"
#: Overhead probes per configuration (``benchmarks.gateway --probes``).
PROBES = 200
#: Requests sent first through each path to warm it (connections, imports); their texts.
WARMUPS = tuple(f"warm {i}" for i in range(5))


@dataclass(frozen=True)
class Ask:
    """One replayed request: which triple, which kind, what text."""

    triple: int
    kind: str  # query | repeat | paraphrase | near_miss
    text: str


def load_triples(eval_dir: Path | None = None, limit: int | None = None) -> list[dict[str, str]]:
    """The development set's (query, paraphrase, near_miss) triples; the first ``limit``
    when given. Exits with status 2 naming where it looked when the set is missing."""
    path = require(DATA_NAME, eval_dir)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return rows[:limit] if limit else rows


def replay_set(triples: Sequence[dict[str, str]], seed: int = 0) -> list[Ask]:
    """Every query, then its repeat, paraphrase and near-miss in a seeded shuffle."""
    first = [Ask(i, "query", t["query"]) for i, t in enumerate(triples)]
    later = [
        Ask(i, kind, t[field])
        for i, t in enumerate(triples)
        for kind, field in (
            ("repeat", "query"),
            ("paraphrase", "paraphrase"),
            ("near_miss", "near_miss"),
        )
    ]
    random.Random(seed).shuffle(later)
    return first + later


def probe_text(i: int) -> str:
    """The ``i``-th overhead probe: a unique question, so every probe is a miss."""
    return f"Overhead probe {i}: what does the number {i * 7919 % 104729} mean?"


def prelude(probes: int) -> list[str]:
    """What goes through the gateway's cache before the replay: the warm-ups, then the
    probes (``evals/cache_full.py --probes`` stores the same texts first)."""
    return [*WARMUPS, *(probe_text(i) for i in range(probes))]
