"""``evermind import-hf``: a model trained on with transformers back into a `.evermind` package."""

from __future__ import annotations

import argparse
import json
from typing import Any

from evermind.cli.args import folder, output_file, package_file


def register(sub: Any) -> None:
    """Adds ``import-hf`` to the ``evermind`` command."""
    command = sub.add_parser(
        "import-hf",
        help="make a Hugging Face model folder (trained on with transformers) a .evermind "
        "package again",
        description="Unzip a package, train it on with transformers (Trainer, accelerate, "
        "torchrun: docs/scale.md), save it with trainer.save_model(FOLDER), then import it: "
        "the folder gives the weights, --base (the package you unzipped) the tokenizer, "
        "generation config, name and embedding/affect heads. The folder must describe the "
        "same model as the base (fine-tuning changes weights, not shapes).",
    )
    command.add_argument("folder", type=folder, help="what save_pretrained / save_model wrote")
    command.add_argument(
        "--base", required=True, type=package_file, help="the package the model came from"
    )
    command.add_argument(
        "--out", required=True, type=output_file, help="the .evermind package to write"
    )
    command.add_argument("--version", help="the new package's version (default: the base's +hf)")
    command.add_argument(
        "--drop-heads",
        action="store_true",
        help="leave out the base's embedding and affect heads (they were fitted on its weights; "
        "by default they are kept: re-fit with evermind distill-embedder)",
    )
    command.set_defaults(func=cmd_import_hf)


def cmd_import_hf(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime
    from pathlib import Path

    import evermind
    from evermind.package import read_package, utc_timestamp, write_file_atomic
    from evermind.package.hf_folder import import_hf_folder

    base = read_package(args.base)
    made = import_hf_folder(
        args.folder,
        base,
        version=args.version,
        created_at=utc_timestamp(datetime.now(UTC)),
        producer=f"evermind {evermind.__version__} (import-hf)",
        keep_heads=not args.drop_heads,
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    digest = write_file_atomic(out, made.data)
    print(
        json.dumps(
            {
                "model": f"evermind/{base.name}:{made.version}",
                "from": str(args.folder),
                "base": base.ref,
                "tensors": made.tensors,
                "tensors_changed": made.changed,
                "heads_kept": list(made.kept_heads),
                "out": str(out),
                "bytes": len(made.data),
                "digest": digest,
            }
        )
    )
    return 0
