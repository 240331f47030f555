"""A static file server for the offline bundle, bound to loopback by default (native-only).

Serves the built Studio to a browser on this machine: ``evermind studio``, headless training,
``evermind doctor`` and the browser tests. Standard library only.

What it adds to a plain static server, and why:
- **MIME types** set explicitly (``.mjs``/``.wasm`` are missing from Python 3.11's table and
  would otherwise fall back to the OS's mime.types).
- **Precompressed files**: ``build/build_web.py`` writes ``x.br``/``x.gz`` beside each
  compressible ``x``; the best one the request's ``Accept-Encoding`` allows is sent with
  ``Content-Encoding`` and ``Vary: Accept-Encoding``. Nothing is compressed per request.
- **Caching**: a path with a content-hash folder (a segment of :data:`HASH_LENGTH` hex
  digits, e.g. ``pyodide/3f9c0a1b2c3d4e5f/``) never changes and is sent ``immutable`` for a
  year; everything else (``index.html``, ``sw.js``, the small app modules) is ``no-cache``
  with an ``ETag``, so a revalidation costs a 304.
- **CORS** for ``<evermind-studio>`` loaded into a page of another origin: its module script,
  the worker it imports and every fetch inside (wasm, wheel, stdlib) are CORS requests.
  ``Cross-Origin-Resource-Policy: cross-origin`` lets a cross-origin-isolated host page
  (COEP ``require-corp``) load the files too. Preflights (``OPTIONS``) are answered.
- **Safe paths**: only files inside the folder (links resolved first); no directory
  listings, no dot-files; only regular files (:mod:`evermind.safefiles`: a FIFO, socket or
  device in the folder is never opened, so none can hang a handler thread); a bad path is
  a 404, never a 500.
"""

from __future__ import annotations

import email.utils
import logging
import os
import re
import stat as stat_mode
import threading
import urllib.parse
from collections.abc import Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from evermind.errors import ConfigError
from evermind.safefiles import RefusedFile, open_regular

log = logging.getLogger(__name__)

MIME_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".wasm": "application/wasm",
    ".wgsl": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".whl": "application/zip",
    ".zip": "application/zip",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".gz": "application/gzip",
    ".br": "application/octet-stream",
    ".evermind": "application/zip",
    "": "application/octet-stream",
}
#: Encodings with a precompressed file beside the original, best first.
ENCODINGS = (("br", ".br"), ("gzip", ".gz"))
#: Length of the hex folder name that marks content-hashed (immutable) files.
HASH_LENGTH = 16
_HASHED = re.compile(rf"(^|/)[0-9a-f]{{{HASH_LENGTH}}}/")
IMMUTABLE = "public, max-age=31536000, immutable"
#: ``allow_origins`` value that sends ``Access-Control-Allow-Origin: *``.
ANY_ORIGIN = "*"
_CHUNK = 1 << 16
_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:]+(:[0-9]{1,5})?")


def accepted_encodings(header: str | None) -> set[str]:
    """The content codings an ``Accept-Encoding`` header allows (q > 0), lower-cased.

    ``*`` allows every coding not named with ``q=0``. A missing header allows only identity.
    """
    allowed: set[str] = set()
    refused: set[str] = set()
    wildcard = False
    for part in (header or "").split(","):
        name, _, params = part.strip().partition(";")
        name = name.strip().lower()
        if not name:
            continue
        q = 1.0
        match = re.search(r"q\s*=\s*([^;\s]*)", params)
        if match:
            try:
                q = float(match.group(1))
            except ValueError:
                q = 0.0
        if name == "*":
            wildcard = q > 0
        elif q > 0:
            allowed.add(name)
        else:
            refused.add(name)
    if wildcard:
        allowed |= {coding for coding, _ in ENCODINGS} - refused
    return allowed


def parse_origins(values: Iterable[str] | None) -> tuple[str, ...]:
    """Checks ``--allow-origin`` values: ``*``, ``none``, or ``scheme://host[:port]``.

    None (the option not given) means any origin. ``none`` alone means no CORS headers.

    Raises:
        ConfigError: A value is not an origin (a path, a trailing slash, no scheme).
    """
    if values is None:
        return (ANY_ORIGIN,)
    origins = tuple(values)
    if origins == ("none",):
        return ()
    for origin in origins:
        if origin != ANY_ORIGIN and not _ORIGIN.fullmatch(origin):
            raise ConfigError(
                f"--allow-origin {origin!r} is not an origin; expected '*', 'none' or "
                "scheme://host[:port] without a path, e.g. https://example.org"
            )
    return origins


