"""Package precision: size, native generation speed and held-out loss of float32, float16
and int8 packages of one trained model (native-only). Run as ``python -m benchmarks.quantize``.

The model is ``dist/demo/evermind-default.evermind`` (``make demo``) or ``--model PATH``;
without either, a nano model is trained here first (numpy, ``--train-steps``). It is
re-stored with :func:`evermind.job.convert_package` as float16, int8 (projections and the
tied embedding / LM head) and int8 with a float32 embedding, and each is loaded with
``evermind.load`` (int8 runs on its int8 weights). Measured, nothing asserted:

- package bytes and ``model.safetensors`` bytes (the embedding head, float32 in every
  variant, is the rest), and the bytes of weights the loaded model holds;
- greedy generation tokens/s through ``Model.complete`` (what ``evermind generate`` and the
  runtime run: step, sampler, detokeniser) and the bare ``CpuMamba.step`` at batch 1 and 8;
- held-out cross-entropy (nats/token, ``Model.evaluate``) on the tail of the default corpus
  (the held-out share ``JobConfig.held_out`` of this Python's standard-library docstrings);
- the int8 product two ways on the nano in_proj shape: the scale on the output rows
  (``linear_rows``, what the model runs) against dequantising the weight first.

Timings are medians over rounds that interleave the variants (shared cores drift), with
one BLAS thread as ``evermind serve`` runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.host import blas_threads

DEMO = Path("dist/demo/evermind-default.evermind")
PROMPT = "Return the number of"


def _median_rounds(fns: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Median of each function's returned rate over ``rounds`` interleaved rounds."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():  # warm-up
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(fn())
    return {name: statistics.median(values) for name, values in samples.items()}


def _train_quick(steps: int) -> bytes:
    """A nano package trained here (numpy) when no demo package is around."""
    from evermind.cli import main

    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "quick.evermind")
        args = ["train", "--device", "cpu", "--steps", str(steps), "--corpus-bytes", "300000"]
        if main([*args, "--out", out]) != 0:
            raise SystemExit("training the quick model failed")
        return Path(out).read_bytes()


def _weights_member(data: bytes) -> int:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return archive.getinfo("model.safetensors").file_size


def _held_out_text(chars: int, corpus_bytes: int) -> str:
    from evermind.job import JobConfig, default_corpus

    text, _ = default_corpus(corpus_bytes)
    tail = text[int(len(text) * (1 - JobConfig().held_out)) :]
    return tail[:chars]


def _step_rate(model: Any, batch: int, tokens: int) -> Callable[[], float]:
    import numpy as np

    ids = np.arange(batch, dtype=np.int64) % model.config.vocab_size

    def run() -> float:
        state = model.cpu.init_state(batch)
        start = time.perf_counter()
        for _ in range(tokens):
            model.cpu.step(ids, state)
        return batch * tokens / (time.perf_counter() - start)

    return run


def _generate_rate(model: Any, tokens: int) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        done = model.complete(PROMPT, max_new_tokens=tokens, temperature=0.0)
        return done.completion_tokens / (time.perf_counter() - start)

    return run


def _product_rates(rounds: int) -> dict[str, float]:
    """Products per second with a (512, 128) weight (the nano in_proj) at batch 1 and 8."""
    import numpy as np

    from evermind.model.quantize import dequantize_rows, linear_rows, quantize_rows

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((512, 128)).astype(np.float32)
    quantised = quantize_rows(weight)
    fns: dict[str, Callable[[], float]] = {}
    for batch in (1, 8):
        x = rng.standard_normal((batch, 128)).astype(np.float32)

        def timed(product: Callable[[], object], repeats: int = 2000) -> Callable[[], float]:
            def run() -> float:
                start = time.perf_counter()
                for _ in range(repeats):
                    product()
                return repeats / (time.perf_counter() - start)

            return run

        fns[f"float32 x @ W.T, batch {batch}"] = timed(lambda x=x: x @ weight.T)
        fns[f"int8 (x @ Q.T) * scale, batch {batch}"] = timed(lambda x=x: linear_rows(x, quantised))
        fns[f"int8 x @ dequantize(Q).T, batch {batch}"] = timed(
            lambda x=x: x @ dequantize_rows(quantised).T
        )
    return _median_rounds(fns, rounds)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every row of the report as plain data."""
    import evermind
    from evermind.job import convert_package
    from evermind.package import read_package

    path = Path(args.model) if args.model else DEMO
    if path.is_file():
        source, what = path.read_bytes(), str(path)
    else:
        source, what = (
            _train_quick(args.train_steps),
            f"nano trained here ({args.train_steps} steps)",
        )
    package = read_package(source)
    variants = {
        "float32": convert_package(package, "float32"),
        "float16": convert_package(package, "float16"),
        "int8": convert_package(package, "int8", int8_embedding=True),
        "int8, float32 embedding": convert_package(package, "int8", int8_embedding=False),
    }
    models = {name: evermind.load(data) for name, data in variants.items()}
    held = _held_out_text(args.eval_chars, args.corpus_bytes)
    rows: dict[str, dict[str, Any]] = {}
    for name, data in variants.items():
        model = models[name]
        rows[name] = {
            "package_bytes": len(data),
            "weights_bytes": _weights_member(data),
            "held_bytes": int(sum(getattr(v, "nbytes", 0) for v in model.cpu.params.values())),
            "held_out_loss": model.evaluate(held)["cross_entropy"],
        }
    with blas_threads(1) as note:
        fns: dict[str, Callable[[], float]] = {}
        for name, model in models.items():
            fns[f"{name}|generate"] = _generate_rate(model, args.tokens)
            fns[f"{name}|step1"] = _step_rate(model, 1, args.tokens)
            fns[f"{name}|step8"] = _step_rate(model, 8, args.tokens)
        rates = _median_rounds(fns, args.rounds)
        products = _product_rates(args.rounds)
    for key, rate in rates.items():
        name, column = key.split("|")
        rows[name][column] = rate
    return {
        "model": what,
        "manifest_model": package.manifest["model"],
        "held_out_chars": len(held),
        "held_out_tokens": len(models["float32"].tokenizer.encode(held)),
        "threads": note,
        "rounds": args.rounds,
        "tokens": args.tokens,
        "variants": rows,
        "products_per_s": products,
    }


