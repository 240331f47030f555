"""The installed ``evermind`` command as a newcomer meets it: defaults in help, one-line errors.

Every case runs the real console script (the ``evermind`` next to this interpreter, as
``pip install`` wrote it) in its own process group: every subcommand's ``--help``, and a
table of bad file arguments (missing, a folder, binary, empty; output paths that cannot be
written) for each command's file arguments. Each must end with exit code 2 and exactly one
line on stderr that names the argument and the problem, and no traceback.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evermind.cli import build_parser
from tests import procs
from tests.factories import tiny_package

#: What each kind of bad file must be called in the error line.
PROBLEM = {
    "missing": "no such file or folder",
    "folder": "is a folder",
    "binary": "not UTF-8 text",
    "not-a-package": "not a .evermind package",
    "empty": "is empty (0 bytes)",
    "file-for-folder": "is a file; expected a folder",
    "under-a-file": "is a file, not a folder",
}
TEXT = ("missing", "folder", "binary", "empty")
PACKAGE = ("missing", "folder", "not-a-package", "empty")
ANY_FILE = ("missing", "folder", "empty")
OUTPUT = ("folder", "under-a-file")

#: (argv with BAD where the bad value goes, the argument's name in the message, kinds).
CASES: list[tuple[list[str], str, tuple[str, ...]]] = [
    (["eval", "--model", "PKG", "--text-file", "BAD"], "--text-file", TEXT),
    (["eval", "--model", "BAD", "--text-file", "TXT"], "--model", PACKAGE),
    (["eval", "run", "BAD", "--gate", "TXT", "--against", "m"], "argument CASES", TEXT),
    (["eval", "run", "TXT", "--gate", "BAD", "--against", "m"], "--gate", TEXT),
    (["generate", "--model", "BAD", "hello"], "--model", PACKAGE),
    (["embed", "--model", "BAD", "hello"], "--model", PACKAGE),
    (["export", "--model", "BAD", "--out", "o.evermind"], "--model", PACKAGE),
    (["export", "--model", "PKG", "--out", "BAD"], "--out", OUTPUT),
    (["train", "--corpus", "BAD"], "--corpus", ("missing", "binary", "empty")),
    (["train", "--out", "BAD"], "--out", OUTPUT),
    (["tune-embedder", "--model", "BAD", "--out", "o.evermind"], "--model", PACKAGE),
    (["tune-embedder", "--model", "PKG", "--texts", "BAD", "--out", "o"], "--texts", TEXT),
    (["distill-embedder", "--model", "PKG", "--teacher", "x", "--texts", "BAD"], "--texts", TEXT),
    (["build-embedder", "--out", "BAD"], "--out", OUTPUT),
    (["train-affect", "BAD", "TXT", "--out", "o.evermind"], "argument model", PACKAGE),
    (["train-affect", "PKG", "BAD", "--out", "o.evermind"], "argument labelled", TEXT),
    (["adapt", "BAD", "TXT", "--out", "o.evermind"], "argument model", PACKAGE),
    (["adapt", "PKG", "BAD", "--out", "o.evermind"], "argument TEXTFILE", TEXT),
    (["adapt", "PKG", "TXT", "--out", "BAD"], "--out", OUTPUT),
    (["merge-adapter", "PKG", "BAD", "--out", "o.evermind"], "argument adapter", ANY_FILE),
    (["distill", "--collected", "BAD", "--package", "PKG", "--out", "o"], "--collected", ANY_FILE),
    (["distill", "--collected", "TXT", "--package", "BAD", "--out", "o"], "--package", PACKAGE),
    (
        ["import-hf", "BAD", "--base", "PKG", "--out", "o"],
        "argument folder",
        ("missing", "file-for-folder"),
    ),
    (["import-hf", ".", "--base", "BAD", "--out", "o"], "--base", PACKAGE),
    (["import-hf", ".", "--base", "PKG", "--out", "BAD"], "--out", OUTPUT),
    (["ingest", "BAD"], "argument PATH", ("missing",)),
    (["ingest", "--model", "BAD", "TXT"], "--model", PACKAGE),
    (["serve", "--tokens-file", "BAD"], "--tokens-file", TEXT),
    (["serve", "--upstreams", "BAD"], "--upstreams", TEXT),
    (["push", "BAD", "--to", "http://127.0.0.1:9"], "argument file", PACKAGE),
    (["mcp", "--model", "BAD"], "--model", PACKAGE),
    (["mcp", "--tokens-file", "BAD"], "--tokens-file", TEXT),
    (["install-mcp", "--model", "BAD", "--dry-run"], "--model", PACKAGE),
    (["studio", "--no-open", "--dir", "BAD"], "--dir", ("missing", "file-for-folder")),
]


def _evermind() -> str:
    """The console script ``pip install`` put beside this interpreter."""
    found = shutil.which("evermind", path=str(Path(sys.executable).parent))
    assert found, f"no `evermind` script beside {sys.executable}: pip install -e . first"
    return found


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return procs.run([_evermind(), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def _bad(kind: str, root: Path) -> str:
    """A path of ``kind`` under ``root`` (made on first use)."""
    path = root / kind
    if kind == "folder":
        path.mkdir(exist_ok=True)
    elif kind == "binary":
        path.write_bytes(b"\x00\xff\xfe\x80 not text \x81\x82" * 64)
    elif kind == "not-a-package":
        path.write_text("plain text, not a ZIP archive\n")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "file-for-folder":
        path.write_text("a file\n")
    elif kind == "under-a-file":
        (root / "a-file").write_text("a file, not a folder\n")
        return str(root / "a-file" / "out.evermind")
    return str(path)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str, str, str]]:
    """Runs every bad-file case once (in parallel): (command line, argument, kind, stderr)."""
    root = tmp_path_factory.mktemp("bad-files")
    package = root / "ok.evermind"  # passes the parse-time check (a ZIP); never opened
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("manifest.json", "{}")
    text = root / "ok.txt"
    text.write_text("a short UTF-8 text\n")
    jobs = []
    for argv, argument, kinds in CASES:
        for kind in kinds:
            fill = {"PKG": str(package), "TXT": str(text), "BAD": _bad(kind, root)}
            jobs.append(([fill.get(word, word) for word in argv], argument, kind))
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda job: _run(*job[0], cwd=root), jobs))
    return [
        (" ".join(argv), argument, kind, f"{result.returncode}\n{result.stderr}")
        for (argv, argument, kind), result in zip(jobs, results, strict=True)
    ]


def test_every_bad_file_argument_is_one_line_naming_it(
    table: list[tuple[str, str, str, str]],
) -> None:
    failures = []
    for command, argument, kind, outcome in table:
        code, stderr = outcome.split("\n", 1)
        lines = stderr.strip().splitlines()
        ok = (
            code == "2"
            and len(lines) == 1
            and argument in lines[0]
            and PROBLEM[kind] in lines[0]
            and "Traceback" not in stderr
        )
        if not ok:
            failures.append(f"evermind {command}  [{kind}] -> exit {code}: {stderr!r}")
    assert not failures, "\n".join(failures)
    assert len(table) >= 90  # the table above, every kind of every argument


def test_an_error_a_command_raises_is_one_line_naming_the_argument(tmp_path: Path) -> None:
    """Past the parser: a package that is a ZIP but not a package, text that turns binary late."""
    fake = tmp_path / "fake.evermind"
    with zipfile.ZipFile(fake, "w") as archive:
        archive.writestr("notes.txt", "not a manifest")
    out = _run("generate", "--model", str(fake), "hello")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("error: archive:") and "manifest.json" in out.stderr

    late = tmp_path / "late.txt"  # UTF-8 for the checked head, then a byte no UTF-8 has
    late.write_bytes(b"plain words " * 6000 + b"\xff tail\n")
    model = tmp_path / "tiny.evermind"
    model.write_bytes(tiny_package(steps=0))
    out = _run("eval", "--model", str(model), "--text-file", str(late))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr == (
        f"error: --text-file '{late}': not UTF-8 text (byte 0xff at offset 72000); "
        "expected a UTF-8 text file\n"
    )
    out = _run("train", "--device", "cpu", "--corpus", str(late), "--out", str(tmp_path / "m"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "late.txt: not UTF-8 text (byte 72000)" in out.stderr

    out = _run("export", "--model", str(model), "--dtype", "float16", "--out", "/proc/m.evermind")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr and "/proc" in out.stderr


def _option_blocks(help_text: str) -> dict[str, str]:
    """``--option`` -> its help block, from argparse's ``--help`` output."""
    blocks: dict[str, str] = {}
    current = ""
    for line in help_text.splitlines():
        stripped = line.strip()
        if line.startswith("  -") and not line.startswith("   "):
            current = stripped.split()[0].rstrip(",")
            blocks[current] = stripped
        elif current and line.startswith("   "):
            blocks[current] += " " + stripped
        else:
            current = ""
    return blocks


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every command by its words (``eval run`` too: a sub-command of ``eval``)."""
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands = dict(action.choices)
    for name, command in action.choices.items():
        for nested in command._actions:
            if isinstance(nested, argparse._SubParsersAction):
                commands |= {f"{name} {word}": sub for word, sub in nested.choices.items()}
    return commands


def test_every_help_shows_its_defaults() -> None:
    commands = _subcommands()
    with ThreadPoolExecutor(max_workers=4) as pool:
        outputs = dict(
            zip(
                commands,
                pool.map(lambda name: _run(*name.split(), "--help"), commands),
                strict=True,
            )
        )
    missing = []
    for name, command in commands.items():
        out = outputs[name]
        assert out.returncode == 0 and out.stdout.startswith(f"usage: evermind {name}"), out
        if name == "bench":  # bench passes --help on to the benchmark runner
            continue
        blocks = " ".join(" ".join(b.split()) for b in _option_blocks(out.stdout).values())
        for action in command._actions:
            if not action.option_strings or action.default in (None, False, [], "==SUPPRESS=="):
                continue
            block = " ".join(_option_blocks(out.stdout).get(action.option_strings[0], "").split())
            if "default:" not in block:
                missing.append(f"{name} {action.option_strings[0]}: {block!r}")
        # hook's options are evermind.mcp.hook's own parser (the hook starts without the CLI)
        assert name == "hook" or "(default " not in blocks, f"{name}: write '(default: X)'"
    assert not missing, "options whose --help hides the default:\n" + "\n".join(missing)


def test_a_token_from_the_environment_never_shows_in_help() -> None:
    secret = "s3cret-token-value"
    for command in (["train"], ["eval", "run"]):
        out = procs.run(
            [_evermind(), *command, "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "EVERMIND_TOKEN": secret},
        )
        assert out.returncode == 0 and secret not in out.stdout
        assert "(default: $EVERMIND_TOKEN)" in " ".join(out.stdout.split())