def cache_control(url_path: str) -> str:
    """``immutable`` for a path inside a content-hash folder, ``no-cache`` otherwise."""
    return IMMUTABLE if _HASHED.search(url_path) else "no-cache"


class BundleHandler(BaseHTTPRequestHandler):
    """GET/HEAD/OPTIONS for one folder; see the module docstring for the rules."""

    server: BundleHTTPServer
    protocol_version = "HTTP/1.1"

    def do_OPTIONS(self) -> None:
        self.send_response(HTTPStatus.NO_CONTENT)
        self._cors_headers(preflight=True)
        self.send_header("Allow", "GET, HEAD, OPTIONS")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _serve(self, body: bool) -> None:
        url_path = urllib.parse.urlsplit(self.path).path
        target = self._resolve(url_path)
        if target is None:
            self._error(HTTPStatus.NOT_FOUND, "not found")
            return
        if target.is_dir():
            if not url_path.endswith("/"):
                self.send_response(HTTPStatus.MOVED_PERMANENTLY)
                self.send_header("Location", url_path + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            index = self._regular(target / "index.html")
            if index is None:
                self._error(HTTPStatus.NOT_FOUND, "not found")
                return
            target = index
        coding, variant, has_variants = self._pick_variant(target)
        try:
            fd, stat = open_regular(variant, root=self.server.root)
        except (OSError, RefusedFile):
            self._error(HTTPStatus.NOT_FOUND, "not found")
            return
        with os.fdopen(fd, "rb") as handle:
            etag = f'"{stat.st_size:x}-{stat.st_mtime_ns:x}-{coding or "identity"}"'
            not_modified = etag in _etags(self.headers.get("If-None-Match"))
            self.send_response(HTTPStatus.NOT_MODIFIED if not_modified else HTTPStatus.OK)
            self.send_header("Content-Type", _mime(target))
            if coding:
                self.send_header("Content-Encoding", coding)
            if has_variants:
                self.send_header("Vary", "Accept-Encoding")
            self.send_header("Cache-Control", cache_control(url_path))
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", email.utils.formatdate(stat.st_mtime, usegmt=True))
            self._cors_headers(preflight=False)
            if not_modified:
                self.end_headers()
                return
            self.send_header("Content-Length", str(stat.st_size))
            self.end_headers()
            if body:
                self._copy(handle, url_path)

    def _resolve(self, url_path: str) -> Path | None:
        """The file for ``url_path`` inside the served folder, or None (then a 404)."""
        try:
            parts = urllib.parse.unquote(url_path, errors="strict").split("/")
        except UnicodeDecodeError:
            return None
        parts = [p for p in parts if p]
        # No dot-files or dot-folders (.stamp, .., .git) and nothing a filesystem would
        # read as a separator or a drive.
        if any(p.startswith(".") or "\\" in p or "\0" in p or ":" in p for p in parts):
            return None
        target = self._inside(self.server.root.joinpath(*parts))
        try:
            return target if target is not None and target.exists() else None
        except (OSError, ValueError):  # a name too long, a NUL the filesystem refuses
            return None

    def _inside(self, path: Path) -> Path | None:
        """``path`` resolved, if it stays inside the served folder."""
        root = self.server.root
        try:
            target = path.resolve()
        except (OSError, ValueError, RuntimeError):  # a NUL, a link loop
            return None
        return target if target == root or target.is_relative_to(root) else None

    def _regular(self, path: Path) -> Path | None:
        """``path`` resolved, if it is a regular file inside the served folder (no FIFO)."""
        target = self._inside(path)
        try:
            is_regular = target is not None and stat_mode.S_ISREG(os.stat(target).st_mode)
        except (OSError, ValueError):
            return None
        return target if is_regular else None

    def _pick_variant(self, target: Path) -> tuple[str | None, Path, bool]:
        """(coding, file to send, whether compressed variants exist) for ``target``."""
        allowed = accepted_encodings(self.headers.get("Accept-Encoding"))
        has_variants = False
        for coding, suffix in ENCODINGS:
            variant = self._regular(target.with_name(target.name + suffix))
            if variant is not None:
                has_variants = True
                if coding in allowed:
                    return coding, variant, True
        return None, target, has_variants

    def _cors_headers(self, preflight: bool) -> None:
        origin = self.headers.get("Origin")
        allowed = self.server.allow_origins
        if ANY_ORIGIN in allowed:
            self.send_header("Access-Control-Allow-Origin", "*")
        elif origin and origin in allowed:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Vary", "Origin")
        else:
            return
        self.send_header("Cross-Origin-Resource-Policy", "cross-origin")
        if preflight:
            self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
            requested = self.headers.get("Access-Control-Request-Headers")
            if requested:
                self.send_header("Access-Control-Allow-Headers", requested)
            if self.headers.get("Access-Control-Request-Private-Network") == "true":
                # Chromium's Private Network Access: a public page asking for loopback files.
                self.send_header("Access-Control-Allow-Private-Network", "true")
            self.send_header("Access-Control-Max-Age", "86400")
        else:
            # Byte progress reads these; Content-Encoding is not CORS-safelisted.
            self.send_header("Access-Control-Expose-Headers", "Content-Encoding, Content-Length")

    def _copy(self, handle: Any, url_path: str) -> None:
        # Each chunk is tallied before it is written: a client that has read the whole body
        # then finds it counted (counted after the write, the tally could lag the client).
        while chunk := handle.read(_CHUNK):
            self.server.count(url_path, len(chunk))
            self.wfile.write(chunk)

    def _error(self, status: HTTPStatus, message: str) -> None:
        data = f"{int(status)} {message}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache")
        self._cors_headers(preflight=False)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


