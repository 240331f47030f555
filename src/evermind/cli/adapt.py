"""``evermind adapt``: adapt a package to new text with a LoRA adapter, kept only if better
(native-only).

Parses the arguments, reads the text files, shows the training progress and writes what an
accepted :func:`evermind.train.adapt.adapt` returns; the work is the library's. The model
file is never overwritten unless the adaptation was accepted: the merged package goes to
``--out`` (a new file), or with ``--in-place`` over the model after its bytes are kept as
``<model>.prev``. A rollback writes nothing and says why. The result is one JSON line on
stdout; the exit status is 0 either way (``"accepted"`` tells them apart), 2 on an error.

``evermind merge-adapter MODEL A.lora.safetensors --out NEW.evermind`` applies an exported
adapter to the base it was trained on (refused on any other) and writes the merged package.

With ``--push URL`` an accepted package is also pushed to that runtime, which from then on
serves ``evermind/<name>`` from it (the newest version of a name is the one served); a
rollback pushes nothing, so the runtime keeps serving the previous version.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from evermind.cli.args import corpus_source, input_file, output_file, package_file, text_file

#: The suffix of the previous model kept by ``--in-place``.
PREV_SUFFIX = ".prev"


def register(sub: Any) -> None:
    """Adds ``adapt`` to the ``evermind`` command."""
    adapt = sub.add_parser(
        "adapt",
        help="adapt a model to new text with a LoRA adapter (kept only if it is better)",
    )
    adapt.add_argument("model", type=package_file, help="the .evermind package served now")
    adapt.add_argument(
        "texts", nargs="+", metavar="TEXTFILE", type=text_file, help="the new domain's text files"
    )
    where = adapt.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--out", type=output_file, help="where the adapted package is written (a new file)"
    )
    where.add_argument(
        "--in-place",
        action="store_true",
        help="replace the model when accepted, keeping the old bytes as <model>.prev",
    )
    adapt.add_argument(
        "--adapter-out",
        type=output_file,
        help="also write the adapter alone (.lora.safetensors)",
    )
    adapt.add_argument("--rank", type=int, default=8, help="LoRA rank")
    adapt.add_argument("--alpha", type=float, default=16.0, help="LoRA scale (alpha / rank)")
    adapt.add_argument(
        "--dt-proj", action="store_true", help="adapt dt_proj too (Mamba-1 models only)"
    )
    adapt.add_argument("--steps", type=int, default=60, help="optimiser steps")
    adapt.add_argument("--batch-size", type=int, default=4, help="sequences per step")
    adapt.add_argument("--seq-len", type=int, default=64, help="tokens per sequence")
    adapt.add_argument("--lr", type=float, default=3e-3, help="learning rate")
    adapt.add_argument("--held-out", type=float, default=0.2, help="share of the texts held out")
    adapt.add_argument(
        "--rehearsal", type=float, default=2.0, help="original tokens mixed in per new token"
    )
    adapt.add_argument("--min-improvement", type=float, default=1e-3, help="nats/token")
    adapt.add_argument(
        "--max-forgetting",
        type=float,
        default=None,
        help="largest allowed rise of the original corpus's loss, nats/token (default: 0.1; "
        "negative: unchecked)",
    )
    adapt.add_argument(
        "--corpus",
        default="default",
        type=corpus_source,
        help="the original text: a file, a folder of them, or 'default' (stdlib docstrings)",
    )
    adapt.add_argument(
        "--corpus-bytes", type=int, default=200_000, help="cap on the original text, bytes"
    )
    adapt.add_argument("--version", help="the adapted package's version (default: patch + 1)")
    adapt.add_argument("--seed", type=int, default=0, help="seeds batches and the split")
    adapt.add_argument(
        "--device",
        choices=["cpu", "gpu"],
        default="cpu",
        help="train the adapter with numpy (cpu, default) or on the GPU through wgpu-py (gpu)",
    )
    adapt.add_argument(
        "--push",
        metavar="URL",
        help="push the adapted package to this runtime when accepted (it then serves "
        "evermind/<name> from it; on rollback nothing is pushed and the served version stays)",
    )
    adapt.add_argument(
        "--token",
        default=os.environ.get("EVERMIND_TOKEN"),
        help="bearer token for --push (default: $EVERMIND_TOKEN)",
    )
    adapt.set_defaults(func=cmd_adapt)
    merge = sub.add_parser(
        "merge-adapter", help="merge an exported LoRA adapter into the package it was trained on"
    )
    merge.add_argument("model", type=package_file, help="the base .evermind package")
    merge.add_argument(
        "adapter", type=input_file("a .lora.safetensors file"), help="the .lora.safetensors file"
    )
    merge.add_argument(
        "--out", required=True, type=output_file, help="where the merged package is written"
    )
    merge.add_argument("--version", help="the merged package's version (default: the base's)")
    merge.set_defaults(func=cmd_merge_adapter)


def cmd_adapt(args: Any) -> int:
    from evermind.cli.progress import ProgressBar
    from evermind.errors import ConfigError, InputError
    from evermind.job import read_corpus
    from evermind.package import write_file_atomic
    from evermind.runtime.push import PushError, push_package
    from evermind.train.adapt import DEFAULT_MAX_FORGETTING, AdaptConfig, adapt, split_text
    from evermind.train.lora import DEFAULT_TARGETS
    from evermind.train.lora_file import ADAPTER_SUFFIX, adapter_bytes
    from evermind.train.sources import extract_text
    from evermind.types import Progress

    model = Path(args.model)
    if not model.is_file():
        raise InputError(f"adapt: model {args.model!r}: no such file")
    out = model if args.in_place else Path(args.out)
    if not args.in_place and out.resolve() == model.resolve():
        raise ConfigError(
            f"adapt: --out {args.out!r} is the model itself; hint: pass --in-place to replace "
            f"it (the old bytes are kept as {model.name}{PREV_SUFFIX})"
        )
    if args.push and not args.push.startswith(("http://", "https://")):
        raise ConfigError(f"adapt: --push {args.push!r}: expected the http(s) URL of a runtime")
    if args.adapter_out and not args.adapter_out.endswith(ADAPTER_SUFFIX):
        raise ConfigError(
            f"adapt: --adapter-out {args.adapter_out!r} should end with {ADAPTER_SUFFIX}"
        )
    texts: list[str] = []
    for name in args.texts:
        path = Path(name)
        if not path.is_file():
            raise InputError(f"adapt: text file {name!r}: no such file")
        texts.extend(split_text(extract_text(path.name, path.read_bytes())))
    forgetting = DEFAULT_MAX_FORGETTING if args.max_forgetting is None else args.max_forgetting
    config = AdaptConfig(
        rank=args.rank,
        alpha=args.alpha,
        targets=(*DEFAULT_TARGETS, "dt_proj") if args.dt_proj else None,
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        lr=args.lr,
        held_out=args.held_out,
        rehearsal=args.rehearsal,
        min_improvement=args.min_improvement,
        max_forgetting=None if forgetting < 0 else forgetting,
        seed=args.seed,
    )
    corpus, described = read_corpus(args.corpus, args.corpus_bytes)
    before = model.read_bytes()
    print(
        f"adapt: {len(texts)} text(s) from {len(args.texts)} file(s); rank {config.rank} on "
        f"{', '.join(config.targets or ['the block projections'])}; original: {described}",
        file=sys.stderr,
    )
    bar = ProgressBar("adapt", max(1, args.steps))

    def on_progress(event: Progress) -> None:
        bar.update(event.step, f"loss {event.loss:.3f} {event.tokens_per_second:,.0f} tok/s")

    device = None
    if args.device == "gpu":
        from evermind.gpu.native import open_native_device

        device = open_native_device()
        info = device.adapter_info
        print(
            f"adapt: device {info['device'] or info['vendor']} ({info['backend']})", file=sys.stderr
        )
    result = adapt(
        before,
        texts,
        config,
        corpus=corpus,
        version=args.version,
        on_progress=on_progress,
        device=device,
    )
    print(f"adapt: {result.reason}", file=sys.stderr)
    summary = result.to_dict()
    summary.update(out=None, previous=None, adapter_out=None, pushed=None)
    if result.accepted and result.package is not None and result.adapter is not None:
        if args.in_place:
            if model.read_bytes() != before:
                raise ConfigError(
                    f"adapt: {model} changed while adapting; nothing was replaced; hint: run "
                    "adapt again"
                )
            previous = model.with_name(model.name + PREV_SUFFIX)
            write_file_atomic(previous, before)
            summary["previous"] = str(previous)
        write_file_atomic(out, result.package)
        summary["out"] = str(out)
        if args.adapter_out:
            write_file_atomic(args.adapter_out, adapter_bytes(result.adapter))
            summary["adapter_out"] = args.adapter_out
        print(f"adapt: wrote {out}", file=sys.stderr)
        if args.push:
            try:
                summary["pushed"] = push_package(out, args.push, args.token).get("id")
            except PushError as err:
                raise PushError(f"adapt: wrote {out}, but the push failed: {err}") from err
            print(f"adapt: {args.push} serves {summary['pushed']}", file=sys.stderr)
    print(json.dumps(summary))
    return 0


def cmd_merge_adapter(args: Any) -> int:
    from evermind.errors import ConfigError, InputError
    from evermind.package import read_package, write_file_atomic
    from evermind.train.lora_file import merge_package, read_adapter

    for name in (args.model, args.adapter):
        if not Path(name).is_file():
            raise InputError(f"merge-adapter: {name!r}: no such file")
    if Path(args.out).resolve() == Path(args.model).resolve():
        raise ConfigError("merge-adapter: --out is the base itself; write a new file")
    adapter = read_adapter(Path(args.adapter).read_bytes(), where=args.adapter)
    merged = merge_package(read_package(args.model), adapter, version=args.version)
    digest = write_file_atomic(args.out, merged)
    print(json.dumps({"out": args.out, "digest": digest, "bytes": len(merged)}))
    return 0
