"""A static file server for the offline bundle, bound to loopback by default (native-only).

Serves the built Studio to a browser on this machine: ``evermind studio``, headless training,
``evermind doctor`` and the browser tests. Standard library only. MIME types are set
explicitly (``.mjs``/``.wasm`` are missing from Python 3.11's table and would otherwise fall
back to the OS's mime.types).
"""

from __future__ import annotations

import logging
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MIME_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".wasm": "application/wasm",
    ".wgsl": "text/plain; charset=utf-8",
    ".whl": "application/zip",
    ".zip": "application/zip",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".evermind": "application/zip",
    "": "application/octet-stream",
}


class BundleHandler(SimpleHTTPRequestHandler):
    """Serves files with explicit MIME types and without caching of the bundle's index."""

    extensions_map = MIME_TYPES

    def end_headers(self) -> None:
        # The bundle changes on rebuild; let the browser revalidate instead of guessing.
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class BundleServer:
    """Serves ``directory`` on ``host:port`` in a background thread.

    Args:
        directory: The folder to serve (e.g. ``dist/web``).
        host: Interface to bind; loopback by default.
        port: TCP port; 0 picks a free one (see :attr:`port`).
    """

    def __init__(self, directory: str | Path, host: str = "127.0.0.1", port: int = 0) -> None:
        self.directory = Path(directory)
        handler = partial(BundleHandler, directory=str(self.directory))
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.host = host
        self.port = int(self.httpd.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8765/``."""
        return f"http://{self.host}:{self.port}/"

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
