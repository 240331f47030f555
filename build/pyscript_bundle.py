"""The bundle's PyScript parts: the vendored ``@pyscript/core`` and a PEP 503 index of our wheel.

Used by ``build_web.py`` (the bundle build only). What a PyScript page of the bundle needs,
all served from the bundle itself:

- PyScript from the npm package ``@pyscript/core`` (pinned in package-lock.json): its
  ``dist/`` files, without source maps, under ``vendor/pyscript/<hash>/``. Its release is
  paired with the bundled Pyodide's major version (PyScript 0.7.31 defaults to Pyodide 314.0.2;
  the bundle's 314.x is ABI-compatible), and a page points PyScript's ``interpreter`` at the
  bundle's ``pyodide.mjs`` so nothing is fetched from a CDN.
- A PEP 503 "simple" index: ``simple/index.html`` and ``simple/<normalized-name>/index.html``
  linking to the wheel (``#sha256=`` fragment, ``data-requires-python``), so micropip (or
  PyScript's ``packages`` with ``index_urls``) resolves ``evermind-memory`` from our own files
  and checks the download's hash.
- The example pages under ``examples/`` name those content-hash folders through
  placeholders (``{{pyscript_dir}}``, ``{{pyodide_dir}}``) that the build fills in.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
import zipfile
from email.parser import HeaderParser
from pathlib import Path

#: Where npm puts PyScript, relative to the checkout.
PYSCRIPT_NPM = Path("node_modules") / "@pyscript" / "core"


def pyscript_inputs(root: Path) -> list[Path]:
    """The npm files the PyScript folder is made of (for the build's input digest)."""
    package = root / PYSCRIPT_NPM
    return [package / "package.json", *_dist_files(package)]


def _dist_files(package: Path) -> list[Path]:
    # Source maps are for devtools only (a browser fetches them only with devtools open).
    return sorted(
        p for p in (package / "dist").glob("*") if p.is_file() and not p.name.endswith(".map")
    )


def pyscript_version(root: Path) -> str:
    """The vendored ``@pyscript/core`` version (from its package.json)."""
    return str(json.loads((root / PYSCRIPT_NPM / "package.json").read_text())["version"])


#: How PyScript's build names its default Pyodide (the jsDelivr URL a page without
#: ``interpreter`` would load; our pages always name the bundle's own): a default parameter
#: holding the version, ``(e="314.0.2")=>``, then the URL (the pattern below).
_DEFAULT_PYODIDE = re.compile(
    r'\(\w+="(\d+)\.(\d+)\.(\d+)"\)=>`https://cdn\.jsdelivr\.net/pyodide/'
)


def default_pyodide(root: Path) -> str:
    """The Pyodide version the vendored PyScript release is built for.

    Raises:
        ValueError: No such version is found in PyScript's files.
    """
    for path in _dist_files(root / PYSCRIPT_NPM):
        if path.suffix == ".js" and (match := _DEFAULT_PYODIDE.search(path.read_text())):
            return ".".join(match.groups())
    raise ValueError(f"no default Pyodide version found in {PYSCRIPT_NPM}/dist")


def vendor_pyscript(root: Path, target: Path, pyodide_version: str) -> None:
    """Copies PyScript's ``dist/`` files (no source maps) into ``target`` (created).

    Raises:
        ValueError: The PyScript release is built for another Pyodide major version than
            ``pyodide_version`` (the bundled one): its Python layer would not match.
    """
    wanted = default_pyodide(root)
    if wanted.split(".")[0] != pyodide_version.split(".")[0]:
        raise ValueError(
            f"@pyscript/core {pyscript_version(root)} is built for Pyodide {wanted}, but the "
            f"bundle has Pyodide {pyodide_version}; pin a PyScript release for the same major"
        )
    target.mkdir(parents=True)
    for path in _dist_files(root / PYSCRIPT_NPM):
        shutil.copy2(path, target / path.name)


def normalized_name(name: str) -> str:
    """A project name as PEP 503 normalizes it (``Evermind_Memory`` -> ``evermind-memory``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _wheel_metadata(wheel: Path) -> tuple[str, str | None]:
    """(project name, Requires-Python or None) read from the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise ValueError(f"{wheel.name}: expected one .dist-info/METADATA, found {names}")
        headers = HeaderParser().parsestr(zf.read(names[0]).decode("utf-8"))
    name = headers.get("Name")
    if not name:
        raise ValueError(f"{wheel.name}: METADATA has no Name")
    return name, headers.get("Requires-Python")


def _page(title: str, links: list[str]) -> str:
    body = "\n".join(f"    {link}<br>" for link in links)
    return (
        "<!DOCTYPE html>\n<html>\n  <head>\n"
        '    <meta name="pypi:repository-version" content="1.0">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n"
        f"    <h1>{html.escape(title)}</h1>\n{body}\n  </body>\n</html>\n"
    )


def write_simple_index(staging: Path, wheel: Path) -> str:
    """Writes ``simple/`` for ``wheel`` (a file inside ``staging``); returns the project's
    normalized name.

    Links are relative (``../../wheels/<hash>/<file>``), so the index works wherever the
    bundle is served; micropip joins them onto the index URL it fetched.
    """
    name, requires_python = _wheel_metadata(wheel)
    project = normalized_name(name)
    href = "../../" + wheel.relative_to(staging).as_posix()
    sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
    attributes = f'href="{html.escape(href)}#sha256={sha256}"'
    if requires_python:
        attributes += f' data-requires-python="{html.escape(requires_python)}"'
    folder = staging / "simple" / project
    folder.mkdir(parents=True)
    (folder / "index.html").write_text(
        _page(f"Links for {project}", [f"<a {attributes}>{html.escape(wheel.name)}</a>"])
    )
    (staging / "simple" / "index.html").write_text(
        _page("Simple index", [f'<a href="{project}/">{html.escape(project)}</a>'])
    )
    return project


def fill_examples(staging: Path, values: dict[str, str]) -> None:
    """Replaces ``{{name}}`` placeholders in ``examples/*.html`` with the build's values.

    Raises:
        ValueError: A page uses a placeholder the build does not know (a typo would
            otherwise ship as a broken URL).
    """
    for page in sorted((staging / "examples").glob("*.html")):
        text = page.read_text()
        unknown = set(re.findall(r"\{\{(\w+)\}\}", text)) - set(values)
        if unknown:
            raise ValueError(
                f"{page.name} uses unknown placeholders {sorted(unknown)}; "
                f"the build fills {sorted(values)}"
            )
        for key, value in values.items():
            text = text.replace("{{" + key + "}}", value)
        page.write_text(text)
