"""``evermind train | generate | embed | eval`` (registered by ``evermind.cli``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from array import array
from pathlib import Path
from typing import Any

from evermind.errors import ConfigError


def register(sub: Any) -> None:
    """Adds the training and inference subcommands to the CLI."""
    train = sub.add_parser("train", help="train a model on a corpus and write a .evermind package")
    train.add_argument(
        "--device",
        choices=["gpu", "cpu"],
        default="gpu",
        help="gpu: WebGPU through wgpu-py (a real GPU, or lavapipe); cpu: numpy",
    )
    train.add_argument(
        "--headless",
        action="store_true",
        help="train in headless Chromium through the Studio page (WebGPU in the browser)",
    )
    train.add_argument(
        "--corpus",
        default="default",
        help="a text/markdown/JSON/JSONL/CSV file, a folder of them, or 'default' "
        "(the Python standard library's docstrings)",
    )
    train.add_argument(
        "--corpus-bytes",
        type=int,
        default=1_000_000,
        help="cap on the corpus size in bytes (default 1,000,000)",
    )
    train.add_argument("--preset", default="nano", choices=["nano", "small", "base"])
    train.add_argument("--vocab-size", type=int, default=2048)
    train.add_argument("--steps", type=int, default=300)
    train.add_argument("--batch-size", type=int, default=4)
    train.add_argument("--seq-len", type=int, default=128)
    train.add_argument("--lr", type=float, default=3e-3)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--name", default="evermind-default", help="package name")
    train.add_argument("--version", default="0.1.0", help="package version")
    train.add_argument("--out", default="model.evermind", help="output package path")
    train.add_argument("--push", metavar="URL", help="push the package to a runtime after training")
    train.add_argument(
        "--token",
        default=os.environ.get("EVERMIND_TOKEN"),
        help="bearer token for --push (default $EVERMIND_TOKEN)",
    )
    train.set_defaults(func=cmd_train)

    generate = sub.add_parser("generate", help="continue a prompt with a trained model (streams)")
    generate.add_argument("--model", required=True, help="a .evermind package")
    generate.add_argument("--max-new-tokens", type=int, default=64)
    generate.add_argument("--temperature", type=float, default=0.8)
    generate.add_argument("--top-k", type=int, default=40)
    generate.add_argument("--top-p", type=float, default=0.95)
    generate.add_argument("--seed", type=int, default=None)
    generate.add_argument("prompt")
    generate.set_defaults(func=cmd_generate)

    embed = sub.add_parser("embed", help="print embeddings of texts as JSON lines")
    embed.add_argument("--model", required=True, help="a .evermind package")
    embed.add_argument("texts", nargs="+")
    embed.set_defaults(func=cmd_embed)

    tune = sub.add_parser(
        "tune-embedder",
        help="tune a model's embeddings for recall on your own texts (contrastive, numpy)",
        description="Tunes the package's weights so that texts about the same thing embed "
        "close together (InfoNCE over random crops of each text, in-batch negatives) and "
        "writes a new package. Serve it with `evermind mcp --model OUT` or the runtime.",
    )
    tune.add_argument("--model", required=True, help="the .evermind package to start from")
    tune.add_argument(
        "--texts",
        help="an Evermind memory file (.db: its memories), .jsonl (strings or objects with "
        "'content'/'text') or a text file (one text per paragraph, else per line); default: "
        "the memory file `evermind mcp` and the runtime use ($EVERMIND_MEMORY_FILE, else the "
        "per-user data directory)",
    )
    tune.add_argument("--tenant", default="default", help="memory file tenant (default 'default')")
    tune.add_argument(
        "--namespace", default="default", help="memory file namespace (default 'default')"
    )
    tune.add_argument("--steps", type=int, help="optimiser steps (default 300)")
    tune.add_argument("--batch-size", type=int, help="texts per step (default 32)")
    tune.add_argument("--lr", type=float, help="Adam learning rate (default 5e-4)")
    tune.add_argument("--temperature", type=float, help="InfoNCE temperature (default 0.05)")
    tune.add_argument("--seed", type=int, help="seeds batches and crops (default 0)")
    tune.add_argument("--version", help="version of the new package (default: <old>-tuned)")
    tune.add_argument("--out", required=True, help="output package path")
    tune.set_defaults(func=cmd_tune_embedder)

    evaluate = sub.add_parser("eval", help="bench metrics of a model on a text file (JSON)")
    evaluate.add_argument("--model", required=True, help="a .evermind package")
    evaluate.add_argument("--text-file", required=True)
    evaluate.set_defaults(func=cmd_eval)


def read_corpus(spec: str, max_bytes: int) -> tuple[str, str]:
    """(text, description) of ``--corpus``: 'default', a file, or a folder of files."""
    from evermind.pipeline import default_corpus
    from evermind.train.sources import TEXT_SUFFIXES, extract_text

    if spec == "default":
        return default_corpus(max_bytes)
    path = Path(spec)
    if not path.exists():
        raise ConfigError(f"--corpus {spec!r}: no such file or folder")
    suffixes = (*TEXT_SUFFIXES, ".json", ".jsonl", ".ndjson", ".csv")
    files = (
        sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in suffixes)
        if path.is_dir()
        else [path]
    )
    if not files:
        raise ConfigError(f"--corpus {spec!r}: no text, Markdown, JSON, JSONL or CSV files inside")
    parts, used = [], 0
    for file in files:
        text = extract_text(file.name, file.read_bytes())
        if used + len(text) > max_bytes:
            text = text[: max_bytes - used]
        parts.append(text)
        used += len(text)
        if used >= max_bytes:
            break
    text = "\n\n".join(p for p in parts if p)
    if not text.strip():
        raise ConfigError(f"--corpus {spec!r}: the files hold no text")
    return text, f"{len(files)} file(s) from {path.name} ({len(text.encode()):,} bytes)"


class ProgressBar:
    """A one-line terminal progress bar on stderr (redrawn at most 10 times a second)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total = label, max(1, total)
        self.start = time.perf_counter()
        self._last = 0.0
        self.tty = sys.stderr.isatty()

    def update(self, done: int, extra: str = "", force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last < 0.1 and done < self.total:
            return
        self._last = now
        frac = min(1.0, done / self.total)
        elapsed = now - self.start
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        bar = "#" * int(frac * 24)
        line = (
            f"{self.label} [{bar:<24}] {done}/{self.total} {extra} {elapsed:5.1f}s eta {eta:5.1f}s"
        )
        if self.tty:
            sys.stderr.write("\r" + line[:160].ljust(120))
            if done >= self.total:
                sys.stderr.write("\n")
        elif done >= self.total or force:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


async def train_native(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the whole job natively; returns the summary line's fields."""
    from evermind.model.init import init_params
    from evermind.pipeline import (
        JobConfig,
        export_package,
        model_config,
        split,
        tokenize,
        train_tokenizer,
    )
    from evermind.train.loop import TrainConfig, Trainer

    train_cfg = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        lr=args.lr,
        min_lr=args.lr / 10,
        warmup_steps=min(30, args.steps // 10),
        seed=args.seed,
        eval_every=max(1, args.steps // 6),
    )
    job = JobConfig(
        name=args.name,
        version=args.version,
        preset=args.preset,
        vocab_size=args.vocab_size,
        seed=args.seed,
        train=train_cfg,
    )
    text, corpus = read_corpus(args.corpus, args.corpus_bytes)
    print(f"corpus: {corpus}", file=sys.stderr)
    bar = ProgressBar("tokenizer", args.vocab_size)
    tokenizer = train_tokenizer(text, args.vocab_size, on_progress=lambda d, t: bar.update(d))
    bar.update(bar.total, force=True)
    tokens = tokenize(tokenizer, text)
    train_ids, held = split(job, tokens)
    config = model_config(job, tokenizer)
    params = init_params(config, job.seed)
    print(
        f"model: {job.preset}, {config.n_params:,} parameters, vocab {config.vocab_size}; "
        f"{len(train_ids):,} training tokens, {len(held):,} held out",
        file=sys.stderr,
    )
    backend: Any
    if args.device == "gpu":
        from evermind.gpu.native import open_native_device
        from evermind.model.gpu import GpuMamba

        device = open_native_device()
        print(
            f"device: {device.adapter_info['device'] or device.adapter_info['vendor']} "
            f"({device.adapter_info['backend']})",
            file=sys.stderr,
        )
        backend = GpuMamba(device, config, train_cfg.batch_size, train_cfg.seq_len, train_cfg)
        backend.load_params(params)
        label = "wgpu"
    else:
        from evermind.train.cpu_backend import CpuBackend

        backend = CpuBackend(config, params, train_cfg)
        label = "numpy"
    bar = ProgressBar("train", train_cfg.steps)

    def show(p: Any) -> None:
        ev = f" eval {p.eval_loss:.3f}" if p.eval_loss is not None else ""
        bar.update(
            p.step,
            f"loss {p.loss:.3f}{ev} {p.tokens_per_second:,.0f} tok/s",
            force=p.eval_loss is not None,
        )

    trainer = Trainer(backend, train_ids, held, train_cfg, on_progress=show)
    result = await trainer.run()
    final = await backend.read_params() if args.device == "gpu" else backend.params()
    data = export_package(job, config, final, tokenizer, result, corpus, f"{label} {args.device}")
    out = Path(args.out)
    _atomic_write(out, data)
    summary = {
        "steps": result.steps,
        "tokens": result.tokens,
        "initial_loss": round(result.initial_loss, 4),
        "final_loss": round(result.final_loss, 4),
        "eval_loss": None if result.eval_loss is None else round(result.eval_loss, 4),
        "tokens_per_second": result.tokens_per_second,
        "out": str(out),
    }
    return summary


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def cmd_train(args: argparse.Namespace) -> int:
    if args.headless:
        from evermind.studio.headless import train_headless

        summary = train_headless(args)
    else:
        summary = asyncio.run(train_native(args))
    if args.push:
        from evermind.runtime.push import push_package

        served = push_package(Path(summary["out"]), args.push, args.token)
        summary["pushed"] = served.get("id")
    print(json.dumps(summary))
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    import evermind

    model = evermind.load(args.model)
    for piece in model.stream(
        args.prompt,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
    ):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


def cmd_embed(args: argparse.Namespace) -> int:
    import evermind

    model = evermind.load(args.model)
    for text, vector in zip(args.texts, model.embed(args.texts), strict=True):
        print(json.dumps({"text": text, "embedding": [round(float(x), 6) for x in vector]}))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    import evermind

    model = evermind.load(args.model)
    text = Path(args.text_file).read_text(encoding="utf-8")
    print(json.dumps(model.evaluate(text)))
    return 0


def cmd_tune_embedder(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    import evermind
    from evermind.mcp.config import resolve_memory_file, store_namespace
    from evermind.package import Tensor, write_package_file
    from evermind.package.manifest import utc_timestamp
    from evermind.train.contrastive import TuneConfig, load_texts, tune_embedder

    knobs = ("steps", "batch_size", "lr", "temperature", "seed")
    config = TuneConfig(
        **{name: getattr(args, name) for name in knobs if getattr(args, name) is not None}
    )
    model = evermind.load(args.model)
    source = args.texts or resolve_memory_file(None)
    texts = load_texts(source, store_namespace(args.tenant, args.namespace))
    print(f"tuning {model.name} on {len(texts)} texts from {source}", file=sys.stderr)
    bar = ProgressBar("tune", config.steps)
    result = tune_embedder(
        model, texts, config, on_step=lambda step, loss: bar.update(step, f"loss {loss:.3f}")
    )
    bar.update(config.steps, force=True)
    package = model.package
    shapes = model.config.param_shapes()
    tensors = {
        name: Tensor(shapes[name], array("f", model.cpu.params[name].astype("float32").tobytes()))
        for name in shapes
    }
    training = {**package.manifest.get("training", {})}
    training["embedding_tuning"] = result.summary(config)
    version = args.version or f"{package.version}-tuned"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_package_file(
        out,
        name=package.name,
        version=version,
        created_at=utc_timestamp(datetime.now(UTC)),
        producer=f"evermind {evermind.__version__} (numpy tune-embedder)",
        config=package.config,
        tensors=tensors,
        tokenizer_json=package.tokenizer_json,
        training=training,
        bench=package.manifest.get("bench", {}),
        generation_config=package.generation_config,
    )
    print(
        json.dumps(
            {
                "model": f"{package.name}:{version}",
                "texts": result.texts,
                "steps": result.steps,
                "first_loss": round(result.first_loss, 4),
                "final_loss": round(result.final_loss, 4),
                "seconds": round(result.seconds, 1),
                "out": str(out),
            }
        )
    )
    return 0
