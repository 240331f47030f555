"""``evermind serve`` and ``evermind push`` (native-only; heavy imports inside the commands).

``register(subparsers)`` adds both subcommands to the ``evermind`` command.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from evermind.cli.args import embedder_spec, package_file, text_file

MIB = 1024 * 1024


def cmd_serve(args: argparse.Namespace) -> int:
    """Runs the runtime in the foreground."""
    # The server runs many small requests in parallel on its worker pool; BLAS threads inside
    # each small matmul would oversubscribe the cores (measured: 8 clients of embeddings fell
    # from ~160 to ~10 requests/s). Set before numpy loads; an explicit setting wins.
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    import logging

    from evermind.runtime.config import RuntimeConfig, default_data_dir
    from evermind.runtime.server import serve

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    config = RuntimeConfig(
        data_dir=Path(args.data) if args.data else default_data_dir(),
        host=args.host,
        port=args.port,
        tokens_file=Path(args.tokens_file) if args.tokens_file else None,
        insecure_no_auth=args.insecure_no_auth,
        cors_origins=list(args.cors_origin or []),
        allowed_hosts=list(args.allowed_host or []),
        max_package_bytes=int(args.max_package_mb * MIB),
        max_request_bytes=int(args.max_request_mb * MIB),
        max_tokens_cap=args.max_tokens,
        default_max_tokens=min(128, args.max_tokens),
        rate_limit=args.rate_limit,
        memory_budget_bytes=int(args.memory_budget_mb * MIB),
        teachers=list(args.teacher or []),
        **({"worker_threads": args.workers} if args.workers else {}),
        max_prompt_tokens=args.max_prompt_tokens,
        tenant_generations=args.tenant_generations,
        upstreams_file=Path(args.upstreams) if args.upstreams else None,
        cache_max_error=args.cache_max_error,
        batch_slots=args.batch_slots,
        device=args.device,
        store=args.store,
        otlp_endpoint=args.otlp_endpoint,
        max_connections=args.max_connections,
        keep_alive_s=args.keep_alive,
        trusted_proxies=list(args.trusted_proxy or []),
        cache_scope=args.cache_scope,
        memory_workspace_root=(
            Path(args.memory_workspace_root) if args.memory_workspace_root else None
        ),
        memory_probe_http=args.memory_probe_http,
        embedder=args.embedder,
    )
    config.check_exposure()
    from evermind.runtime.devices import resolve_device

    serving = resolve_device(config.device)  # fails here if --device gpu finds no adapter
    auth = f"tokens from {config.tokens_file}" if config.tokens_file else "no auth (loopback)"
    if config.upstreams_file:
        auth += f"; gateway upstreams from {config.upstreams_file}"
    if config.embedder:
        auth += f"; memory embeds with --embedder {config.embedder} unless a request names a model"
    if config.store:
        from urllib.parse import urlsplit

        where = urlsplit(config.store)  # printed without user name or password
        auth += f"; memory and cache on {where.scheme}://{where.hostname or ''}{where.path}"
    collector = config.otlp_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if collector:
        auth += f"; telemetry to {collector}"
    print(
        f"Evermind runtime on http://{config.host}:{config.port}  data: {config.data_dir}  "
        f"{auth}  decoding on {serving.kind}: {serving.adapter}  (docs at /docs; Ctrl-C to stop)",
        flush=True,
    )
    serve(config, log_level=args.log_level)
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    """Pushes a package and prints the id it is served under."""
    from evermind.runtime.push import push_package

    token = args.token or os.environ.get("EVERMIND_TOKEN")
    size = Path(args.file).stat().st_size if Path(args.file).is_file() else 0
    show = size >= 4 * MIB and sys.stderr.isatty()

    def progress(sent: int, total: int) -> None:
        width = 30
        done = int(width * sent / max(total, 1))
        print(
            f"\r[{'#' * done}{' ' * (width - done)}] {100 * sent / max(total, 1):5.1f}%  "
            f"{sent / MIB:.1f}/{total / MIB:.1f} MiB",
            end="",
            file=sys.stderr,
            flush=True,
        )

    answer = push_package(args.file, args.to, token, progress=progress if show else None)
    if show:
        print(file=sys.stderr)
    state = "installed" if answer.get("created", True) else "already installed"
    print(answer["id"])
    print(f"{state}: {answer.get('digest', '')}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``serve`` and ``push`` to the ``evermind`` command."""
    serve = sub.add_parser(
        "serve", help="serve pushed .evermind packages (OpenAI-compatible API, memory, cache)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="interface (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8377, help="TCP port (default: 8377)")
    serve.add_argument("--data", help="data directory (default: the per-user data dir)")
    serve.add_argument(
        "--tokens-file", type=text_file, help="token -> tenant file (see docs/runtime.md)"
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help="allowed browser origin (repeatable; default: any loopback origin)",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="host name clients reach the server by (repeatable; default: loopback names when "
        "bound to loopback, else any); other Host headers get 421",
    )
    serve.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="allow a non-loopback --host without a tokens file",
    )
    serve.add_argument("--max-package-mb", type=float, default=1024, help="push size cap")
    serve.add_argument("--max-request-mb", type=float, default=4, help="JSON body size cap")
    serve.add_argument("--max-tokens", type=int, default=4096, help="max_tokens cap")
    serve.add_argument(
        "--rate-limit", type=float, default=100, help="requests/s per tenant (0: off)"
    )
    serve.add_argument(
        "--memory-budget-mb", type=float, default=2048, help="memory for loaded models"
    )
    serve.add_argument(
        "--teacher",
        action="append",
        choices=["minilm"],
        help="serve a local teacher embedder on /v1/embeddings (minilm: model id "
        "teacher/all-minilm-l6-v2; repeatable)",
    )
    serve.add_argument("--workers", type=int, default=0, help="worker threads (0: auto)")
    serve.add_argument(
        "--memory-workspace-root",
        help="folder whose files are evidence when a memory write conflicts with a stored "
        "fact (never read outside it; default: none)",
    )
    serve.add_argument(
        "--memory-probe-http",
        action="store_true",
        help="let a conflicting memory write GET the URLs it names, as evidence",
    )
    serve.add_argument(
        "--embedder",
        type=embedder_spec,
        metavar="base|PATH",
        help="the memory routes' embedder when a request names no model: 'base' (the static "
        "embedder Evermind ships) or a .safetensors file evermind build-embedder wrote; recall "
        "then fuses it with BM25 (default: none, such requests recall lexically)",
    )
    serve.add_argument(
        "--max-prompt-tokens", type=int, default=8192, help="longest prompt, in tokens (400 beyond)"
    )
    serve.add_argument(
        "--tenant-generations",
        type=int,
        default=0,
        help="generations one tenant may have in the batch (0: 3/4 of --batch-slots)",
    )
    serve.add_argument(
        "--batch-slots", type=int, default=32, help="sequences a model decodes together per step"
    )
    serve.add_argument(
        "--upstreams",
        metavar="FILE",
        type=text_file,
        help="gateway: upstream models (anthropic/openai), their keys and the cache policy, "
        "TOML or JSON (see docs/gateway.md); models <upstream>/<name> then go through the cache",
    )
    serve.add_argument(
        "--cache-max-error",
        metavar="DELTA",
        default=None,
        help="gateway cache: the share of cacheable lookups you accept being answered wrongly "
        "(default: 0.01, or the upstreams file's [cache] max_error); 'off' for the rule-based "
        "decision (see docs/gateway.md)",
    )
    serve.add_argument(
        "--device",
        default="auto",
        choices=["cpu", "gpu", "auto"],
        help="what decodes: cpu (numpy), gpu (wgpu-py, any adapter, lavapipe included) or auto "
        "(a real GPU if wgpu-py finds one, else numpy; default)",
    )
    serve.add_argument(
        "--store",
        metavar="URL",
        help="keep memory and the L2 cache in this vector store instead of <data>/runtime.db: "
        "postgresql://user:pass@host/db (shared by every runtime on it: run several behind a "
        "load balancer), qdrant://host:port, or memory:// (this process only); see "
        "docs/runtime.md, 'Scale-out'",
    )
    serve.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="export GenAI traces and metrics over OTLP/HTTP to this collector base URL, e.g. "
        "http://127.0.0.1:4318 (default: $OTEL_EXPORTER_OTLP_ENDPOINT; unset: off; protobuf with "
        "the telemetry extra, else OTLP JSON); see docs/telemetry.md",
    )
    serve.add_argument(
        "--cache-scope",
        choices=["user", "tenant", "group"],
        help="gateway: who is served a cached answer: the token that stored it (user), any "
        "token of its tenant (tenant) or its [cache.shared] group (group); default: the "
        "upstreams file's [cache] scope (tenant)",
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        default=1024,
        help="connections and in-flight requests held at once; past them a request gets 503 "
        "(default: 1024)",
    )
    serve.add_argument(
        "--keep-alive",
        type=int,
        default=5,
        metavar="SECONDS",
        help="an idle connection (before its first request or between requests) is closed "
        "after this long (default: 5)",
    )
    serve.add_argument(
        "--trusted-proxy",
        action="append",
        metavar="IP",
        help="a reverse proxy (address or network) whose X-Forwarded-For names the client; "
        "repeatable; without one the header is ignored (see docs/runtime.md)",
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="server log detail",
    )
    serve.set_defaults(func=cmd_serve)

    push = sub.add_parser("push", help="push a .evermind package to a runtime")
    push.add_argument("file", type=package_file, help="the .evermind package")
    push.add_argument(
        "--to", required=True, metavar="URL", help="runtime URL, e.g. http://127.0.0.1:8377"
    )
    push.add_argument("--token", help="bearer token (default: $EVERMIND_TOKEN)")
    push.set_defaults(func=cmd_push)
