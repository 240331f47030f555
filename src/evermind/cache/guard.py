"""The guard protocol: what a guard is, what a refusal says, how guards compose.

This module owns :class:`Guard` (what any guard must provide), :class:`Refusal` (which
guard refused, why) and :class:`GuardChain` (guards run in order; the first refusal wins).
It knows no language: the rules themselves are plug-ins, such as the English guards of
:mod:`evermind.cache.english`, which :class:`~evermind.cache.SemanticCache` uses by default.

Browser-safe: standard library only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from evermind.errors import ConfigError

__all__ = ["Guard", "GuardChain", "Refusal"]

logger = logging.getLogger(__name__)


@runtime_checkable
class Guard(Protocol):
    """A named check: ``check`` returns None to allow serving, or a reason to refuse.

    A guard may also carry ``unless_confident`` (a float): its refusals are then soft, see
    :attr:`Refusal.unless_confident`.
    """

    @property
    def name(self) -> str:
        """Shown in refusals and cache statistics."""
        ...

    def check(self, query: str, cached_query: str) -> str | None:
        """Compares the incoming ``query`` with the ``cached_query`` whose answer is stored."""
        ...


@dataclass(frozen=True)
class Refusal:
    """Why a cached answer was not served.

    Attributes:
        guard: The name of the guard that refused.
        reason: What it found, in words.
        unless_confident: None for a veto. Otherwise a soft refusal, which the cache's
            decision overrides when the embedder's score lies at least this share of the
            way from the threshold to 1.0 (:func:`evermind.cache.decide.decide`); a chain
            runs soft guards after its vetoes, so overriding one never skips a veto.
    """

    guard: str
    reason: str
    unless_confident: float | None = None


class GuardChain:
    """Runs guards in order; the first refusal wins.

    Guards only ever refuse; a guard that finds nothing to compare accepts. Calling the
    chain returns a bool, so it can be used wherever a guard callable
    ``(query, cached_query[, cosine]) -> bool`` is expected.

    Args:
        guards: The guards to run, in order (any objects with a ``name`` and
            ``check(query, cached_query) -> str | None``), e.g.
            :data:`evermind.cache.english.ENGLISH_GUARDS`.

    Raises:
        ConfigError: When two guards share a name.
    """

    def __init__(self, guards: Iterable[Guard]) -> None:
        given = tuple(guards)
        # Soft guards (an ``unless_confident`` attribute) run after every veto.
        self.guards: tuple[Guard, ...] = tuple(
            g for g in given if getattr(g, "unless_confident", None) is None
        ) + tuple(g for g in given if getattr(g, "unless_confident", None) is not None)
        names = [g.name for g in self.guards]
        if len(set(names)) != len(names):
            raise ConfigError(
                f"GuardChain: expected unique guard names, received {names}; "
                "hint: give each custom guard its own name"
            )

    @property
    def names(self) -> tuple[str, ...]:
        """The guard names, in order."""
        return tuple(g.name for g in self.guards)

    def check(self, query: str, cached_query: str) -> Refusal | None:
        """The first guard's refusal, or None when every guard accepts."""
        for guard in self.guards:
            reason = guard.check(query, cached_query)
            if reason is not None:
                logger.debug(
                    "guard %s refused %r vs %r: %s", guard.name, query, cached_query, reason
                )
                return Refusal(guard.name, reason, getattr(guard, "unless_confident", None))
        return None

    def without(self, *names: str) -> GuardChain:
        """A copy of the chain without the named guards."""
        return GuardChain(g for g in self.guards if g.name not in names)

    def __call__(self, query: str, cached_query: str, cosine: float | None = None) -> bool:
        """True when serving the cached answer would be safe (``cosine`` is ignored)."""
        del cosine
        return self.check(query, cached_query) is None
