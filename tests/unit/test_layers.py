"""The import graph of ``evermind`` has no circles and no import from a lower layer to a higher one.

Every import counts: module level, function-local and ``TYPE_CHECKING`` alike, since each is
a dependency a reader has to know about. The layer order below is the map of
docs/architecture.md; a new top-level module or package must be given a layer here.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import evermind

SRC = Path(evermind.__file__).parent

# Top to bottom. A module may import its own package and any package of a LOWER layer.
# Packages on the same layer are peers and never import each other.
LAYERS: list[set[str]] = [
    {"cli"},
    {"runtime", "mcp", "studio"},
    {"agent", "retrieval", "evaluation"},
    {"job", "bridges", "ingest"},
    {"memory", "cache"},
    {"vectorstore"},
    # The one home of search maths: below every package that ranks (memory, cache,
    # retrieval, vectorstore's in-process engine, runtime, studio); it reads kernels (the
    # GPU top-k) and the leaves.
    {"search"},
    # The base embedder (WordPiece + a static token table distilled from a teacher): above
    # train, whose teacher its build runs; below every package that embeds.
    {"embedder"},
    {"train"},
    {"model"},
    {"kernels"},
    {"ops", "gpu", "tokenizer", "package"},
    {"auth"},
    {"paths", "metrics", "text", "types", "tokens", "telemetry", "safefiles"},
    {"errors"},
]
LEVEL = {room: level for level, rooms in enumerate(LAYERS) for room in rooms}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _targets(path: Path, module: str) -> set[str]:
    """The ``evermind`` modules one file imports (anywhere in it), as dotted names."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "evermind")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] == "evermind":
                found.add(target)
                # `from evermind.x import y` may name a submodule y.
                found.update(f"{target}.{a.name}" for a in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        edges = set()
        for target in _targets(path, module):
            while target not in files and "." in target:
                target = target.rpartition(".")[0]  # a name inside a module: the module
            if target in files and target != module:
                edges.add(target)
        graph[module] = edges
    return graph


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_package_has_a_layer() -> None:
    rooms = {_room(m) for m in _graph()} - {""}
    missing = sorted(rooms - LEVEL.keys())
    assert not missing, (
        f"give these packages a layer in LAYERS (tests/unit/test_layers.py): {missing}"
    )


def test_no_import_goes_up_or_sideways() -> None:
    bad = []
    for module, targets in sorted(_graph().items()):
        here = _room(module)
        for target in sorted(targets):
            there = _room(target)
            if not there or here == there or not here:
                continue  # the root facade (`import evermind`) and imports inside a package
            if here not in LEVEL or there not in LEVEL:
                continue  # test_every_package_has_a_layer names it
            if LEVEL[there] <= LEVEL[here]:
                kind = "sideways (peer)" if LEVEL[there] == LEVEL[here] else "up"
                bad.append(
                    f"{module} -> {target}  ({kind}: {here} is layer {LEVEL[here]}, "
                    f"{there} is layer {LEVEL[there]})"
                )
    print("\n".join(bad))
    assert not bad, f"{len(bad)} imports break the layer order:\n" + "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_circles() -> None:
    graph = _graph()
    # A package's __init__ re-exporting its modules is not a circle of ideas: leave the
    # package-to-its-own-__init__ edges out, keep everything else.
    pruned = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in graph.items()}
    circles = _cycles(pruned)
    assert not circles, "import circles:\n" + "\n".join(" ⇄ ".join(c) for c in circles)


def test_the_checker_sees_a_violation() -> None:
    """The graph code itself: a planted upward edge and a planted circle are found."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = _graph()
    assert "evermind.errors" in graph and graph, "the source tree was not read"
    edges = defaultdict(set, {k: set(v) for k, v in graph.items()})
    assert any(_room(t) == "errors" for t in edges.get("evermind.model.config", set()))
