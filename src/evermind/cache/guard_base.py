"""The guard protocol and the small value types shared by guards and the cache.

This module owns :class:`Guard` (what any guard must provide), :class:`FunctionGuard`
(a rule over two parsed queries, named) and :class:`Refusal` (which guard refused, why).
They live apart from :mod:`evermind.cache.guards` so that module can be loaded straight
from its file by the evaluation script.

Browser-safe: standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from evermind.cache.analysis import Analysis, analyze

__all__ = ["FunctionGuard", "Guard", "Refusal"]


@runtime_checkable
class Guard(Protocol):
    """A named check: ``check`` returns None to allow serving, or a reason to refuse."""

    @property
    def name(self) -> str:
        """Shown in refusals and cache statistics."""
        ...

    def check(self, query: str, cached_query: str) -> str | None:
        """Compares the incoming ``query`` with the ``cached_query`` whose answer is stored."""
        ...


@dataclass(frozen=True)
class FunctionGuard:
    """Wraps a rule over two :class:`Analysis` objects as a :class:`Guard`.

    Attributes:
        name: Shown in refusals and cache statistics.
        rule: ``rule(query_analysis, cached_analysis) -> reason | None``.
        description: One line on what the guard refuses.
    """

    name: str
    rule: Callable[[Analysis, Analysis], str | None]
    description: str = ""

    def check(self, query: str, cached_query: str) -> str | None:
        """Runs the rule on the parsed queries."""
        return self.rule(analyze(query), analyze(cached_query))


@dataclass(frozen=True)
class Refusal:
    """Why a cached answer was not served.

    Attributes:
        guard: The name of the guard that refused.
        reason: What it found, in words.
    """

    guard: str
    reason: str