def _mime(path: Path) -> str:
    return MIME_TYPES.get(path.suffix.lower(), MIME_TYPES[""])


def _etags(header: str | None) -> set[str]:
    return {tag.strip().removeprefix("W/") for tag in (header or "").split(",") if tag.strip()}


class BundleHTTPServer(ThreadingHTTPServer):
    """The threading server plus what the handler reads: the folder, origins, byte counts."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], root: Path, allow_origins: Iterable[str]) -> None:
        self.root = root.resolve()
        self.allow_origins = frozenset(allow_origins)
        self.bytes_sent: dict[str, int] = {}
        self._lock = threading.Lock()
        super().__init__(address, BundleHandler)

    def count(self, url_path: str, sent: int) -> None:
        """Adds ``sent`` body bytes to ``url_path``'s tally (what the network carried)."""
        with self._lock:
            self.bytes_sent[url_path] = self.bytes_sent.get(url_path, 0) + sent

    def counts(self, reset: bool = False) -> dict[str, int]:
        """A copy of the tallies; ``reset`` zeroes them."""
        with self._lock:
            counts = dict(self.bytes_sent)
            if reset:
                self.bytes_sent.clear()
            return counts

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A tab closed mid-download is routine; anything else is logged with its traceback.
        log.debug("request from %s failed", client_address, exc_info=True)


class BundleServer:
    """Serves ``directory`` on ``host:port`` in a background thread.

    Args:
        directory: The folder to serve (e.g. ``dist/web``).
        host: Interface to bind; loopback by default.
        port: TCP port; 0 picks a free one (see :attr:`port`).
        allow_origins: Origins whose pages may load the bundle cross-origin (``*`` for any,
            an empty list for none). Default: any, since every file is public static code.
    """

    def __init__(
        self,
        directory: str | Path,
        host: str = "127.0.0.1",
        port: int = 0,
        allow_origins: Iterable[str] = (ANY_ORIGIN,),
    ) -> None:
        self.directory = Path(directory)
        self.httpd = BundleHTTPServer((host, port), self.directory, allow_origins)
        self.host = host
        self.port = int(self.httpd.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8765/``."""
        return f"http://{self.host}:{self.port}/"

    def bytes_sent(self) -> dict[str, int]:
        """Body bytes sent so far per URL path (compressed bytes where a variant was sent)."""
        return self.httpd.counts()

    def reset_counts(self) -> None:
        """Zeroes :meth:`bytes_sent` (e.g. between a first and a second visit)."""
        self.httpd.counts(reset=True)

    def start(self) -> BundleServer:
        """Starts serving in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serves in the calling thread until interrupted."""
        self.httpd.serve_forever()

    def close(self) -> None:
        """Stops serving and releases the port."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> BundleServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
