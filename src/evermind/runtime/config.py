"""Settings of one runtime server and where its state lives by default (native-only).

This module owns :class:`RuntimeConfig` (every limit the server enforces, with its default)
and :func:`default_data_dir` (the per-user data directory, XDG style on Linux).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from evermind.errors import ConfigError
from evermind.paths import data_dir
from evermind.telemetry.otlp_json import check_endpoint
from evermind.train.teachers import LOCAL_TEACHERS
from evermind.vectorstore.shared import check_store_url

MIB = 1024 * 1024
DEFAULT_PORT = 8377


def default_data_dir() -> Path:
    """The per-user data directory of the runtime: :func:`evermind.paths.data_dir`.

    ``$XDG_DATA_HOME/evermind`` (default ``~/.local/share/evermind``) on Linux and other
    Unixes, ``~/Library/Application Support/evermind`` on macOS, ``%LOCALAPPDATA%\\evermind``
    on Windows. The MCP server resolves the same directory, so both share one memory file.
    """
    return data_dir()


def is_loopback(host: str) -> bool:
    """Whether binding to ``host`` keeps the server reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class RuntimeConfig:
    """Everything one server needs to start.

    Attributes:
        data_dir: Installed packages and the SQLite database live here.
        host: Interface the server binds to (for the loopback-without-auth check).
        port: TCP port.
        tokens_file: Path of the tokens file (see docs/runtime.md); None: no auth, one
            tenant ``default`` with write access (loopback only unless ``insecure_no_auth``).
        insecure_no_auth: Allow running without tokens on a non-loopback address.
        cors_origins: Exact allowed origins; empty: any ``http(s)://`` loopback origin. A
            request whose ``Origin`` is not allowed is refused (403) before it runs.
        allowed_hosts: Host names the ``Host`` header may carry (421 otherwise: DNS
            rebinding). Empty: loopback names when ``host`` is loopback, else any.
        max_package_bytes: Largest package a push may upload (413 beyond).
        max_request_bytes: Largest JSON request body (413 beyond).
        max_tokens_cap: Largest ``max_tokens`` a generation request may ask for (400 beyond).
        default_max_tokens: ``max_tokens`` when a request does not say.
        max_embedding_inputs: Most texts in one embeddings request.
        max_input_chars: Longest prompt or embedding input, in characters.
        max_prompt_tokens: Longest prompt in tokens (400 beyond): every prompt token costs a
            step of the model before the first output token.
        tenant_generations: Generations one tenant may have in the decoding batch at once (its
            next ones wait in line; 0: three quarters of ``batch_slots``, at least 1).
        tenant_queue: Generations one tenant may have waiting beyond those (429 beyond).
        rate_limit: Requests per second each tenant may sustain (0: unlimited).
        rate_burst: Requests a tenant may send at once before the rate applies (0: 2 x rate).
        memory_budget_bytes: Loaded models are evicted (least recently used first) above this.
        worker_threads: Size of the thread pool that runs embeddings and model loading.
        batch_slots: Sequences each served model decodes together in one batched step.
        cache_max_entries: Entries kept per semantic-cache namespace (oldest evicted).
        upstreams_file: The gateway's upstreams and cache policy (TOML or JSON, see
            docs/gateway.md); None: no gateway, only local models are served.
        device: What decodes: ``cpu`` (numpy), ``gpu`` (wgpu-py, any adapter) or ``auto`` (a
            real GPU if wgpu-py finds one, else numpy); see :mod:`evermind.runtime.devices`.
        store: Where memory and the L2 cache live: None (the default) keeps them in
            ``runtime.db``; ``postgresql://…`` (or ``qdrant://host:port``) in that server,
            shared by every runtime on it; ``memory://`` in this process only. See
            :mod:`evermind.vectorstore.shared` and docs/runtime.md ("Scale-out").
        cache_scope: Overrides the upstreams file's ``[cache] scope`` (who is served a
            gateway cache entry: ``user``, ``tenant`` or ``group``); None: the file decides.
        max_connections: Connections (and in-flight requests) the server holds at once; past
            them a request is answered 503 (uvicorn's ``limit_concurrency``).
        keep_alive_s: Seconds an idle connection is kept: after a response, and before a
            connection's first request (uvicorn's ``timeout_keep_alive``).
        trusted_proxies: Addresses of reverse proxies whose ``X-Forwarded-For`` names the
            client (the failed-authentication limiter keys missing credentials on it); empty:
            the header is ignored and the client is the socket's peer.
        memory_workspace_root: The folder whose files are evidence when a memory write
            conflicts with a stored fact (``--memory-workspace-root``; read only under it, for
            every tenant: set it only where the tenants may know what the folder holds).
            None: no file evidence.
        memory_probe_http: Whether a conflicting memory write may GET the URLs it names, as
            evidence (``--memory-probe-http``; off: a write must not make the server fetch).
        embedder: The memory routes' embedder when a request names no ``model``
            (``--embedder``): ``base`` (the shipped base embedder) or the path of a static
            embedder file (:mod:`evermind.embedder.shipped`). None: such requests recall
            lexically (BM25 only), as before.
        otlp_endpoint: Base URL of an OTLP/HTTP collector (``http://host:4318``): GenAI spans
            and metrics are exported there (docs/telemetry.md). None: the standard
            ``OTEL_EXPORTER_OTLP_ENDPOINT`` variable decides; unset, telemetry is off.
    """

    data_dir: Path = field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    tokens_file: Path | None = None
    insecure_no_auth: bool = False
    cors_origins: list[str] = field(default_factory=list)
    allowed_hosts: list[str] = field(default_factory=list)
    max_package_bytes: int = 1024 * MIB
    max_request_bytes: int = 4 * MIB
    max_tokens_cap: int = 4096
    default_max_tokens: int = 128
    max_embedding_inputs: int = 2048
    max_input_chars: int = 200_000
    max_prompt_tokens: int = 8192
    tenant_generations: int = 0
    tenant_queue: int = 16
    rate_limit: float = 100.0
    rate_burst: int = 0
    memory_budget_bytes: int = 2048 * MIB
    worker_threads: int = field(default_factory=lambda: min(32, (os.cpu_count() or 1) + 4))
    cache_max_entries: int = 100_000
    batch_slots: int = 32
    #: Local teacher embedders served on ``/v1/embeddings`` to every tenant (e.g.
    #: ``["minilm"]`` serves model ``teacher/all-minilm-l6-v2``; see train/teachers.py).
    teachers: list[str] = field(default_factory=list)
    upstreams_file: Path | None = None
    #: ``--cache-max-error``: overrides the upstreams file's ``[cache] max_error`` (a rate in
    #: (0, 1) or ``"off"``); None keeps the file's (default 0.01).
    cache_max_error: str | None = None
    device: str = "cpu"
    store: str | None = None
    otlp_endpoint: str | None = None
    cache_scope: str | None = None
    max_connections: int = 1024
    keep_alive_s: int = 5
    trusted_proxies: list[str] = field(default_factory=list)
    memory_workspace_root: Path | None = None
    memory_probe_http: bool = False
    embedder: str | None = None

    @property
    def generation_slots(self) -> int:
        """Generations one tenant may run at once (see ``tenant_generations``)."""
        return self.tenant_generations or max(1, self.batch_slots * 3 // 4)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.teachers) - set(LOCAL_TEACHERS))
        if unknown:
            raise ConfigError(
                f"RuntimeConfig.teachers: unknown teacher(s) {unknown}; expected some of "
                f"{sorted(LOCAL_TEACHERS)}"
            )
        if self.device not in ("cpu", "gpu", "auto"):
            raise ConfigError(
                f"RuntimeConfig.device: expected cpu, gpu or auto, got {self.device!r}"
            )
        if self.store is not None:
            check_store_url(self.store)
        if self.embedder is not None:
            from evermind.embedder.shipped import spec_path

            self.embedder = spec_path(self.embedder)  # 'base', or an absolute existing file
        self.data_dir = Path(self.data_dir)
        if self.otlp_endpoint is not None:
            self.otlp_endpoint = check_endpoint(self.otlp_endpoint)
        if self.tokens_file is not None:
            self.tokens_file = Path(self.tokens_file)
        if self.upstreams_file is not None:
            self.upstreams_file = Path(self.upstreams_file)
        positive = {
            "max_package_bytes": self.max_package_bytes,
            "max_request_bytes": self.max_request_bytes,
            "max_tokens_cap": self.max_tokens_cap,
            "default_max_tokens": self.default_max_tokens,
            "max_embedding_inputs": self.max_embedding_inputs,
            "max_input_chars": self.max_input_chars,
            "max_prompt_tokens": self.max_prompt_tokens,
            "tenant_queue": self.tenant_queue,
            "memory_budget_bytes": self.memory_budget_bytes,
            "worker_threads": self.worker_threads,
            "cache_max_entries": self.cache_max_entries,
            "max_connections": self.max_connections,
            "keep_alive_s": self.keep_alive_s,
        }
        for name, value in positive.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"RuntimeConfig.{name}: expected an integer >= 1, got {value!r}")
        if (
            isinstance(self.tenant_generations, bool)
            or not isinstance(self.tenant_generations, int)
            or self.tenant_generations < 0
        ):
            raise ConfigError(
                "RuntimeConfig.tenant_generations: expected an integer >= 0, got "
                f"{self.tenant_generations!r}"
            )
        if self.default_max_tokens > self.max_tokens_cap:
            raise ConfigError(
                f"RuntimeConfig: default_max_tokens {self.default_max_tokens} exceeds "
                f"max_tokens_cap {self.max_tokens_cap}; hint: raise the cap or lower the default"
            )
        if self.rate_limit < 0 or self.rate_burst < 0:
            raise ConfigError(
                f"RuntimeConfig: rate_limit and rate_burst must be >= 0, got "
                f"{self.rate_limit} and {self.rate_burst}"
            )
        for proxy in self.trusted_proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError as err:
                raise ConfigError(
                    f"RuntimeConfig.trusted_proxies: {proxy!r} is not an IP address or network; "
                    "hint: --trusted-proxy 10.0.0.2 (or 10.0.0.0/24)"
                ) from err
        if not 0 <= self.port < 65536:
            raise ConfigError(f"RuntimeConfig.port: expected 0..65535, got {self.port}")

    def check_exposure(self) -> None:
        """Refuses a non-loopback bind without tokens unless ``insecure_no_auth`` is set.

        Raises:
            ConfigError: The server would be reachable from the network with no auth.
        """
        if self.tokens_file is None and not is_loopback(self.host) and not self.insecure_no_auth:
            raise ConfigError(
                f"refusing to serve on {self.host} without authentication; expected a "
                "--tokens-file (or a loopback --host such as 127.0.0.1); hint: pass "
                "--insecure-no-auth if anyone who can reach this address may push and generate"
            )

    @property
    def models_dir(self) -> Path:
        """``<data>/models``: installed packages."""
        return self.data_dir / "models"

    @property
    def tmp_dir(self) -> Path:
        """``<data>/tmp``: uploads and staged installs; emptied at start."""
        return self.data_dir / "tmp"

    @property
    def db_path(self) -> Path:
        """``<data>/runtime.db``: the SQLite database (memories and the semantic cache)."""
        return self.data_dir / "runtime.db"
