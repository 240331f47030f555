"""The bundle server: CORS, precompressed files by Accept-Encoding, caching, safe paths."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from evermind.errors import ConfigError
from evermind.studio.webserver import (
    IMMUTABLE,
    BundleServer,
    accepted_encodings,
    cache_control,
    parse_origins,
)

HASH = "0123456789abcdef"  # a content-hash folder name (16 hex digits)
APP_JS = b"export const answer = 42;\n" * 200


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("bundle")
    root = tmp_path / "web"
    root.mkdir()
    (root / "index.html").write_text("<!doctype html><title>Studio</title>")
    (root / "app.js").write_bytes(APP_JS)
    (root / "app.js.gz").write_bytes(gzip.compress(APP_JS, mtime=0))
    (root / "app.js.br").write_bytes(b"BROTLI-STAND-IN")  # only its bytes are checked
    (root / "style.css").write_text("body{}")
    (root / ".stamp").write_text("secret digest")
    (root / "sub").mkdir()
    (root / "sub" / "page.html").write_text("sub page")
    (root / "empty").mkdir()
    hashed = root / "pyodide" / HASH
    hashed.mkdir(parents=True)
    (hashed / "pyodide.asm.wasm").write_bytes(b"\0asm" + bytes(100))
    (tmp_path / "outside.txt").write_text("outside the bundle")
    os.symlink(tmp_path / "outside.txt", root / "escape.txt")
    return root


@pytest.fixture(scope="module")
def server(bundle: Path) -> Iterator[BundleServer]:
    with BundleServer(bundle) as srv:
        yield srv


def request(
    server: BundleServer, path: str, method: str = "GET", **headers: str
) -> tuple[int, dict[str, str], bytes]:
    """One raw request (the path is sent exactly as given); returns status, headers, body."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name.replace("_", "-"), value)
        conn.endheaders()
        response = conn.getresponse()
        body = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        conn.close()


def test_index_is_no_cache_with_an_etag_and_revalidates_to_304(server: BundleServer) -> None:
    status, headers, body = request(server, "/index.html")
    assert status == 200 and body.startswith(b"<!doctype html>")
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert headers["cache-control"] == "no-cache"
    status, headers2, body = request(server, "/index.html", If_None_Match=headers["etag"])
    assert status == 304 and body == b""
    assert headers2["etag"] == headers["etag"]
    # The root is the index, not a listing.
    assert request(server, "/")[2].startswith(b"<!doctype html>")


def test_content_hash_folders_are_immutable_and_other_paths_are_not() -> None:
    assert cache_control(f"/pyodide/{HASH}/pyodide.asm.wasm") == IMMUTABLE
    assert cache_control(f"/wheels/{HASH}/evermind-0.1.0-py3-none-any.whl") == IMMUTABLE
    assert cache_control("/pyodide/pyodide.asm.wasm") == "no-cache"
    assert cache_control(f"/pyodide/{HASH[:-1]}/x.wasm") == "no-cache"  # 15 digits
    assert cache_control(f"/pyodide/{HASH}x/x.wasm") == "no-cache"
    assert cache_control("/sw.js") == "no-cache"


def test_hashed_file_is_served_immutable_with_wasm_type(server: BundleServer) -> None:
    status, headers, body = request(server, f"/pyodide/{HASH}/pyodide.asm.wasm")
    assert status == 200 and body.startswith(b"\0asm")
    assert headers["content-type"] == "application/wasm"
    assert headers["cache-control"] == "public, max-age=31536000, immutable"


@pytest.mark.parametrize(
    ("accept", "coding"),
    [
        ("gzip, deflate, br, zstd", "br"),
        ("gzip", "gzip"),
        ("br;q=0, gzip;q=0.5", "gzip"),
        ("*", "br"),
        ("*, br;q=0", "gzip"),
        ("gzip;q=0, br;q=0", None),
        ("identity", None),
        ("", None),
    ],
)
def test_the_best_allowed_encoding_is_sent(
    server: BundleServer, accept: str, coding: str | None
) -> None:
    status, headers, body = request(server, "/app.js", Accept_Encoding=accept)
    assert status == 200
    assert headers.get("content-encoding") == coding
    assert headers["vary"] == "Accept-Encoding"  # every response of a file with variants
    assert headers["content-type"] == "text/javascript; charset=utf-8"  # the original's type
    assert int(headers["content-length"]) == len(body)
    if coding == "gzip":
        assert gzip.decompress(body) == APP_JS
    elif coding == "br":
        assert body == b"BROTLI-STAND-IN"
    else:
        assert body == APP_JS


def test_a_file_without_variants_has_no_vary(server: BundleServer) -> None:
    _, headers, body = request(server, "/style.css", Accept_Encoding="gzip, br")
    assert body == b"body{}"
    assert "content-encoding" not in headers and "vary" not in headers


def test_etags_differ_per_encoding(server: BundleServer) -> None:
    gz = request(server, "/app.js", Accept_Encoding="gzip")[1]["etag"]
    plain = request(server, "/app.js")[1]["etag"]
    assert gz != plain
    # A cached gzip body must not be revalidated as the identity one.
    assert request(server, "/app.js", If_None_Match=gz)[0] == 200


def test_bytes_sent_counts_what_went_over_the_wire(server: BundleServer) -> None:
    server.reset_counts()
    _, _, body = request(server, "/app.js", Accept_Encoding="gzip")
    request(server, "/index.html", method="HEAD")
    assert server.bytes_sent() == {"/app.js": len(body)}
    assert len(body) < len(APP_JS) / 10


