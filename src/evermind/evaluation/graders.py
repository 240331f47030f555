"""Graders over plain values: exact, contains, regex, retrieval recall@k, citation validity.

Each grader reads one field of the outcome's ``values`` and (most) one field of the case's
``expected``, both named when it is built, and returns a :class:`~evermind.evaluation.cases.Grade`.
When a field it needs is absent (or None) it **skips**; a value of the wrong type is a
:class:`~evermind.errors.InputError` naming the case and the field, since a mislabelled set
should stop the run rather than score it. The LLM judge is in
:mod:`evermind.evaluation.judge`. Browser-safe: standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from evermind.errors import ConfigError, InputError
from evermind.evaluation.cases import Case, Grade, Outcome, Status

__all__ = ["CitationValidity", "Contains", "Exact", "Grader", "RecallAtK", "Regex", "normalise"]

_SPACE = re.compile(r"\s+")
_MISSING = object()


class Grader(Protocol):
    """Grades one case's outcome."""

    name: str

    async def grade(self, case: Case, outcome: Outcome) -> Grade:
        """The verdict on ``outcome`` for ``case``."""
        ...


def normalise(text: str) -> str:
    """Case-folded, whitespace squeezed, outer spaces and final ``.!?`` dropped."""
    return _SPACE.sub(" ", text.casefold()).strip().rstrip(".!?").strip()


def _value(values: Any, name: str) -> Any:
    value = values.get(name, _MISSING) if hasattr(values, "get") else _MISSING
    return _MISSING if value is None else value


