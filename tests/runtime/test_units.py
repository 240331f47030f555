"""The runtime's parts without a server: the tokens file, versions, template, installs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evermind.errors import ConfigError
from evermind.mcp.config import resolve_memory_file
from evermind.package import read_package
from evermind.runtime.config import RuntimeConfig, default_data_dir, is_loopback
from evermind.runtime.generation import render_chat
from evermind.runtime.installs import InstallConflict, InstallStore, version_key
from evermind.runtime.registry import ModelNotFound, parse_model_id
from evermind.tokens import parse_tokens
from tests.factories import tiny_package


def test_tokens_file_parses_and_rejects_mistakes() -> None:
    entries = parse_tokens(
        "# c\nabcdefgh-1 acme\n\nabcdefgh-2 acme read # ro\nabcdefgh-3 b.x-1 write\n"
    )
    assert [(t, p.tenant, p.access) for t, p in entries] == [
        ("abcdefgh-1", "acme", "write"),
        ("abcdefgh-2", "acme", "read"),
        ("abcdefgh-3", "b.x-1", "write"),
    ]
    for text, fragment in (
        ("short acme", "at least"),
        ("abcdefgh-1 acme/x", "tenant"),
        ("abcdefgh-1 acme admin", "access"),
        ("abcdefgh-1 acme\nabcdefgh-1 other", "twice"),
        ("abcdefgh-1", "fields"),
        ("# nothing\n", "no tokens"),
    ):
        with pytest.raises(ConfigError, match=fragment):
            parse_tokens(text)


def test_version_order_and_model_ids() -> None:
    ordered = ["0.9", "1.0.0", "1.2.0", "1.9.0", "1.10.0", "2"]
    assert sorted(reversed(ordered), key=version_key) == ordered
    assert parse_model_id("evermind/notes:1.2.0") == ("notes", "1.2.0")
    assert parse_model_id("notes") == ("notes", None)
    for bad in ("evermind/", "Evermind/Notes", "evermind/a:b:c", "../x"):
        with pytest.raises(ModelNotFound):
            parse_model_id(bad)


def test_chat_template() -> None:
    prompt = render_chat(
        [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello."), ("user", "Who?")]
    )
    assert prompt == "Be brief.\n\nUser: Hi\nAssistant: Hello.\nUser: Who?\nAssistant:"
    assert render_chat([("user", "Hi")]) == "User: Hi\nAssistant:"


def test_install_store_is_atomic_and_cleans_up(tmp_path: Path) -> None:
    models, tmp = tmp_path / "models", tmp_path / "tmp"
    tmp.mkdir()
    (tmp / "upload-dead.part").write_bytes(b"half a package")
    (tmp / "stage-dead").mkdir()
    (tmp / "stage-dead" / "package.evermind").write_bytes(b"x")
    store = InstallStore(models, tmp)
    assert list(tmp.iterdir()) == []

    package = read_package(tiny_package("unit", "1.0.0"))
    upload = store.new_upload_path()
    upload.write_bytes(tiny_package("unit", "1.0.0"))
    install, created = store.install("acme", upload, package)
    assert created and install.ref == "evermind/unit:1.0.0" and not upload.exists()
    assert install.path == models / "acme" / "unit" / "1.0.0" / "package.evermind"
    assert read_package(install.path).digest == package.digest

    other = read_package(tiny_package("unit", "1.0.0", seed=9))
    upload = store.new_upload_path()
    upload.write_bytes(b"irrelevant")
    with pytest.raises(InstallConflict):
        store.install("acme", upload, other)
    assert not upload.exists()

    # A fresh store (a restart) finds the install; another tenant does not see it.
    again = InstallStore(models, tmp)
    assert [i.ref for i in again.list("acme")] == ["evermind/unit:1.0.0"]
    assert again.list("other") == [] and again.newest("other", "unit") is None
    assert again.delete("acme", "unit", "1.0.0") is not None
    assert not (models / "acme").exists() and list(tmp.iterdir()) == []


def test_config_checks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")
    RuntimeConfig(host="127.0.0.1").check_exposure()
    with pytest.raises(ConfigError, match="insecure-no-auth"):
        RuntimeConfig(host="0.0.0.0").check_exposure()
    RuntimeConfig(host="0.0.0.0", insecure_no_auth=True).check_exposure()
    RuntimeConfig(host="0.0.0.0", tokens_file=tmp_path / "t").check_exposure()
    with pytest.raises(ConfigError, match="max_tokens_cap"):
        RuntimeConfig(max_tokens_cap=0)
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_data_dir() == tmp_path / "evermind"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_data_dir() == Path.home() / ".local" / "share" / "evermind"
    # The runtime and the MCP server resolve one directory, so they share one memory file;
    # a relative XDG_DATA_HOME is ignored (XDG Base Directory spec) by both.
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")
    assert default_data_dir() == Path.home() / ".local" / "share" / "evermind"
    assert resolve_memory_file(None, {**os.environ}).parent == default_data_dir()
