"""The verified decision: serve a cached answer only within an error the operator set.

This module owns the cache's decision when a ``max_error`` (δ) is set
(:func:`decide_verified`) and what the cache learns from verification (:class:`Verification`).
It replaces the hand-written lexical, residue and language-guard rules of
:func:`evermind.cache.decide.decide` with a learned verifier and a bound:

1. **Exact text wins**, as everywhere: re-asking the same question is safe with any embedder.
2. **The best candidate only.** The embedder proposes; a lower candidate is never served.
3. **Above unrelated.** Its cosine must exceed what this embedder gives *unrelated* stored
   queries (the cache's calibration, :func:`evermind.search.calibration.calibrate`); on that scale
   (0 = unrelated, 1 = the same vector) the score is handed to the verifier. Until the cache
   holds enough questions to measure that (:data:`~evermind.search.calibration.MIN_CALIBRATION`),
   a score means nothing (a collapsed embedder scores every pair 0.99), and only exact repeats
   are served.
4. **The learned verifier** (:class:`evermind.cache.verifier.PairVerifier`) reads both
   questions and the score and gives the probability that one answer serves both. A hit
   needs the probability the bound sets for δ: the shipped one (fitted on a calibration split
   so the served error stayed ≤ δ at 95% confidence), or, in a cache that verifies itself
   (the gateway), the one learned from its own verified outcomes (:class:`Verification`).
5. **An entry proven wrong stays wrong.** When a verification found that an entry's answer
   did not serve a question it was matched to at probability ``p``, that entry needs more than
   ``p`` from then on (:attr:`Candidate.contested` carries it, on the probability scale).
6. **No guessing.** When the runner-up holds another answer and also passes, it is a miss.

**With a verification signal** (the gateway's upstream, the library's ``generate`` in
:meth:`~evermind.cache.semantic.SemanticCache.get_or_generate`) a cache checks its would-be hits
until its own evidence bounds their error (:class:`Verification`); :func:`plan_check` and
:func:`record_check` are that protocol, the one both call. **Without any** (a lookup alone: the
library's ``lookup``, the tab) nothing can check a hit, so the decision falls back to a stricter
bound (``fallback=True``, :func:`fallback_threshold`): the shipped threshold fitted for
``max_error × FALLBACK_SHARE``, or exact repeats only when no shipped level is that strict; the
decision's ``reason`` names "the no-signal fallback" (the library's misses then begin "no
verification signal: ").

Browser-safe: standard library only.
"""

from __future__ import annotations

import json
import math
import random
import re
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from evermind.cache.decide import Candidate, Decision, fold
from evermind.cache.verifier import PairVerifier
from evermind.errors import ConfigError
from evermind.search.calibration import MIN_CALIBRATION, Calibration
from evermind.search.risk import (
    binomial_upper,
    bounded_threshold,
    fewest_outcomes,
    rate_bounded_below,
)
from evermind.text import normalise

__all__ = [
    "DEFAULT_MAX_ERROR",
    "FALLBACK_SHARE",
    "CheckPlan",
    "Verification",
    "answer_text",
    "answers_equivalent",
    "decide_verified",
    "fallback_threshold",
    "is_guess",
    "parse_max_error",
    "plan_check",
    "record_check",
]

#: The default δ of every cache (the library's, the tab's, the runtime's L2, the gateway's): at
#: most 1 served answer in 100 lookups wrong, at 95% confidence on the verifier's calibration
#: split.
DEFAULT_MAX_ERROR = 0.01
#: Without a verification signal a hit needs the shipped threshold fitted for this share of
#: ``max_error`` (:func:`fallback_threshold`): the other part of δ is the margin for traffic
#: unlike the corpus the thresholds were fitted on, which such a cache cannot detect.
FALLBACK_SHARE = 0.5


