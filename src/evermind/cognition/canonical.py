"""Canonical subject keys: one spelling per thing a belief is about.

"Niamh's  EDITOR", "niamh's editor" and an alias such as "editor of niamh" must land on the
same belief, so a subject is normalised (Unicode NFC, case-folded, whitespace collapsed) and
then looked up in an alias table. Browser-safe: standard library only.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping

from evermind.errors import ConfigError


def normalise_subject(text: str) -> str:
    """NFC-normalises, case-folds and collapses whitespace (leading/trailing removed).

    Raises:
        ConfigError: ``text`` is not a string or is blank.
    """
    if not isinstance(text, str):
        raise ConfigError(f"subject: expected a string, got {type(text).__name__}")
    folded = unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold())
    collapsed = " ".join(folded.split())
    if not collapsed:
        raise ConfigError(
            f"subject: expected a non-blank string, got {text!r}; "
            "hint: name what the claim is about, e.g. 'deploy window'"
        )
    return collapsed


class AliasTable:
    """Maps alternative names of a subject to its canonical name (one hop, normalised).

    Args:
        aliases: Initial ``alias -> canonical`` pairs.
    """

    def __init__(self, aliases: Mapping[str, str] | None = None) -> None:
        self._map: dict[str, str] = {}
        for alias, canonical in (aliases or {}).items():
            self.add(alias, canonical)

    def add(self, alias: str, canonical: str) -> None:
        """Declares ``alias`` another name of ``canonical``.

        Raises:
            ConfigError: The alias is already bound to a different canonical name, or the
                canonical name is itself an alias (chains are refused to keep lookups one hop).
        """
        key, target = normalise_subject(alias), normalise_subject(canonical)
        if key == target:
            return
        if target in self._map:
            raise ConfigError(
                f"alias {alias!r} -> {canonical!r}: {canonical!r} is itself an alias of "
                f"{self._map[target]!r}; hint: point the alias at {self._map[target]!r}"
            )
        bound = self._map.get(key)
        if bound is not None and bound != target:
            raise ConfigError(
                f"alias {alias!r} already names {bound!r}, cannot also name {canonical!r}"
            )
        if key in self._map.values():
            raise ConfigError(
                f"alias {alias!r}: it is already the canonical name of other aliases; "
                "hint: choose one canonical name per subject"
            )
        self._map[key] = target

    def resolve(self, subject: str) -> str:
        """Returns the canonical key of ``subject``."""
        key = normalise_subject(subject)
        return self._map.get(key, key)

    def __len__(self) -> int:
        return len(self._map)


def canonical_subject(subject: str, aliases: AliasTable | Mapping[str, str] | None = None) -> str:
    """Returns the canonical key of ``subject``: normalised, then resolved through ``aliases``."""
    table = aliases if isinstance(aliases, AliasTable) else AliasTable(aliases)
    return table.resolve(subject)
