"""The Studio worker's RPC surface: named async handlers taking and returning JSON.

The JS worker (``web/worker.js``) forwards ``{fn, kwargs}`` messages from the page to
:func:`call` and posts the JSON result back. Progress and log lines go out through the
emitter the worker installs with :func:`set_emitter`, so this module never touches ``js``.
The same handlers run natively (wgpu-py) in the unit tests.

This module holds the session's handlers (boot, corpus, tokenizer, training, generation,
packages); :mod:`~evermind.studio.memory_api`, :mod:`~evermind.studio.ingest_api`,
:mod:`~evermind.studio.affect_api` and :mod:`~evermind.studio.bench_api` hold theirs. Each
builds a :class:`~evermind.studio.rpc.Router`; :data:`HANDLERS` merges them once.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import platform
import sys
import time
from typing import Any

import evermind
from evermind import gpu
from evermind.errors import ConfigError, EvermindError, NoAdapterError
from evermind.job import DEFAULT_CORPUS_BYTES, describe_default_corpus
from evermind.kernels.harness import run_case
from evermind.studio import affect_api, bench_api, ingest_api, memory_api, operations, telemetry_api
from evermind.studio.inputs import check_csv, check_text_bytes
from evermind.studio.rpc import Handler, Router, emit, merge, session, set_emitter
from evermind.studio.session import CHECKPOINT_S, EMBEDDER_TEXTS, FIRST_CHECKPOINT_S
from evermind.studio.session import embedder_texts as corpus_embedder_texts
from evermind.tokenizer import Tokenizer
from evermind.train.corpus import harvest_stdlib_docstrings, iter_harvest
from evermind.train.loop import TrainConfig
from evermind.train.sources import extract_text

log = logging.getLogger(__name__)

router = Router()
handler = router.handler


async def call(name: str, kwargs_json: str = "{}") -> str:
    """Runs handler ``name`` with JSON keyword arguments; returns a JSON envelope.

    The envelope is ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {"type",
    "message"}}``: errors never escape as exceptions, so the page always gets words.
    """
    try:
        fn = HANDLERS.get(name)
        if fn is None:
            raise ConfigError(f"unknown studio call {name!r}; known: {', '.join(sorted(HANDLERS))}")
        kwargs = json.loads(kwargs_json) if kwargs_json else {}
        if not isinstance(kwargs, dict):
            raise ConfigError(f"studio call {name!r}: arguments must be a JSON object")
        try:
            with telemetry_api.call_span(name):
                result = await fn(**kwargs)
        finally:
            telemetry_api.after_call()
        return json.dumps({"ok": True, "result": result})
    except EvermindError as err:
        return json.dumps({"ok": False, "error": {"type": type(err).__name__, "message": str(err)}})
    except Exception as err:  # a bug: report it in words, keep the worker alive
        log.exception("studio call %s failed", name)
        words = str(err) or f"studio call {name!r} failed with {type(err).__name__} (a bug)"
        return json.dumps({"ok": False, "error": {"type": type(err).__name__, "message": words}})


@handler
async def boot() -> dict[str, Any]:
    """Opens the WebGPU device; returns adapter, limits, versions and timings.

    Without WebGPU the boot still succeeds: ``gpu`` is false, ``transport`` is ``"cpu"``
    and ``gpu_error`` carries the :class:`~evermind.errors.NoAdapterError` (type and
    message), so the page can say so and keep everything that needs no GPU working.
    """
    start = time.perf_counter()
    facts: dict[str, Any] = {
        "evermind": evermind.__version__,
        "python": platform.python_version(),
        "platform": sys.platform,
    }
    try:
        device = await gpu.open_device()
    except NoAdapterError as err:
        session().gpu_error = str(err)
        return {
            **facts,
            "gpu": False,
            "gpu_error": {"type": type(err).__name__, "message": str(err)},
            "transport": "cpu",
            "adapter": {},
            "limits": {},
            "device_ms": round((time.perf_counter() - start) * 1000, 1),
        }
    session().gpu_error = None
    return {
        **facts,
        "gpu": True,
        "gpu_error": None,
        "transport": device.transport,
        "adapter": device.adapter_info,
        "limits": device.limits,
        "device_ms": round((time.perf_counter() - start) * 1000, 1),
    }


@handler
async def kernel_case(spec: dict[str, Any]) -> dict[str, str]:
    """Runs one kernel case (base64 buffers in, base64 outputs back)."""
    device = await gpu.open_device()
    decoded = dict(spec)
    decoded["buffers"] = {k: base64.b64decode(v) for k, v in spec["buffers"].items()}
    outputs = await run_case(device, decoded)
    return {k: base64.b64encode(v).decode() for k, v in outputs.items()}


# -- the Studio session -------------------------------------------------------------------


#: Seconds between two ``corpus-progress`` events (and cancel checks) of the default corpus.
CORPUS_PROGRESS_S = 0.1


@handler
async def corpus_default(max_bytes: int = DEFAULT_CORPUS_BYTES) -> dict[str, Any]:
    """Adds the embedded default corpus (this Python's standard-library docstrings).

    The harvest imports the library module by module (tens of seconds in a tab): it emits
    ``corpus-progress`` (bytes ``done`` of at most ``total``) and checks for a cancel
    (``operation_cancel("corpus")``) at most every :data:`CORPUS_PROGRESS_S`; a cancelled
    harvest adds nothing (``Cancelled``)."""
    limit = int(max_bytes)
    emit(
        "corpus-progress", message="Reading the standard library's docstrings…", done=0, total=limit
    )
    parts: list[str] = []
    with operations.operation("corpus") as op:
        last = time.monotonic()
        for piece, used in iter_harvest(limit):
            parts.append(piece)
            if time.monotonic() - last >= CORPUS_PROGRESS_S:
                emit("corpus-progress", done=used, total=limit)
                await asyncio.sleep(0)  # lets the page's cancel call in
                op.check()
                last = time.monotonic()
        op.check()
    text = "".join(parts)
    s = session()
    s.add_source("Python standard library docstrings", text, describe_default_corpus(text))
    await s.save_draft()
    return s.corpus_info()


@handler
async def corpus_add(
    name: str, text: str | None = None, data_b64: str | None = None, column: str | None = None
) -> dict[str, Any]:
    """Adds a pasted text or a dropped file (plain text, Markdown, JSON, JSONL, CSV)."""
    if (text is None) == (data_b64 is None):
        raise ConfigError("corpus_add takes exactly one of text= or data_b64=")
    # A file's bytes are refused with the reason when they are not text (NUL bytes, invalid
    # UTF-8, control characters), and a CSV is parsed strictly first.
    data = text if text is not None else check_text_bytes(name, base64.b64decode(data_b64 or ""))
    if name.lower().endswith(".csv"):
        check_csv(name, data)
    extracted = extract_text(name, data, column)
    s = session()
    s.add_source(name, extracted, f"{name} ({len(extracted.encode('utf-8')):,} bytes)")
    await s.save_draft()
    return s.corpus_info()


@handler
async def corpus_remove(name: str) -> dict[str, Any]:
    """Removes a source by name."""
    s = session()
    if s.sources.pop(name, None) is None:
        raise ConfigError(f"no corpus source named {name!r}")
    s.tokenizer, s.train_ids, s.held_ids = None, None, None
    await s.save_draft()
    return s.corpus_info()


@handler
async def corpus_info() -> dict[str, Any]:
    """Size, token estimate, sample and split of the corpus so far."""
    return session().corpus_info()


@handler
async def tokenizer_train(vocab_size: int = 2048) -> dict[str, Any]:
    """Trains the byte-level BPE tokenizer on the corpus (``tokenizer-progress`` events)."""
    s = session()
    result = s.train_tokenizer(int(vocab_size))
    # Saved with the corpus, so that a reload before any checkpoint keeps both.
    await s.save_draft()
    return result


@handler
async def corpus_check(name: str, data_b64: str) -> dict[str, Any]:
    """Checks a file without adding it: ``{bytes, text}`` (the decoded text) and, for a CSV,
    ``columns`` and ``rows``; refuses binary content and CSV problems in words."""
    text = check_text_bytes(name, base64.b64decode(data_b64))
    out: dict[str, Any] = {"bytes": len(text.encode("utf-8")), "text": text}
    if name.lower().endswith(".csv"):
        out.update(check_csv(name, text))
    return out


@handler
async def tokenizer_info() -> dict[str, Any]:
    """The tokenizer's numbers and examples (and why it is smaller than asked, if it is)."""
    return session().tokenizer_info()


@handler
async def tokenizer_encode(text: str) -> dict[str, Any]:
    """Token ids and their text pieces."""
    tok = session().tokenizer
    if tok is None:
        raise ConfigError("train a tokenizer first")
    ids = tok.encode(text)
    return {"ids": ids, "pieces": [tok.decode([i]) for i in ids]}


@handler
async def train_start(
    preset: str = "nano",
    config: dict[str, Any] | None = None,
    steps: int = 300,
    lr: float = 3e-3,
    batch_size: int = 4,
    seq_len: int = 128,
    warmup_steps: int | None = None,
    checkpoint_every: int = 25,
    eval_every: int | None = None,
    seed: int = 0,
    first_checkpoint_s: float = FIRST_CHECKPOINT_S,
    checkpoint_s: float = CHECKPOINT_S,
    block: str = "mamba1",
    cortex: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Trains a new model from scratch (``train-progress`` events); resolves when it ends.

    ``block`` is the block type, ``mamba1`` (the selective scan) or ``mamba2`` (the SSD block).
    ``cortex`` adds the shared-expert MoE FFN after each mixer (Mamba-1 only): ``MambaConfig``'s
    ``moe_experts``, ``moe_top_k``, ``moe_intermediate``, ``moe_shared_intermediate``,
    ``moe_every``, ``router_aux_loss_coef`` (omitted keys take their defaults); each
    ``train-progress`` event then carries the step's ``routing``.

    Checkpoints every ``checkpoint_every`` steps, and by time: after the first
    ``first_checkpoint_s`` seconds, then every ``checkpoint_s`` (whichever comes first). The
    run stored before is kept as an earlier run (``runs_list``), not deleted."""
    train = TrainConfig(
        steps=int(steps),
        batch_size=int(batch_size),
        seq_len=int(seq_len),
        lr=float(lr),
        min_lr=float(lr) / 10,
        warmup_steps=int(warmup_steps) if warmup_steps is not None else min(30, int(steps) // 10),
        checkpoint_every=int(checkpoint_every),
        eval_every=int(eval_every) if eval_every is not None else max(1, int(steps) // 10),
        seed=int(seed),
    )
    s = session()
    s.checkpoint_seconds = (float(first_checkpoint_s), float(checkpoint_s))
    return await s.start(preset, config, train, block=str(block), cortex=cortex)


@handler
async def train_pause() -> dict[str, Any]:
    """Pauses a running training loop after the current step (and checkpoints)."""
    return session().request("pause")


@handler
async def train_stop() -> dict[str, Any]:
    """Stops a running training loop after the current step (and checkpoints)."""
    return session().request("stop")


@handler
async def train_resume() -> dict[str, Any]:
    """Continues training from memory or from the stored checkpoint (after a reload)."""
    return await session().resume()


@handler
async def train_summary() -> dict[str, Any]:
    """The summary of the current model's training."""
    return session().summary()


@handler
async def session_status() -> dict[str, Any]:
    """Whether a stored checkpoint exists, and at which step."""
    return await session().status()


@handler
async def session_restore() -> dict[str, Any]:
    """After a reload: restores the stored run (corpus, tokenizer, model at its checkpoint
    with its embedder, settings) unless the worker holds one, or the corpus and tokenizer saved
    before any run; the notice also counts the memories (namespace ``studio``) and the cached
    answers kept in this browser (``memories``, ``cached``);
    ``{restored, notice, notice_kind, settings, tokenizer, corpus, summary, runs, memories,
    cached}``."""
    back = await session().restore()
    try:
        memories, cached = await memory_api.tab_memory().stored()
    except EvermindError as err:  # the notice must never cost the session its restore
        log.warning("session_restore: could not count memories and cached answers: %s", err)
        memories = cached = 0
    return {**back, "memories": memories, "cached": cached, **_kept_notice(back, memories, cached)}


def _kept_notice(back: dict[str, Any], memories: int, cached: int) -> dict[str, Any]:
    """The restore notice with the memories and cached answers this browser keeps."""
    kept = []
    if memories:
        kept.append(f"{memories:,} memor{'ies' if memories != 1 else 'y'}")
    if cached:
        kept.append(f"{cached:,} cached answer{'s' if cached != 1 else ''}")
    if not kept:
        return {}
    words = " and ".join(kept)
    notice = back.get("notice")
    if not notice:
        return {
            "notice": f"Restored from this browser's storage: {words}.",
            "notice_kind": "restored",
        }
    if back.get("notice_kind") == "restored":
        return {"notice": f"{notice.rstrip('.')}; also {words}."}
    return {"notice": f"{notice} Kept: {words}."}


@handler
async def runs_list() -> dict[str, Any]:
    """The saved runs, newest first (``current`` marks the run training resumes)."""
    return {"runs": await session().runs()}


@handler
async def run_open(id: str) -> dict[str, Any]:
    """Makes a saved run the current one (the current is kept) and restores it."""
    s = session()
    await s.open_run(str(id))
    return await s.restore()


@handler
async def run_delete(id: str) -> dict[str, Any]:
    """Deletes a saved run; the runs left."""
    return {"runs": await session().delete_run(str(id))}


@handler
async def session_clear() -> dict[str, Any]:
    """Forgets the stored training session."""
    kv = await session().kv()
    await kv.clear("session")
    return {}


@handler
async def generate(
    prompt: str,
    max_new_tokens: int = 64,
    temperature: float = 0.8,
    top_k: int | None = 40,
    top_p: float | None = 0.95,
    seed: int | None = None,
) -> dict[str, Any]:
    """Streams a continuation of ``prompt`` (``generate-token`` events)."""
    if int(max_new_tokens) < 1:
        raise ConfigError(f"generate: max_new_tokens must be at least 1, got {max_new_tokens}")
    return await session().generate(
        prompt, int(max_new_tokens), float(temperature), top_k, top_p, seed
    )


@handler
async def embed(texts: list[str]) -> dict[str, Any]:
    """Unit-norm embeddings of ``texts``."""
    vectors = await session().embed(list(texts))
    return {"vectors": vectors, "dim": len(vectors[0]) if vectors else 0}


@handler
async def embedder_train(
    texts: list[str],
    targets: list[list[float]],
    steps: int = 100,
    lr: float = 3e-3,
    batch_size: int = 8,
    seed: int = 0,
    teacher: str = "",
) -> dict[str, Any]:
    """Distils teacher vectors (one per text, e.g. from a ``/v1/embeddings`` endpoint the
    page called) into the tab's model on WebGPU (``embedder-progress`` events); ``embed``
    then serves the distilled embedding and ``export_package`` writes its head."""
    return await session().embedder_train(
        list(texts),
        [[float(x) for x in t] for t in targets],
        int(steps),
        float(lr),
        int(batch_size),
        int(seed),
        str(teacher),
    )


@handler
async def embedder_vocab() -> dict[str, Any]:
    """The vocabulary entries (``ids``, ``texts``) the token term asks the teacher about."""
    return session().embedder_vocab()


@handler
async def embedder_tokens(
    ids: list[int],
    vectors: list[list[float]],
    texts: list[str],
    targets: list[list[float]],
    corpus: list[str] | None = None,
) -> dict[str, Any]:
    """Adds the token term to the distilled head: the teacher's ``vectors`` of the vocabulary
    entries ``ids``, scaled on ``texts`` (held out from ``embedder_train``) and their teacher
    ``targets``; IDF over ``corpus`` (default ``texts``)."""
    return await session().embedder_tokens(
        [int(i) for i in ids],
        [[float(x) for x in v] for v in vectors],
        list(texts),
        [[float(x) for x in t] for t in targets],
        None if corpus is None else list(corpus),
    )


@handler
async def embedder_texts(limit: int = EMBEDDER_TEXTS) -> dict[str, Any]:
    """The corpus sentences the embedder phase embeds (at most ``limit``)."""
    texts = corpus_embedder_texts(session().corpus_text, int(limit))
    return {"texts": texts, "count": len(texts)}


@handler
async def embedder_centre(
    texts: list[str] | None = None, limit: int = EMBEDDER_TEXTS, reason: str = ""
) -> dict[str, Any]:
    """The teacher-free embedder phase: centring on the corpus sentences (or ``texts``)."""
    s = session()
    chosen = list(texts) if texts is not None else corpus_embedder_texts(s.corpus_text, int(limit))
    return await s.embedder_centre(chosen, str(reason))


@handler
async def embedder_info() -> dict[str, Any]:
    """What serves ``embed`` now (method, teacher, dim, fingerprint)."""
    return session().embedder_info()


@handler
async def operation_cancel(name: str) -> dict[str, Any]:
    """Asks the running long operation ``name`` (``corpus``, ``embedder``, ``similarity``)
    to stop at its next batch; ``cancelled`` says whether one was running."""
    return {"cancelled": operations.cancel(str(name))}


@handler
async def similarity(a: str, b: str) -> dict[str, Any]:
    """Cosine similarity of two texts' embeddings, with the embedder's calibration on the
    corpus (``threshold``: what a cache hit needs; ``unrelated``: what unrelated texts score)."""
    return await session().similarity(a, b)


@handler
async def evaluate(text: str | None = None) -> dict[str, Any]:
    """Bench metrics on the held-out split (or on ``text``)."""
    return await session().evaluate(text)


@handler
async def tokenizer_bench(max_bytes: int = 2_000_000, vocab_size: int = 4096) -> dict[str, Any]:
    """Times harvesting the default corpus, training the tokenizer and encoding, in this host."""
    start = time.perf_counter()
    text = harvest_stdlib_docstrings(int(max_bytes))
    harvested = time.perf_counter()
    tok = Tokenizer.train(text, int(vocab_size))
    trained = time.perf_counter()
    ids = tok.encode(text)
    encoded = time.perf_counter()
    return {
        "bytes": len(text.encode("utf-8")),
        "vocab_size": tok.vocab_size,
        "tokens": len(ids),
        "harvest_s": round(harvested - start, 3),
        "train_s": round(trained - harvested, 3),
        "encode_s": round(encoded - trained, 3),
        "python": platform.python_version(),
    }


@handler
async def package_load(data_b64: str) -> dict[str, Any]:
    """Opens a ``.evermind`` package (base64) in the tab: verified, then ready to try."""
    return await session().load_package(base64.b64decode(data_b64))


@handler
async def export_package(
    name: str = "evermind-studio", version: str = "0.1.0", dtype: str = "float32"
) -> dict[str, Any]:
    """The ``.evermind`` package of the current model (base64)."""
    return await session().export(name, version, dtype)


#: Every RPC handler by name: this module's, the Memory tab's, Data → Memory's, the affect
#: head's, the benchmarks' and the telemetry export's.
HANDLERS: dict[str, Handler] = merge(
    router,
    memory_api.router,
    ingest_api.router,
    affect_api.router,
    bench_api.router,
    telemetry_api.router,
)

__all__ = ["HANDLERS", "call", "emit", "session", "set_emitter"]
