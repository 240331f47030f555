"""The one lookup decision of every Evermind cache: candidates → calibration → lexical → guards.

The library's :class:`~evermind.cache.SemanticCache`, the Studio tab's cache
(``evermind.studio.tab_memory``) and the runtime's L2 (``evermind.cache.l2_sqlite``)
each find their scored candidates their own way (pure Python, the GPU scan, numpy) and then
call :func:`decide`, which alone says hit or miss. The rules, in order:

1. **Exact text wins.** A candidate whose query is the incoming query (case and spaces
   folded) is served: re-asking the same question is safe with any embedder.
2. **Calibrated threshold.** :func:`~evermind.search.calibration.calibrate` measures how
   the cache's embedder scores *unrelated* texts: the cosines between the cache's own stored
   queries, sampled, over the pairs that share no content word
   (:func:`~evermind.search.calibration.calibration_pairs`; all pairs when fewer than
   the minimum share none). Templated traffic ("Order 17: status?", "Order 18: status?")
   therefore does not count as unrelated texts scoring 0.95 and raise the threshold until
   nothing but repeats hits. Only scores above the
   :data:`~evermind.search.calibration.QUANTILE` of that distribution plus
   :data:`~evermind.search.calibration.MARGIN` are served, and never below
   :data:`~evermind.search.calibration.FLOOR`. An explicit threshold is honoured when it is
   *higher*; a lower one is raised to the calibrated value and the reason says so. With fewer
   than :data:`~evermind.search.calibration.MIN_CALIBRATION` stored queries there is no
   calibration: the explicit threshold (or the floor) applies, and rules 3-5 still protect.
   When unrelated texts already score within the margin of 1.0 the embedder does not
   separate texts: every lookup that is not an exact match is a miss, and the reason says so.
3. **The best candidate only.** Guards are a veto, never a search down the list: the
   best-scoring candidate is judged; if it is refused, the lookup is a miss with that
   refusal as its reason. A lower candidate is never served.
4. **Lexical evidence, weighted by informativeness.** The incoming and cached query must
   share content words (stop words dropped, folded and stemmed with
   :func:`evermind.text.terms`): at least :data:`MIN_OVERLAP` of the shorter query's terms,
   and either :data:`STRONG_SHARED_TERMS` of them or :data:`STRONG_OVERLAP` of the shorter
   (:func:`lexical_evidence`); and :data:`MIN_LONGER_OVERLAP` of the longer one, unless the
   score is :data:`CONFIDENT` (well above the threshold). Once the cache holds
   :data:`~evermind.search.terms.MIN_IDF_ENTRIES` stored queries, words are weighted by how
   rare they are among them (:class:`~evermind.search.terms.TermStats`: an inverse document
   frequency over the cache's *own* stored queries, kept up to date as entries are stored,
   evicted and cleared): the shares are shares of IDF weight, and only *informative* terms
   count as shared, those held by fewer than ``√(N+1)`` of the ``N`` stored queries
   (:data:`INFORMATIVE`). So two queries that
   share only words common in this cache ("python", "file" in a cache of Python questions)
   have no evidence, while a rare shared word ("pgbouncer") is evidence. A smaller cache
   keeps the unweighted rule: every term counts alike. Morphological variants the light
   stemmer leaves apart ("freez"/"freezer", "valid"/"validity": :func:`variants`) count as
   one term. ``evals/cache_full.py`` measures the cache as a whole.
4b. **Two questions on one topic** (``residue``, :func:`residue_evidence`). When *each*
   query keeps content words the other lacks that weigh (IDF, as in rule 4) at least
   :data:`RESIDUE_RATIO` times what the two share, the shared words are the topic and the
   rest is what is asked about it: "Can I contribute to an HSA after enrolling in
   Medicare?" and "Can I use HSA money to pay Medicare premiums?" share only HSA and
   Medicare; "Chemical formula of baking soda" and "Can I substitute baking soda for baking
   powder?" only the baking soda. A paraphrase looks the same to word counts ("closing a
   credit card hurt my credit score" / "cancelling a credit card lower my credit rating"),
   so only the embedder can tell them apart, and it must be confident: the score at least
   :data:`RESIDUE_CONFIDENT` of the way from the threshold to 1.0, and
   :data:`SHORT_CONFIDENT` when either query has at most :data:`SHORT_TERMS` content terms
   (a short question *is* mostly its residue, and a strong embedder still scores a short
   question on the same topic high: MiniLM gives the two pairs above 0.76 and 0.70). A
   shared code or specific number (:data:`CODE_CHARS` characters with a digit: "550",
   "8080", "E0382") exempts the pair: both ask about that code, and the guards compare the
   rest.
5. **Guards.** The guard chain (by default the English guards) compares numbers, units,
   negation, entities, direction, operation and codes.
6. **Contested entries.** An entry remembers the highest cosine at which the cache holds
   *another question with another answer* next to it (:attr:`Candidate.contested`, set when
   either is stored: the cache stored both, so it judged them different). Serving it then
   needs a score above that plus :data:`CONTEST_MARGIN` (or the incoming vector itself,
   cosine 1 within float32 rounding): where the cache knows that two
   questions this close differ ("absorb more iron" next to "reduce iron absorption"), a
   query no closer than they are cannot be told apart. This is what keeps a read-through
   cache, which stores every miss (near-misses included), from serving a paraphrase of one
   the answer of its stored near-miss. The library's L1 keeps the value per entry (updated
   as entries are stored); the L2 and the tab measure it for the best candidate at lookup
   (:func:`contested_of`: one scan of that entry's neighbours).
7. **No guessing.** When the runner-up scores within :data:`AMBIGUITY_MARGIN` of the best,
   would itself pass rules 4-5 and holds a different answer, the lookup is a miss
   ("ambiguous"), unless the best is the incoming vector itself (cosine 1 within float32
   rounding) and the runner-up is not. The margin (0.05) is wider than the noise of one
   cosine: a read-through cache stores near-misses, and a paraphrase that lands between its
   question and that question's stored near-miss (0.61 to one, 0.58 to the other, as
   MiniLM scored an Ubuntu support question) cannot be resolved by the embedder.

8. **Confidence needs a similarity-trained embedder.** Rules 4, 4b and the soft guards
   relax for a *confident* score. That reading assumes an embedder trained to place
   paraphrases together (a tuned or distilled head, a sentence encoder, the lexical
   embedders, whose score *is* word overlap). An untrained model's pooled hidden states
   score surface likeness: in the read-through replay the untrained nano model scored
   "npm install that doesn't save the dependency into package.json" 0.35 of the way to 1.0
   against "npm install fails with ERESOLVE …". A caller whose embedder is not so trained
   passes ``trust_scores=False``: no score is confident, every one of those rules holds.

The constants of rules 4b and 7 (and the variants of rule 4) were chosen on the
development set (``evals/cache_full.py`` prints every split; see its docstring).

Browser-safe: standard library and ``evermind`` only (the calibration and the term
statistics it reads are :mod:`evermind.search`'s).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

from evermind.cache.guard import Refusal
from evermind.search.calibration import FLOOR, Calibration
from evermind.search.terms import TermStats
from evermind.text import terms

__all__ = [
    "AMBIGUITY_MARGIN",
    "CODE_CHARS",
    "CONFIDENT",
    "CONTEST_MARGIN",
    "INFORMATIVE",
    "MAX_VARIANT_SUFFIX",
    "MIN_LONGER_OVERLAP",
    "MIN_OVERLAP",
    "MIN_SHARED_TERMS",
    "MIN_VARIANT_STEM",
    "RESIDUE_CONFIDENT",
    "RESIDUE_RATIO",
    "SHORT_CONFIDENT",
    "SHORT_TERMS",
    "STRONG_OVERLAP",
    "STRONG_SHARED_TERMS",
    "Candidate",
    "Decision",
    "contested_of",
    "decide",
    "fold",
    "lexical_evidence",
    "residue_evidence",
    "variants",
]

#: Lexical evidence: shared content terms, and their share of the shorter query's terms.
MIN_SHARED_TERMS = 1
MIN_OVERLAP = 0.25
#: ... and either this many shared terms or this share (one shared generic word such as
#: "many" or "time" between two short queries is not evidence).
STRONG_SHARED_TERMS = 2
STRONG_OVERLAP = 0.5
#: ... and at least this share of the *longer* query's terms (two words shared with a long,
#: detailed stored question are not evidence that a short one asks the same thing), unless
#: the embedder is confident: the score lies at least :data:`CONFIDENT` of the way from the
#: threshold to 1.0 (a strong embedder's paraphrase, reworded beyond word overlap).
MIN_LONGER_OVERLAP = 0.35
CONFIDENT = 0.3
#: A term is informative when its normalised IDF, ``ln((N+1)/(df+1)) / ln(N+1)``, reaches
#: this: 0.5 means it is held by fewer than ``√(N+1)`` of the ``N`` stored queries.
INFORMATIVE = 0.5
#: Rule 4b (:func:`residue_evidence`): when each query's unshared content weighs at least
#: this many times the shared content, the score must lie :data:`RESIDUE_CONFIDENT` of the
#: way from the threshold toward 1.0, or :data:`SHORT_CONFIDENT` when either query has at
#: most :data:`SHORT_TERMS` distinct content terms ...
RESIDUE_RATIO = 1.0
RESIDUE_CONFIDENT = 0.3
SHORT_TERMS = 4
SHORT_CONFIDENT = 0.7
#: ... unless they share a code: a term of at least this many characters with a digit.
CODE_CHARS = 3
#: Morphological variants (:func:`variants`): the shorter stem's fewest letters, and the
#: most letters the longer adds.
MIN_VARIANT_STEM = 4
MAX_VARIANT_SUFFIX = 4
#: A runner-up this close to the best score with another answer makes the lookup a miss.
AMBIGUITY_MARGIN = 0.05
#: A contested entry (rule 6) is served only this far above its contested cosine.
CONTEST_MARGIN = 0.03
# A cosine this close to 1 is the same vector (float32 rounding aside).
_SAME_VECTOR = 1.0 - 1e-6

Guard = Callable[[str, str], Refusal | None]


def contested_of(
    neighbours: Iterable[tuple[float, Hashable, object]], own: Hashable, answer: object
) -> float | None:
    """The ``contested`` cosine of the entry ``own`` holding ``answer``, from its
    ``(cosine, key, answer)`` neighbours (itself and entries with the same answer skipped)."""
    scores = [score for score, key, other in neighbours if key != own and other != answer]
    return max(scores) if scores else None


def lexical_evidence(
    query: str, cached_query: str, idf: TermStats | None = None, confidence: float = 0.0
) -> str | None:
    """None when the two queries share enough content words, else why not (in words).

    Args:
        query: The incoming query.
        cached_query: The stored query whose answer would be served.
        idf: The cache's :class:`~evermind.search.terms.TermStats`; when it is
            :attr:`~evermind.search.terms.TermStats.active`, shares are of IDF weight and
            only informative terms count as shared (see rule 4 of the module). None or a
            small cache: every term weighs 1.
        confidence: How far the candidate's score lies from the threshold toward 1.0, in
            [0, 1]; from :data:`CONFIDENT` on, the share of the longer query is not required.
    """
    mine, theirs = _aligned(set(terms(query)), set(terms(cached_query)))
    if not mine or not theirs:
        return "no content words to compare"
    shared = mine & theirs
    if idf is None or not idf.active:
        share = len(shared) / min(len(mine), len(theirs))
        longer = len(shared) / max(len(mine), len(theirs))
        counted = len(shared)
        weighted = ""
    else:
        weight = {t: idf.idf(t) for t in mine | theirs}
        sizes = sum(weight[t] for t in mine), sum(weight[t] for t in theirs)
        common_weight = sum(weight[t] for t in shared)
        share = common_weight / min(sizes) if min(sizes) > 0.0 else 0.0
        longer = common_weight / max(sizes) if max(sizes) > 0.0 else 0.0
        counted = sum(idf.informativeness(t) >= INFORMATIVE for t in shared)
        common = len(shared) - counted
        weighted = f" by IDF weight over {idf.n} stored queries" + (
            f"; {common} shared word(s) too common in this cache to count" if common else ""
        )
    strong = counted >= STRONG_SHARED_TERMS or share >= STRONG_OVERLAP
    if (
        counted < MIN_SHARED_TERMS
        or share < MIN_OVERLAP
        or (longer < MIN_LONGER_OVERLAP and confidence < CONFIDENT)
        or not strong
    ):
        return (
            f"the queries share {counted} informative content word(s) "
            f"({share:.0%} of the shorter, {longer:.0%} of the longer{weighted}; needs "
            f"{STRONG_SHARED_TERMS}, or one that is {STRONG_OVERLAP:.0%} of the shorter, and "
            f"{MIN_LONGER_OVERLAP:.0%} of the longer unless the score is confident)"
        )
    return None


def variants(a: str, b: str) -> bool:
    """Whether two different stemmed terms are one word's variants: both alphabetic, and the
    shorter (at least :data:`MIN_VARIANT_STEM` letters) begins the longer, which adds at
    most :data:`MAX_VARIANT_SUFFIX` letters ("freez"/"freezer", "valid"/"validity",
    "connect"/"connection": derivations the light stemmer leaves apart)."""
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    return (
        short != long
        and len(short) >= MIN_VARIANT_STEM
        and len(long) - len(short) <= MAX_VARIANT_SUFFIX
        and short.isalpha()
        and long.isalpha()
        and long.startswith(short)
    )


def _is_code(term: str) -> bool:
    """Whether a term is a code or a specific number: at least :data:`CODE_CHARS`
    characters, one of them a digit ("550", "8080", "e0382", "0x80070005")."""
    return len(term) >= CODE_CHARS and any(ch.isdigit() for ch in term)


def _aligned(mine: set[str], theirs: set[str]) -> tuple[set[str], set[str]]:
    """``mine`` and ``theirs`` with each of ``theirs``' unshared terms that is a variant
    (:func:`variants`) of one of ``mine``'s unshared terms spelled as ``mine`` spells it."""
    only_mine = sorted(mine - theirs)
    if not only_mine:
        return mine, theirs
    spelled = set(theirs)
    for term in sorted(theirs - mine):
        match = next((t for t in only_mine if variants(t, term) and t not in spelled), None)
        if match is not None:
            spelled.discard(term)
            spelled.add(match)
    return mine, spelled


