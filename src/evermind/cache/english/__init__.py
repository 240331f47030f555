"""The English guards of the semantic cache: a plug-in of rules over word lists.

This package owns everything language-specific about the cache guards: the parsed view of
a query (:mod:`.analysis`), quantities and dates (:mod:`.quantities`), the comparison rules
(:mod:`.rules`), the named guard list (:mod:`.guards`) and the word lists they read, which
are data files under ``data/`` loaded once by :mod:`.lexicon`. Text folding, tokenising
and stemming come from :mod:`evermind.text`; the guard protocol from
:mod:`evermind.cache.guard`. :class:`evermind.cache.SemanticCache` uses
:data:`ENGLISH_CHAIN` unless given other guards.

Browser-safe: standard library only.
"""

from __future__ import annotations

from evermind.cache.english.guards import (
    ENGLISH_CHAIN,
    ENGLISH_GUARDS,
    FunctionGuard,
    default_guard,
    explain,
)

__all__ = ["ENGLISH_CHAIN", "ENGLISH_GUARDS", "FunctionGuard", "default_guard", "explain"]
