"""Quality measurements on the development sets, outside the installed package.

- :mod:`evals.cache`: the semantic-cache guard on ``cache_pairs_dev.jsonl`` (the shared
  evaluator ``eval_dev.py``);
- :mod:`evals.memory`: ``MemoryStore.recall`` on ``memory_recall_dev.jsonl``;
- :mod:`evals.mcp_recall`: the same set through the MCP tool over stdio;
- :mod:`evals.write_through`: false links of write-through cognition on that set's facts;
- :mod:`evals.quality`: memory and cache tables, lexical vs Evermind vs hybrid.
- :mod:`evals.retrieval`: ``EnterpriseRetriever`` on ``retrieval_set.jsonl`` (in the
  repository, over the ingest fixtures): answer and refusal rates, through the harness.
- :mod:`evals.affect`: the affect head on ``affect_dev.jsonl`` (in the repository: 150
  labelled sentences) against a bag-of-words logistic baseline.
- :mod:`evals.cache_corpus`: the cache's development corpus (in the repository: written
  triples, public pairs when licensed, a fixed sha256 tune/report split) and its check,
  ``python -m evals.cache_corpus.check``; the report split is never read case by case.
- :mod:`evals.conversation_memory`: long multi-session dialogues written for this project (in
  the repository, a fixed sha256 tune/report split by dialogue), ``MemoryStore.recall``'s
  recall@5/@10, MRR and stale@1 per question kind; its check is
  ``python -m evals.conversation_memory.check``.

Run each as ``python -m evals.<name> --help`` from the checkout's root (or by its file path).
The sets are not in the repository: every script finds them with :func:`find` /
:func:`require`, in ``$EVERMIND_EVAL_DIR`` when it is set, else in the ``shared/eval`` folder
next to the checkout. These are development numbers; the held-out set decides the real ones.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: The environment variable naming the folder of the development sets.
ENV_VAR = "EVERMIND_EVAL_DIR"
#: The checkout, and the shared folder next to it that holds the sets by default.
ROOT = Path(__file__).resolve().parents[1]
SHARED_EVAL = ROOT.parent / "shared" / "eval"


def eval_dir(folder: Path | None = None) -> Path:
    """The folder of the development sets: ``folder`` when given (a script's
    ``--eval-dir``), else ``$EVERMIND_EVAL_DIR`` when set, else ``shared/eval`` next to the
    checkout."""
    if folder is not None:
        return folder
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else SHARED_EVAL


def find(name: str, folder: Path | None = None) -> Path:
    """Where the file ``name`` of the development sets is (see :func:`eval_dir`); it may not
    exist: :func:`require` checks."""
    return eval_dir(folder) / name


def require(name: str, folder: Path | None = None) -> Path:
    """:func:`find`, or exit with status 2 and a message naming where it looked and why."""
    path = find(name, folder)
    if not path.is_file():
        env = os.environ.get(ENV_VAR)
        source = (
            "--eval-dir"
            if folder is not None
            else f"${ENV_VAR}"
            if env
            else f"the default, shared/eval next to the checkout (${ENV_VAR} is not set)"
        )
        print(
            f"error: {name} is not in {path.parent} ({source}); set ${ENV_VAR} to the folder "
            f"of the development sets, or put them in {SHARED_EVAL}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return path
