"""Every browser-safe module imports with numpy, wgpu and the server stacks blocked.

A module is native-only (or browser-only) when its docstring says so; everything else must
run in Pyodide, where only the standard library exists.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import sys
from pathlib import Path

import evermind
from tests import procs

SRC = Path(evermind.__file__).parent
BLOCKED = [
    "numpy",
    "wgpu",
    "playwright",
    "httpx",
    "starlette",
    "uvicorn",
    "mcp",
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "js",
    "pyodide",
]


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def _modules() -> tuple[list[str], list[str]]:
    safe, host_only = [], []
    for info in pkgutil.walk_packages([str(SRC)], prefix="evermind."):
        rel = info.name.split(".")[1:]
        path = SRC.joinpath(*rel)
        path = path / "__init__.py" if info.ispkg else path.with_suffix(".py")
        doc = _docstring(path).lower()
        (host_only if ("native-only" in doc or "browser-only" in doc) else safe).append(info.name)
    return safe, host_only


def test_browser_safe_modules_import_without_native_packages() -> None:
    safe, host_only = _modules()
    assert "evermind.gpu.base" in safe and "evermind.gpu.native" in host_only
    script = f"""
import importlib, importlib.abc, json, sys
BLOCKED = set({BLOCKED!r})
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked in the browser-safety test: {{name}}")
sys.meta_path.insert(0, Block())
failed = {{}}
for name in {safe!r}:
    try:
        importlib.import_module(name)
    except Exception as err:
        failed[name] = f"{{type(err).__name__}}: {{err}}"
print(json.dumps(failed))
"""
    out = procs.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    failed = json.loads(out.stdout.strip().splitlines()[-1])
    assert not failed, f"browser-safe modules need native packages: {failed}"