def decide_verified(
    query: str,
    candidates: Sequence[Candidate],
    *,
    calibration: Calibration,
    verifier: PairVerifier,
    max_error: float,
    learned: Verification | None = None,
    floor: float | None = None,
    fallback: bool = False,
) -> Decision:
    """Hit or miss for ``query`` among ``candidates`` within the error ``max_error``.

    Args:
        query: The incoming question.
        candidates: Scored entries, any order (the caller's top few suffice); their
            ``contested`` is read on the probability scale (rule 5).
        calibration: The cache's calibration over its stored queries.
        verifier: The pair verifier.
        max_error: δ, the served error the operator accepts, in (0, 1).
        learned: The cache's own verified outcomes, when it verifies itself.
        floor: A cosine the best candidate must also reach (a caller's explicit threshold:
            it can only turn hits into misses, so the bound still holds); None: none.
        fallback: The lookup has no verification signal (nothing can check a hit it
            serves): unless ``learned`` has a threshold of its own, a hit needs
            :func:`fallback_threshold` instead of the shipped one.

    Returns:
        The :class:`Decision`; ``threshold`` is the probability a hit needed.
    """
    ranked = sorted(candidates, key=lambda c: -c.score)
    need, source = _needed(verifier, max_error, learned, fallback)
    wanted = fold(query)
    for cand in ranked:
        if floor is not None and cand.score < floor:
            continue
        if cand.query is not None and fold(cand.query) == wanted:
            return Decision(True, cand, need, None, "exact match of a cached query", 1.0)
    if not ranked:
        return Decision(False, None, need, None, "the cache is empty")
    best = ranked[0]
    if calibration.collapsed:
        return Decision(False, best, need, "calibration", calibration.words)
    if calibration.unrelated is None:
        # Too few stored questions to measure what this embedder gives unrelated ones: a
        # score means nothing yet (a collapsed embedder puts every pair at 0.99), so only
        # exact repeats are served until the calibration exists.
        return Decision(
            False,
            best,
            need,
            "calibration",
            f"fewer than {MIN_CALIBRATION} stored questions: what this embedder gives unrelated "
            "ones is not measured yet, so only exact repeats are served",
        )
    if best.query is None:
        return Decision(False, best, need, "verifier", "the cached entry keeps no question text")
    if floor is not None and best.score < floor:
        return Decision(
            False,
            best,
            need,
            "threshold",
            f"best cosine {best.score:.3f} is below the explicit threshold {floor:.3f}",
        )
    p_best = _probability(verifier, query, best, calibration)
    if p_best is None:
        return Decision(
            False,
            None,
            need,
            None,
            f"no cached query scored above unrelated texts ({calibration.words}; "
            f"best cosine {best.score:.3f})",
        )
    bar = max(need, best.contested if best.contested is not None else -math.inf)
    if p_best < bar or (best.contested is not None and p_best <= best.contested):
        if best.contested is not None and p_best >= need:
            return Decision(
                False,
                best,
                bar,
                "contested",
                f"verified wrong before for a question this close: serving {best.query!r} "
                f"needs p > {best.contested:.3f}, got {p_best:.3f}",
                p_best,
            )
        return Decision(
            False,
            best,
            need,
            "verifier",
            f"the verifier gives {p_best:.3f} that one answer serves both; δ = {max_error:g} "
            f"needs {need:.3f} ({source})",
            p_best,
        )
    for rival in ranked[1:4]:
        if rival.query is None or (rival.answer == best.answer and rival.answer is not None):
            continue
        p_rival = _probability(verifier, query, rival, calibration)
        if p_rival is not None and p_rival >= need:
            return Decision(
                False,
                best,
                need,
                "ambiguous",
                f"ambiguous: {rival.query!r} also passes ({p_rival:.3f}) with another answer",
                p_best,
            )
    return Decision(
        True,
        best,
        need,
        None,
        f"verified: p {p_best:.3f} >= {need:.3f} for δ {max_error:g} ({source})",
        p_best,
    )


def _probability(
    verifier: PairVerifier, query: str, cand: Candidate, calibration: Calibration
) -> float | None:
    score = PairVerifier.normalise(cand.score, calibration.unrelated)
    if score <= 0.0 or cand.query is None:
        return None
    return verifier.probability(query, cand.query, score)


def _needed(
    verifier: PairVerifier, max_error: float, learned: Verification | None, fallback: bool
) -> tuple[float, str]:
    if learned is not None:
        own = learned.threshold()
        if own is not None:
            return own, f"learned from {learned.sampled} sampled, verified lookups"
    if fallback:
        need = fallback_threshold(verifier, max_error)
        strict = max_error * FALLBACK_SHARE
        if math.isinf(need):
            return need, (
                f"the no-signal fallback: no shipped bound reaches δ × {FALLBACK_SHARE:g} = "
                f"{strict:g}, so only exact repeats are served"
            )
        return need, f"the no-signal fallback: the shipped bound for δ × {FALLBACK_SHARE:g}"
    shipped = verifier.threshold(max_error)
    if math.isinf(shipped):
        return shipped, f"no shipped bound reaches δ {max_error:g}: only exact repeats are served"
    return shipped, "shipped bound, no verification here"


