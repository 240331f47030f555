"""Running the runtime app on uvicorn, in the foreground or on a background thread
(native-only).

:func:`serve` is what ``evermind serve`` calls. :class:`ServerThread` runs a server inside
this process on a free loopback port (tests, the benchmark, notebooks).
"""

from __future__ import annotations

import gc
import logging
import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from evermind.errors import EvermindError
from evermind.runtime.app import create_app
from evermind.runtime.config import RuntimeConfig

logger = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


#: Seconds in-flight requests get after SIGTERM before they are cancelled.
GRACEFUL_SHUTDOWN_S = 5


def _idle_closing(base: type[Any]) -> type[Any]:
    """``base`` (uvicorn's HTTP protocol) closing a connection that is idle before its request.

    uvicorn arms its keep-alive timer after a response and disarms it when data arrives; this
    also arms it when the connection opens and after data that leaves the request's head
    incomplete. Should a uvicorn version lack the hooks, ``base`` is returned unchanged.
    """
    hooks = ("connection_made", "data_received", "timeout_keep_alive_handler")
    if not all(hasattr(base, hook) for hook in hooks):
        return base

    class IdleClosing(base):  # type: ignore[misc]
        def _arm(self) -> None:
            cycle = getattr(self, "cycle", None)
            if cycle is not None and not cycle.response_complete:
                return  # a request is being served: uvicorn's own timers apply
            self._unset_keepalive_if_required()
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self.transport.is_closing():
                self._arm()

    IdleClosing.__name__ = f"IdleClosing{base.__name__}"
    return IdleClosing


def _uvicorn_config(config: RuntimeConfig, log_level: str) -> uvicorn.Config:
    trusted = list(config.trusted_proxies)
    return uvicorn.Config(
        create_app(config),
        host=config.host,
        port=config.port,
        log_level=log_level,
        lifespan="on",
        http=_idle_closing(AutoHTTPProtocol),
        limit_concurrency=config.max_connections,
        timeout_keep_alive=config.keep_alive_s,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        # X-Forwarded-For names the client only when a trusted proxy sent it; uvicorn's own
        # default trusts 127.0.0.1, so anyone on the loopback could claim any address.
        proxy_headers=bool(trusted),
        forwarded_allow_ips=trusted or None,
        server_header=False,
        # Streams and pushes must not wait on Nagle; uvicorn sets TCP_NODELAY itself.
    )


def serve(config: RuntimeConfig, log_level: str = "info") -> None:
    """Serves until interrupted (Ctrl-C / SIGTERM).

    Raises:
        ConfigError: No tokens on a non-loopback address, or bad settings.
    """
    config.check_exposure()
    server = uvicorn.Server(_uvicorn_config(config, log_level))
    # Everything built so far (modules, classes, the app and its routes: ~120,000 objects)
    # lives as long as the process: out of the collector's sight, a full collection no longer
    # walks them all (~40 ms with the GIL held, during which no request or step runs).
    gc.collect()
    gc.freeze()
    server.run()


class ServerThread:
    """A runtime server on a background thread; a context manager.

    Args:
        config: The settings; ``port=0`` picks a free port.
        log_level: uvicorn's log level.
        start_timeout_s: How long :meth:`start` waits for the server to accept connections.
    """

    def __init__(
        self, config: RuntimeConfig, log_level: str = "warning", start_timeout_s: float = 30.0
    ) -> None:
        if config.port == 0:
            config.port = free_port(config.host)
        config.check_exposure()
        self.config = config
        self._timeout = start_timeout_s
        self.server = uvicorn.Server(_uvicorn_config(config, log_level))
        self._thread = threading.Thread(
            target=self.server.run, name="evermind-runtime", daemon=True
        )

    @property
    def url(self) -> str:
        """``http://host:port`` of the server."""
        return f"http://{self.config.host}:{self.config.port}"

    def start(self) -> ServerThread:
        """Starts the thread and waits until the server is up.

        Raises:
            EvermindError: The server did not start in time (e.g. the port is taken).
        """
        self._thread.start()
        deadline = time.monotonic() + self._timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise EvermindError(
                    f"the runtime did not start on {self.url} within {self._timeout} s; "
                    "hint: is the port already in use?"
                )
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Asks the server to shut down and waits for the thread."""
        self.server.should_exit = True
        self._thread.join(timeout=self._timeout)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