def residue_evidence(
    query: str, cached_query: str, idf: TermStats | None = None, confidence: float = 0.0
) -> str | None:
    """None unless both queries say more apart than together (rule 4b of the module).

    The *residue* of a query is the weight of its content terms the other lacks (IDF
    weight when ``idf`` is :attr:`~TermStats.active`, else one per term; variants are
    shared, :func:`variants`). When the residue of *each* query weighs at least
    :data:`RESIDUE_RATIO` times what they share, they are two questions about one topic
    ("contribute to an HSA after enrolling in Medicare" / "use HSA money to pay Medicare
    premiums") as often as one question reworded, and only an embedder that is confident,
    the score at least :data:`RESIDUE_CONFIDENT` of the way from the threshold to 1.0
    (:data:`SHORT_CONFIDENT` for a query of at most :data:`SHORT_TERMS` terms), may tell
    them apart. A shared code (:func:`_is_code`) exempts the pair. Returns why not, in words.

    Args:
        query: The incoming query.
        cached_query: The stored query whose answer would be served.
        idf: The cache's :class:`~evermind.search.terms.TermStats` (None or inactive: every
            term weighs 1).
        confidence: As for :func:`lexical_evidence`.
    """
    mine, theirs = _aligned(set(terms(query)), set(terms(cached_query)))
    shared = mine & theirs
    needed = SHORT_CONFIDENT if min(len(mine), len(theirs)) <= SHORT_TERMS else RESIDUE_CONFIDENT
    if not shared or confidence >= needed:
        return None
    if any(_is_code(t) for t in shared):
        return None  # one code both name (550, 8080, e0382): the guards compare the rest
    weighted = idf is not None and idf.active

    def weight(group: set[str]) -> float:
        return sum(idf.idf(t) for t in group) if idf is not None and weighted else len(group)

    common = weight(shared)
    apart = min(weight(mine - shared), weight(theirs - shared))
    if apart <= 0.0 or apart < RESIDUE_RATIO * common:
        return None
    return (
        f"each query keeps content the other lacks ({sorted(mine - shared)} / "
        f"{sorted(theirs - shared)}), weighing {apart / max(common, 1e-9):.2f}x what they share "
        f"({sorted(shared)}){' by IDF weight' if weighted else ''}; that needs a confident "
        f"score ({confidence:.2f} of the way to 1.0, needs {needed:g})"
    )


