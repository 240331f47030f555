"""``evermind ingest``: files and folders into a memory store, diff-synced (native-only).

Parses the arguments, draws the progress bar and prints the report as one JSON line on
stdout (a summary on stderr); the work is :func:`evermind.ingest.sync`'s. The store is the
MCP server's memory file unless ``--store`` names another, and the namespace is the one
``evermind mcp --tenant T --namespace N`` reads, so what is ingested here is what the MCP
tools recall. With ``--model`` the package embeds the chunks and its tokenizer counts
the chunk sizes (else sizes are in words); ``--embedder terms`` embeds with hashed content
terms instead (no model). Reading never leaves the folders given: links are reported, not
followed, unless ``--follow-symlinks`` (and then only inside), and only regular files are
opened (:mod:`evermind.ingest.files`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from evermind.cli.args import folder, input_path, package_file
from evermind.errors import ConfigError
from evermind.mcp.config import DEFAULT_NAMESPACE, DEFAULT_TENANT


def register(sub: Any) -> None:
    """Adds ``ingest`` to the ``evermind`` command."""
    cmd = sub.add_parser(
        "ingest",
        help="put files and folders (Markdown, HTML, JSON/JSONL, CSV/TSV, text) into memory",
        description=(
            "Parse, chunk and diff-sync files into a memory store: only new or changed "
            "chunks are written and embedded, and files gone from a synced folder are forgotten."
        ),
    )
    cmd.add_argument(
        "paths", nargs="*", metavar="PATH", type=input_path, help="files and folders to ingest"
    )
    cmd.add_argument(
        "--store",
        help="a SQLite file or sqlite:///PATH (default: the MCP memory file, "
        "$EVERMIND_MEMORY_FILE or the data directory's), or a shared store: postgresql://…, "
        "qdrant://host:port, memory://",
    )
    cmd.add_argument(
        "--tenant",
        default=DEFAULT_TENANT,
        help=f"tenant of the namespace (default: {DEFAULT_TENANT})",
    )
    cmd.add_argument(
        "--namespace", default=DEFAULT_NAMESPACE, help=f"namespace (default: {DEFAULT_NAMESPACE})"
    )
    cmd.add_argument("--fields", help="JSON/JSONL fields that are the text, comma-separated")
    cmd.add_argument("--columns", help="CSV/TSV columns that are the text, comma-separated")
    cmd.add_argument("--parser", help="parse every file with this parser (e.g. text)")
    cmd.add_argument(
        "--model",
        type=package_file,
        help="a .evermind package that embeds; sizes in its tokens (default: $EVERMIND_MODEL)",
    )
    cmd.add_argument(
        "--embedder",
        choices=["none", "terms"],
        default="none",
        help="without --model: none (lexical recall) or terms (hashed content terms)",
    )
    cmd.add_argument("--size", type=int, default=200, help="most tokens (or words) per chunk")
    cmd.add_argument(
        "--overlap", type=int, default=30, help="tokens (or words) shared by neighbours"
    )
    cmd.add_argument(
        "--base", type=folder, help="source ids are paths relative to this folder (default: .)"
    )
    cmd.add_argument("--tag", action="append", default=[], help="extra tag on every chunk")
    cmd.add_argument("--no-prune", action="store_true", help="keep sources gone from a folder")
    cmd.add_argument(
        "--fail-fast",
        action="store_true",
        help="stop at the first bad file (exit 2) instead of reporting it and going on; by "
        "default a bad file fails alone, the run continues, and the exit status is 1 when any "
        "file failed",
    )
    cmd.add_argument(
        "--keep-going", action="store_true", help="the default (kept for older scripts)"
    )
    cmd.add_argument(
        "--max-bytes",
        type=int,
        default=20 * 1024 * 1024,
        help="skip larger files (a file that grows past it keeps its stored chunks)",
    )
    cmd.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="follow symbolic links whose target stays inside the folder (default: links "
        "are reported and not read)",
    )
    cmd.add_argument(
        "--forget", action="append", default=[], metavar="SOURCE", help="remove a source"
    )
    cmd.add_argument("--list", action="store_true", help="print the stored sources and stop")
    cmd.set_defaults(func=cmd_ingest)


def store_path(value: str | None) -> Path | str:
    """The SQLite file ``--store`` names (a path or ``sqlite:///PATH``), or a shared store's URL.

    Raises:
        ConfigError: An unknown URL scheme, or a folder.
    """
    from evermind.mcp.config import resolve_store

    return resolve_store(value)


def _names(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if not names:
        raise ConfigError(f"expected comma-separated names, got {value!r}")
    return names


def embedder_for(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(embedder, tokenizer)`` the arguments ask for (each may be None)."""
    from evermind.mcp.config import resolve_model_file

    model_file = resolve_model_file(args.model)
    if model_file is not None:
        import evermind

        model = evermind.load(model_file)
        print(f"ingest: embedding with {model_file.name} ({model.fingerprint})", file=sys.stderr)
        return model, model.tokenizer
    if args.embedder == "terms":
        return TermsEmbedder(), None
    return None, None


class TermsEmbedder:
    """The gateway's model-free ``TermEmbedder`` (hashed content terms) as a batch embedder."""

    def __init__(self) -> None:
        from evermind.bridges.caching import TermEmbedder

        self._terms = TermEmbedder()
        self.fingerprint = self._terms.fingerprint

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One hashed-terms vector per text."""
        return [self._terms(text) for text in texts]


def cmd_ingest(args: argparse.Namespace) -> int:
    from evermind import ingest
    from evermind.cli.progress import ProgressBar
    from evermind.mcp.config import store_namespace
    from evermind.memory import MemoryStore

    if not args.paths and not args.forget and not args.list:
        raise ConfigError("ingest: expected PATH..., --forget SOURCE or --list")
    path = store_path(args.store)
    namespace = store_namespace(args.tenant, args.namespace)
    embedder, tokenizer = embedder_for(args) if args.paths else (None, None)
    chunker = ingest.Chunker(args.size, args.overlap, tokenizer)
    options = ingest.ParseOptions(fields=_names(args.fields), columns=_names(args.columns))
    bars: list[ProgressBar] = []

    def on_progress(event: ingest.IngestProgress) -> None:
        if not bars:
            bars.append(ProgressBar("ingest", event.total))
        bars[0].update(event.done, f"{event.chunks} chunks")

    def opened() -> Any:
        if isinstance(path, str):  # a shared store: the tenant's namespace, as serve names it
            from evermind.memory.shared_memory import shared_memory

            return shared_memory(path, embedder, tenant=args.tenant, namespace=args.namespace)
        return MemoryStore(path, embedder, namespace=namespace)

    async def run() -> dict[str, Any]:
        async with opened() as store:
            if args.list:
                return {"sources": [_manifest_row(m) for m in await ingest.sources(store)]}
            forgotten = {s: await ingest.forget(store, s) for s in args.forget}
            out: dict[str, Any] = {}
            if args.paths:
                report = await ingest.sync(
                    store,
                    args.paths,
                    base=args.base,
                    chunker=chunker,
                    options=options,
                    parser=args.parser,
                    tags=args.tag,
                    prune=not args.no_prune,
                    errors="raise" if args.fail_fast else "skip",
                    max_bytes=args.max_bytes,
                    follow_symlinks=args.follow_symlinks,
                    on_progress=on_progress,
                )
                out = report.to_dict()
                _summary(report)
            if args.forget:
                out["forgot"] = forgotten
            out["store"], out["namespace"] = _shown(path), namespace
            return out

    out = asyncio.run(run())
    print(json.dumps(out))
    return 1 if out.get("failed") else 0


def _shown(path: Path | str) -> str:
    """The store as the report names it: a URL without its password."""
    if isinstance(path, Path):
        return str(path)
    from urllib.parse import urlsplit

    parts = urlsplit(path)
    if parts.password is None:
        return path
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _manifest_row(manifest: Any) -> dict[str, Any]:
    return {
        "source": manifest.source,
        "kind": manifest.kind,
        "chunks": len(manifest.chunks),
        "origin": manifest.origin,
        "title": manifest.title,
        "ingested_at": manifest.ingested_at,
    }


def _summary(report: Any) -> None:
    print(
        f"ingest: {report.sources} sources, {report.chunks} chunks ({report.unit}): "
        f"{report.added} added, {report.updated} updated, {report.deleted} deleted, "
        f"{report.unchanged} unchanged; {report.embeds} embedded; {report.seconds:.2f} s "
        f"({report.chunks_per_second():,.0f} chunks/s)",
        file=sys.stderr,
    )
    print(
        f"ingest: {report.ok} ok, {len(report.failed)} failed, {len(report.skipped)} skipped",
        file=sys.stderr,
    )
    for path, reason in report.failed:
        print(f"ingest: failed {path}: {reason}", file=sys.stderr)
    for path, reason in report.skipped:
        print(f"ingest: skipped {path}: {reason}", file=sys.stderr)
    for source in report.forgotten:
        print(f"ingest: forgot {source} (gone from its folder)", file=sys.stderr)