def print_report(report: dict[str, Any]) -> None:
    """The Markdown tables of docs/benchmarks.md."""
    print(f"model: {report['model']} ({report['manifest_model']['n_params']:,} parameters)")
    print(
        f"held-out: {report['held_out_tokens']} tokens; {report['threads']}; medians of "
        f"{report['rounds']} interleaved rounds, {report['tokens']} tokens each\n"
    )
    base = report["variants"]["float32"]
    print(
        "| dtype | package | model.safetensors | weights held | generate tok/s | step tok/s "
        "(batch 1) | step tok/s (batch 8) | held-out loss |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, row in report["variants"].items():
        loss_delta = row["held_out_loss"] - base["held_out_loss"]
        share = row["weights_bytes"] / base["weights_bytes"]
        print(
            f"| {name} | {row['package_bytes'] / 1e6:.2f} MB | "
            f"{row['weights_bytes'] / 1e6:.2f} MB ({share:.0%}) | "
            f"{row['held_bytes'] / 1e6:.2f} MB | {row['generate']:.0f} | {row['step1']:.0f} | "
            f"{row['step8']:.0f} | {row['held_out_loss']:.4f} ({loss_delta:+.4f}) |"
        )
    print("\n| product, (512, 128) weight | per second |")
    print("| --- | ---: |")
    for name, rate in report["products_per_s"].items():
        print(f"| {name} | {rate:,.0f} |")


def main(argv: list[str] | None = None) -> int:
    """Parses the options, measures, prints."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quantize", description=__doc__)
    parser.add_argument("--model", help=f"a .evermind package (default {DEMO} if present)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per timed run")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--eval-chars", type=int, default=20_000, help="held-out characters")
    parser.add_argument(
        "--corpus-bytes", type=int, default=400_000, help="default corpus size (the demo's)"
    )
    parser.add_argument("--train-steps", type=int, default=150, help="without a model: steps")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    report = measure(args)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
