"""Tools for the prebuilt agents: any Python function as a tool, and Evermind's own.

Browser-safe (standard library and ``evermind`` only).

- :func:`tool` turns a function (sync or async) into a :class:`Tool`: its name, its
  docstring's first paragraph as the description, a JSON Schema of its parameters from the
  type hints (``str``, ``int``, ``float``, ``bool``, ``list[T]``, ``dict[str, T]``,
  ``Literal[...]``, ``T | None``; a default makes a parameter optional) with each parameter's
  description from the docstring's ``Args:`` section. A signature it cannot express
  (``*args``, ``**kwargs``, a positional-only or unannotated parameter, another type) is a
  ``ConfigError`` naming the parameter.
- :meth:`Tool.spec` is the neutral tool shape of ``ChatRequest.tools``; each bridge maps it
  to its own wire format (Anthropic ``tools``, OpenAI ``{"type": "function"}``).
- :func:`run_calls` runs one turn's tool calls concurrently. A call's arguments are checked
  against the schema first; a bad argument, an unknown tool or an exception in the tool
  becomes an error *result* the model reads (``error: ...``), never a crash of the run.
- Evermind's own tools are in :mod:`~evermind.agent.prebuilt.memory_tools`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evermind.agent.graph.errors import GraphInterrupt
from evermind.errors import ConfigError, InputError

#: The longest tool result the model is shown (longer results are cut, with a note).
MAX_RESULT_CHARS = 16_000
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True)
class Tool:
    """A function a model may call.

    Attributes:
        name: What the model calls it (letters, digits, ``_`` and ``-``; at most 64).
        description: What it does and when to call it (the model reads this).
        input_schema: The JSON Schema of its arguments (an object).
        fn: Called with the arguments as keywords; sync (run in a worker thread) or async.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    fn: Callable[..., Any] = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(
                f"tool name {self.name!r} must be 1-64 letters, digits, '_' or '-' "
                "(what both Anthropic and OpenAI accept)"
            )
        if self.input_schema.get("type") != "object":
            raise ConfigError(f"tool {self.name!r}: input_schema must be a JSON Schema object")

    @property
    def spec(self) -> dict[str, Any]:
        """The neutral shape ``ChatRequest.tools`` carries."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }

    async def run(self, arguments: Mapping[str, Any]) -> str:
        """Checks ``arguments`` against the schema, calls the function, and returns its
        result as text (a string as it is, None as ``done``, anything else as JSON).

        Raises:
            InputError: An argument does not fit the schema (the message names it).
            Exception: Whatever the function raised.
        """
        checked = check_arguments(self.name, self.input_schema, arguments)
        if inspect.iscoroutinefunction(self.fn):
            result = await self.fn(**checked)
        else:
            result = await asyncio.to_thread(self.fn, **checked)
            if inspect.isawaitable(result):
                result = await result
        return as_text(result)


@dataclass(frozen=True)
class ToolResult:
    """What one call produced: its text, and whether it is an error."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Any:
    """Makes a :class:`Tool` of ``fn``; usable as ``tool(fn)``, ``@tool`` or ``@tool(name=...)``.

    Args:
        fn: A function with annotated parameters (see the module docstring).
        name: The tool's name (default: the function's).
        description: What it does (default: the docstring's first paragraph).

    Raises:
        ConfigError: A signature or type the schema cannot express, or no description.
    """
    if fn is None:
        return lambda f: make_tool(f, name=name, description=description)
    return make_tool(fn, name=name, description=description)


