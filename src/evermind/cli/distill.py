"""``evermind distill``: fine-tune a package on collected frontier answers (native-only).

Parses the arguments, shows the training progress and prints the result as one JSON line;
the work is :class:`evermind.agent.distillation.DistillationEngine`'s. The new package is
written to ``--out`` only when its held-out loss on the collected pairs beats the previous
package's (and the corpus loss did not rise past ``--max-forgetting``); otherwise nothing is
written, the previous package stays, and the line says why (``"promoted": false``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from evermind.cli.args import corpus_source, input_file, output_file, package_file


def register(sub: Any) -> None:
    """Adds ``distill`` to the ``evermind`` command."""
    distill = sub.add_parser(
        "distill",
        help="fine-tune a model on collected frontier answers (kept only if it is better)",
    )
    distill.add_argument(
        "--collected",
        required=True,
        type=input_file("the SQLite file the distillation engine filled"),
        help="the SQLite file the distillation engine filled",
    )
    distill.add_argument(
        "--package", required=True, type=package_file, help="the .evermind package served now"
    )
    distill.add_argument(
        "--out", required=True, type=output_file, help="where the better package is written"
    )
    distill.add_argument("--tenant", help="only this tenant's pairs (default: all)")
    distill.add_argument("--steps", type=int, default=60, help="optimiser steps")
    distill.add_argument("--batch-size", type=int, default=4, help="sequences per step")
    distill.add_argument("--seq-len", type=int, default=64, help="tokens per sequence")
    distill.add_argument("--lr", type=float, default=1e-3, help="learning rate")
    distill.add_argument("--held-out", type=float, default=0.2, help="fraction of pairs held out")
    distill.add_argument(
        "--rehearsal", type=float, default=3.0, help="corpus tokens mixed in per pair token"
    )
    distill.add_argument(
        "--max-forgetting",
        type=float,
        default=0.5,
        help="largest allowed rise of the corpus loss, nats/token (negative: unchecked)",
    )
    distill.add_argument(
        "--corpus",
        default="default",
        type=corpus_source,
        help="rehearsal text: a file, a folder of them, or 'default' (stdlib docstrings)",
    )
    distill.add_argument(
        "--corpus-bytes", type=int, default=200_000, help="cap on the rehearsal text, bytes"
    )
    distill.add_argument("--version", help="the new package's version (default: patch + 1)")
    distill.add_argument("--seed", type=int, default=0, help="seeds batches and the split")
    distill.set_defaults(func=cmd_distill)


def cmd_distill(args: Any) -> int:
    from evermind.agent.distillation import DistillationEngine, FineTuneConfig
    from evermind.cli.progress import ProgressBar
    from evermind.errors import ConfigError
    from evermind.job import read_corpus
    from evermind.types import Progress

    collected = Path(args.collected)
    if not collected.is_file():
        raise ConfigError(f"--collected {args.collected!r}: no such file")
    config = FineTuneConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        lr=args.lr,
        held_out=args.held_out,
        rehearsal=args.rehearsal,
        max_forgetting=None if args.max_forgetting < 0 else args.max_forgetting,
        seed=args.seed,
    )
    corpus, _ = read_corpus(args.corpus, args.corpus_bytes)
    bar = ProgressBar("distill", max(1, args.steps))

    def on_progress(event: Progress) -> None:
        bar.update(event.step, f"loss {event.loss:.3f} {event.tokens_per_second:,.0f} tok/s")

    with DistillationEngine(collected) as engine:
        pairs = engine.count(args.tenant)
        print(
            f"distill: {pairs} collected pair(s)"
            + (f" of tenant {args.tenant!r}" if args.tenant else ""),
            file=sys.stderr,
        )
        result = engine.fine_tune(
            args.package,
            args.out,
            config,
            tenant=args.tenant,
            corpus=corpus,
            version=args.version,
            on_progress=on_progress,
        )
    print(f"distill: {result.reason}", file=sys.stderr)
    print(json.dumps(result.to_dict()))
    return 0
