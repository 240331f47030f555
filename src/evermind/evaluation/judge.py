"""An LLM judge: a grader that asks a model, through any bridge, whether an answer is right.

The judge sends the question, the reference answer (when the case has one), the answer under
test and the rubric, at temperature 0, and asks for a reply that starts with ``PASS`` or
``FAIL`` (optionally ``PASS 0.8``: a score in [0, 1]). A reply that starts with neither
fails the case with the reply in the detail (a judge that cannot follow the format is not a
pass). The call's price (``Completion.cost_usd``, which
:class:`~evermind.bridges.InstrumentedBridge` sets) is the grade's cost, so a
:class:`~evermind.evaluation.gates.MaxMeanCost` gate sees what judging costs.
Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

import re

from evermind.bridges.base import Bridge, ChatRequest, Message
from evermind.evaluation.cases import Case, Grade, Outcome

__all__ = ["JUDGE_SYSTEM", "LLMJudge", "parse_verdict"]

JUDGE_SYSTEM = (
    "You grade answers. Read the question, the reference answer if one is given, the answer "
    "to grade and the rubric. Reply with PASS or FAIL as the first word, optionally followed "
    "by a score between 0 and 1, then one short reason."
)
_VERDICT = re.compile(r"^\W*(PASS|FAIL)\b[\W_]*([01](?:\.\d+)?\b)?", re.IGNORECASE)


def parse_verdict(text: str) -> tuple[bool, float | None] | None:
    """``(passed, score)`` from a judge's reply, or None when it starts with neither word."""
    found = _VERDICT.match(text)
    if found is None:
        return None
    passed = found.group(1).upper() == "PASS"
    score = float(found.group(2)) if found.group(2) is not None else float(passed)
    return passed, min(1.0, score)


class LLMJudge:
    """Grades ``values[output]`` against the case with a model.

    Args:
        bridge: Any :class:`~evermind.bridges.Bridge`.
        model: The judge model's name upstream.
        rubric: What a passing answer must do.
        output: The outcome field holding the answer.
        reference: The expected field holding a reference answer (optional per case).
        name: The grader's name in the report.
        max_tokens: The reply's limit.
    """

    def __init__(
        self,
        bridge: Bridge,
        *,
        model: str,
        rubric: str,
        output: str = "answer",
        reference: str = "answer",
        name: str = "judge",
        max_tokens: int = 64,
    ) -> None:
        self.bridge = bridge
        self.model = model
        self.rubric = rubric
        self.output = output
        self.reference = reference
        self.name = name
        self.max_tokens = max_tokens

    def request(self, case: Case, answer: str) -> ChatRequest:
        """The judge's request for one answer."""
        parts = [f"Question: {case.input}"]
        reference = case.expected.get(self.reference)
        if isinstance(reference, str) and reference:
            parts.append(f"Reference answer: {reference}")
        parts += [f"Answer to grade: {answer}", f"Rubric: {self.rubric}"]
        return ChatRequest(
            model=self.model,
            messages=(Message("user", "\n".join(parts)),),
            system=JUDGE_SYSTEM,
            max_tokens=self.max_tokens,
            temperature=0.0,
        )

    async def grade(self, case: Case, outcome: Outcome) -> Grade:
        """Asks the model; PASS/FAIL as it says (an unreadable reply fails)."""
        answer = outcome.values.get(self.output)
        if answer is None:
            return Grade(self.name, "skip", detail=f"no {self.output!r} output")
        completion = await self.bridge.generate(self.request(case, str(answer)))
        cost = completion.cost_usd or 0.0
        verdict = parse_verdict(completion.text)
        if verdict is None:
            detail = f"the judge replied neither PASS nor FAIL: {completion.text[:200]!r}"
            return Grade(self.name, "fail", None, detail, cost)
        passed, score = verdict
        return Grade(self.name, "pass" if passed else "fail", score, completion.text[:200], cost)
