"""What an evaluation grades: a :class:`Case` (input, labels), an Outcome, a Grade.

Everything is plain values, so any system (a retriever, a router, a cache) can be graded:
the system maps a case's ``input`` to an outcome's ``values`` (``{"answer": …,
"retrieved": […]}``), and each grader compares named fields of ``values`` with named fields
of the case's ``expected``. A grader whose fields are absent **skips** (it has nothing to
say about that case); a skip is never a pass (see :mod:`evermind.evaluation.gates`).
Browser-safe: standard library only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evermind.errors import InputError

__all__ = ["Case", "Grade", "Outcome", "Status", "load_cases"]

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class Case:
    """One labelled example.

    Attributes:
        id: Unique within its set.
        input: What the system under test gets (a question, a request).
        expected: The labels graders compare with (``answer``, ``relevant``, ``refused`` …).
        tags: Groups to report pass rates by (``answerable``, ``unanswerable`` …).
    """

    id: str
    input: Any
    expected: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """What the system produced for one case.

    Attributes:
        values: Named outputs the graders read.
        cost_usd: What producing it cost (None: not known).
        error: Set when the system raised instead (the case then fails every grader).
    """

    values: Mapping[str, Any] = field(default_factory=dict)
    cost_usd: float | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if self.cost_usd is not None and not (math.isfinite(self.cost_usd) and self.cost_usd >= 0):
            raise InputError(
                f"Outcome: cost_usd must be a finite number ≥ 0, got {self.cost_usd!r}"
            )


@dataclass(frozen=True)
class Grade:
    """One grader's verdict on one case.

    Attributes:
        grader: The grader's name.
        status: ``pass``, ``fail`` or ``skip`` (the grader had nothing to grade).
        score: A number in [0, 1] behind the verdict (recall, a judge's score), if any.
        detail: Why, for a reader of the report.
        cost_usd: What grading cost (an LLM judge's call); 0 for the others.
    """

    grader: str
    status: Status
    score: float | None = None
    detail: str = ""
    cost_usd: float = 0.0


def load_cases(path: Path, *, input_field: str = "input") -> list[Case]:
    """Cases from a JSONL file: one object per line with ``id``, ``input_field``, optional
    ``tags`` (a list); every other field becomes ``expected``.

    Raises:
        InputError: A line that is not a JSON object, lacks ``id`` or the input, or repeats
            an id (the message names the line).
    """
    cases: list[Case] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{path}:{number}: not JSON ({err.msg})") from err
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("id"), str)
            or input_field not in row
        ):
            raise InputError(f"{path}:{number}: expected an object with 'id' and {input_field!r}")
        if row["id"] in seen:
            raise InputError(f"{path}:{number}: id {row['id']!r} appears twice; ids must be unique")
        seen.add(row["id"])
        tags = row.pop("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise InputError(f"{path}:{number}: tags must be a list of strings")
        case_id, value = row.pop("id"), row.pop(input_field)
        cases.append(Case(case_id, value, row, tuple(tags)))
    return cases
