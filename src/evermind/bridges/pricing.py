"""What a call cost: a versioned price table, read from a data file (browser-safe).

The table ships as ``evermind/bridges/data/prices.json``::

    {"version": "2026-12-01", "models": {"claude-sonnet-4-5": {"input": 3.0, "output": 15.0,
     "cache_read": 0.3, "cache_write": 3.75}, "gpt-4.1": {...}, ...}}

in US dollars per million tokens, with where and when the figures were taken in its
``source``. A deployment overrides or extends it with its own file of the same shape (the
``EVERMIND_PRICES`` environment variable, or ``PriceTable.load(path)``): its models replace
the shipped ones of the same name, its ``version`` names the result.

:meth:`PriceTable.price` prices a :class:`~evermind.bridges.base.Usage` at four rates:
uncached input, output, cache reads and cache writes. That is Anthropic's three-way input
split (``input_tokens``, ``cache_read_input_tokens``, ``cache_creation_input_tokens``) at
three rates, and OpenAI's cached input (``cached_tokens``) at its cached rate. A model the
table does not know prices to None, never to a guess; names are matched exactly, after
dropping a ``provider/`` prefix, a date suffix (``-20250929``, ``-2024-07-18``) or ``-latest``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from evermind.bridges.base import Usage
from evermind.errors import ConfigError

#: The environment variable naming a deployment's price file.
ENV = "EVERMIND_PRICES"
RATES = ("input", "output", "cache_read", "cache_write")
_SUFFIX = re.compile(r"(-\d{8}|-\d{4}-\d{2}-\d{2}|-latest)$")


@dataclass(frozen=True)
class Rates:
    """US dollars per million tokens of each kind."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    def price(self, usage: Usage) -> float:
        """The dollars ``usage`` costs at these rates."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
        ) / 1_000_000


class PriceTable:
    """Rates per model, and the version of the table they came from."""

    def __init__(self, models: Mapping[str, Rates], version: str) -> None:
        self.models = dict(models)
        self.version = version

    @classmethod
    def load(cls, path: str | Path | None = None) -> PriceTable:
        """The shipped table, overridden by ``path`` (or the file ``EVERMIND_PRICES`` names).

        Raises:
            ConfigError: The override file is missing or not a price table.
        """
        shipped = files("evermind.bridges") / "data" / "prices.json"
        table = cls.parse(json.loads(shipped.read_text(encoding="utf-8")), "prices.json")
        override = path if path is not None else os.environ.get(ENV) or None
        if override is None:
            return table
        try:
            raw = json.loads(Path(override).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise ConfigError(
                f"price table {str(override)!r} cannot be read: {err}; hint: a JSON file "
                '{"version": ..., "models": {name: {"input", "output", "cache_read", '
                '"cache_write"}}}'
            ) from err
        extra = cls.parse(raw, str(override))
        return cls({**table.models, **extra.models}, extra.version)

    @classmethod
    def parse(cls, raw: Any, where: str = "price table") -> PriceTable:
        """A table from its JSON (``{"version", "models"}``), every rate checked.

        Raises:
            ConfigError: A field is missing, or a rate is not a number >= 0.
        """
        if not isinstance(raw, dict) or not isinstance(raw.get("models"), dict):
            raise ConfigError(f"{where}: expected an object with 'version' and 'models'")
        models = {}
        for name, rates in raw["models"].items():
            if not isinstance(rates, dict):
                raise ConfigError(f"{where}: models[{name!r}] must be an object of rates")
            values = []
            for rate in RATES:
                value = rates.get(rate)
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise ConfigError(
                        f"{where}: models[{name!r}].{rate} must be a number >= 0 "
                        f"(dollars per million tokens), got {value!r}"
                    )
                values.append(float(value))
            models[str(name)] = Rates(*values)
        return cls(models, str(raw.get("version", "")))

    def rates(self, model: str) -> Rates | None:
        """The rates of ``model`` (None: not in the table)."""
        name = model.split("/", 1)[1] if "/" in model else model
        return self.models.get(name) or self.models.get(_SUFFIX.sub("", name))

    def price(self, model: str, usage: Usage) -> float | None:
        """Dollars ``usage`` cost on ``model``; None when the table does not know the model."""
        rates = self.rates(model)
        return None if rates is None else rates.price(usage)