@dataclass(frozen=True)
class Candidate:
    """A stored entry scored against the incoming query.

    Attributes:
        key: The caller's handle on the entry.
        score: Cosine with the incoming query.
        query: The stored query (None when the store does not know it: no lexical check or
            guards can run, see :func:`decide`).
        answer: Anything equal for entries that hold the same answer (e.g. the response).
        contested: The highest cosine between this entry and another stored entry with
            another answer (None: unknown or none): see rule 6 and :func:`contested_of`.
    """

    key: Hashable
    score: float
    query: str | None
    answer: object = None
    contested: float | None = None


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` concluded.

    Attributes:
        hit: True when ``candidate`` is served.
        candidate: The served candidate, or the best one judged on a miss (None: none).
        threshold: The threshold that applied.
        refused_by: ``"threshold"``, ``"calibration"``, ``"lexical"``, ``"residue"``,
            ``"contested"``, ``"ambiguous"`` or
            the refusing guard's name on a miss with a candidate; else None.
        reason: Why, in words.
        probability: The verifier's probability for ``candidate`` (the verified decision of
            :mod:`evermind.cache.verified` only), else None.
    """

    hit: bool
    candidate: Candidate | None
    threshold: float
    refused_by: str | None
    reason: str
    probability: float | None = None


def fold(text: str) -> str:
    """A question's text as exact matching compares it: case-folded, white space collapsed,
    sentence punctuation at its end dropped ("How do I X?" asks what "how do i x" asks).
    Symbols inside stay ("2+2" is not "2-2")."""
    return " ".join(text.casefold().split()).rstrip("?!.。？！ ")


def decide(
    query: str | None,
    candidates: Sequence[Candidate],
    *,
    threshold: float | None,
    calibration: Calibration,
    guard: Guard | None,
    lexical: bool = True,
    idf: TermStats | None = None,
    trust_scores: bool = True,
) -> Decision:
    """Hit or miss for ``query`` among ``candidates`` (the best few; see the module rules).

    Args:
        query: The incoming query text; None when the caller only has its vector (the
            lexical check and guards cannot run then: only an entry without query text is
            judged alike).
        candidates: Scored entries, in any order (the caller's top few suffice).
        threshold: An explicit threshold, or None for the calibrated one (or the floor).
        calibration: From :func:`~evermind.search.calibration.measure_calibration` over the
            cache's stored queries.
        guard: Returns a :class:`Refusal` to veto, None to allow; None: no guards.
        lexical: Require :func:`lexical_evidence` (on by default).
        idf: The cache's :class:`~evermind.search.terms.TermStats` over its stored queries,
            which weights the lexical evidence; None: unweighted (as a cache under
            :data:`~evermind.search.terms.MIN_IDF_ENTRIES`).
        trust_scores: Whether a score well above the threshold counts as evidence (rule 8).
            False for an embedder not trained to place paraphrases together (an untrained
            model's pooled states): every rule that a confident score relaxes then holds.
    """
    ranked = sorted(candidates, key=lambda c: -c.score)
    tau = _threshold(threshold, calibration)
    if query is not None:
        wanted = fold(query)
        for cand in ranked:
            if cand.query is not None and fold(cand.query) == wanted:
                return Decision(True, cand, tau, None, "exact match of a cached query")
    if not ranked:
        return Decision(False, None, tau, None, "the cache is empty")
    best = ranked[0]
    if calibration.collapsed:
        return Decision(False, best, tau, "calibration", calibration.words)
    if best.score < tau:
        why = f"no cached query reached the threshold {tau:.3f} (best cosine {best.score:.3f})"
        if threshold is not None and tau > threshold:
            raised = calibration.words if calibration.threshold == tau else f"floor {FLOOR:g}"
            why += f"; the requested {threshold:g} was raised ({raised})"
        return Decision(False, None, tau, None, why)
    veto = _veto(query, best, guard, lexical, idf, tau, trust_scores)
    if veto is not None:
        name, words = veto
        return Decision(False, best, tau, name, words)
    if (
        best.contested is not None
        and best.score < best.contested + CONTEST_MARGIN
        and best.score < _SAME_VECTOR  # the incoming vector is the stored one: no doubt
    ):
        return Decision(
            False,
            best,
            tau,
            "contested",
            f"contested: the cache holds another question scoring {best.contested:.3f} "
            f"against {best.query!r}, so serving it needs "
            f"{best.contested + CONTEST_MARGIN:.3f} (best cosine {best.score:.3f})",
        )
    for rival in ranked[1:]:
        if rival.score < best.score - AMBIGUITY_MARGIN or rival.score < tau:
            break
        if best.score >= _SAME_VECTOR > rival.score:
            break  # the best is the incoming vector itself: nothing to guess between
        same = rival.answer == best.answer and rival.answer is not None
        if not same and _veto(query, rival, guard, lexical, idf, tau, trust_scores) is None:
            return Decision(
                False,
                best,
                tau,
                "ambiguous",
                f"ambiguous: {rival.query!r} scores {rival.score:.3f}, within "
                f"{AMBIGUITY_MARGIN:g} of the best ({best.score:.3f}), with another answer",
            )
    return Decision(True, best, tau, None, "served")


def _threshold(threshold: float | None, calibration: Calibration) -> float:
    tau = max(FLOOR, FLOOR if threshold is None else float(threshold))
    if calibration.threshold is not None:
        tau = max(tau, calibration.threshold)
    return tau


def _veto(
    query: str | None,
    cand: Candidate,
    guard: Guard | None,
    lexical: bool,
    idf: TermStats | None,
    tau: float,
    trust_scores: bool = True,
) -> tuple[str, str] | None:
    if query is None or cand.query is None:
        return None  # nothing to compare: the caller decides whether that is acceptable
    # How far the score lies from the threshold toward 1.0 (0 when scores are not evidence).
    confidence = (cand.score - tau) / (1.0 - tau) if tau < 1.0 and trust_scores else 0.0
    if lexical:
        missing = lexical_evidence(query, cand.query, idf, confidence)
        if missing is not None:
            return "lexical", f"no lexical evidence: {missing}"
        apart = residue_evidence(query, cand.query, idf, confidence)
        if apart is not None:
            return "residue", f"two questions on one topic: {apart}"
    if guard is not None:
        refusal = guard(query, cand.query)
        if refusal is not None:
            soft = refusal.unless_confident
            if soft is not None and confidence >= soft:
                return None  # a soft refusal that the embedder's confidence overrides
            return refusal.guard, f"guard '{refusal.guard}' refused: {refusal.reason}"
    return None
