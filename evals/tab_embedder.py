"""The Studio's embedder phase, run natively through the tab's own handlers, on a real corpus.

What the page does after training, with the teacher local instead of behind a runtime URL:
open a package in the Studio session (``package_load``; wgpu-py on this machine's Vulkan
device), take the default corpus's sentences (``embedder_texts``), ask all-MiniLM-L6-v2 for
their vectors, distil four fifths of them on the GPU (``embedder_train``), export the
projection-only package, then add the token term scored on the held-out fifth
(``embedder_vocab`` → teacher → ``embedder_tokens``) and export again. Score both packages
with ``evals/memory.py --embedder package:PATH`` and ``evals/cache_full.py --model PATH``.

``python -m evals.tab_embedder --package dist/demo/evermind-default.evermind --out-dir /tmp/tab``
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

from evermind.studio import api
from evermind.train.teachers import LOCAL_TEACHERS, MiniLMTeacher


def call(handler: str, **kwargs: Any) -> Any:
    """One Studio handler, as the page's worker calls it."""
    envelope = json.loads(asyncio.run(api.call(handler, json.dumps(kwargs))))
    if not envelope["ok"]:
        raise SystemExit(f"{handler} failed: {envelope['error']}")
    return envelope["result"]


def export(path: Path, name: str) -> None:
    data = call("export_package", name=name, version="0.1.0")["data_b64"]
    path.write_bytes(base64.b64decode(data))
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", type=Path, required=True, help="the .evermind to open")
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--texts", type=int, default=512, help="corpus sentences (the page's)")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    api.set_emitter(lambda _event: None)
    teacher, teacher_id = MiniLMTeacher(), LOCAL_TEACHERS["minilm"]
    call("corpus_default")
    call("package_load", data_b64=base64.b64encode(args.package.read_bytes()).decode())
    texts = call("embedder_texts", limit=args.texts)["texts"]
    vectors = [[float(x) for x in row] for row in teacher.embed(texts)]
    held = [i for i in range(len(texts)) if i % 5 == 4]  # as web/ui/app.js holds out
    fit = [i for i in range(len(texts)) if i % 5 != 4]
    steps = min(200, max(30, -(-3 * len(fit) // 16)))  # the page's default for batch 16
    start = time.perf_counter()
    trained = call(
        "embedder_train",
        texts=[texts[i] for i in fit],
        targets=[vectors[i] for i in fit],
        steps=steps,
        lr=0.005,
        batch_size=16,
        teacher=teacher_id,
    )
    print(
        f"embedder_train: {steps} steps on {len(fit)} sentences in "
        f"{time.perf_counter() - start:.1f} s, loss {trained['first_loss']:.3f} -> "
        f"{trained['loss']:.3f}"
    )
    export(args.out_dir / "tab-projection.evermind", "tab-projection")
    vocab = call("embedder_vocab")
    start = time.perf_counter()
    prior = [[float(x) for x in row] for row in teacher.embed(vocab["texts"])]
    added = call(
        "embedder_tokens",
        ids=vocab["ids"],
        vectors=prior,
        texts=[texts[i] for i in held],
        targets=[vectors[i] for i in held],
        corpus=texts,
    )
    print(
        f"embedder_tokens: {len(vocab['ids'])} vocabulary vectors, "
        f"{time.perf_counter() - start:.1f} s; "
        f"token term {'kept' if added['tokens'] else 'not kept'} (alpha {added['token_alpha']}), "
        f"held-out agreement {added['agreement_without_tokens']} -> {added['agreement']}"
    )
    export(args.out_dir / "tab-tokens.evermind", "tab-tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
