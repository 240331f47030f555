"""Claims, evidence, beliefs, and the rule that decides what a new claim does to a belief.

``reconcile`` is a pure function of (claim, current belief, evidence) -> verdict:

=============  ==================================================================
``reject``     evidence refutes the claim; or it contradicts the current belief
               with lower confidence and no supporting evidence
``augment``    nothing is believed about the subject yet: the claim becomes the belief
``confirm``    the claim says what the current belief says (normalised text)
``supersede``  the claim replaces the current belief, which is kept as history
=============  ==================================================================

Browser-safe: standard library only.
"""

from __future__ import annotations

import enum
import math
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

from evermind.errors import ConfigError


class Verdict(enum.StrEnum):
    """What a commit did."""

    AUGMENT = "augment"
    CONFIRM = "confirm"
    SUPERSEDE = "supersede"
    REJECT = "reject"


class EvidenceStatus(enum.StrEnum):
    """What the gathered evidence says about a claim."""

    SUPPORTED = "supported"
    REFUTED = "refuted"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Claim:
    """Something an agent wants to believe.

    Attributes:
        subject: What it is about ("deploy window", "prod db host"); canonicalised on commit.
        statement: What is claimed about it.
        confidence: 0 … 1, how sure the claimant is.
        source: Who or what said it (a tool, a URL, "user").
        tags: Extra memory tags for the belief.
        importance: Memory importance of the belief (eviction and recall weighting).
    """

    subject: str
    statement: str
    confidence: float = 0.5
    source: str | None = None
    tags: tuple[str, ...] = ()
    importance: float = 0.5

    def __post_init__(self) -> None:
        if not isinstance(self.statement, str) or not self.statement.strip():
            raise ConfigError(
                f"claim: statement must be a non-blank string, got {self.statement!r}"
            )
        if (
            isinstance(self.confidence, bool)
            or not isinstance(self.confidence, int | float)
            or not 0.0 <= self.confidence <= 1.0
        ):
            raise ConfigError(f"claim: confidence must be in [0, 1], got {self.confidence!r}")


@dataclass(frozen=True)
class Evidence:
    """What a gatherer found.

    Attributes:
        status: Supported, refuted, or unknown (nothing checkable).
        notes: Human-readable findings, kept with the belief.
    """

    status: EvidenceStatus = EvidenceStatus.UNKNOWN
    notes: tuple[str, ...] = ()

    @staticmethod
    def combine(parts: Iterable[Evidence]) -> Evidence:
        """Merges evidence: any refutation refutes; else any support supports."""
        items = list(parts)
        notes = tuple(note for e in items for note in e.notes)
        statuses = {e.status for e in items}
        if EvidenceStatus.REFUTED in statuses:
            return Evidence(EvidenceStatus.REFUTED, notes)
        if EvidenceStatus.SUPPORTED in statuses:
            return Evidence(EvidenceStatus.SUPPORTED, notes)
        return Evidence(EvidenceStatus.UNKNOWN, notes)


@dataclass(frozen=True)
class Belief:
    """A belief as stored: current (``valid_to`` None) or history.

    Attributes:
        subject: The subject as first written.
        canonical: The canonical subject key.
        statement: What is believed.
        confidence: The belief's confidence.
        source: Where it came from.
        valid_from: When it became the current belief (seconds since the epoch).
        valid_to: When it was superseded, or None while current.
        revision: 1 for the first belief on the subject, +1 per supersede.
        confirmations: How many later claims confirmed it.
        evidence: Evidence notes gathered for it.
        key: The memory key it is stored under.
    """

    subject: str
    canonical: str
    statement: str
    confidence: float
    source: str | None
    valid_from: float
    valid_to: float | None = None
    revision: int = 1
    confirmations: int = 0
    evidence: tuple[str, ...] = field(default_factory=tuple)
    key: str = ""


@dataclass(frozen=True)
class Decision:
    """The verdict and why."""

    verdict: Verdict
    reason: str


def same_statement(a: str, b: str) -> bool:
    """Whether two statements say the same after NFC, case-folding, whitespace and end stops."""

    def norm(text: str) -> str:
        return " ".join(unicodedata.normalize("NFC", text).casefold().split()).rstrip(".!; ")

    return norm(a) == norm(b)


def reconcile(claim: Claim, incumbent: Belief | None, evidence: Evidence) -> Decision:
    """Decides what ``claim`` does to the current belief ``incumbent`` given ``evidence``."""
    if evidence.status is EvidenceStatus.REFUTED:
        detail = "; ".join(evidence.notes) or "a gatherer refuted it"
        return Decision(Verdict.REJECT, f"evidence refutes the claim: {detail}")
    if incumbent is None:
        return Decision(Verdict.AUGMENT, "no current belief on this subject")
    if same_statement(claim.statement, incumbent.statement):
        return Decision(Verdict.CONFIRM, f"matches the current belief (rev {incumbent.revision})")
    weaker = claim.confidence < incumbent.confidence and not math.isclose(
        claim.confidence, incumbent.confidence
    )
    if weaker and evidence.status is not EvidenceStatus.SUPPORTED:
        return Decision(
            Verdict.REJECT,
            f"contradicts the current belief with lower confidence ({claim.confidence:.2f} < "
            f"{incumbent.confidence:.2f}) and no supporting evidence",
        )
    why = "supported by evidence" if evidence.status is EvidenceStatus.SUPPORTED else "newer"
    return Decision(Verdict.SUPERSEDE, f"replaces rev {incumbent.revision} ({why})")