def make_tool(
    fn: Tool | Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> Tool:
    """:func:`tool` without the decorator forms."""
    if isinstance(fn, Tool):
        return fn
    if not callable(fn):
        raise ConfigError(f"tool: expected a function, got {type(fn).__name__}")
    label = name or str(getattr(fn, "__name__", ""))
    summary, arg_docs = _docstring(inspect.getdoc(fn) or "")
    text = description if description is not None else summary
    if not text:
        raise ConfigError(
            f"tool {label!r} has no description: give the function a docstring (the model "
            "reads it to decide when to call the tool) or pass description="
        )
    return Tool(label, text, schema_of(fn, arg_docs), fn)


def schema_of(fn: Callable[..., Any], arg_docs: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The JSON Schema (an object) of ``fn``'s parameters.

    Raises:
        ConfigError: A parameter the schema cannot express, named.
    """
    label = getattr(fn, "__name__", repr(fn))
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (TypeError, ValueError, NameError) as err:
        raise ConfigError(f"tool {label!r}: its signature cannot be read ({err})") from err
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in signature.parameters.values():
        where = f"tool {label!r}: parameter {param.name!r}"
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise ConfigError(
                f"{where} is {param.kind.description}; a tool takes named arguments only "
                "(no *args, **kwargs or positional-only parameters)"
            )
        if param.name not in hints:
            raise ConfigError(f"{where} has no type annotation; annotate it (str, int, ...)")
        prop = _json_type(hints[param.name], where)
        if arg_docs and param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        else:
            try:
                json.dumps(param.default)
            except (TypeError, ValueError) as err:
                raise ConfigError(f"{where}: its default is not JSON ({err})") from err
            prop["default"] = param.default
        properties[param.name] = prop
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return schema


def _json_type(hint: Any, where: str) -> dict[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        inner = _json_type(args[0], where)
        notes = [a for a in args[1:] if isinstance(a, str)]
        return {**inner, "description": notes[0]} if notes else inner
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if origin is typing.Literal:
        kinds = {type(a) for a in args}
        if not kinds <= set(_SCALARS):
            raise ConfigError(f"{where}: a Literal of strings, numbers or booleans only")
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        if len(kept) == 1 and len(args) == 2:
            inner = _json_type(kept[0], where)
            if "type" in inner:
                return {**inner, "type": [inner["type"], "null"]}
            return {"anyOf": [inner, {"type": "null"}]}
        raise ConfigError(f"{where}: a union other than `T | None` ({hint}) is not supported")
    if hint is list or origin is list:
        return {"type": "array", "items": _json_type(args[0], where)} if args else {"type": "array"}
    if hint is dict or origin is dict:
        if args and args[0] is not str:
            raise ConfigError(f"{where}: dict keys must be str in JSON, got {args[0]}")
        if args:
            return {"type": "object", "additionalProperties": _json_type(args[1], where)}
        return {"type": "object"}
    if hint is Any:
        return {}
    raise ConfigError(
        f"{where} has the type {getattr(hint, '__name__', hint)}, which a tool schema cannot "
        "express; use str, int, float, bool, list[...], dict[str, ...], Literal[...] or T | None"
    )


def _docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(the first paragraph, ``{parameter: description}`` from a Google-style ``Args:``)."""
    summary = " ".join(doc.split("\n\n", 1)[0].split())
    args: dict[str, str] = {}
    lines = doc.splitlines()
    heads = [i for i, line in enumerate(lines) if line.strip() in ("Args:", "Arguments:")]
    if not heads:
        return summary, args
    indent, current = -1, ""
    for line in lines[heads[0] + 1 :]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent < 0:
            indent = depth
        if depth < indent or depth == 0:
            break  # the next section
        found = re.match(r"^(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line.strip())
        if depth == indent and found:
            current = found.group(1)
            args[current] = found.group(2).strip()
        elif current:
            args[current] = f"{args[current]} {line.strip()}".strip()
    return summary, args


def check_arguments(name: str, schema: Mapping[str, Any], arguments: Any) -> dict[str, Any]:
    """``arguments`` checked against ``schema`` (the subset :func:`schema_of` writes: types,
    ``enum``, ``items``, ``required``, ``additionalProperties``), defaults filled in.

    Raises:
        InputError: One line naming the tool and the argument that does not fit.
    """
    if not isinstance(arguments, Mapping):
        raise InputError(f"tool {name!r}: arguments must be a JSON object, got {arguments!r}")
    properties = schema.get("properties") or {}
    missing = [k for k in schema.get("required") or () if k not in arguments]
    if missing:
        raise InputError(f"tool {name!r}: missing required argument {missing[0]!r}")
    if schema.get("additionalProperties") is False:
        extra = [k for k in arguments if k not in properties]
        if extra:
            raise InputError(
                f"tool {name!r}: unknown argument {extra[0]!r}; it takes "
                f"{', '.join(map(repr, properties)) or 'no arguments'}"
            )
    checked = dict(arguments)
    for key, prop in properties.items():
        if key in checked:
            _check_value(f"tool {name!r}: argument {key!r}", prop, checked[key])
        elif "default" in prop:
            checked[key] = prop["default"]
    return checked


_PY_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _check_value(where: str, prop: Mapping[str, Any], value: Any) -> None:
    if "enum" in prop and value not in prop["enum"]:
        raise InputError(f"{where} must be one of {prop['enum']}, got {value!r}")
    if "anyOf" in prop:
        for option in prop["anyOf"]:
            try:
                _check_value(where, option, value)
                return
            except InputError:
                continue
        raise InputError(f"{where} fits none of its allowed shapes, got {value!r}")
    kinds = prop.get("type")
    if kinds is not None:
        allowed = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_PY_TYPES.get(k, lambda v: True)(value) for k in allowed):
            raise InputError(
                f"{where} must be {' or '.join(allowed)}, got {type(value).__name__} {value!r}"
            )
    if isinstance(value, list) and isinstance(prop.get("items"), Mapping):
        for i, item in enumerate(value):
            _check_value(f"{where}[{i}]", prop["items"], item)
    extra = prop.get("additionalProperties")
    if isinstance(value, dict) and isinstance(extra, Mapping):
        for key, item in value.items():
            _check_value(f"{where}[{key!r}]", extra, item)


def as_text(result: Any, limit: int = MAX_RESULT_CHARS) -> str:
    """A tool's return value as the text the model reads, cut to ``limit`` characters."""
    if result is None:
        text = "done"
    elif isinstance(result, str):
        text = result
    else:
        try:
            text = json.dumps(result, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = str(result)
    if len(text) > limit:
        text = f"{text[:limit]}… [cut: {len(text) - limit} more characters]"
    return text


async def run_call(
    tools: Mapping[str, Tool], call_id: str, name: str, arguments: Any
) -> ToolResult:
    """One tool call; every failure becomes an error result the model reads."""
    found = tools.get(name)
    if found is None:
        known = ", ".join(sorted(tools)) or "none"
        return ToolResult(call_id, name, f"error: no tool named {name!r}; tools: {known}", True)
    try:
        return ToolResult(call_id, name, await found.run(arguments))
    except GraphInterrupt:
        raise  # the tool asks a human (interrupt()): the run stops, resume answers it
    except InputError as err:
        return ToolResult(call_id, name, f"error: {err}", True)
    except Exception as err:  # the tool's own failure is the model's to read, not a crash
        return ToolResult(
            call_id, name, f"error: tool {name!r} failed: {type(err).__name__}: {err}", True
        )


async def run_calls(
    tools: Mapping[str, Tool], calls: Sequence[tuple[str, str, Any]]
) -> list[ToolResult]:
    """The calls ``(id, name, arguments)`` of one turn, run concurrently, results in order."""
    return list(await asyncio.gather(*(run_call(tools, *call) for call in calls)))


def as_tools(items: Sequence[Tool | Callable[..., Any]]) -> dict[str, Tool]:
    """Tools by name (plain functions made tools with :func:`tool`).

    Raises:
        ConfigError: Two tools with one name, or a function :func:`tool` refuses.
    """
    found: dict[str, Tool] = {}
    for item in items:
        made = make_tool(item)
        if made.name in found:
            raise ConfigError(f"two tools are named {made.name!r}; rename one (tool(fn, name=))")
        found[made.name] = made
    return found
