"""A gate file: the graders and the gates of a launch check, in TOML.

::

    [graders]
    exact = true                  # Exact(): the answer equals the case's "answer" label
    contains = true               # Contains(): the answer holds the case's "contains" strings
    regex = "^\\d+$"              # Regex(pattern=...); true: each case's "pattern" label

    [gates]
    min_pass_rate = 0.9           # MinPassRate
    grader_minimum = {exact = 0.8}    # GraderMinimum, per grader named in [graders]
    max_mean_cost_usd = 0.002     # MaxMeanCost
    max_p95_latency_ms = 1500     # MaxP95Latency
    max_mean_latency_ms = 800     # MaxMeanLatency

Validation is strict, so a typo cannot switch a gate off: an unknown table or key, a value
of the wrong type, a number out of range or a ``grader_minimum`` for a grader the file does
not enable is an :class:`~evermind.errors.InputError` whose one line names the file and the
key. A file with no gate at all loads (its check is vacuous and fails:
:func:`~evermind.evaluation.gates.check_gates` with no gates is not passed).
Browser-safe: standard library only.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evermind.errors import ConfigError, InputError
from evermind.evaluation.gates import (
    Gate,
    GraderMinimum,
    MaxMeanCost,
    MaxMeanLatency,
    MaxP95Latency,
    MinPassRate,
)
from evermind.evaluation.graders import Contains, Exact, Grader, Regex

__all__ = ["GateFile", "load_gate_file", "parse_gate_file"]

#: The number gates: key → the gate it builds.
NUMBER_GATES: dict[str, Callable[[float], Gate]] = {
    "min_pass_rate": MinPassRate,
    "max_mean_cost_usd": MaxMeanCost,
    "max_p95_latency_ms": MaxP95Latency,
    "max_mean_latency_ms": MaxMeanLatency,
}
GRADER_KEYS = ("exact", "contains", "regex")
TABLES = ("graders", "gates")


@dataclass(frozen=True)
class GateFile:
    """What a gate file asks for.

    Attributes:
        graders: The graders to run, in the file's order.
        gates: The gates to check (empty: the check is vacuous and fails).
    """

    graders: tuple[Grader, ...]
    gates: tuple[Gate, ...]


def _type_name(value: object) -> str:
    return {bool: "a boolean", str: "a string", int: "an integer", float: "a number"}.get(
        type(value), f"a {type(value).__name__}"
    )


def _number(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where} must be a number, got {_type_name(value)} ({value!r})")
    return float(value)


def _table(where: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"{where} must be a table, got {_type_name(value)} ({value!r})")
    return value


def _unknown(where: str, table: dict[str, Any], known: tuple[str, ...]) -> None:
    for key in table:
        if key not in known:
            raise InputError(f"{where}: unknown key {key!r}; expected one of {', '.join(known)}")


def _graders(source: str, table: dict[str, Any]) -> dict[str, Grader]:
    _unknown(f"{source}: [graders]", table, GRADER_KEYS)
    graders: dict[str, Grader] = {}
    for key, value in table.items():
        where = f"{source}: [graders] {key}"
        if key == "regex" and isinstance(value, str):
            try:
                graders[key] = Regex(pattern=value)
            except ConfigError as err:
                raise InputError(f"{where}: {err}") from err
            continue
        if not isinstance(value, bool):
            wanted = "true, false or a pattern" if key == "regex" else "true or false"
            raise InputError(f"{where} must be {wanted}, got {_type_name(value)} ({value!r})")
        if value:
            graders[key] = {"exact": Exact, "contains": Contains, "regex": Regex}[key]()
    return graders


def _gates(source: str, table: dict[str, Any], graders: dict[str, Grader]) -> list[Gate]:
    _unknown(f"{source}: [gates]", table, (*NUMBER_GATES, "grader_minimum"))
    gates: list[Gate] = []
    for key, value in table.items():
        where = f"{source}: [gates] {key}"
        try:
            if key != "grader_minimum":
                gates.append(NUMBER_GATES[key](_number(where, value)))
                continue
            minimums = _table(where, value)
            _unknown(where, minimums, GRADER_KEYS)
            for name, minimum in minimums.items():
                if name not in graders:
                    raise InputError(
                        f"{where}.{name}: [graders] does not enable {name!r}; "
                        f"enabled: {', '.join(graders) or 'none'}"
                    )
                gates.append(GraderMinimum(graders[name].name, _number(f"{where}.{name}", minimum)))
        except ConfigError as err:
            raise InputError(f"{where}: {err}") from err
    return gates


def parse_gate_file(text: str, source: str = "gates.toml") -> GateFile:
    """The graders and gates ``text`` (TOML) asks for; ``source`` names it in errors.

    Raises:
        InputError: Not TOML, an unknown table or key, a wrong type or a value out of range.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{source}: not TOML ({err})") from err
    _unknown(source, data, TABLES)
    graders = _graders(source, _table(f"{source}: [graders]", data.get("graders", {})))
    gates = _gates(source, _table(f"{source}: [gates]", data.get("gates", {})), graders)
    return GateFile(tuple(graders.values()), tuple(gates))


def load_gate_file(path: Path) -> GateFile:
    """:func:`parse_gate_file` of the UTF-8 file at ``path``."""
    return parse_gate_file(path.read_text(encoding="utf-8"), str(path))