def fallback_threshold(verifier: PairVerifier, max_error: float) -> float:
    """The probability a hit needs when nothing can check it (no verification signal): the
    shipped threshold for ``max_error × FALLBACK_SHARE`` (``inf``: only exact repeats, when
    no shipped level is that strict, as for δ = 0.01).

    The shipped thresholds hold δ for traffic like the corpus's tune split they were fitted
    on; on the shared development set the shipped δ = 0.01 bound served 1.8% wrong with
    MiniLM (docs/gateway.md, stop 46). A cache that checks itself finds that out and pays
    for checks; one that cannot check keeps this margin instead.
    """
    return verifier.threshold(max_error * FALLBACK_SHARE)


def parse_max_error(value: object, where: str) -> float | None:
    """A ``max_error`` setting (a config field, a flag, a request field): a rate in (0, 1),
    as a number or its text, or ``"off"`` for the rule-based decision (None).

    Raises:
        ConfigError: Anything else, naming ``where`` and what was received.
    """
    if isinstance(value, str) and value.strip().lower() == "off":
        return None
    number: object = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if (
        isinstance(number, bool)
        or not isinstance(number, int | float)
        or not 0.0 < float(number) < 1.0
    ):
        raise ConfigError(
            f"{where}: max_error must be a rate in (0, 1) such as 0.01, or 'off', got {value!r}"
        )
    return float(number)


# --------------------------------------------------------------------------- verification

_WORD = re.compile(r"\w+")
#: The learned threshold is re-fitted once the sample has grown by this share (1%) since the
#: last fit, not on every lookup.
REFIT_SHARE = 0.01
#: The served bound's share of would-be hits is counted over this many recent lookups, so it
#: follows a change of traffic within a few thousand lookups.
BOUND_LOOKUPS = 2000
#: Would-be hits checked before any is served unchecked, whatever the lookups alone bound: a
#: bound from the share of would-be hits only would trust that share not to change.
MIN_HIT_CHECKS = 10


def answers_equivalent(cached: str, fresh: str) -> bool:
    """Whether two answers to one question agree (the documented answer-equivalence test).

    Equal after Unicode folding and collapsing white space; or, for answers of at least
    eight words, the two word multisets overlap in at least 90% of the longer one *and* they
    name the same numbers (an answer that changes one number is a different answer).
    Deliberately strict: a false "differs" only costs a hit, a false "agrees" would let a
    wrong entry stay.

    Args:
        cached: The stored answer.
        fresh: The upstream's answer to the new question.
    """
    a, b = " ".join(normalise(cached).split()), " ".join(normalise(fresh).split())
    if a == b:
        return True
    wa, wb = _WORD.findall(a), _WORD.findall(b)
    if min(len(wa), len(wb)) < 8:
        return False
    if sorted(w for w in wa if w.isdigit()) != sorted(w for w in wb if w.isdigit()):
        return False
    shared = sum((Counter(wa) & Counter(wb)).values())
    return shared >= 0.9 * max(len(wa), len(wb))


