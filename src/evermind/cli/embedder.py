"""``evermind build-embedder``: build the base embedder from the MiniLM teacher (native-only).

Parses the arguments, draws a progress bar per stage on stderr and prints the build's
report as one JSON line; the work is :func:`evermind.embedder.build.build`'s. Checkpoints go
to ``<out>.work/`` (the teacher's token table, the corpus, the teacher's vectors in chunks,
the fine-tune's state): run the same command again after a stop and it resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from evermind.cli.args import output_file


def _count(what: str, low: int) -> Any:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if number < low:
            raise argparse.ArgumentTypeError(f"{what} must be >= {low}, got {number}")
        return number

    return parse


def register(sub: Any) -> None:
    """Adds ``build-embedder`` to the ``evermind`` command."""
    from evermind.embedder.build import BuildConfig

    defaults = BuildConfig()
    build = sub.add_parser(
        "build-embedder",
        help="build the base embedder (static token vectors distilled from all-MiniLM-L6-v2)",
    )
    build.add_argument(
        "--out", required=True, type=output_file, help="the embedder file to write (.safetensors)"
    )
    build.add_argument(
        "--dims", type=_count("--dims", 8), default=defaults.dims, help="embedding size, 8..384"
    )
    build.add_argument(
        "--storage",
        choices=["int8", "float16", "float32"],
        default=defaults.storage,
        help="how the token vectors are stored",
    )
    build.add_argument(
        "--corpus-limit",
        type=_count("--corpus-limit", 0),
        default=defaults.corpus_limit,
        help="texts the fine-tune learns from (the teacher embeds each once)",
    )
    build.add_argument(
        "--steps",
        type=_count("--steps", 0),
        default=defaults.steps,
        help="fine-tune steps (0: the distilled table only)",
    )
    build.add_argument(
        "--batch-size", type=_count("--batch-size", 1), default=defaults.batch_size,
        help="texts per fine-tune step",
    )  # fmt: skip
    build.add_argument("--lr", type=float, default=defaults.learning_rate, help="Adam step size")
    build.add_argument("--seed", type=int, default=defaults.seed, help="seeds the split")
    build.set_defaults(func=cmd_build_embedder)


def cmd_build_embedder(args: Any) -> int:
    from evermind.cli.progress import ProgressBar
    from evermind.embedder.build import BuildConfig, build
    from evermind.embedder.wordpiece import WordPiece
    from evermind.train.teachers import MiniLMTeacher, minilm_dir

    config = BuildConfig(
        dims=args.dims,
        storage=args.storage,
        corpus_limit=args.corpus_limit,
        steps=args.steps,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        seed=args.seed,
    )
    config.check()
    out = Path(args.out)
    work = out.with_name(out.name + ".work")
    tokenizer = WordPiece.from_text((minilm_dir() / "vocab.txt").read_text("utf-8"))
    teacher = MiniLMTeacher()
    bars: dict[str, ProgressBar] = {}

    def progress(stage: str, done: int, total: int) -> None:
        name, _, extra = stage.partition(" (")
        if name not in bars:
            bars[name] = ProgressBar(f"build-embedder: {name}", total)
        bars[name].update(done, extra.rstrip(")"))

    embedder, report = build(teacher, tokenizer, config, work, progress=progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    size = embedder.save(out)
    report.pop("fine_tune_history", None)
    print(f"build-embedder: wrote {out} ({size:,} bytes); checkpoints in {work}", file=sys.stderr)
    print(json.dumps({"out": str(out), "bytes": size, "params": embedder.n_params, **report}))
    return 0