def _strings(case: Case, name: str, value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return list(value)
    raise InputError(
        f"case {case.id!r}: {name!r} must be a string or a list of strings, got {value!r}"
    )


def _text(case: Case, name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InputError(f"case {case.id!r}: {name!r} must be a string, got {type(value).__name__}")
    return value


def _skip(name: str, why: str) -> Grade:
    return Grade(name, "skip", detail=why)


class Exact:
    """The output field equals the expected one (strings compared after :func:`normalise`
    unless ``strict``; other values with ``==``)."""

    def __init__(
        self,
        output: str = "answer",
        expected: str | None = None,
        *,
        strict: bool = False,
        name: str | None = None,
    ) -> None:
        self.output = output
        self.expected = expected or output
        self.strict = strict
        self.name = name or f"exact:{self.output}"

    async def grade(self, case: Case, outcome: Outcome) -> Grade:
        got = _value(outcome.values, self.output)
        want = _value(case.expected, self.expected)
        if got is _MISSING or want is _MISSING:
            return _skip(
                self.name,
                f"no {self.output!r} output" if got is _MISSING else f"no {self.expected!r} label",
            )
        if isinstance(got, str) and isinstance(want, str) and not self.strict:
            same = normalise(got) == normalise(want)
        else:
            same = got == want and type(got) is type(want)
        return Grade(
            self.name, "pass" if same else "fail", float(same), f"got {got!r}, expected {want!r}"
        )


class Contains:
    """The output text contains every expected string (case-insensitive unless ``strict``)."""

    def __init__(
        self,
        output: str = "answer",
        expected: str = "contains",
        *,
        strict: bool = False,
        name: str | None = None,
    ) -> None:
        self.output = output
        self.expected = expected
        self.strict = strict
        self.name = name or f"contains:{self.output}"

    async def grade(self, case: Case, outcome: Outcome) -> Grade:
        got = _value(outcome.values, self.output)
        want = _value(case.expected, self.expected)
        if got is _MISSING or want is _MISSING:
            return _skip(
                self.name,
                f"no {self.output!r} output" if got is _MISSING else f"no {self.expected!r} label",
            )
        text = _text(case, self.output, got)
        needles = _strings(case, self.expected, want)
        fold = (lambda s: s) if self.strict else normalise
        missing = [n for n in needles if fold(n) not in fold(text)]
        score = 1.0 - len(missing) / len(needles) if needles else 1.0
        detail = f"missing {missing!r}" if missing else f"contains all {len(needles)}"
        return Grade(self.name, "fail" if missing else "pass", score, detail)


class Regex:
    """The output text matches a pattern (``re.search``): ``pattern`` given here, or read
    from the case's ``expected`` field."""

    def __init__(
        self,
        output: str = "answer",
        pattern: str | None = None,
        *,
        expected: str = "pattern",
        flags: int = re.IGNORECASE,
        name: str | None = None,
    ) -> None:
        self.output = output
        self.expected = expected
        self.flags = flags
        self._fixed = self._compile(pattern, "Regex") if pattern is not None else None
        self.name = name or f"regex:{self.output}"

    def _compile(self, pattern: str, where: str) -> re.Pattern[str]:
        try:
            return re.compile(pattern, self.flags)
        except re.error as err:
            raise ConfigError(f"{where}: pattern {pattern!r} does not compile: {err}") from err

    async def grade(self, case: Case, outcome: Outcome) -> Grade:
        got = _value(outcome.values, self.output)
        if got is _MISSING:
            return _skip(self.name, f"no {self.output!r} output")
        compiled = self._fixed
        if compiled is None:
            want = _value(case.expected, self.expected)
            if want is _MISSING:
                return _skip(self.name, f"no {self.expected!r} label")
            compiled = self._compile(_text(case, self.expected, want), f"case {case.id!r}")
        found = compiled.search(_text(case, self.output, got))
        detail = f"matched {found.group(0)!r}" if found else f"no match for {compiled.pattern!r}"
        return Grade(self.name, "pass" if found else "fail", float(found is not None), detail)


class RecallAtK:
    """Share of the labelled relevant ids among the first ``k`` retrieved ones.

    Passes when the share reaches ``minimum`` (1.0: all of them). A case with no relevant
    ids labelled skips (recall is undefined). With ``capped`` the share is over
    ``min(k, |relevant|)`` rather than ``|relevant|`` (a question with three relevant ids
    reaches 1.0 at ``k=1`` when the first hit is one of them): the memory development set's
    recall@k (``shared/eval/eval_dev.py``).
    """

    def __init__(
        self,
        k: int,
        *,
        retrieved: str = "retrieved",
        relevant: str = "relevant",
        minimum: float = 1.0,
        capped: bool = False,
        name: str | None = None,
    ) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"RecallAtK: k must be an int ≥ 1, got {k!r}")
        if not 0.0 < minimum <= 1.0:
            raise ConfigError(f"RecallAtK: minimum must be in (0, 1], got {minimum!r}")
        self.k = k
        self.retrieved = retrieved
        self.relevant = relevant
        self.minimum = minimum
        self.capped = capped
        self.name = name or f"recall@{k}"

    async def grade(self, case: Case, outcome: Outcome) -> Grade:
        want = _value(case.expected, self.relevant)
        if want is _MISSING:
            return _skip(self.name, f"no {self.relevant!r} label")
        relevant = set(_strings(case, self.relevant, want))
        if not relevant:
            return _skip(self.name, "no relevant ids labelled")
        got = _value(outcome.values, self.retrieved)
        ranked = [] if got is _MISSING else _strings(case, self.retrieved, got)
        top = set(ranked[: self.k])
        found = relevant & top
        out_of = min(self.k, len(relevant)) if self.capped else len(relevant)
        score = len(found) / out_of
        status: Status = "pass" if score >= self.minimum else "fail"
        shown = ", ".join(ranked[: self.k]) or "nothing"
        return Grade(
            self.name,
            status,
            score,
            f"{len(found)} of {len(relevant)} relevant in the top {self.k} "
            f"(retrieved: {shown}; relevant: {', '.join(sorted(relevant))})",
        )


class CitationValidity:
    """Every cited number names one of the sources offered, and at least one is cited.

    Reads ``citations`` (the cited numbers, 1-based) and ``sources`` (how many were offered,
    or the list of them) from the outcome. An outcome without citations (None: a refusal,
    nothing was answered) skips.
    """

    def __init__(
        self, *, citations: str = "citations", sources: str = "sources", name: str = "citations"
    ) -> None:
        self.citations = citations
        self.sources = sources
        self.name = name

    async def grade(self, case: Case, outcome: Outcome) -> Grade:
        cited = _value(outcome.values, self.citations)
        if cited is _MISSING:
            return _skip(self.name, f"no {self.citations!r} output")
        offered = _value(outcome.values, self.sources)
        if isinstance(offered, int) and not isinstance(offered, bool):
            count = offered
        elif isinstance(offered, Sequence) and not isinstance(offered, str):
            count = len(offered)
        else:
            raise InputError(
                f"case {case.id!r}: {self.sources!r} must be a count or a list, got {offered!r}"
            )
        if not isinstance(cited, Sequence) or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in cited
        ):
            raise InputError(
                f"case {case.id!r}: {self.citations!r} must be a list of ints, got {cited!r}"
            )
        if not cited:
            return Grade(self.name, "fail", 0.0, "the answer cites nothing")
        bad = [n for n in cited if not 1 <= n <= count]
        score = 1.0 - len(bad) / len(cited)
        detail = f"cites {bad} of {count} sources" if bad else f"{len(cited)} citations, all valid"
        return Grade(self.name, "fail" if bad else "pass", score, detail)