def answer_text(response: object) -> str:
    """The text of a cached or generated response, as :func:`answers_equivalent` compares it.

    A string is itself. A JSON object with a string ``"text"`` (the gateway's entries) is that
    text; one in the OpenAI chat shape is its first choice's ``message.content``. Any other
    JSON value (a number, a list, an object without those) is its canonical JSON text (keys
    sorted, no spaces), so two such answers agree only when they are equal values.
    """
    if isinstance(response, str):
        return response
    if isinstance(response, dict):
        text = response.get("text")
        if isinstance(text, str):
            return text
        choices = response.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            message = choices[0].get("message")
            if isinstance(message, dict) and isinstance(message.get("content"), str):
                return str(message["content"])
    try:
        return json.dumps(response, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(response)


def is_guess(query: str, cached_query: str | None) -> bool:
    """Whether serving an entry stored for ``cached_query`` answers another question than
    ``query`` (not an exact repeat after folding; an entry without its question counts as
    another): what a check can find wrong."""
    return cached_query is None or fold(cached_query) != fold(query)


@dataclass(frozen=True)
class CheckPlan:
    """What a self-verifying cache does with one lookup before it answers (:func:`plan_check`).

    Attributes:
        scope: Whose served bound the lookup counts in (the cache namespace).
        sampled: Drawn into the random sample: checked whatever the cache decided (a miss for
            free, against the answer fetched anyway; a hit for one more call).
        guess: A would-be hit that is not an exact repeat (:func:`is_guess`).
        forced: A guess that must be checked before it is served: the scope's served bound is
            not yet within δ (:meth:`Verification.must_check`). Without a signal to check it
            with, it must not be served at all.
    """

    scope: str = "default"
    sampled: bool = False
    guess: bool = False
    forced: bool = False

    @property
    def check_hit(self) -> bool:
        """Whether a would-be hit is checked (against a fresh answer) before it is served."""
        return self.sampled or self.forced


def plan_check(
    verification: Verification | None,
    *,
    hit: bool,
    query: str,
    cached_query: str | None,
    scope: str = "default",
    eligible: bool = True,
    draw: bool = True,
) -> CheckPlan:
    """Must this lookup be checked, and what will its check count as: the one decision every
    self-verifying cache makes after a lookup (the gateway, the library's ``get_or_generate``,
    and its look-ups without a signal).

    It draws the lookup into the sample (:meth:`Verification.draw`), counts it for the scope's
    served bound (:meth:`Verification.looked_up`) and asks whether a would-be hit must be
    checked (:meth:`Verification.must_check`). Call it once per lookup, then
    :func:`record_check` once per check made.

    Args:
        verification: The cache's; None: nothing is checked (an empty plan).
        hit: Whether the cache would serve a stored answer.
        query: The asked question.
        cached_query: The question of the entry it would serve.
        scope: The cache namespace (each has its own served bound).
        eligible: False for a lookup that cannot be wrong and must not be checked (the
            gateway's lookup that waited on an identical in-flight miss): it counts as a
            lookup that is no guess, and is not sampled.
        draw: False where nothing can check a sampled lookup (a look-up without a signal):
            no draw is made.
    """
    if verification is None:
        return CheckPlan(scope)
    sampled = draw and verification.draw() and eligible
    guess = eligible and hit and is_guess(query, cached_query)
    verification.looked_up(guess, scope)
    forced = guess and verification.must_check(scope)
    return CheckPlan(scope, sampled, guess, forced)


def record_check(
    verification: Verification | None,
    plan: CheckPlan,
    probability: float | None,
    correct: bool,
    entry: Hashable | None = None,
    *,
    paid: bool = False,
    cost_usd: float = 0.0,
) -> None:
    """Records one check of a lookup planned by :func:`plan_check`, so the bound learns.

    A checked would-be hit (``plan.check_hit``): ``correct`` is whether the fresh answer agreed
    with the cached one (``paid``: the check cost a call a hit would not have made). A miss
    whose best candidate was judged (``probability`` not None): whether that candidate's
    answer agreed with the fresh one (free: the call was made anyway); a sampled miss without
    one records ``probability=None, correct=True`` (nothing could have been served wrongly).
    A wrong candidate's ``entry`` is marked contested. None ``verification``: nothing.
    """
    if verification is None:
        return
    verification.record(
        probability,
        correct,
        entry,
        sampled=plan.sampled,
        paid=paid,
        cost_usd=cost_usd,
        guess=plan.guess,
        forced=plan.forced,
        scope=plan.scope,
    )


@dataclass(frozen=True)
class Outcome:
    """One sampled lookup: its best candidate's probability (None: no judged candidate,
    so it could not be answered wrongly) and whether serving that candidate was right."""

    probability: float | None
    correct: bool


#: Scopes whose served bound is kept (the least recently used go first: a scope seen again
#: after that starts over, checking its would-be hits).
MAX_SCOPES = 10_000


class _ServedBound:
    """One scope's counts for :meth:`Verification.served_bound` (not thread-safe: the
    verification's lock guards it)."""

    def __init__(self, window: int) -> None:
        self.looked: deque[bool] = deque(maxlen=min(window, BOUND_LOOKUPS))
        self.guesses = 0  # would-be hits in looked
        self.hit_checks: deque[bool] = deque(maxlen=window)
        self.wrong = 0  # wrong ones in hit_checks
        self._kept: bool | None = None  # must_check's last answer
        self._seen = (0, 0, 0, 0)  # the counts it was decided on

    def looked_up(self, guess: bool) -> None:
        if len(self.looked) == self.looked.maxlen:
            self.guesses -= self.looked[0]
        self.looked.append(guess)
        self.guesses += guess

    def checked(self, correct: bool) -> None:
        if len(self.hit_checks) == self.hit_checks.maxlen:
            self.wrong -= not self.hit_checks[0]
        self.hit_checks.append(correct)
        self.wrong += not correct

    def counts(self) -> tuple[int, int, int, int]:
        """Would-be hits, lookups, wrong checks, checks."""
        return self.guesses, len(self.looked), self.wrong, len(self.hit_checks)

    def kept(self) -> bool | None:
        """The last answer, while the checks are the same and the lookups and would-be hits
        moved by at most 1% (None: decide again)."""
        if self._kept is None:
            return None
        guesses, looked, wrong, checks = self.counts()
        g0, l0, w0, c0 = self._seen
        if (wrong, checks) != (w0, c0) or abs(looked - l0) > REFIT_SHARE * l0:
            return None
        return self._kept if abs(guesses - g0) <= max(1.0, REFIT_SHARE * g0) else None

    def keep(self, answer: bool, seen: tuple[int, int, int, int]) -> None:
        self._kept, self._seen = answer, seen


class Verification:
    """What a self-verifying cache learned: its own bound, and the entries proven wrong.

    The bound needs an unbiased sample of lookups, so the gateway draws each lookup into the
    sample with probability :attr:`sample_rate` (:meth:`draw`) and checks the sampled ones
    whatever the cache decided: a sampled miss is checked for free (the upstream is called
    anyway; its answer is compared with the best candidate's), a sampled hit costs one more
    upstream call (counted in :attr:`paid`). Over the last :attr:`window` sampled lookups the
    threshold is re-fitted with :func:`evermind.search.risk.bounded_threshold` (the share of
    lookups answered wrongly, vCache's error rate) once there are enough to bound
    ``max_error`` at all (:func:`evermind.search.risk.fewest_outcomes`: 299 for δ = 0.01).

    Separately, *every* check, sampled or not (each miss with a candidate is one), that finds
    an entry's answer wrong for a question it was matched to at probability ``p`` makes that
    entry need more than ``p`` from then on (:meth:`contested`): the same mistake is not
    served twice.

    **Checked until bounded** (``until_bounded``, the default). The shipped bound holds for
    traffic like the corpus it was fitted on, and a gateway cannot know its traffic is like
    that until it has looked. So a would-be hit that is not an exact repeat is served
    unchecked only once the cache's own evidence bounds the error of serving such hits
    (:meth:`served_bound`): over the last :data:`BOUND_LOOKUPS` lookups, the share that were
    such would-be hits (``h``) times the share of the last ``window`` *checked* ones whose
    answer proved wrong (``q``), each at its Clopper–Pearson upper bound with ``alpha / 2`` (so
    the product holds with ``1 − alpha``), must be at most ``max_error``, and at least
    :data:`MIN_HIT_CHECKS` would-be hits must have been checked. Until then every such
    would-be hit is checked (:meth:`must_check`: one upstream call, and a hit whose answer
    differs is never served); after, the random sample keeps checking a share of them, so
    ``q`` keeps being measured and checking resumes when the traffic turns worse. Checked
    hits are either all would-be hits (while checking) or a random share of them (after), so
    ``q`` is unbiased either way for traffic that does not change faster than the window.
    Each scope (a cache namespace: a tenant, or the group sharing its answers) has a bound of
    its own, counted over its own lookups and checks, so one tenant's traffic cannot loosen
    another's. Thread-safe.

    Args:
        max_error: δ.
        sample_rate: The share of lookups drawn into the sample, in [0, 1].
        window: Most sampled lookups kept (the oldest go first); also the hit checks the
            served bound counts over.
        alpha: One-sided error of the bound.
        seed: Seeds the draw (tests); None: from the system.
        until_bounded: Check every would-be hit until :meth:`served_bound` is within
            ``max_error`` (False: only the random sample is checked).
    """

    def __init__(
        self,
        max_error: float,
        *,
        sample_rate: float = 0.05,
        window: int = 20_000,
        alpha: float = 0.05,
        seed: int | None = None,
        until_bounded: bool = True,
    ) -> None:
        if not 0.0 < max_error < 1.0:
            raise ValueError(f"Verification: max_error must lie in (0, 1), got {max_error}")
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError(f"Verification: sample_rate must lie in [0, 1], got {sample_rate}")
        self.max_error = max_error
        self.sample_rate = sample_rate
        self.alpha = alpha
        self._rng = random.Random(seed)
        self._sample: deque[Outcome] = deque(maxlen=window)
        self._contested: OrderedDict[Hashable, float] = OrderedDict()
        self._lock = threading.Lock()
        self._threshold: float | None = None
        self._dirty = False
        self._added = 0  # sampled lookups since the last fit
        self._fitted_on = 0  # the sample's size at the last fit
        self.checked = 0
        self.mismatches = 0
        self.paid = 0
        self.paid_usd = 0.0
        self.until_bounded = until_bounded
        self._window = window
        # The served bound's counts, per scope (a cache namespace: a tenant, or the group
        # that shares its answers), least recently used first.
        self._scopes: OrderedDict[str, _ServedBound] = OrderedDict()
        self.forced = 0

    @property
    def sampled(self) -> int:
        """How many sampled lookups are held."""
        return len(self._sample)

    def draw(self) -> bool:
        """Whether the next lookup is in the sample (checked against the upstream)."""
        with self._lock:
            return self._rng.random() < self.sample_rate

    def _scope(self, scope: str) -> _ServedBound:
        """The scope's counts (created on first use; the least recently used are dropped
        past :data:`MAX_SCOPES`). Call with the lock held."""
        found = self._scopes.get(scope)
        if found is None:
            found = self._scopes[scope] = _ServedBound(self._window)
            while len(self._scopes) > MAX_SCOPES:
                self._scopes.popitem(last=False)
        else:
            self._scopes.move_to_end(scope)
        return found

    def looked_up(self, guess: bool, scope: str = "default") -> None:
        """Counts one lookup of ``scope`` for its served bound.

        Args:
            guess: Whether the cache would serve it a stored answer that is not an exact
                repeat of its question (a would-be hit: what can be wrong).
            scope: Whose traffic it is (the cache namespace): each scope's bound counts its
                own lookups and checks only, so one tenant's traffic cannot loosen another's.
        """
        with self._lock:
            self._scope(scope).looked_up(guess)

    def served_bound(self, scope: str | None = None) -> float:
        """The upper bound (confidence ``1 − alpha``) on the share of ``scope``'s lookups a
        would-be hit served unchecked would answer wrongly: ``h × q`` (see the class
        docstring); 1.0 while nothing is known; without a scope, the largest of all scopes'.
        (Two bisections; :meth:`must_check` decides more cheaply, and also waits for
        :data:`MIN_HIT_CHECKS`.)"""
        with self._lock:
            if scope is None:
                counts = [b.counts() for b in self._scopes.values()]
            else:
                found = self._scopes.get(scope)
                counts = [found.counts()] if found is not None else []
        half = self.alpha / 2
        bounds = [
            binomial_upper(guesses, looked, half) * binomial_upper(wrong, checks, half)
            for guesses, looked, wrong, checks in counts
        ]
        return max(bounds, default=1.0)

    def must_check(self, scope: str = "default") -> bool:
        """Whether a would-be hit of ``scope`` must be checked before it is served:
        ``until_bounded`` and :meth:`served_bound` is still above ``max_error``, or fewer than
        :data:`MIN_HIT_CHECKS` of its would-be hits were checked.

        Decided without the first bisection: the bound holds when the would-be-hit share's
        upper bound lies below ``max_error / q``, i.e. when seeing at most this many would-be
        hits at that rate would be less likely than ``alpha / 2``. The answer is kept until a
        hit check is added or the lookups or would-be hits change by 1%.
        """
        if not self.until_bounded:
            return False
        with self._lock:
            bound = self._scope(scope)
            kept = bound.kept()
            if kept is not None:
                return kept
            guesses, looked, wrong, checks = bound.counts()
        half = self.alpha / 2
        rate = self.max_error / binomial_upper(wrong, checks, half)
        bounded = checks >= MIN_HIT_CHECKS and rate_bounded_below(guesses, looked, rate, half)
        with self._lock:
            bound.keep(not bounded, (guesses, looked, wrong, checks))
        return not bounded

    def record(
        self,
        probability: float | None,
        correct: bool,
        entry: Hashable | None = None,
        *,
        sampled: bool,
        paid: bool = False,
        cost_usd: float = 0.0,
        guess: bool = False,
        forced: bool = False,
        scope: str = "default",
    ) -> None:
        """Adds one checked lookup.

        Args:
            probability: The verifier's probability for its best candidate (None: none was
                judged; such a lookup counts in the sample and can never be wrong).
            correct: Whether that candidate's answer agreed with the upstream's.
            entry: The candidate's entry; a wrong one is marked contested.
            sampled: Whether :meth:`draw` put this lookup in the sample.
            paid: Whether the check cost an upstream call the lookup would not have made.
            cost_usd: That call's price, when known.
            guess: Whether it checked a would-be hit that is not an exact repeat (evidence
                for :meth:`served_bound`).
            forced: Whether it was checked because :meth:`must_check` said so.
            scope: Whose lookup it was (see :meth:`looked_up`).
        """
        with self._lock:
            self.checked += 1
            self.paid += paid
            self.paid_usd += cost_usd
            self.forced += forced
            if guess:
                self._scope(scope).checked(correct)
            if sampled:
                self._sample.append(Outcome(probability, correct))
                self._dirty = True
                self._added += 1
            if probability is not None and not correct:
                self.mismatches += 1
                if entry is not None:
                    old = self._contested.pop(entry, -math.inf)
                    self._contested[entry] = max(old, probability)
                    while len(self._contested) > 100_000:
                        self._contested.popitem(last=False)

    def gauges(self) -> dict[str, float]:
        """What ``/metrics`` shows of it: checks, mismatches, paid checks and their cost, the
        checks :meth:`must_check` forced, the served bound, the sample held, δ and the learned
        threshold (-1 while the shipped bound applies)."""
        learned = self.threshold()
        bound = self.served_bound()
        with self._lock:
            return {
                "evermind_gateway_cache_checks_total": self.checked,
                "evermind_gateway_cache_check_mismatches_total": self.mismatches,
                "evermind_gateway_cache_paid_checks_total": self.paid,
                "evermind_gateway_cache_paid_checks_usd_total": self.paid_usd,
                "evermind_gateway_cache_forced_checks_total": self.forced,
                "evermind_gateway_cache_served_error_bound": bound,
                "evermind_gateway_cache_sampled_lookups": len(self._sample),
                "evermind_gateway_cache_max_error": self.max_error,
                "evermind_gateway_cache_learned_threshold": -1.0
                if learned is None
                else min(learned, 2.0),
            }

    def contested(self, entry: Hashable) -> float | None:
        """The highest probability at which ``entry`` was found wrong, or None."""
        with self._lock:
            return self._contested.get(entry)

    def forget(self, entry: Hashable) -> None:
        """Drops what was learned about an entry (it was replaced or deleted)."""
        with self._lock:
            self._contested.pop(entry, None)

    def threshold(self) -> float | None:
        """The probability a hit needs, learned from the sample.

        Returns:
            None while the sample is too small to bound ``max_error`` (the shipped bound
            applies); ``inf`` when it is large enough and not even the strictest threshold
            holds (only exact repeats are served); else the threshold.
        """
        with self._lock:
            # Every lookup asks; re-fitting (a sort and a few bounds over the window) waits
            # until the sample has grown by REFIT_SHARE since the last fit.
            due = max(1, int(REFIT_SHARE * self._fitted_on))
            if not self._dirty or self._added < due:
                return self._threshold
            items = list(self._sample)
            self._dirty = False
            self._added = 0
            self._fitted_on = len(items)
        if len(items) < fewest_outcomes(self.max_error, self.alpha):
            found: float | None = None
        else:
            judged = [o for o in items if o.probability is not None]
            bound = bounded_threshold(
                [o.probability for o in judged if o.probability is not None],
                [o.correct for o in judged],
                self.max_error,
                lookups=len(items),
                alpha=self.alpha,
            )
            found = math.inf if bound is None else bound
        with self._lock:
            self._threshold = found
        return found
