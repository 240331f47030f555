"""The release artifacts install and run: sdist -> wheel -> a fresh venv -> ``evermind``.

What this proves: ``python -m build`` makes an sdist and, from that sdist, a wheel (so the
sdist holds everything the wheel needs); the wheel installed alone into a fresh virtual
environment (no editable install, no ``src/`` on the path, ``PYTHONPATH`` cleared) carries
every module and data file of ``src/evermind`` (the shaders, the cache's and bridges' JSON
data, the MCP skill) byte for byte, reports the version ``__init__.__version__`` holds, and
its ``evermind`` script prints ``--help``, starts ``evermind serve``, which answers
``/healthz`` on loopback, and ``evermind mcp``, which an MCP SDK client drives over stdio
(remember, then recall; and with ``--embedder base``, the base embedder read from the
package data).

What it does not prove: that pip resolves the declared dependencies. To stay offline and
fast the wheel goes in with ``--no-deps``, and the third-party packages come from this
interpreter's site-packages through a ``.pth`` file naming a folder of links to every entry
there except this checkout's own install (``evermind*``, ``_evermind*``); so a dependency
missing from ``pyproject.toml`` but installed here would go unnoticed. The Studio's web
bundle (``dist/web``) is not in the wheel: ``evermind studio`` serves a checkout's build.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest

import evermind
from evermind.runtime.server import free_port
from tests import procs

ROOT = Path(__file__).resolve().parents[2]
#: Entries of this interpreter's site-packages that are this checkout's own install.
OWN_INSTALL = ("evermind", "_evermind", "__editable__")
#: The wheel alone: no dependency resolution, no index.
PIP_OFFLINE = ("-q", "--no-deps", "--no-index")


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "EVERMIND_"))}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _third_party_view(folder: Path) -> Path:
    """A folder of links to this interpreter's site-packages, less this checkout's install."""
    folder.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if not entry.name.startswith(OWN_INSTALL) and entry.suffix != ".pth":
            (folder / entry.name).symlink_to(entry)
    return folder


def _digests(package: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``package`` (bytecode caches left out)."""
    return {
        str(path.relative_to(package)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(package.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def _build(out: Path) -> Path:
    result = procs.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=180,
        env=_clean_env(),
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    wheels = list(out.glob("*.whl"))
    sdists = list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    assert wheels[0].name == f"evermind_memory-{evermind.__version__}-py3-none-any.whl"
    return wheels[0]


def _fresh_venv(root: Path, wheel: Path) -> Path:
    venv = root / "venv"
    made = procs.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120)
    assert made.returncode == 0
    python = venv / "bin" / "python"
    site = procs.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_clean_env(),
    ).stdout.strip()
    installed = procs.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", *PIP_OFFLINE, str(wheel)],
        capture_output=True,
        text=True,
        timeout=180,
        env=_clean_env(),
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    view = _third_party_view(root / "third-party")
    Path(site, "zz_third_party.pth").write_text(f"{view}\n")
    return venv


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(venv, scratch folder): the wheel built from the sdist, installed alone in a new venv."""
    root = tmp_path_factory.mktemp("wheel")
    return _fresh_venv(root, _build(root / "dist")), root


def test_the_built_wheel_installs_alone_and_runs(fresh: tuple[Path, Path]) -> None:
    start = time.monotonic()
    venv, tmp_path = fresh
    bin_dir = venv / "bin"
    env = _clean_env()

    where = procs.run(
        [str(bin_dir / "python"), "-c", "import evermind; print(evermind.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    installed = Path(where.stdout.strip()).parent
    assert installed.is_relative_to(venv), where
    source = ROOT / "src" / "evermind"
    shipped, expected = _digests(installed), _digests(source)
    expected.update(
        {f"shaders/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest() for p in
         (ROOT / "shaders").glob("*.wgsl")}
    )  # fmt: skip
    assert {k: v for k, v in shipped.items() if k in expected} == expected
    assert "cache/data/verifier.json" in shipped and "shaders/selective_scan.wgsl" in shipped
    assert "embedder/data/base-embedder.safetensors" in shipped

    version = procs.run(
        [str(bin_dir / "evermind"), "--version"], capture_output=True, text=True, env=env
    )
    assert version.stdout.strip() == f"evermind {evermind.__version__}", version
    helped = procs.run(
        [str(bin_dir / "evermind"), "--help"], capture_output=True, text=True, env=env
    )
    assert helped.returncode == 0 and "serve" in helped.stdout, helped.stderr

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        server = procs.popen(
            [str(bin_dir / "evermind"), "serve", "--port", str(port), "--data", str(tmp_path)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=env,
        )
    try:
        body = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    body = r.read()
                    break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        assert body, f"no /healthz answer: {log.read_text()[-2000:]}"
    finally:
        procs.stop_group(server)
    assert time.monotonic() - start < 60  # serving proof; the build and install are the fixture


def test_the_installed_mcp_server_answers_an_sdk_client(fresh: tuple[Path, Path]) -> None:
    """``evermind mcp`` from the wheel, over stdio, driven by the official MCP SDK client."""
    from mcp import Client, StdioServerParameters

    venv, tmp_path = fresh
    params = StdioServerParameters(
        command=str(venv / "bin" / "evermind"),
        args=["mcp", "--memory-file", str(tmp_path / "memory.db")],
        env=_clean_env(),
        cwd=str(tmp_path),
    )

    async def scenario() -> str:
        async with Client(params, read_timeout_seconds=60) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert {"memory_remember", "memory_recall"} <= tools, tools
            await client.call_tool(
                "memory_remember",
                {"key": "wheel", "content": "the wheel installs and serves memory"},
            )
            result = await client.call_tool("memory_recall", {"query": "wheel installs"})
            return "\n".join(b.text for b in result.content if b.type == "text")

    answer = anyio.run(scenario)
    assert "the wheel installs and serves memory" in answer and "[1] wheel" in answer, answer


def test_the_installed_mcp_server_embeds_with_the_shipped_base(fresh: tuple[Path, Path]) -> None:
    """``evermind mcp --embedder base`` from the wheel finds the base embedder in the package
    data (no checkout on the path) and fuses it with BM25."""
    from mcp import Client, StdioServerParameters

    venv, tmp_path = fresh
    params = StdioServerParameters(
        command=str(venv / "bin" / "evermind"),
        args=["mcp", "--memory-file", str(tmp_path / "base.db"), "--embedder", "base"],
        env=_clean_env(),
        cwd=str(tmp_path),
    )

    async def scenario() -> str:
        async with Client(params, read_timeout_seconds=60) as client:
            for key, content in (
                ("pet", "Their dog, a golden retriever named Biscuit, needs a walk twice a day."),
                ("job", "They work as a nurse on night shifts at the city hospital."),
            ):
                await client.call_tool("memory_remember", {"key": key, "content": content})
            result = await client.call_tool("memory_recall", {"query": "which animal do I own?"})
            return "\n".join(b.text for b in result.content if b.type == "text")

    answer = anyio.run(scenario)
    assert "[1] pet" in answer and "ranked by: semantic+lexical" in answer, answer


def test_the_version_has_one_source() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "\nversion =" not in pyproject
    assert '[tool.hatch.version]\npath = "src/evermind/__init__.py"' in pyproject
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"\n## {evermind.__version__} - " in changelog, "CHANGELOG.md lacks this version"