def test_head_sends_headers_only(server: BundleServer) -> None:
    status, headers, body = request(server, "/app.js", method="HEAD")
    assert status == 200 and body == b""
    assert int(headers["content-length"]) == len(APP_JS)


def test_any_origin_by_default_with_corp(server: BundleServer) -> None:
    _, headers, _ = request(server, "/app.js", Origin="http://127.0.0.1:9999")
    assert headers["access-control-allow-origin"] == "*"
    assert headers["cross-origin-resource-policy"] == "cross-origin"
    assert "Content-Encoding" in headers["access-control-expose-headers"]


def test_preflight_is_answered(server: BundleServer) -> None:
    status, headers, body = request(
        server,
        "/pyodide/" + HASH + "/pyodide.asm.wasm",
        method="OPTIONS",
        Origin="https://example.org",
        Access_Control_Request_Method="GET",
        Access_Control_Request_Headers="range",
        Access_Control_Request_Private_Network="true",
    )
    assert status == 204 and body == b""
    assert headers["access-control-allow-origin"] == "*"
    assert "GET" in headers["access-control-allow-methods"]
    assert headers["access-control-allow-headers"] == "range"
    assert headers["access-control-allow-private-network"] == "true"


def test_listed_origins_are_echoed_and_others_get_no_cors(bundle: Path) -> None:
    with BundleServer(bundle, allow_origins=["https://a.example"]) as srv:
        _, headers, _ = request(srv, "/app.js", Origin="https://a.example")
        assert headers["access-control-allow-origin"] == "https://a.example"
        assert "Origin" in headers["vary"]
        _, headers, _ = request(srv, "/app.js", Origin="https://b.example")
        assert "access-control-allow-origin" not in headers
        status, headers, _ = request(srv, "/app.js", method="OPTIONS", Origin="https://b.example")
        assert status == 204 and "access-control-allow-origin" not in headers
    with BundleServer(bundle, allow_origins=()) as srv:
        _, headers, _ = request(srv, "/app.js", Origin="https://a.example")
        assert "access-control-allow-origin" not in headers
        assert "cross-origin-resource-policy" not in headers


@pytest.mark.parametrize(
    "path",
    [
        "/nope.js",
        "/../outside.txt",
        "/sub/../../outside.txt",
        "/%2e%2e/outside.txt",
        "/%2E%2E%2Foutside.txt",
        "/sub/%2e%2e%2f%2e%2e%2foutside.txt",
        "/..%5coutside.txt",
        "/escape.txt",  # a symlink out of the folder
        "/.stamp",
        "/%2estamp",
        "/%00",
        "/index.html%00.js",
        "/%ff%fe",
        "/C:/Windows/win.ini",
        "/empty/",  # a folder without index.html: no listing
        "//etc/passwd",
        "/" + "a" * 5000,
    ],
)
def test_bad_paths_are_404_never_500(server: BundleServer, path: str) -> None:
    status, _, body = request(server, path)
    assert status == 404, (path, status, body[:200])
    assert b"outside the bundle" not in body and b"secret" not in body


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_or_a_linked_variant_in_the_folder_is_never_opened(tmp_path: Path) -> None:
    """A FIFO's open blocks until a writer comes: it used to hang the handler thread."""
    root = tmp_path / "web"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "outside.js").write_text("outside the bundle")
    (root / "app.js").write_text("export const ok = 1;")
    os.symlink(tmp_path / "outside.js", root / "app.js.gz")  # a variant leading out
    os.mkfifo(root / "app.js.br")  # a variant that is a FIFO
    os.mkfifo(root / "pipe.html")
    os.mkfifo(root / "sub" / "index.html")
    try:
        with BundleServer(root) as srv:
            for path in ("/pipe.html", "/sub/"):
                status, _, body = request(srv, path)
                assert status == 404, (path, status, body[:200])
            status, headers, body = request(srv, "/app.js", accept_encoding="br, gzip")
            assert status == 200 and body == b"export const ok = 1;"
            assert "content-encoding" not in headers and "vary" not in headers
    finally:
        for fifo in (root / "pipe.html", root / "sub" / "index.html", root / "app.js.br"):
            with contextlib.suppress(OSError):  # frees a reader stuck in open() on a FIFO
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_a_folder_without_slash_redirects_and_query_strings_are_ignored(
    server: BundleServer,
) -> None:
    status, headers, _ = request(server, "/sub")
    assert status == 301 and headers["location"] == "/sub/"
    status, _, body = request(server, "/sub/page.html?v=3#x")
    assert status == 200 and body == b"sub page"


def test_accepted_encodings_parses_q_values() -> None:
    assert accepted_encodings(None) == set()
    assert accepted_encodings("gzip, br") == {"gzip", "br"}
    assert accepted_encodings("GZIP;q=1.0, br;q=0") == {"gzip"}
    assert accepted_encodings("*;q=0.1") == {"gzip", "br"}
    assert accepted_encodings("gzip;q=bad") == set()


def test_parse_origins() -> None:
    assert parse_origins(None) == ("*",)
    assert parse_origins(["none"]) == ()
    assert parse_origins(["https://a.example", "http://127.0.0.1:8000"]) == (
        "https://a.example",
        "http://127.0.0.1:8000",
    )
    for bad in ("https://a.example/", "a.example", "https://a.example/path", ""):
        with pytest.raises(ConfigError, match="is not an origin"):
            parse_origins([bad])


def test_cli_refuses_an_allow_origin_that_is_not_an_origin(bundle: Path, capsys) -> None:
    from evermind.cli import main

    code = main(["studio", "--no-open", "--dir", str(bundle), "--allow-origin", "example.org"])
    assert code == 2
    assert "--allow-origin 'example.org' is not an origin" in capsys.readouterr().err
