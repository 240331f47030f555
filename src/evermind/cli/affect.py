"""``evermind train-affect``: fit a package's affect classifier head (native-only).

Parses the arguments and prints the result as one JSON line; the work is
:func:`evermind.train.affect.fit_affect`'s. The new package (same weights, its embedding
head kept, ``affect.safetensors`` added) is verified before it is written atomically to
``--out``; the input package is never modified.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from evermind.cli.args import output_file, package_file, text_file


def register(sub: Any) -> None:
    """Adds ``train-affect`` to the ``evermind`` command."""
    affect = sub.add_parser(
        "train-affect",
        help="fit an affect classifier head (valence or your own labels) on labelled texts",
        description="Fits a linear softmax classifier over the model's pooled hidden state "
        "(L2-regularised multinomial logistic regression, numpy) on labelled texts, scores "
        "it on a held-out split (accuracy, macro-F1) and writes a new verified package with "
        "affect.safetensors. It is a classifier head, no more.",
    )
    affect.add_argument(
        "model", type=package_file, help="the .evermind package to start from (not modified)"
    )
    affect.add_argument(
        "labelled",
        type=text_file,
        help="labelled texts: .jsonl ({'text', 'label'} objects) or .csv (header "
        "with text and label columns)",
    )
    affect.add_argument("--out", required=True, type=output_file, help="output package path")
    affect.add_argument(
        "--labels",
        help="the allowed labels in order, comma-separated (default: the file's labels, "
        "sorted); an example with another label is an error",
    )
    affect.add_argument("--l2", type=float, help="L2 penalty on standardised features (0.1)")
    affect.add_argument("--holdout", type=float, help="fraction held out per label (0.2)")
    affect.add_argument("--seed", type=int, help="seeds the held-out split (0)")
    affect.add_argument("--version", help="version of the new package (default: <old>-affect)")
    affect.set_defaults(func=cmd_train_affect)


def cmd_train_affect(args: Any) -> int:
    import evermind
    from evermind.package import write_file_atomic
    from evermind.train.affect import affect_package_bytes, fit_affect, load_labelled
    from evermind.train.affect_fit import AffectConfig

    knobs = {"l2": args.l2, "holdout": args.holdout, "seed": args.seed}
    config = AffectConfig(**{k: v for k, v in knobs.items() if v is not None})
    texts, labels = load_labelled(args.labelled)
    known = [x.strip() for x in args.labels.split(",")] if args.labels else None
    model = evermind.load(args.model)
    print(f"fitting an affect head on {model.name} from {len(texts)} texts", file=sys.stderr)
    result = fit_affect(model, texts, labels, config, known, Path(args.labelled).name)
    version = args.version or f"{model.package.version}-affect"
    data = affect_package_bytes(model.package, result.head, version)
    evermind.load(data)  # verify what is written
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(out, data)
    print(
        json.dumps(
            {"model": f"{model.package.name}:{version}", **result.summary(), "out": str(out)}
        )
    )
    return 0
