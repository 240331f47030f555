"""Write-through cognition: beliefs with one current version per subject, kept in a MemoryStore.

Public API::

    cognition = EvermindCognition(store, gather=workspace_presence_gatherer("."))
    result = await cognition.commit(Claim("retry module", "Retries live in `src/retry.py`"))
    result.verdict          # Verdict.AUGMENT | CONFIRM | SUPERSEDE | REJECT
    await cognition.recall_context("where are retries?")   # fenced, sanitised

Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

from evermind.cognition.canonical import AliasTable, canonical_subject, normalise_subject
from evermind.cognition.engine import CommitResult, EvermindCognition, current_key, history_key
from evermind.cognition.gatherers import (
    Gatherer,
    extract_references,
    run_gatherer,
    workspace_presence_gatherer,
)
from evermind.cognition.reconcile import (
    Belief,
    Claim,
    Decision,
    Evidence,
    EvidenceStatus,
    Verdict,
    reconcile,
    same_statement,
)

__all__ = [
    "AliasTable",
    "Belief",
    "Claim",
    "CommitResult",
    "Decision",
    "EvermindCognition",
    "Evidence",
    "EvidenceStatus",
    "Gatherer",
    "Verdict",
    "canonical_subject",
    "current_key",
    "extract_references",
    "history_key",
    "normalise_subject",
    "reconcile",
    "run_gatherer",
    "same_statement",
    "workspace_presence_gatherer",
]
