"""Skills compiled from recorded episodes: parameters, secrets and approvals (pure logic).

Owns the value-level rules of the experience store (``evermind.memory.experience``):

- :func:`redact_args`: a step's arguments with every secret (``evermind.memory.sanitize``'s
  detector) replaced by a marker ``{"$secret": "<name>"}``, so an episode never stores one;
- :func:`compile_skill`: an episode's steps turned into a reusable skill: every typed literal
  (string, integer, number, boolean) in the arguments becomes a named parameter with its type
  and the recorded value as its default; a secret marker becomes a *required* parameter with
  no default (the value was never stored); the same value under the same name in several
  steps is one parameter; steps keep their ``irreversible`` mark;
- :func:`bind_parameters`: a caller's values checked against a skill's parameters (unknown
  name, wrong type, missing required value) and :func:`resolve_steps`, the plan of a run.

Browser-safe: standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evermind.errors import InputError
from evermind.memory.sanitize import is_secret, redact_secrets

#: The marker a secret value is stored as: ``{SECRET_MARK: "<parameter name>"}``.
SECRET_MARK = "$secret"
#: The placeholder of a parameter in a skill's step arguments: ``{PARAM_MARK: "<name>"}``.
PARAM_MARK = "$param"
#: How a secret parameter's value is shown in a run's plan and audit trail.
SECRET_SHOWN = "***"
TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}
_NAME = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class Step:
    """One step of an episode or a run.

    Attributes:
        action: What was done (a tool or command name), e.g. ``"http.post"``.
        args: Its arguments (JSON values; secrets already replaced by markers).
        result: What came back, in words (secrets masked).
        irreversible: The step cannot be undone (a payment, a deletion, a sent e-mail).
    """

    action: str
    args: dict[str, Any] = field(default_factory=dict)
    result: str = ""
    irreversible: bool = False


@dataclass(frozen=True)
class Parameter:
    """A skill's parameter.

    Attributes:
        name: The name a run passes its value under.
        type: ``string``, ``integer``, ``number``, ``boolean`` or ``secret``.
        default: The recorded value (None for a secret: it was never stored).
        required: A run must pass a value (true for every secret).
        steps: The (1-based) steps whose arguments use it.
    """

    name: str
    type: str
    default: Any = None
    required: bool = False
    steps: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "default": self.default,
            "required": self.required,
            "steps": list(self.steps),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Parameter:
        return cls(
            str(data["name"]),
            str(data["type"]),
            data.get("default"),
            bool(data.get("required")),
            tuple(int(s) for s in data.get("steps", ())),
        )


@dataclass(frozen=True)
class CompiledSkill:
    """What :func:`compile_skill` makes of an episode: parameters and step templates."""

    parameters: tuple[Parameter, ...]
    steps: tuple[Step, ...]

    @property
    def irreversible_steps(self) -> list[int]:
        """The 1-based numbers of the steps that need approval at run time."""
        return [n for n, step in enumerate(self.steps, start=1) if step.irreversible]


def _slug(text: str) -> str:
    return _NAME.sub("_", text.lower()).strip("_") or "value"


def redact_args(value: Any, path: str = "") -> tuple[Any, int]:
    """``value`` with every secret replaced by a ``{"$secret": name}`` marker.

    A field is secret when :func:`evermind.memory.sanitize.is_secret` says so for its value
    under its name (nested fields are named ``parent_child``).

    Returns:
        ``(redacted value, how many secrets were replaced)``.

    Raises:
        InputError: A value is not JSON (a dict key that is not a string, an object).
    """
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        total = 0
        for key, item in value.items():
            if not isinstance(key, str):
                raise InputError(
                    f"step args: expected string keys, got {key!r}; hint: pass a JSON object"
                )
            if isinstance(item, Mapping) and set(item) == {SECRET_MARK}:
                out[key], total = dict(item), total + 1
                continue
            name = f"{path}_{_slug(key)}" if path else _slug(key)
            if isinstance(item, (str, int, float)) and is_secret(item, key):
                out[key], total = {SECRET_MARK: name}, total + 1
                continue
            out[key], found = redact_args(item, name)
            total += found
        return out, total
    if isinstance(value, (list, tuple)):
        items, total = [], 0
        for index, item in enumerate(value):
            name = f"{path or 'item'}_{index}"
            if isinstance(item, str) and is_secret(item):
                items.append({SECRET_MARK: name})
                total += 1
                continue
            redacted, found = redact_args(item, name)
            items.append(redacted)
            total += found
        return items, total
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, str) and is_secret(value):
            return {SECRET_MARK: path or "secret"}, 1
        return value, 0
    raise InputError(
        f"step args: expected JSON values, got a {type(value).__name__}; hint: pass strings, "
        "numbers, booleans, lists and objects only"
    )


def redact_text(text: str) -> str:
    """``text`` (a step's result, a note) with every secret masked as ``***``."""
    return redact_secrets(text, SECRET_SHOWN)[0]


def compile_skill(steps: Sequence[Step]) -> CompiledSkill:
    """Turns an episode's steps into parameters and step templates (see the module docstring).

    Raises:
        InputError: The episode has no steps.
    """
    if not steps:
        raise InputError("skill: the episode has no steps; hint: record at least one step")
    params: dict[str, dict[str, Any]] = {}
    by_value: dict[tuple[str, str, str], str] = {}

    def name_for(base: str, kind: str, value: Any, step_no: int) -> str:
        key = (base, kind, repr(value))
        if kind != "secret" and key in by_value:  # the same value again: one parameter
            name = by_value[key]
        elif kind == "secret" and base in params and params[base]["type"] == "secret":
            name = base  # one secret used by several steps is passed once
        else:
            name, n = base, 2
            while name in params:
                name, n = f"{base}_{n}", n + 1
            by_value[key] = name
            params[name] = {"type": kind, "default": value, "steps": []}
        if step_no not in params[name]["steps"]:
            params[name]["steps"].append(step_no)
        return name

    def template(value: Any, path: str, step_no: int) -> Any:
        if isinstance(value, Mapping):
            if set(value) == {SECRET_MARK}:
                base = _slug(str(value[SECRET_MARK]))
                return {PARAM_MARK: name_for(base, "secret", None, step_no)}
            return {
                k: template(v, f"{path}_{_slug(k)}" if path else _slug(k), step_no)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [template(v, f"{path or 'item'}_{i}", step_no) for i, v in enumerate(value)]
        if value is None:
            return None
        return {PARAM_MARK: name_for(path or "value", TYPES[type(value)], value, step_no)}

    templates = tuple(
        Step(s.action, template(s.args, "", n), "", s.irreversible)
        for n, s in enumerate(steps, start=1)
    )
    parameters = tuple(
        Parameter(
            name,
            spec["type"],
            spec["default"],
            required=spec["type"] == "secret",
            steps=tuple(spec["steps"]),
        )
        for name, spec in params.items()
    )
    return CompiledSkill(parameters, templates)


def _type_ok(kind: str, value: Any) -> bool:
    if kind in ("string", "secret"):
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return False


def bind_parameters(
    parameters: Sequence[Parameter], given: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The value of every parameter: ``given`` checked, defaults filled in.

    Raises:
        InputError: A name is unknown, a value has the wrong type, or a required parameter
            (every secret) has no value.
    """
    given = dict(given or {})
    known = {p.name: p for p in parameters}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise InputError(
            f"skill parameters: unknown {', '.join(map(repr, unknown))}; expected some of "
            f"{', '.join(map(repr, known)) or 'none'}; hint: skill_get lists them"
        )
    bound: dict[str, Any] = {}
    missing = []
    for param in parameters:
        if param.name not in given:
            if param.required:
                missing.append(param.name)
            else:
                bound[param.name] = param.default
            continue
        value = given[param.name]
        if not _type_ok(param.type, value):
            raise InputError(
                f"skill parameter {param.name!r}: expected type {param.type}, got "
                f"{type(value).__name__} {value!r:.40}; hint: pass a JSON {param.type}"
            )
        bound[param.name] = value
    if missing:
        raise InputError(
            f"skill parameters: missing required {', '.join(map(repr, missing))} (secrets are "
            "never stored, so a run must pass them); hint: add them to params"
        )
    return bound


def resolve_steps(
    steps: Sequence[Step], parameters: Sequence[Parameter], bound: Mapping[str, Any]
) -> list[Step]:
    """The run's plan: each template with its parameters' values, secrets shown as ``***``."""
    secret = {p.name for p in parameters if p.type == "secret"}

    def fill(value: Any) -> Any:
        if isinstance(value, Mapping):
            if set(value) == {PARAM_MARK}:
                name = str(value[PARAM_MARK])
                return SECRET_SHOWN if name in secret else bound[name]
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    return [Step(s.action, fill(s.args), "", s.irreversible) for s in steps]


__all__ = [
    "PARAM_MARK",
    "SECRET_MARK",
    "SECRET_SHOWN",
    "CompiledSkill",
    "Parameter",
    "Step",
    "bind_parameters",
    "compile_skill",
    "redact_args",
    "redact_text",
    "resolve_steps",
]
