"""docs/architecture.md stays true about the code, mechanically.

Three claims of the map are checked against the tree:

- the layer table names the same rooms, in the same layers and order, as ``LAYERS`` in
  ``tests/unit/test_layers.py`` (the order the import checker enforces), numbered 1, 2, 3, …
  (peers of one layer may take a row each);
- every file or folder the table names (``scheduler.py``, ``gateway/config.py``,
  ``english/data/*.json``, ``vectorstore/shared.py``, ``tests/unit/test_one_search.py``) exists:
  a bare name inside its row's package (or a subfolder of it), a path from ``src/evermind/``
  or from the checkout's root; every ``evermind.x.y`` it names is a module or a name one
  defines;
- the exception tree drawn in ``errors.py``'s docstring is the tree of classes: each drawn
  class exists with the parent it is drawn under, and every subclass of ``EvermindError``
  in the package is drawn.

A moved or renamed module, a new room without a row, or a new error class left out of the
tree fails here with the stale name in the message.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import evermind
from tests.unit.test_layers import LAYERS

SRC = Path(evermind.__file__).parent
ROOT = SRC.parents[1]
DOC = ROOT / "docs" / "architecture.md"

#: A table row: ``| <layer> | <rooms> | <what it owns> |``.
ROW = re.compile(r"^\| (\d+) \| (.+?) \| (.+) \|$")
#: A backticked name that reads as a file or folder: ``x.py``, ``a/b.json``, ``dir/``.
PATHLIKE = re.compile(r"[\w.*-]+(?:/[\w.*-]+)*(?:\.(?:py|json|jsonl|md)|/)")
#: A dotted module reference: ``evermind.search.fusion``.
DOTTED = re.compile(r"evermind(?:\.\w+)+")


def layer_rows(text: str) -> list[tuple[int, list[str], str]]:
    """The layer table's rows: (layer number, rooms as written, the owns cell)."""
    rows = []
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            rooms = re.findall(r"`([^`]+)`", match.group(2))
            rows.append((int(match.group(1)), rooms, match.group(3)))
    return rows


def room_name(written: str) -> str:
    """``cache/`` → ``cache``, ``job.py`` → ``job``."""
    return written.rstrip("/").removesuffix(".py")


def layer_problems(rows: list[tuple[int, list[str], str]], layers: list[set[str]]) -> list[str]:
    """How the table's rooms differ from ``layers`` (empty when they agree)."""
    problems = []
    numbers = [number for number, _, _ in rows]
    # Peers of one layer may take a row each; the numbers run 1, 2, 3, … without a gap.
    if sorted(set(numbers)) != list(range(1, max(numbers, default=0) + 1)) or numbers != sorted(
        numbers
    ):
        problems.append(f"layer numbers are {numbers}; expected 1, 2, 3, … top to bottom")
    table: list[set[str]] = [set() for _ in range(max(numbers, default=0))]
    for number, rooms, _ in rows:
        table[number - 1].update(room_name(room) for room in rooms)
    in_table = set().union(*table) if table else set()
    in_layers = set().union(*layers) if layers else set()
    for room in sorted(in_layers - in_table):
        problems.append(f"{room}: in LAYERS (tests/unit/test_layers.py) but not in the table")
    for room in sorted(in_table - in_layers):
        problems.append(f"{room}: in the table but not in LAYERS (tests/unit/test_layers.py)")
    if not problems and table != layers:
        problems.append(f"the table's layers {table} are not LAYERS' order {layers}")
    for _, rooms, _ in rows:
        for room in rooms:
            if not (SRC / room).exists():
                problems.append(f"{room}: the table's room is not in src/evermind/")
    return problems


def _resolves(name: str, rooms: list[str]) -> bool:
    """Whether a file or folder named in a row exists (globs must match something)."""
    name = name.rstrip("/")
    bases = [SRC / room.rstrip("/") for room in rooms if room.endswith("/")]
    for base in [SRC, ROOT, *bases]:
        if any(base.glob(name)):
            return True
    # A bare or partial path inside the row's package, in a subfolder of it.
    return any(any(base.glob(f"**/{name}")) for base in bases)


def _defined_names(module: Path) -> set[str]:
    """Top-level names a module defines or imports (what ``module.name`` may refer to)."""
    names: set[str] = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _module_file(parts: list[str]) -> Path | None:
    path = SRC.joinpath(*parts[1:])
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _dotted_resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = _module_file(parts[:cut])
        if module is not None:
            rest = parts[cut:]
            return not rest or rest[0] in _defined_names(module)
    return False


