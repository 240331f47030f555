"""The bundle's PyScript parts (``build/pyscript_bundle.py``): the PEP 503 index, the example
pages' placeholders and the PyScript/Pyodide version pairing."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import zipfile
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    # build/ is scripts, not a package: load the module from its file.
    spec = importlib.util.spec_from_file_location(
        "pyscript_bundle", ROOT / "build" / "pyscript_bundle.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bundle = _load()


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs))


def _links(path: Path) -> list[dict[str, str | None]]:
    parser = _Links()
    parser.feed(path.read_text())
    return parser.links


def _wheel(folder: Path, name: str = "Evermind_Memory", requires: str | None = ">=3.11") -> Path:
    folder.mkdir(parents=True)
    wheel = folder / "evermind_memory-0.1.0-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.4\nName: {name}\nVersion: 0.1.0\n"
    if requires:
        metadata += f"Requires-Python: {requires}\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("evermind/__init__.py", "")
        zf.writestr("evermind_memory-0.1.0.dist-info/METADATA", metadata)
    return wheel


@pytest.mark.parametrize(
    ("name", "normalized"),
    [
        ("evermind-memory", "evermind-memory"),
        ("Evermind_Memory", "evermind-memory"),
        ("a.b__c--d", "a-b-c-d"),
    ],
)
def test_project_names_are_normalized_as_pep_503_says(name: str, normalized: str) -> None:
    assert bundle.normalized_name(name) == normalized


def test_the_index_links_the_wheel_with_its_hash_and_python_range(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "wheels" / "0123456789abcdef")
    assert bundle.write_simple_index(tmp_path, wheel) == "evermind-memory"
    root = _links(tmp_path / "simple" / "index.html")
    assert root == [{"href": "evermind-memory/"}]
    (link,) = _links(tmp_path / "simple" / "evermind-memory" / "index.html")
    href, _, fragment = str(link["href"]).partition("#")
    # Relative to the project page, the link lands on the wheel.
    target = (tmp_path / "simple" / "evermind-memory" / href).resolve()
    assert target == wheel.resolve()
    assert fragment == "sha256=" + hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert link["data-requires-python"] == ">=3.11"  # the parser unescapes &gt;


def test_a_wheel_without_metadata_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "wheels" / "x"
    folder.mkdir(parents=True)
    wheel = folder / "broken-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("broken/__init__.py", "")
    with pytest.raises(ValueError, match="METADATA"):
        bundle.write_simple_index(tmp_path, wheel)


def test_the_example_pages_placeholders_are_filled(tmp_path: Path) -> None:
    examples = tmp_path / "examples"
    examples.mkdir()
    for page in (ROOT / "web" / "examples").glob("*.html"):
        (examples / page.name).write_text(page.read_text())
    values = {"pyscript_dir": "vendor/pyscript/0123456789abcdef/", "pyodide_dir": "pyodide/x/"}
    bundle.fill_examples(tmp_path, values)
    page = (examples / "pyscript.html").read_text()
    assert "{{" not in page
    assert 'src="../vendor/pyscript/0123456789abcdef/core.js"' in page
    config = page.split("config='", 1)[1].split("'", 1)[0]
    assert json.loads(config) == {"interpreter": "../pyodide/x/pyodide.mjs"}


def test_an_unknown_placeholder_fails_the_build(tmp_path: Path) -> None:
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "typo.html").write_text('<script src="{{pyscrpt_dir}}core.js">')
    with pytest.raises(ValueError, match="pyscrpt_dir"):
        bundle.fill_examples(tmp_path, {"pyscript_dir": "a/"})


def test_pyscript_is_refused_for_another_pyodide_major(tmp_path: Path) -> None:
    if not (ROOT / bundle.PYSCRIPT_NPM / "package.json").is_file():
        pytest.fail("node_modules/@pyscript/core is missing; run `npm ci`")
    built_for = bundle.default_pyodide(ROOT)
    pinned = json.loads((ROOT / "node_modules" / "pyodide" / "package.json").read_text())
    assert built_for.split(".")[0] == pinned["version"].split(".")[0]
    with pytest.raises(ValueError, match="built for Pyodide"):
        bundle.vendor_pyscript(ROOT, tmp_path / "out", "0.27.7")
    assert not (tmp_path / "out").exists()
