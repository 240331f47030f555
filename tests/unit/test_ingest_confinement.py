"""Ingestion never leaves its folder: symbolic links, FIFOs and swaps (issue 35, item 4).

The repro is ``ln -s /etc/passwd docs/passwd.md && evermind ingest docs/``; here the secret
is a file in ``tmp_path`` beside the folder (no real ``/etc`` is touched), and the command is
the real ``evermind ingest`` in a child process, so a FIFO that were opened would hang it
(the child's timeout kills it and the test fails).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evermind import ingest
from evermind.errors import InputError
from evermind.ingest.files import read_source, select_files
from evermind.ingest.registry import PARSERS
from evermind.memory import MemoryStore
from evermind.safefiles import BENEATH, RefusedFile, open_regular
from tests import procs

SECRET = "root:x:0:0:root:/root:/bin/bash"
pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX links and FIFOs")


def evermind_ingest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``evermind ingest ARGS`` in a child process (its own group, killed on a timeout)."""
    return procs.run(
        [sys.executable, "-m", "evermind.cli", "ingest", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def stored_texts(db: Path) -> list[str]:
    async def export() -> list[str]:
        async with MemoryStore(db, namespace="default/default") as store:
            return [entry["content"] for entry in await store.export()]

    return asyncio.run(export())


def hostile_folder(tmp_path: Path) -> Path:
    """``docs/`` with a note, links out of it (file, folder, ``..``), a FIFO and a loop."""
    (tmp_path / "passwd").write_text(SECRET + "\n")
    (tmp_path / "secret.md").write_text("# Beside\n\nthe launch code is 0000\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "private.md").write_text("# Private\n\nnot in docs at all\n")
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "notes.md").write_text("# Notes\n\nthe lantern guide lives here\n")
    (docs / "sub" / "real.md").write_text("# Real\n\nreal page inside the folder\n")
    os.symlink(tmp_path / "passwd", docs / "passwd.md")  # absolute target outside
    os.symlink("../secret.md", docs / "beside.md")  # a `..` escape
    os.symlink(outside, docs / "linked")  # a folder outside
    os.symlink("sub/real.md", docs / "alias.md")  # stays inside
    os.symlink("sub", docs / "subalias")  # a folder inside, walked already
    (docs / ".drafts").mkdir()  # hidden: left out, unless a link leads in
    (docs / ".drafts" / "draft.md").write_text("# Draft\n\na draft reached by a link\n")
    os.symlink(".drafts", docs / "drafts")  # a folder inside
    os.symlink("..", docs / "sub" / "loop")  # back to docs: a loop
    os.symlink(tmp_path / "gone.md", docs / "dangling.md")
    os.mkfifo(docs / "pipe.md")
    return docs


def test_cli_never_follows_a_link_out_of_the_folder_and_reports_each(tmp_path: Path) -> None:
    hostile_folder(tmp_path)
    db = tmp_path / "m.db"
    out = evermind_ingest(tmp_path, "docs", "--store", str(db), "--keep-going")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    skipped = dict(report["skipped"])
    print(skipped)
    links = ("passwd.md", "beside.md", "linked", "alias.md", "subalias", "drafts", "dangling.md")
    for name in links:
        assert skipped[f"docs/{name}"].startswith("a symbolic link, not followed"), name
    assert skipped["docs/sub/loop"].startswith("a symbolic link, not followed")
    assert skipped["docs/pipe.md"] == "a FIFO (named pipe), not a regular file"
    assert "ingest: skipped docs/passwd.md: a symbolic link" in out.stderr
    assert report["sources"] == 2  # notes.md and sub/real.md
    texts = "\n".join(stored_texts(db))
    assert "lantern guide" in texts and "real page" in texts
    assert SECRET not in texts and "launch code" not in texts and "not in docs" not in texts


def test_follow_symlinks_follows_only_links_that_stay_inside(tmp_path: Path) -> None:
    hostile_folder(tmp_path)
    db = tmp_path / "m.db"
    out = evermind_ingest(tmp_path, "docs", "--store", str(db), "--follow-symlinks")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    skipped = dict(report["skipped"])
    print(skipped)
    assert skipped["docs/passwd.md"] == "a symbolic link to outside the folder docs; not followed"
    assert skipped["docs/beside.md"] == "a symbolic link to outside the folder docs; not followed"
    assert skipped["docs/linked"] == "a symbolic link to outside the folder docs; not followed"
    assert skipped["docs/dangling.md"] == "a symbolic link to outside the folder docs; not followed"
    assert "walked already" in skipped["docs/sub/loop"]
    assert "walked already" in skipped["docs/subalias"]  # a second way into docs/sub
    assert skipped["docs/pipe.md"] == "a FIFO (named pipe), not a regular file"
    listed = json.loads(evermind_ingest(tmp_path, "--list", "--store", str(db)).stdout)
    sources = {s["source"] for s in listed["sources"]}
    # Links inside the folder are read under their own names.
    assert sources == {"docs/notes.md", "docs/sub/real.md", "docs/alias.md", "docs/drafts/draft.md"}
    texts = "\n".join(stored_texts(db))
    assert SECRET not in texts and "launch code" not in texts and "not in docs" not in texts


def test_a_named_link_or_fifo_is_an_error_naming_it(tmp_path: Path) -> None:
    hostile_folder(tmp_path)
    db = str(tmp_path / "m.db")
    out = evermind_ingest(tmp_path, "docs/passwd.md", "--store", db, "--fail-fast")
    assert out.returncode == 2
    assert "error: docs/passwd.md: cannot ingest: a symbolic link, not followed" in out.stderr
    out = evermind_ingest(
        tmp_path, "docs/passwd.md", "--store", db, "--fail-fast", "--follow-symlinks"
    )
    assert out.returncode == 2 and "a symbolic link to outside its folder docs" in out.stderr
    out = evermind_ingest(tmp_path, "docs/pipe.md", "--store", db, "--fail-fast")
    assert out.returncode == 2 and "a FIFO (named pipe), not a regular file" in out.stderr
    # By default a refused file named explicitly fails alone (it was asked for: exit 1).
    out = evermind_ingest(tmp_path, "docs/passwd.md", "--store", db)
    assert (
        out.returncode == 1 and "failed docs/passwd.md: a symbolic link, not followed" in out.stderr
    )
    out = evermind_ingest(tmp_path, "docs/pipe.md", "docs/notes.md", "--store", db)
    report = json.loads(out.stdout)
    assert out.returncode == 1 and report["sources"] == 1 and report["ok"] == 1
    assert dict(report["failed"]) == {"docs/pipe.md": "a FIFO (named pipe), not a regular file"}
    # A named link that stays in its folder is read with --follow-symlinks.
    out = evermind_ingest(tmp_path, "docs/alias.md", "--store", db, "--follow-symlinks")
    assert out.returncode == 0 and json.loads(out.stdout)["added"] >= 1, out.stderr
    assert SECRET not in "\n".join(stored_texts(Path(db)))


def test_a_file_swapped_for_a_link_after_the_walk_is_refused(tmp_path: Path) -> None:
    """TOCTOU: the walk saw a regular file; the read finds a link (or a FIFO) and refuses."""
    docs = hostile_folder(tmp_path)
    (docs / "z.md").write_text("# Z\n\nlast file, swapped during the sync\n")
    store = MemoryStore(tmp_path / "m.db")

    def swap(event: ingest.IngestProgress) -> None:
        if event.source == "docs/notes.md":  # files in order: notes.md, z.md, sub/real.md
            os.remove(docs / "z.md")
            os.symlink(tmp_path / "passwd", docs / "z.md")

    report = asyncio.run(ingest.sync(store, [docs], base=tmp_path, on_progress=swap))
    skipped = dict(report.skipped)
    assert skipped["docs/z.md"] == "a symbolic link, not a regular file"
    texts = "\n".join(e["content"] for e in asyncio.run(store.export()))
    assert SECRET not in texts and "lantern guide" in texts


def test_read_source_refuses_a_link_a_fifo_or_another_file_in_its_place(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (tmp_path / "passwd").write_text(SECRET)
    for name in ("a.md", "b.md", "c.md"):
        (docs / name).write_text(f"# {name}\n\ntext\n")
    files = {f.source: f for f in select_files([docs], tmp_path, PARSERS).files}
    assert read_source(files["docs/a.md"]) == b"# a.md\n\ntext\n"
    os.remove(docs / "a.md")
    os.symlink(tmp_path / "passwd", docs / "a.md")
    os.remove(docs / "b.md")
    os.mkfifo(docs / "b.md")
    os.rename(docs / "c.md", docs / "c.old")  # kept: its inode cannot be reused
    (docs / "c.md").write_text("# another file now\n")
    with pytest.raises(RefusedFile, match=r"docs/a\.md: a symbolic link, not a regular file"):
        read_source(files["docs/a.md"])
    with pytest.raises(RefusedFile, match=r"docs/b\.md: a FIFO \(named pipe\), not a regular"):
        read_source(files["docs/b.md"])  # refused before the open: a FIFO's open would block
    with pytest.raises(RefusedFile, match=r"docs/c\.md: replaced by another file"):
        read_source(files["docs/c.md"])
    with pytest.raises(RefusedFile, match="a FIFO"):
        open_regular(docs / "b.md")


@pytest.mark.skipif(not BENEATH, reason="needs openat (dir_fd) with O_NOFOLLOW")
def test_a_folder_on_the_way_swapped_for_a_link_is_refused(tmp_path: Path) -> None:
    """The open goes folder by folder from the root: a link in the middle stops it."""
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "sub" / "a.md").write_text("# A\n\ntext\n")
    (file,) = select_files([docs], tmp_path, PARSERS).files
    os.rename(docs / "sub", tmp_path / "moved")  # the same file, now outside the folder
    os.symlink(tmp_path / "moved", docs / "sub")
    assert (docs / "sub" / "a.md").read_bytes() == b"# A\n\ntext\n"  # a path open follows
    with pytest.raises(RefusedFile, match="its folder 'sub' is now a symbolic link"):
        read_source(file)
    with pytest.raises(RefusedFile, match="outside"):
        open_regular(tmp_path / "moved" / "a.md", root=docs.resolve())


def test_a_missing_path_is_still_an_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file or folder"):
        select_files([tmp_path / "nope.md"], tmp_path, PARSERS)


def test_inside_compares_whole_path_components() -> None:
    from evermind.safefiles import inside

    assert inside("/srv/docs", "/srv/docs") and inside("/srv/docs", "/srv/docs/a/b.md")
    assert not inside("/srv/docs", "/srv/docs-private/key.md")
    assert not inside("/srv/docs", "/srv") and not inside("/srv/docs", "/etc/passwd")
