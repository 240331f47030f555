"""The ``evermind mcp`` and ``evermind install-mcp`` subcommands.

``evermind mcp`` serves the memory tools over stdio (what MCP hosts launch) or, with
``--http``, over streamable HTTP with bearer-token tenants. ``evermind install-mcp`` registers
the stdio server in the config of every MCP host found (or the ones named), all pointing at
one memory file. The SDK and server stacks are imported inside the command functions so that
``evermind --help`` stays fast. Native-only. The server itself is :mod:`evermind.mcp`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from evermind.cli.args import embedder_spec, package_file, text_file
from evermind.mcp.config import EXPERIENCE_ENV, MEMORY_FILE_ENV, MODEL_ENV, ServerConfig

DEFAULT_HTTP_PORT = 8787


def _server_config(args: argparse.Namespace) -> ServerConfig:
    from evermind.mcp.config import experience_enabled

    return ServerConfig(
        max_results=args.max_results,
        default_results=min(args.max_results, ServerConfig.default_results),
        max_chars=args.max_chars,
        readonly=args.readonly,
        experience=args.experience or experience_enabled(),
        max_runs=args.max_runs,
        workspace_root=None if args.workspace_root is None else Path(args.workspace_root),
        probe_http=args.probe_http,
    )


def cmd_mcp(args: argparse.Namespace) -> int:
    """Runs the MCP memory server (stdio, or streamable HTTP with ``--http``)."""
    import anyio

    from evermind.errors import ConfigError
    from evermind.mcp.config import resolve_model_file, store_namespace
    from evermind.mcp.experience_tools import ExperienceSettings
    from evermind.mcp.server import load_embedder, open_store, run_stdio

    # stdout is the protocol channel under stdio: everything human-readable goes to stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
    config = _server_config(args)
    location = _memory_location(args, config)
    store_namespace(args.tenant, args.namespace)  # the same rules for every store
    if args.embedder is not None and args.model is not None:
        raise ConfigError(
            "mcp: expected --model or --embedder, got both; pass one (--model embeds with a "
            ".evermind package, --embedder with a static embedder file)"
        )
    # An explicit --embedder wins over $EVERMIND_MODEL, as a flag wins over the environment.
    model_file = None if args.embedder is not None else resolve_model_file(args.model)
    embedder = load_embedder(model_file, args.embedder)
    model = getattr(embedder, "model", None)  # memory_compact probes with an Evermind model
    if args.http:
        return _serve_http(args, config, location, embedder, model_file)
    if isinstance(location, str):  # a shared store's URL (checked)
        from evermind.memory.shared_memory import shared_memory

        async def serve_shared() -> None:
            async with shared_memory(
                location, embedder, tenant=args.tenant, namespace=args.namespace
            ) as store:
                await run_stdio(store, config, model, ExperienceSettings())

        anyio.run(serve_shared)
        return 0
    namespace = store_namespace(args.tenant, args.namespace)
    store = open_store(location, embedder, namespace)
    # Over stdio the one tenant served is the local user: the private model is theirs.
    anyio.run(run_stdio, store, config, model, ExperienceSettings(model_file=model_file))
    return 0


def _serve_http(
    args: argparse.Namespace,
    config: ServerConfig,
    location: Path | str,
    embedder: Any,
    model_file: Path | None,
) -> int:
    """``evermind mcp --http``: one MCP server per token's tenant, on a SQLite memory file
    (each tenant its namespace ``<tenant>/<namespace>``) or a shared store (each tenant its own
    items, the tenant every item's ACL, as ``evermind serve --store`` keeps them)."""
    from dataclasses import replace

    from evermind.auth import RateLimiter, TokenTable
    from evermind.mcp.config import store_namespace
    from evermind.mcp.experience_tools import ExperienceSettings
    from evermind.mcp.http import OPEN_TENANT, build_http_app, serve_http
    from evermind.mcp.server import build_server, open_store

    model = getattr(embedder, "model", None)
    tokens = TokenTable.from_file(args.tokens_file)  # no file: the open loopback mode
    # The private model is trained (and its path shown) only for the tenant that owns it.
    owner = args.experience_owner or (None if tokens.enabled else OPEN_TENANT)
    resources: Any = None
    if isinstance(location, str):
        from evermind.memory.shared_memory import memory_source
        from evermind.vectorstore import redacted

        _check_reachable(location, args.namespace)
        source = memory_source(location, embedder, namespace=args.namespace)
        resources, where = source, f"store {redacted(location)}"
        tenant_store: Any = source.store
        owner_namespace = None  # no experience tools (nor a private model) on a shared store
    else:
        memory_file, where = location, f"memory {location}"
        owner_namespace = None if owner is None else store_namespace(owner, args.namespace)

        def tenant_store(tenant: str) -> Any:
            # Tenants share the memory file; each is its own namespace, as in the runtime.
            return open_store(memory_file, embedder, store_namespace(tenant, args.namespace))

    def build(store: Any, readonly: bool) -> Any:
        owns = owner_namespace is not None and store.backend.namespace == owner_namespace
        experience = ExperienceSettings(model_file=model_file if owns else None, owns_model=owns)
        served = replace(config, readonly=config.readonly or readonly)
        return build_server(store, served, model, experience)

    limiter = RateLimiter.per_minute(args.rate_limit)
    app = build_http_app(
        tenant_store, build, tokens, host=args.host, limiter=limiter, resources=resources
    )
    tenants = {who.tenant for who in tokens.principals}
    mode = f"{len(tenants)} tenants" if tokens.enabled else "open (loopback, no token)"
    print(
        f"Evermind MCP: http://{args.host}:{args.port}/mcp  ({mode}; {where}; Ctrl-C to stop)",
        file=sys.stderr,
        flush=True,
    )
    serve_http(app, args.host, args.port)
    return 0


def _check_reachable(location: str, namespace: str) -> None:
    """Opens the shared store (or the host's backend, for tenant ``default``) once and closes
    it, so a bad URL, an unreachable server or a backend that is no ``MemoryBackend`` is one
    error line before the server listens (the server opens it again on its own loop).

    Raises:
        ConfigError: A URL ``--store`` does not take, or a bad backend factory.
        StorageError: The engine cannot be reached.
    """
    import anyio

    from evermind.memory.shared_memory import shared_memory

    async def probe() -> None:
        async with shared_memory(location, None, tenant="default", namespace=namespace):
            pass

    anyio.run(probe)


def _memory_location(args: argparse.Namespace, config: ServerConfig) -> Path | str:
    """The SQLite memory file, or the shared store's URL, that ``--store`` / ``--memory-file``
    name (one of them; neither: the default memory file).

    Raises:
        ConfigError: Both are given, a bad URL, or a shared store with the experience tools
            (their tables live in the SQLite memory file).
    """
    from evermind.errors import ConfigError
    from evermind.mcp.config import resolve_memory_file, resolve_store

    if args.store and args.memory_file:
        raise ConfigError("mcp: expected --store or --memory-file, got both; pass one")
    if not args.store:
        return resolve_memory_file(args.memory_file)
    location = resolve_store(args.store)
    if isinstance(location, str) and config.experience:
        raise ConfigError(
            "mcp: the experience tools keep their tables in a SQLite memory file; "
            "drop --experience (or $EVERMIND_EXPERIENCE) to serve a shared --store"
        )
    return location


def cmd_install_mcp(args: argparse.Namespace) -> int:
    """Registers (or with ``--uninstall`` removes) the stdio server in MCP host configs."""
    from evermind.mcp.installer import install, parse_hosts, server_command, uninstall

    hosts = parse_hosts(args.host)
    if args.uninstall:
        results = uninstall(hosts, name=args.name, dry_run=args.dry_run)
    else:
        command = server_command(
            args.memory_file, args.model, args.readonly, args.store, args.embedder
        )
        results = install(hosts, command, name=args.name, dry_run=args.dry_run)
    results += _hooks(args, hosts)
    if not results:
        print(
            "no MCP host found (looked for Claude Code, Claude Desktop, Cursor, Windsurf, VS Code, "
            "Cline, Gemini CLI, Codex CLI); pass --host all or --host claude-code,cursor,…"
        )
        return 1
    width = max(len(r.host) for r in results)
    for result in results:
        line = f"{result.host:<{width}}  {result.action:<9}  {result.path}"
        print(line + (f"  ({result.detail})" if result.detail else ""))
    if not args.uninstall and any(r.action in ("created", "updated") for r in results):
        print(f"command: {' '.join(results[0].command)}" if results[0].command else "")
        print("restart the host apps (or reload their MCP servers) to pick up the change")
    return 1 if any(r.action == "invalid" for r in results) else 0


def _hooks(args: argparse.Namespace, hosts: list[Any]) -> list[Any]:
    """Claude Code's hooks and skill, when Claude Code is among the hosts (not --no-hooks)."""
    if args.no_hooks or not any(host.name == "claude-code" for host in hosts):
        return []
    from evermind.mcp.config import resolve_memory_file, resolve_store
    from evermind.mcp.hook_install import install_hooks, skip_hooks, uninstall_hooks

    if args.uninstall:
        return uninstall_hooks(dry_run=args.dry_run)
    location = resolve_store(args.store) if args.store else resolve_memory_file(args.memory_file)
    if isinstance(location, str) and location.lower().startswith("memory:"):
        return skip_hooks(location)
    return install_hooks(location, dry_run=args.dry_run)


def cmd_hook(args: argparse.Namespace) -> int:
    """Runs one Claude Code hook (JSON on stdin); always exits 0."""
    from evermind.mcp.hook import run

    return run(args, sys.stdin, sys.stdout, sys.stderr)


def register(sub: Any) -> None:
    """Adds ``mcp`` and ``install-mcp`` to the ``evermind`` command's subparsers."""
    mcp = sub.add_parser(
        "mcp",
        help="serve memory to MCP agents (stdio; --http for streamable HTTP)",
        description=(
            "Serve Evermind memory as MCP tools: memory_recall, memory_get, "
            "memory_recall_by_tag, memory_remember, memory_forget (with --experience also "
            "episodes, skills, runs and experience_train)."
        ),
    )
    mcp.add_argument(
        "--memory-file",
        help=f"SQLite memory file (default: ${MEMORY_FILE_ENV}, else runtime.db in the data dir)",
    )
    mcp.add_argument(
        "--store",
        help="where memory lives instead: a SQLite file (PATH or sqlite:///PATH), or a store "
        "shared with other machines: postgresql://…, qdrant://host:port, memory://, or your "
        "own backend: python:package.module:factory",
    )
    mcp.add_argument(
        "--model",
        type=package_file,
        help=f"a .evermind package to embed with (default: ${MODEL_ENV})",
    )
    mcp.add_argument(
        "--embedder",
        type=embedder_spec,
        metavar="base|PATH",
        help="embed with a static embedder instead of --model: 'base' (the one Evermind ships) "
        "or a .safetensors file evermind build-embedder wrote; recall fuses it with BM25 "
        f"(default: none, lexical recall unless --model or ${MODEL_ENV})",
    )
    mcp.add_argument(
        "--tenant",
        default="default",
        help="the runtime tenant whose memories to serve (stdio; over --http each token's)",
    )
    mcp.add_argument("--namespace", default="default", help="memory namespace (default: 'default')")
    mcp.add_argument("--readonly", action="store_true", help="serve only the read tools")
    mcp.add_argument(
        "--max-results", type=int, default=ServerConfig.max_results, help="cap on top_k / limit"
    )
    mcp.add_argument(
        "--max-chars", type=int, default=ServerConfig.max_chars, help="preview length per hit"
    )
    mcp.add_argument(
        "--experience",
        action="store_true",
        help=f"serve the experience tools: episodes, skills, runs, experience_train "
        f"(default: ${EXPERIENCE_ENV}=1)",
    )
    mcp.add_argument(
        "--experience-owner",
        help="over --http: the tenant that owns --model (only it gets experience_train; "
        "default 'default' without --tokens-file, else nobody)",
    )
    mcp.add_argument(
        "--max-runs", type=int, default=500, help="experience runs kept per tenant (default: 500)"
    )
    mcp.add_argument(
        "--workspace-root",
        help="folder whose files are evidence when memory_remember meets a conflicting fact "
        "(never read outside it; default: none)",
    )
    mcp.add_argument(
        "--probe-http",
        action="store_true",
        help="let memory_remember GET the URLs a conflicting fact names, as evidence",
    )
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    mcp.add_argument("--host", default="127.0.0.1", help="HTTP interface (default: 127.0.0.1)")
    mcp.add_argument("--port", type=int, default=DEFAULT_HTTP_PORT, help="HTTP port")
    mcp.add_argument(
        "--tokens-file",
        type=text_file,
        help="the runtime's tokens file: 'TOKEN TENANT [read|write]' lines (needed off loopback)",
    )
    mcp.add_argument(
        "--rate-limit",
        type=int,
        default=600,
        help="requests a minute per tenant (default: 600)",
    )
    mcp.set_defaults(func=cmd_mcp)

    inst = sub.add_parser(
        "install-mcp",
        help="register `evermind mcp` in MCP hosts (Claude Code, Cursor, VS Code, …)",
        description=(
            "Register the Evermind stdio MCP server in each host's config file: claude-code, "
            "claude-desktop, cursor, windsurf, vscode, cline, gemini-cli, codex. Idempotent; "
            "a .bak is written before any change; --uninstall reverses it."
        ),
    )
    inst.add_argument(
        "--host",
        default="auto",
        help="auto (hosts found on this machine), all, or a comma list (default: auto)",
    )
    inst.add_argument("--readonly", action="store_true", help="register the read-only server")
    inst.add_argument("--memory-file", help="the memory file every host shares (default: data dir)")
    inst.add_argument(
        "--store",
        help="register `evermind mcp --store URL` (and the hooks on it) instead: "
        "postgresql://…, qdrant://…, sqlite:///PATH, memory:// (no hooks: one process only)",
    )
    inst.add_argument(
        "--model", type=package_file, help="a .evermind package the server embeds with"
    )
    inst.add_argument(
        "--embedder",
        type=embedder_spec,
        metavar="base|PATH",
        help="register `evermind mcp --embedder base|PATH` (a static embedder; not with --model)",
    )
    inst.add_argument("--name", default="evermind", help="server name in the configs")
    inst.add_argument("--uninstall", action="store_true", help="remove the server from the configs")
    inst.add_argument(
        "--dry-run", action="store_true", help="say what would change, change nothing"
    )
    inst.add_argument(
        "--no-hooks",
        action="store_true",
        help="do not register the Claude Code memory hooks and skill",
    )
    inst.set_defaults(func=cmd_install_mcp)

    from evermind.mcp.hook import add_arguments

    hook = sub.add_parser(
        "hook",
        help="a Claude Code hook: session-start, user-prompt-submit, pre-compact, stop",
        description="Run one Claude Code memory hook: the event's JSON on stdin, exit 0 always.",
    )
    add_arguments(hook)
    hook.set_defaults(func=cmd_hook)


__all__ = ["cmd_hook", "cmd_install_mcp", "cmd_mcp", "register"]