def stale_names(rows: list[tuple[int, list[str], str]]) -> list[str]:
    """The files, folders and dotted modules the table names that do not exist."""
    stale = []
    for number, rooms, owns in rows:
        for name in re.findall(r"`([^`]+)`", owns):
            if PATHLIKE.fullmatch(name):
                # A file or folder; a bare non-Python name (``tokenizer.json``) is a format.
                if ("/" in name or name.endswith(".py")) and not _resolves(name, rooms):
                    stale.append(f"layer {number} ({', '.join(rooms)}): {name} does not exist")
                continue
            for dotted in DOTTED.findall(name):
                if not _dotted_resolves(dotted):
                    stale.append(f"layer {number} ({', '.join(rooms)}): {dotted} does not exist")
    return stale


def drawn_tree(docstring: str) -> dict[str, str]:
    """``errors.py``'s drawn tree as class → parent (the root maps to "")."""
    tree: dict[str, str] = {}
    stack: list[str] = []
    for line in docstring.splitlines():
        match = re.match(r"^\s{4}((?:[│ ] {3})*)(?:[├└]── )?([A-Z]\w+)(?:\s|$)", line)
        if not match or (stack == [] and match.group(2) != "EvermindError"):
            continue
        depth = len(match.group(1)) // 4 + (1 if "──" in line else 0)
        del stack[depth:]
        tree[match.group(2)] = stack[-1] if stack else ""
        stack.append(match.group(2))
    return tree


def error_classes() -> dict[str, tuple[str, list[str]]]:
    """Every subclass of ``EvermindError`` in the package: name → (module, base names)."""
    classes: dict[str, list[tuple[str, list[str]]]] = {}
    for path in SRC.rglob("*.py"):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
                classes.setdefault(node.name, []).append((module, bases))
    family = {"EvermindError"}
    grew = True
    while grew:
        grew = False
        for name, defs in classes.items():
            if name not in family and any(family & set(bases) for _, bases in defs):
                family.add(name)
                grew = True
    return {name: classes[name][0] for name in family}


def tree_problems(drawn: dict[str, str], classes: dict[str, tuple[str, list[str]]]) -> list[str]:
    problems = []
    for name, parent in sorted(drawn.items()):
        if name not in classes:
            problems.append(f"{name}: drawn in errors.py's tree but no such error class")
        elif parent and parent not in classes[name][1]:
            problems.append(f"{name}: drawn under {parent}, but its bases are {classes[name][1]}")
    for name, (module, bases) in sorted(classes.items()):
        if name not in drawn:
            problems.append(f"{name} ({module}, bases {bases}): not drawn in errors.py's tree")
    return problems


def test_the_layer_table_is_layers() -> None:
    rows = layer_rows(DOC.read_text(encoding="utf-8"))
    assert len(rows) >= 10, f"no layer table found in {DOC}"
    problems = layer_problems(rows, LAYERS)
    assert not problems, "docs/architecture.md's layer table:\n" + "\n".join(problems)


def test_every_name_in_the_layer_table_exists() -> None:
    stale = stale_names(layer_rows(DOC.read_text(encoding="utf-8")))
    assert not stale, "docs/architecture.md names what is not there:\n" + "\n".join(stale)


def test_the_drawn_exception_tree_is_the_class_tree() -> None:
    import evermind.errors

    drawn = drawn_tree(evermind.errors.__doc__ or "")
    assert drawn.get("EvermindError") == "" and len(drawn) > 20, drawn
    problems = tree_problems(drawn, error_classes())
    assert not problems, "errors.py's docstring tree:\n" + "\n".join(problems)


def test_the_checks_catch_a_stale_map() -> None:
    """A moved module, a missing room and an undrawn error class are all reported."""
    table = (
        "| 1 | `cli/` | the command (`progress.py`) |\n"
        "| 2 | `runtime/` | the runtime (`cache_store.py`, `gateway/core.py`, "
        "`evermind.runtime.auth`, `evermind.search.fusion.convex`) |\n"
        "| 3 | `errors.py` | the tree |"
    )
    rows = layer_rows(table)
    assert stale_names(rows) == [
        "layer 2 (runtime/): cache_store.py does not exist",
        "layer 2 (runtime/): evermind.runtime.auth does not exist",
    ]
    problems = layer_problems(rows, [{"cli"}, {"runtime", "mcp"}, {"errors"}])
    assert problems == ["mcp: in LAYERS (tests/unit/test_layers.py) but not in the table"]
    assert layer_problems(rows, [{"runtime"}, {"cli"}, {"errors"}]) != []
    drawn = drawn_tree(
        "    EvermindError\n    ├── ConfigError      bad\n    │   └── InputError   wrong\n"
        "    └── PushError        refused\n"
    )
    assert drawn == {
        "EvermindError": "",
        "ConfigError": "EvermindError",
        "InputError": "ConfigError",
        "PushError": "EvermindError",
    }
    found = tree_problems(drawn, error_classes())
    assert "InputError: drawn under ConfigError, but its bases are" in found[0]
    assert any(p.startswith("ApiError (evermind.runtime.errors") for p in found)
