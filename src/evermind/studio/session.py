"""The Studio's state in the tab: corpus, tokenizer, model, training control (browser-safe).

One :class:`Session` per worker. It runs the job's steps (:mod:`evermind.job`) one panel
at a time, trains through :class:`~evermind.train.loop.Trainer` on the GPU model,
checkpoints to the storage port (IndexedDB in the tab) every N steps and on pause/stop,
and rebuilds itself from that checkpoint after a reload or a lost device.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import math
import random
import re
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

from evermind import gpu
from evermind.errors import ConfigError, DeviceLostError, GPUError, NoAdapterError
from evermind.job import (
    JobConfig,
    export_package,
    model_config,
    sample_text,
    tokenize_split,
    train_tokenizer,
)
from evermind.metrics import lm_metrics
from evermind.model.config import MambaConfig
from evermind.model.gpu import GpuMamba
from evermind.model.gpu_infer import GpuDecoder, GpuEmbedder
from evermind.model.init import init_params
from evermind.model.py_decode import PyDecoder
from evermind.package import read_package
from evermind.package.affect import AffectHead
from evermind.package.head import EmbedderHead, bag_mean, project
from evermind.package.tensor import Tensor
from evermind.search.calibration import UNCALIBRATED, Calibration, measure_calibration
from evermind.search.cosine import dot
from evermind.studio.draft import DRAFT_KEY, DraftError, describe_draft, draft_record, parse_draft
from evermind.studio.operations import Cancelled, Operation, operation, yield_to_page
from evermind.studio.similarity import similarity_meaning
from evermind.studio.storage import KeyValueStore, open_storage
from evermind.tokenizer import Tokenizer
from evermind.tokenizer.trainer import counting_pieces
from evermind.train.data import eval_windows
from evermind.train.gpu_backend import GpuBackend
from evermind.train.loop import Trainer
from evermind.types import Progress, TrainConfig

log = logging.getLogger(__name__)

Emit = Callable[..., None]
#: Bytes per token, for the token estimate before a tokenizer exists.
BYTES_PER_TOKEN_ESTIMATE = 3.5
#: Most corpus texts the embedder phase uses (teacher calls and GPU steps grow with it).
EMBEDDER_TEXTS = 512
#: Texts the tab's token-term fit scores α on (pure Python: W·(p − μ) for each).
TOKEN_FIT_TEXTS = 160
#: The α grid of the tab's token term, in units of |W·(p − μ)| / |token term| (0: none).
TOKEN_ALPHAS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
#: Tokens per text the CPU path embeds (as :class:`GpuEmbedder`'s default ``max_tokens``).
CPU_EMBED_TOKENS = 128
#: Shortest and longest corpus text (words, characters) the embedder phase takes.
EMBEDDER_MIN_WORDS, EMBEDDER_MAX_CHARS = 3, 240
#: Seconds of training before the first checkpoint, then between checkpoints (whichever of
#: these and ``checkpoint_every`` steps comes first): a reload never loses more than this.
FIRST_CHECKPOINT_S, CHECKPOINT_S = 20.0, 60.0
#: Saved runs kept in the browser: the current one and the latest earlier ones.
KEEP_RUNS = 3
#: The keys of one run in the session store (the current run's keys are unprefixed; an
#: earlier run's are ``archive/<id>/<key>``, listed in the ``runs`` key).
RUN_KEYS = ("meta", "checkpoint", "tokenizer", "corpus", "embedder")
#: The cortex's MambaConfig (and JobConfig) fields that ``train_start``'s ``cortex`` may set.
CORTEX_KEYS = (
    "moe_experts",
    "moe_top_k",
    "moe_intermediate",
    "moe_shared_intermediate",
    "moe_every",
    "router_aux_loss_coef",
)


def _cortex_fields(cortex: dict[str, Any] | None) -> dict[str, Any]:
    """``cortex``'s JobConfig keywords ({} for None).

    Raises:
        ConfigError: A key is not one of :data:`CORTEX_KEYS`.
    """
    if not cortex:
        return {}
    unknown = sorted(set(cortex) - set(CORTEX_KEYS))
    if unknown:
        raise ConfigError(
            f"train_start: unknown cortex keys {unknown}; expected some of {list(CORTEX_KEYS)}; "
            "hint: moe_experts=4 adds the cortex with its defaults"
        )
    return dict(cortex)


#: Corpus sentences the similarity calibration embeds (their unrelated pairs' cosines).
CALIBRATION_TEXTS = 48
#: Texts per batch of that calibration: one progress event and one cancel check each.
SIMILARITY_BATCH = 8
#: Characters per piece of the tokenizer's first pass (a cancel can stop between pieces).
COUNT_PIECE_CHARS = 1 << 15


def embedder_texts(text: str, limit: int = EMBEDDER_TEXTS) -> list[str]:
    """The corpus texts the embedder phase embeds: its sentences, in corpus order.

    Paragraphs (blank-line separated) are split at sentence ends; sentences of fewer than
    :data:`EMBEDDER_MIN_WORDS` words are dropped, longer ones cut at
    :data:`EMBEDDER_MAX_CHARS` characters, duplicates kept once. More than ``limit``: an
    evenly spaced sample, so every part of the corpus is represented.
    """
    seen: dict[str, None] = {}
    for paragraph in re.split(r"\n\s*\n", text):
        flat = " ".join(paragraph.split())
        for sentence in re.split(r"(?<=[.!?])\s+", flat):
            cut = sentence[:EMBEDDER_MAX_CHARS].strip()
            if len(cut.split()) >= EMBEDDER_MIN_WORDS:
                seen.setdefault(cut, None)
    items = list(seen)
    if len(items) <= limit:
        return items
    return [items[i * len(items) // limit] for i in range(max(0, limit))]


class Session:
    """Everything the Studio has built so far in this tab."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.sources: dict[str, tuple[str, str]] = {}
        self.tokenizer: Tokenizer | None = None
        self.train_ids: array[int] | None = None
        self.held_ids: array[int] | None = None
        self.job: JobConfig | None = None
        self.config: MambaConfig | None = None
        self.model: GpuMamba | None = None
        self.trainer: Trainer | None = None
        self._decoder: GpuDecoder | None = None
        self._embedder: GpuEmbedder | None = None
        #: The embedding head (μ, W) the embedder phase fitted (:meth:`embedder_train`,
        #: :meth:`embedder_centre`) or the opened package carries; :meth:`embed` serves
        #: ``normalize(W · (p − μ))`` with it, and :meth:`export` writes it into the package.
        self.head: EmbedderHead | None = None
        #: What the embedder phase did last, in the page's words (see :meth:`embedder_info`).
        self._embedder_info: dict[str, Any] = {}
        self._embedder_version = 0
        #: The affect head (:mod:`evermind.studio.affect_api`) and the
        #: :attr:`embedder_fingerprint` of the model it was fitted on: :meth:`export` writes
        #: it only while that is still the model in the tab.
        self.affect: tuple[AffectHead, str] | None = None
        self._pooler: tuple[str, GpuEmbedder] | None = None  # (fingerprint, headless embedder)
        self.state = "idle"
        self._request: str | None = None
        self._kv: KeyValueStore | None = None
        self.held_out_fraction = 0.05
        #: Why this tab has no WebGPU (the boot's NoAdapterError), None while it has one.
        self.gpu_error: str | None = None
        #: Without WebGPU an opened package lives here (weights in memory, pure-Python
        #: decoding: :class:`~evermind.model.py_decode.PyDecoder`); None otherwise.
        self.cpu_params: dict[str, array[float]] | None = None
        self._cpu_decoder: PyDecoder | None = None
        #: Seconds before the first time-based checkpoint, then between them.
        self.checkpoint_seconds = (FIRST_CHECKPOINT_S, CHECKPOINT_S)
        self._custom: dict[str, Any] | None = None
        self._run_id = ""
        self._vocab_requested: int | None = None
        self._similarity: tuple[str, Calibration, list[float]] | None = None
        self._restore_lock = asyncio.Lock()

    async def kv(self) -> KeyValueStore:
        """The storage port, opened on first use."""
        if self._kv is None:
            self._kv = await open_storage()
        return self._kv

    # -- corpus ------------------------------------------------------------------------------
    @property
    def corpus_text(self) -> str:
        """All sources joined, in the order they were added."""
        return "\n\n".join(text for text, _ in self.sources.values())

    def corpus_info(self) -> dict[str, Any]:
        """Size, token estimate, a sample and the held-out split of the corpus."""
        text = self.corpus_text
        size = len(text.encode("utf-8"))
        tokens = len(self.train_ids or ()) + len(self.held_ids or ()) if self.tokenizer else None
        return {
            "sources": [
                {"name": name, "bytes": len(t.encode("utf-8")), "description": d}
                for name, (t, d) in self.sources.items()
            ],
            "bytes": size,
            "chars": len(text),
            "token_estimate": tokens
            if tokens is not None
            else int(size / BYTES_PER_TOKEN_ESTIMATE),
            "sample": sample_text(text, 400),
            "held_out_fraction": self.held_out_fraction,
            "tokenizer": None
            if self.tokenizer is None
            else {
                "vocab_size": self.tokenizer.vocab_size,
                "num_merges": len(self.tokenizer.spec.merges),
            },
        }

    def add_source(self, name: str, text: str, description: str) -> None:
        """Adds (or replaces) a named source; invalidates the tokenizer built before."""
        if not text.strip():
            raise ConfigError(f"{name}: no text to train on")
        self.sources[name] = (text, description)
        self.tokenizer = None
        self.train_ids = self.held_ids = None

    # -- tokenizer ---------------------------------------------------------------------------
    def train_tokenizer(self, vocab_size: int) -> dict[str, Any]:
        """Trains the tokenizer on the corpus and tokenises it."""
        text = self.corpus_text
        if not text:
            raise ConfigError("add some text in the Data panel before training a tokenizer")
        start = time.perf_counter()
        last = [0.0]

        with operation("tokenizer") as op:

            def progress(done: int, total: int, stage: str = "merge") -> None:
                now = time.perf_counter()
                if now - last[0] > 0.2 or done >= total:
                    last[0] = now
                    self.emit("tokenizer-progress", stage=stage, done=done, total=total)
                    # The training is one synchronous loop: in the tab, let the page's
                    # cancel call in here (a no-op natively), then stop if it asked.
                    yield_to_page()
                    op.check()

            def pieces() -> Iterator[str]:
                # The first pass (counting the words) reads the text in pieces that count
                # as the whole does, with the same way in for a cancel between them.
                done = 0
                for piece in counting_pieces(text, COUNT_PIECE_CHARS):
                    progress(done, len(text), "count")
                    yield piece
                    done += len(piece)
                progress(done, len(text), "count")

            tokenizer = train_tokenizer(pieces(), vocab_size, on_progress=progress)
        # Only a whole tokenizer replaces the one the session had.
        self.tokenizer = tokenizer
        self._vocab_requested = vocab_size
        self.tokenize()
        return {**self.tokenizer_info(), "seconds": round(time.perf_counter() - start, 2)}

    def tokenizer_info(self) -> dict[str, Any]:
        """The tokenizer's numbers and example encodings; ``requested`` and ``short_reason``
        say why the vocabulary came out smaller than asked (when it did)."""
        tok = self.tokenizer
        if tok is None:
            raise ConfigError("train a tokenizer first")
        if self.train_ids is None or self.held_ids is None:
            self.tokenize()
        assert self.train_ids is not None and self.held_ids is not None
        examples = []
        for sample in ("Return the number of items in a container.", "def f(x): return 2 * x"):
            ids = tok.encode(sample)
            examples.append({"text": sample, "ids": ids, "pieces": [tok.decode([i]) for i in ids]})
        merges = len(tok.spec.merges)
        requested = self._vocab_requested
        short = None
        if requested is not None and tok.vocab_size < requested:
            special = max(0, tok.vocab_size - 256 - merges)
            short = (
                f"asked for {requested:,}, got {tok.vocab_size:,}: the corpus has only "
                f"{merges:,} distinct merges (pairs of adjacent tokens that occur at least "
                f"twice), so the vocabulary is 256 bytes + {merges:,} merges"
                + (f" + {special} special tokens" if special else "")
                + ". Add more (or more varied) text for a bigger one."
            )
        return {
            "vocab_size": tok.vocab_size,
            "num_merges": merges,
            "requested": requested,
            "short_reason": short,
            "tokens": len(self.train_ids) + len(self.held_ids),
            "train_tokens": len(self.train_ids),
            "held_out_tokens": len(self.held_ids),
            "examples": examples,
        }

    def tokenize(self) -> None:
        """Encodes the corpus and splits off the held-out tail."""
        assert self.tokenizer is not None
        self.train_ids, self.held_ids = tokenize_split(
            self.tokenizer, self.corpus_text, self.held_out_fraction
        )

    # -- training ----------------------------------------------------------------------------
    async def start(
        self,
        preset: str,
        custom: dict[str, Any] | None,
        train: TrainConfig,
        block: str = "mamba1",
        cortex: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Builds a fresh model of ``block`` type (with the cortex's ``moe_*`` keywords, if
        given) and trains it from step 0.

        Raises:
            ConfigError: Training is running, no tokenizer is trained, or ``cortex`` has a
                key that is not a cortex field (or a bad value).
        """
        if self.state in ("training", "embedding"):
            raise ConfigError("training is already running; pause or stop it first")
        if self.tokenizer is None or self.train_ids is None or self.held_ids is None:
            raise ConfigError("train a tokenizer in the Tokenizer panel first")
        self.job = JobConfig(
            preset=preset,
            block=block,
            vocab_size=self.tokenizer.vocab_size,
            seed=train.seed,
            train=train,
            **_cortex_fields(cortex),
        )
        self.config = model_config(self.job, self.tokenizer, custom)
        self.affect = None  # fitted on the weights this run replaces
        await self._build(init_params(self.config, train.seed))
        self._custom = dict(custom) if custom else None
        kv = await self.kv()
        # The run before this one is kept (archived), never deleted: see :meth:`_archive`.
        archive = await self._archive(kv)
        self._run_id = f"run-{int(time.time() * 1000)}"
        await kv.write(
            "session",
            puts=[
                *archive[0],
                ("meta", self._meta()),
                ("tokenizer", self.tokenizer.to_json()),
                ("corpus", [[n, t, d] for n, (t, d) in self.sources.items()]),
            ],
            deletes=[*archive[1], "checkpoint", "embedder"],
        )
        return await self._train_loop()

    async def _archive(self, kv: KeyValueStore) -> tuple[list[tuple[str, Any]], list[str]]:
        """The puts and deletes that keep the current stored run as an earlier run (when it
        has a checkpoint), dropping the oldest beyond :data:`KEEP_RUNS` runs in all."""
        meta = await kv.get("session", "meta")
        runs: list[dict[str, Any]] = list(await kv.get("session", "runs") or [])
        puts: list[tuple[str, Any]] = []
        deletes: list[str] = []
        if meta and meta.get("checkpoint_step") is not None:
            run_id = str(meta.get("run_id") or f"run-{int(float(meta['updated_at']) * 1000)}")
            for key in RUN_KEYS:
                value = await kv.get("session", key)
                if value is not None:
                    puts.append((f"archive/{run_id}/{key}", value))
            runs = [r for r in runs if r["id"] != run_id] + [_run_entry(run_id, meta)]
        runs.sort(key=lambda r: float(r.get("updated_at") or 0))
        while len(runs) > KEEP_RUNS - 1:
            old = runs.pop(0)
            deletes.extend(f"archive/{old['id']}/{key}" for key in RUN_KEYS)
        puts.append(("runs", runs))
        return puts, deletes

    async def runs(self) -> list[dict[str, Any]]:
        """The saved runs, newest first: the current one (``current``) and earlier ones."""
        kv = await self.kv()
        meta = await kv.get("session", "meta")
        out = [
            {**r, "current": False} for r in reversed(list(await kv.get("session", "runs") or []))
        ]
        if meta and meta.get("checkpoint_step") is not None:
            run_id = str(meta.get("run_id") or "current")
            out.insert(0, {**_run_entry(run_id, meta), "current": True})
        return out

    async def open_run(self, run_id: str) -> dict[str, Any]:
        """Makes an earlier saved run the current one (the current one is kept in its
        place) and restores it, ready to resume."""
        if self.state in ("training", "embedding"):
            raise ConfigError("training is running; pause or stop it before opening another run")
        kv = await self.kv()
        runs = list(await kv.get("session", "runs") or [])
        if not any(r["id"] == run_id for r in runs):
            current = await kv.get("session", "meta")
            if current and str(current.get("run_id") or "current") == run_id:
                await self.restore_from_storage()
                return await self.status()
            raise ConfigError(f"no saved run {run_id!r}")
        values = {key: await kv.get("session", f"archive/{run_id}/{key}") for key in RUN_KEYS}
        puts, deletes = await self._archive(kv)
        index = dict(puts).get("runs", [])
        puts = [(k, v) for k, v in puts if k != "runs"]
        index = [r for r in index if r["id"] != run_id]
        await kv.write(
            "session",
            puts=[*puts, ("runs", index), *((k, v) for k, v in values.items() if v is not None)],
            deletes=[
                *deletes,
                *(f"archive/{run_id}/{key}" for key in RUN_KEYS),
                *(k for k, v in values.items() if v is None),
            ],
        )
        self.trainer = None
        await self.restore_from_storage()
        return await self.status()

    async def delete_run(self, run_id: str) -> list[dict[str, Any]]:
        """Deletes a saved run (the current one only while nothing trains); the runs left."""
        kv = await self.kv()
        meta = await kv.get("session", "meta")
        if meta and str(meta.get("run_id") or "current") == run_id:
            if self.state in ("training", "embedding"):
                raise ConfigError("training is running; stop it before deleting its run")
            await kv.write("session", deletes=list(RUN_KEYS))
        else:
            runs = list(await kv.get("session", "runs") or [])
            if not any(r["id"] == run_id for r in runs):
                raise ConfigError(f"no saved run {run_id!r}")
            await kv.write(
                "session",
                puts=[("runs", [r for r in runs if r["id"] != run_id])],
                deletes=[f"archive/{run_id}/{key}" for key in RUN_KEYS],
            )
        return await self.runs()

    async def _build(self, params: dict[str, array[float]]) -> None:
        assert self.config is not None and self.job is not None
        assert self.train_ids is not None and self.held_ids is not None
        device = await gpu.open_device()
        train = self.job.train
        self._drop_cpu_model()
        backend = GpuBackend(device, self.config, train.batch_size, train.seq_len, train)
        backend.model.load_params(params)
        self.model = backend.model
        self._decoder = None
        self._set_head(None, {})
        self.trainer = Trainer(
            backend, self.train_ids, self.held_ids, train, on_progress=self._progress
        )

    def _meta(self, checkpoint_step: int | None = None) -> dict[str, Any]:
        assert self.job is not None and self.config is not None
        return {
            # Written in the same transaction as the checkpoint, so that the status of a
            # session is known without reading the (megabytes of) checkpoint itself.
            "checkpoint_step": checkpoint_step,
            "run_id": self._run_id,
            "loss": _finite(self.trainer.losses[-1])
            if self.trainer and self.trainer.losses
            else None,
            "eval_loss": self.trainer.eval_losses[-1][1]
            if self.trainer and self.trainer.eval_losses
            else None,
            "train": asdict(self.job.train),
            "preset": self.job.preset,
            "custom": self._custom,
            "vocab_requested": self._vocab_requested,
            "model": self.config.to_hf_config(),
            "held_out_fraction": self.held_out_fraction,
            "corpus_bytes": len(self.corpus_text.encode("utf-8")),
            "sources": [[n, d] for n, (_, d) in self.sources.items()],
            "updated_at": time.time(),
        }

    def _progress(self, p: Progress) -> None:
        # elapsed_s counts training time over all steps, restored ones included.
        remaining = (p.steps - p.step) * (p.elapsed_s / max(1, p.step))
        self.emit(
            "train-progress",
            step=p.step,
            steps=p.steps,
            loss=p.loss,
            lr=p.lr,
            n_params=self.config.n_params if self.config else None,
            eval_loss=p.eval_loss,
            tokens=p.tokens,
            tokens_per_second=round(p.tokens_per_second, 1),
            elapsed_s=round(p.elapsed_s, 2),
            eta_s=round(remaining, 1),
            routing=p.routing,
        )

    async def _train_loop(self) -> dict[str, Any]:
        assert self.trainer is not None and self.job is not None
        trainer, train = self.trainer, self.job.train
        self._request = None
        self.state = "training"
        self.emit("train-state", state="training", step=trainer.step)
        every = train.checkpoint_every or train.steps
        first, later = self.checkpoint_seconds
        recovered = False
        # Time-based checkpoints as well as step-based ones: the first after `first` seconds
        # of this loop, then every `later` seconds (or `every` steps, whichever comes first).
        saved = [time.perf_counter(), trainer.step > 0]

        try:
            while trainer.step < train.steps:
                begun = trainer.step

                def should_stop(begun: int = begun) -> bool:
                    if self._request is not None:
                        return True
                    limit = later if saved[1] else first
                    return trainer.step > begun and time.perf_counter() - saved[0] >= limit

                try:
                    await trainer.run(steps=every - trainer.step % every, should_stop=should_stop)
                except DeviceLostError as err:
                    if recovered:
                        raise
                    recovered = True
                    self.emit("train-state", state="recovering", message=str(err))
                    await self._recover()
                    continue
                if self._request is not None:
                    break
                await self.save_checkpoint()
                saved[:] = [time.perf_counter(), True]
        except BaseException:
            self.state = "error"
            raise
        if self._request is not None:
            await self.save_checkpoint()
        self.state = {"pause": "paused", "stop": "stopped"}.get(self._request or "", "finished")
        self.emit("train-state", state=self.state, step=trainer.step)
        return self.summary()

    async def _recover(self) -> None:
        """Re-opens the GPU device and continues from the last checkpoint."""
        await gpu.open_device(fresh=True)
        kv = await self.kv()
        blob = await kv.get("session", "checkpoint")
        assert self.config is not None
        await self._build(init_params(self.config, self.job.seed if self.job else 0))
        if blob:
            assert self.trainer is not None
            await self.trainer.restore(blob)

    async def save_checkpoint(self) -> None:
        """Writes the full training state to storage (one transaction)."""
        assert self.trainer is not None
        blob = await self.trainer.checkpoint()
        kv = await self.kv()
        await kv.write(
            "session", puts=[("checkpoint", blob), ("meta", self._meta(self.trainer.step))]
        )
        self.emit("train-checkpoint", step=self.trainer.step, bytes=len(blob))

    def request(self, what: str) -> dict[str, Any]:
        """Asks a running training loop to pause or stop at the next step."""
        if self.state != "training":
            return {"state": self.state}
        self._request = what
        return {"state": f"{what}-requested"}

    async def resume(self) -> dict[str, Any]:
        """Continues training: in memory if possible, else from the stored checkpoint."""
        if self.state in ("training", "embedding"):
            raise ConfigError("training is already running")
        if self.trainer is None:
            await self.restore_from_storage()
        return await self._train_loop()

    async def restore_from_storage(self) -> None:
        """Rebuilds tokenizer, data, model and trainer from the stored session."""
        kv = await self.kv()
        meta = await kv.get("session", "meta")
        blob = await kv.get("session", "checkpoint")
        if not meta or not blob:
            raise ConfigError("there is no saved training session to resume")
        self.tokenizer = Tokenizer.from_json(await kv.get("session", "tokenizer"))
        corpus = await kv.get("session", "corpus")
        if isinstance(corpus, str):
            # An older session stored the corpus joined: one source described by all of them.
            described = "; ".join(d for _, d in meta["sources"]) or "restored session"
            self.sources = {"restored corpus": (corpus, described)}
        else:
            self.sources = {str(n): (str(t), str(d)) for n, t, d in corpus}
        self._run_id = str(meta.get("run_id") or "")
        self._custom = meta.get("custom")
        self._vocab_requested = meta.get("vocab_requested")
        self.held_out_fraction = float(meta["held_out_fraction"])
        self.tokenize()
        train = TrainConfig(**meta["train"])
        self.config = MambaConfig.from_hf_config(meta["model"])
        self.job = JobConfig(
            preset=meta["preset"],
            block=self.config.block,
            vocab_size=self.tokenizer.vocab_size,
            seed=train.seed,
            train=train,
            **_cortex_fields({key: getattr(self.config, key) for key in CORTEX_KEYS}),
        )
        await self._build(init_params(self.config, train.seed))
        assert self.trainer is not None
        await self.trainer.restore(blob)
        stored = await kv.get("session", "embedder")
        if stored:
            self._set_head(_head_from_json(stored["head"]), dict(stored["info"]))
        self.state = "finished" if self.trainer.step >= train.steps else "paused"

    async def save_draft(self) -> None:
        """Stores the corpus and tokenizer (one put) so that a reload before the first
        checkpoint brings them back; an empty corpus deletes the draft."""
        kv = await self.kv()
        if not self.sources:
            await kv.write("session", deletes=[DRAFT_KEY])
            return
        record = draft_record(
            self.sources, self.tokenizer, self._vocab_requested, self.held_out_fraction
        )
        await kv.write("session", puts=[(DRAFT_KEY, record)])

    def _forget_restored(self) -> None:
        """Back to an empty session after a restore that failed part-way (no half-restore)."""
        self.sources = {}
        self.tokenizer = None
        self.train_ids = self.held_ids = None
        self.job = self.config = None
        self.model = self.trainer = None
        self._decoder = None
        self._set_head(None, {})
        self._custom = None
        self._run_id = ""
        self._vocab_requested = None
        self.state = "idle"

    async def _restore_draft(self, kv: KeyValueStore) -> str | None:
        """Restores the stored draft whole; a damaged one is dropped. The notice's words."""
        value = await kv.get("session", DRAFT_KEY)
        if value is None:
            return None
        try:
            draft = parse_draft(value)
        except DraftError as err:
            await kv.write("session", deletes=[DRAFT_KEY])
            return (
                f"The saved corpus and tokenizer could not be restored ({err}); they were dropped."
            )
        self.sources = dict(draft.sources)
        self.held_out_fraction = draft.held_out_fraction
        self._vocab_requested = draft.vocab_requested
        self.tokenizer = draft.tokenizer
        if self.tokenizer is not None:
            self.tokenize()
        return describe_draft(draft)

    async def restore(self) -> dict[str, Any]:
        """After a reload: brings the stored run back (corpus, tokenizer, model at its
        checkpoint, settings) unless this worker already holds one, or before any run the
        draft (corpus and tokenizer); what came back and a notice in words (``notice``,
        ``notice_kind``: ``restored`` or ``dropped``)."""
        kv = await self.kv()
        restored = False
        notice: str | None = None
        kind = "restored"
        # Several Studios on one page ask at boot: one restores, the others wait for it.
        async with self._restore_lock:
            meta = await kv.get("session", "meta")
            fresh = self.trainer is None and not self.sources and self.state == "idle"
            if fresh and meta and meta.get("checkpoint_step") is not None:
                try:
                    await self.restore_from_storage()
                except GPUError:
                    self._forget_restored()
                    raise
                except Exception as err:  # a damaged run: drop it rather than half-restore
                    self._forget_restored()
                    await kv.write("session", deletes=list(RUN_KEYS))
                    notice = f"The saved run could not be restored ({err}); it was dropped."
                    kind = "dropped"
                else:
                    restored = True
                    assert self.trainer is not None and self.job is not None
                    notice = (
                        "Restored from this browser's storage: the corpus, the tokenizer and "
                        f"the run at step {self.trainer.step} of {self.job.train.steps}"
                        f"{self._embedder_words()}."
                    )
            elif fresh:
                notice = await self._restore_draft(kv)
                restored = bool(self.sources)
                kind = "restored" if restored else "dropped"
        return {
            "restored": restored,
            "notice": notice,
            "notice_kind": kind,
            "settings": self.settings(),
            "tokenizer": self.tokenizer_info() if self.tokenizer else None,
            "corpus": self.corpus_info() if self.sources else None,
            "summary": self.summary() if self.trainer is not None else None,
            "runs": await self.runs(),
        }

    def _embedder_words(self) -> str:
        """How a restored model embeds, for the notice (empty without the embedder phase)."""
        method = self._embedder_info.get("method") if self.head is not None else None
        if method == "distill":
            teacher = self._embedder_info.get("teacher") or "the runtime's teacher"
            return f" with its embedder (distilled from {teacher})"
        if method == "centre":
            return " with its embedder (centred on the corpus)"
        return " (its embedder phase had not run: the Train panel's Embedder button runs it)"

    def settings(self) -> dict[str, Any] | None:
        """The current run's settings, as the Train panel's form holds them."""
        if self.job is None or self.config is None or self.trainer is None:
            return None
        t = self.job.train
        return {
            "preset": self.job.preset if not self._custom else "custom",
            "config": self._custom,
            "block": self.config.block,
            "cortex": (
                {key: getattr(self.config, key) for key in CORTEX_KEYS}
                if self.config.moe_experts
                else None
            ),
            "steps": t.steps,
            "lr": t.lr,
            "batch_size": t.batch_size,
            "seq_len": t.seq_len,
        }

    async def status(self) -> dict[str, Any]:
        """What a reload could resume."""
        kv = await self.kv()
        meta = await kv.get("session", "meta")
        step = meta.get("checkpoint_step") if meta else None
        return {
            "has_checkpoint": step is not None,
            "run_id": str(meta.get("run_id") or "current") if meta else None,
            "step": step or 0,
            "steps": meta["train"]["steps"] if meta else 0,
            "preset": meta["preset"] if meta else None,
            "vocab_size": meta["model"]["vocab_size"] if meta else None,
            "corpus_bytes": meta.get("corpus_bytes") if meta else None,
            "updated_at": meta["updated_at"] if meta else None,
            "state": self.state,
            "live_step": self.trainer.step if self.trainer else None,
        }

    def summary(self) -> dict[str, Any]:
        """The training summary so far."""
        if self.trainer is None or self.config is None:
            raise ConfigError("no model has been trained yet")
        result = self.trainer.result()
        return {
            "state": self.state,
            "step": self.trainer.step,
            "steps": self.trainer.config.steps,
            "tokens": result.tokens,
            "initial_loss": _finite(result.initial_loss),
            "final_loss": _finite(result.final_loss),
            "eval_loss": result.eval_loss,
            "tokens_per_second": result.tokens_per_second,
            "n_params": self.config.n_params,
            "vocab_size": self.config.vocab_size,
            "losses": [round(x, 5) for x in result.losses],
            "eval_losses": result.eval_losses,
        }

    async def load_package(self, data: bytes) -> dict[str, Any]:
        """Opens a ``.evermind`` package in the tab (verified here) to try or export it."""
        if self.state in ("training", "embedding"):
            raise ConfigError("training is running; pause or stop it before opening a package")
        package = read_package(data)
        roles = package.manifest.get("tokenizer", {})
        self.tokenizer = Tokenizer.from_json(
            package.tokenizer_json, eos=roles.get("eos"), bos=roles.get("bos"), pad=roles.get("pad")
        )
        self.config = MambaConfig.from_hf_config(package.config)
        params = {name: t.to_float32() for name, t in package.tensors.items()}
        await self._load_weights(params)
        self.trainer = None
        self._decoder = None
        head = package.embedder
        self.affect = None
        self._set_head(
            head,
            {}
            if head is None
            else {"method": head.method, "teacher": head.teacher, "dim": head.dim, "texts": None},
        )
        if package.affect is not None:
            self.affect = (package.affect, self.embedder_fingerprint)
        self.job = JobConfig(
            name=package.name, version=package.version, vocab_size=self.config.vocab_size
        )
        self.state = "loaded"
        return {
            "device": "gpu" if self.model is not None else "cpu",
            "ref": f"evermind/{package.name}:{package.version}",
            "digest": package.digest,
            "n_params": self.config.n_params,
            "vocab_size": self.config.vocab_size,
            "training": package.manifest.get("training", {}),
        }

    async def _load_weights(self, params: dict[str, array[float]]) -> None:
        """Puts an opened package's weights on the GPU, or (no WebGPU) keeps them on the CPU."""
        assert self.config is not None
        try:
            device = await gpu.open_device()
        except NoAdapterError as err:
            self.gpu_error = str(err)
            self.model = None
            self.cpu_params = params
            self._cpu_decoder = PyDecoder(self.config, params)
            return
        self._drop_cpu_model()
        model = GpuMamba(device, self.config, 1, 16)
        model.load_params(params)
        self.model = model

    def _drop_cpu_model(self) -> None:
        self.cpu_params, self._cpu_decoder = None, None

    @property
    def on_cpu(self) -> bool:
        """Whether the model in the tab is an opened package on the CPU path (no WebGPU)."""
        return self.model is None and self._cpu_decoder is not None

    # -- using the model ---------------------------------------------------------------------
    def _require_model(self) -> GpuMamba:
        if self.on_cpu:
            raise NoAdapterError(
                "this needs WebGPU; without it the opened package can generate, embed and "
                f"export, nothing more ({self.gpu_error})"
            )
        if self.model is None:
            raise ConfigError("train a model first (or resume the saved session)")
        if self.state in ("training", "embedding"):
            raise ConfigError(f"the model is {self.state}; wait for it or pause it to try it")
        return self.model

    async def generate(
        self,
        prompt: str,
        max_new_tokens: int,
        temperature: float,
        top_k: int | None,
        top_p: float | None,
        seed: int | None,
    ) -> dict[str, Any]:
        """Streams a continuation of ``prompt`` as ``generate-token`` events."""
        source: GpuDecoder | PyDecoder
        if self.on_cpu:
            assert self._cpu_decoder is not None
            source = self._cpu_decoder
        else:
            model = self._require_model()
            assert self.config is not None
            if self._decoder is None:
                self._decoder = GpuDecoder(model.device, self.config, model.slots)
            source = self._decoder
        assert self.tokenizer is not None
        ids = self.tokenizer.encode(prompt) or [self.tokenizer.bos_id or 0]
        decoder = self.tokenizer.stream_decoder()
        pieces: list[str] = []
        start = time.perf_counter()
        count = 0
        async for token in source.stream(
            ids, max_new_tokens, temperature, top_k, top_p, seed, self.tokenizer.eos_id
        ):
            count += 1
            text = decoder.feed(token)
            if text:
                pieces.append(text)
                self.emit("generate-token", text=text)
        tail = decoder.flush()
        if tail:
            pieces.append(tail)
            self.emit("generate-token", text=tail)
        seconds = time.perf_counter() - start
        return {
            "text": "".join(pieces),
            "device": "cpu" if self.on_cpu else "gpu",
            "tokens": count,
            "tokens_per_second": round(count / seconds, 1) if seconds > 0 else 0.0,
        }

    def _embed_batches(
        self, texts: list[str], batch: int, length: int
    ) -> list[tuple[array[int], array[int], int]]:
        """Texts as right-padded (ids, lengths, real rows) batches of ``batch`` x ``length``."""
        assert self.tokenizer is not None
        eos = self.tokenizer.eos_id or 0
        out = []
        for start in range(0, len(texts), batch):
            chunk = [
                (self.tokenizer.encode(t) or [eos])[:length] for t in texts[start : start + batch]
            ]
            real = len(chunk)
            chunk += [[eos]] * (batch - real)  # filler rows, ignored
            ids, lengths = array("i"), array("I")
            for row in chunk:
                ids.extend(row + [eos] * (length - len(row)))
                lengths.append(len(row))
            out.append((ids, lengths, real))
        return out

    async def _pooled_mean(self, trainer: GpuBackend, texts: list[str]) -> array[float]:
        """The mean of the texts' pooled unit vectors p: the centring vector μ."""
        assert self.config is not None
        dm = self.config.d_model
        total = [0.0] * dm
        for ids, lengths, real in self._embed_batches(texts, trainer.batch_size, trainer.seq_len):
            pooled, _ = await trainer.embed_forward(ids, lengths)
            for row in range(real):
                for d in range(dm):
                    total[d] += pooled[row * dm + d]
        return array("f", [x / len(texts) for x in total])

    async def embedder_train(
        self,
        texts: list[str],
        targets: list[list[float]],
        steps: int,
        lr: float,
        batch_size: int,
        seed: int = 0,
        teacher: str = "",
    ) -> dict[str, Any]:
        """Distils a teacher's vectors into the tab's model (``embedder-progress`` events).

        The served embedding becomes ``normalize(W · (p − μ))`` with ``p`` the L2-normalised
        mean pool (the package head's raw vector): μ the mean p of ``texts`` under the
        current weights (fixed), W (E, d_model) a projection
        head starting at the identity; the cosine loss against ``targets`` trains W and
        every model weight on the GPU (:meth:`GpuBackend.embed_train_step`), in place: the
        language model shares those weights.

        Args:
            texts: The texts the page asked the teacher about.
            targets: One teacher vector per text (all of one width E).
            steps: Optimiser steps; each takes ``batch_size`` texts in a shuffled cycle.
            lr: AdamW learning rate (constant; gradients clipped at norm 1).
            batch_size: Texts per step.
            seed: Order of the texts.
            teacher: The teacher's model id, recorded in the head (and the package).
        """
        model = self._require_model()
        assert self.tokenizer is not None and self.config is not None and self.job is not None
        if not texts or len(texts) != len(targets):
            raise ConfigError(
                f"embedder_train: expected one target vector per text, got {len(texts)} texts "
                f"and {len(targets)} vectors"
            )
        width = len(targets[0])
        if width < 1 or any(len(t) != width for t in targets):
            raise ConfigError("embedder_train: every target vector must have the same width > 0")
        if steps < 1 or batch_size < 1:
            raise ConfigError("embedder_train: steps and batch_size must be >= 1")
        eos = self.tokenizer.eos_id or 0
        longest = max(len(self.tokenizer.encode(t) or [eos]) for t in texts)
        length = max(1, min(longest, self.job.train.seq_len))
        batch = min(batch_size, len(texts))
        train = TrainConfig(
            steps=steps, batch_size=batch, seq_len=length, lr=lr, grad_clip=1.0, weight_decay=0.0
        )
        trainer = GpuBackend(
            model.device, self.config, batch, length, train, weights=model.slots, embed_dim=width
        )
        # The distillation changes the model's weights in place: a copy is kept, and a cancel
        # (the ``embedder`` operation, checked before every step) puts it back, so the model
        # is as it was before it (weights and head).
        start = time.perf_counter()
        with operation("embedder") as op:
            before = await model.read_params()
            trainer.load_embedder(await self._pooled_mean(trainer, texts))
            previous, self.state = self.state, "embedding"
            try:
                losses = await self._distil(trainer, texts, targets, steps, seed, op)
            except Cancelled:
                model.load_params(before)
                raise
            finally:
                self.state = previous
        centre, projection = await trainer.read_embedder()
        dm = self.config.d_model
        head = EmbedderHead(
            Tensor((dm,), centre), Tensor((width, dm), projection), "distill", teacher
        )
        info = {
            "method": "distill",
            "teacher": teacher,
            "texts": len(texts),
            "dim": width,
            "steps": steps,
            "first_loss": _finite(losses[0]),
            "loss": _finite(losses[-1]),
            "seconds": round(time.perf_counter() - start, 2),
        }
        self._decoder = None
        await self._keep_head(head, info)
        return info

    async def _distil(
        self,
        trainer: GpuBackend,
        texts: list[str],
        targets: list[list[float]],
        steps: int,
        seed: int,
        op: Operation,
    ) -> list[float]:
        """:meth:`embedder_train`'s optimiser steps (a cancel check before each); the losses."""
        batch, length = trainer.batch_size, trainer.seq_len
        order = list(range(len(texts)))
        rng = random.Random(seed)
        rng.shuffle(order)
        cursor, losses = 0, []
        start = time.perf_counter()
        lr = trainer.train.lr
        for step in range(1, steps + 1):
            op.check()
            rows = []
            for _ in range(batch):
                if cursor == len(order):
                    rng.shuffle(order)
                    cursor = 0
                rows.append(order[cursor])
                cursor += 1
            ((ids, lengths, _),) = self._embed_batches([texts[i] for i in rows], batch, length)
            flat = array("f", [x for i in rows for x in targets[i]])
            loss = await trainer.embed_train_step([(ids, lengths, flat)], lr, step)
            losses.append(loss)
            self.emit(
                "embedder-progress",
                step=step,
                steps=steps,
                loss=_finite(loss),
                elapsed_s=round(time.perf_counter() - start, 2),
            )
        op.check()
        return losses

    def embedder_vocab(self) -> dict[str, Any]:
        """The vocabulary entries the token term asks the teacher about: ``ids`` and their
        ``texts`` (blank entries — padding, bare whitespace — are left out)."""
        if self.config is None or self.tokenizer is None:
            raise ConfigError("embedder_vocab: no model yet; train one first")
        pairs = [(i, self.tokenizer.decode([i])) for i in range(self.config.vocab_size)]
        kept = [(i, t) for i, t in pairs if t.strip()]
        return {"ids": [i for i, _ in kept], "texts": [t for _, t in kept]}

    async def embedder_tokens(
        self,
        ids: list[int],
        vectors: list[list[float]],
        texts: list[str],
        targets: list[list[float]],
        corpus: list[str] | None = None,
        sample: int = TOKEN_FIT_TEXTS,
    ) -> dict[str, Any]:
        """Adds the token term to the distilled head (after :meth:`embedder_train`).

        ``T = α · prior``: the prior is the teacher's vector of each vocabulary entry
        (``vectors[k]`` for id ``ids[k]``; others zero), centred; the weights ``a`` are the
        IDF of each id over ``corpus`` (default ``texts``); ``α`` is the value on a grid
        (scaled to the two terms' typical sizes) that gives the best mean cosine with the
        teacher's ``targets`` on up to ``sample`` of ``texts`` — 0 keeps the head as it is.
        Score on texts :meth:`embedder_train` did not see (the page holds some out): on its
        own texts the trained projection looks better than it is. The native fit
        (:func:`evermind.train.distill.fit_with_tokens`) solves for ``T`` itself; the tab has
        no numpy, so it scales the prior instead.
        """
        model = self._require_model()
        assert self.tokenizer is not None and self.config is not None
        head = self.head
        if head is None or head.projection is None or head.method != "distill":
            raise ConfigError("embedder_tokens: run the embedder phase with a teacher first")
        vocab, dim = self.config.vocab_size, head.dim
        if len(ids) != len(vectors) or not ids or any(len(v) != dim for v in vectors):
            raise ConfigError(
                f"embedder_tokens: expected one {dim}-wide teacher vector per id, got "
                f"{len(ids)} ids and {len(vectors)} vectors"
            )
        if any(not 0 <= i < vocab for i in ids) or len(set(ids)) != len(ids):
            raise ConfigError(f"embedder_tokens: ids must be distinct and in 0..{vocab - 1}")
        if not texts or len(texts) != len(targets) or any(len(t) != dim for t in targets):
            raise ConfigError("embedder_tokens: expected one teacher vector per text")
        start = time.perf_counter()
        centre = [sum(v[d] for v in vectors) / len(vectors) for d in range(dim)]
        prior = array("f", [0.0] * (vocab * dim))
        for i, v in zip(ids, vectors, strict=True):
            prior[i * dim : (i + 1) * dim] = array(
                "f", [x - c for x, c in zip(v, centre, strict=True)]
            )
        eos = self.tokenizer.eos_id or 0
        embedder = GpuEmbedder(model.device, self.config, model.slots)
        encoded = [(self.tokenizer.encode(t) or [eos])[: embedder.max_tokens] for t in texts]
        counted = (
            encoded
            if corpus is None
            else [(self.tokenizer.encode(t) or [eos])[: embedder.max_tokens] for t in corpus]
        )
        counts = [1.0] * vocab
        for seq in counted:
            for i in seq:
                counts[i] += 1.0
        total = sum(counts)
        weights = array("f", [math.log1p(total / c) for c in counts])
        rows = list(range(len(texts)))
        random.Random(0).shuffle(rows)
        rows = rows[:sample]
        pooled = await embedder.embed_ids([encoded[r] for r in rows])
        first = [project(head, p) for p in pooled]
        second = [bag_mean(prior, weights, encoded[r]) for r in rows]
        size = sorted(_norm(u) for u in first)[len(first) // 2]
        other = sorted(_norm(v) for v in second)[len(second) // 2]
        scale = size / other if other > 0 else 0.0

        def agreement(alpha: float) -> float:
            total = 0.0
            for u, v, r in zip(first, second, rows, strict=True):
                e = [a + alpha * b for a, b in zip(u, v, strict=True)]
                norm = _norm(e)
                t = targets[r]
                total += dot(e, t) / (norm * _norm(t) or 1.0)
            return total / len(rows)

        scores = {k: agreement(k * scale) for k in TOKEN_ALPHAS}
        best = max(scores, key=lambda k: scores[k])
        info = {
            **self._embedder_info,
            "tokens": best > 0,
            "token_alpha": round(best * scale, 6),
            "agreement_without_tokens": round(scores[0.0], 4),
            "agreement": round(scores[best], 4),
            "token_texts": len(rows),
            "token_seconds": round(time.perf_counter() - start, 2),
        }
        if best > 0:
            alpha = best * scale
            table = Tensor((vocab, dim), array("f", [alpha * x for x in prior]))
            head = EmbedderHead(
                head.mean, head.projection, head.method, head.teacher, table,
                Tensor((vocab,), weights),
            )  # fmt: skip
            self._decoder = None
            await self._keep_head(head, info)
        else:
            self._embedder_info = info
        return info

    async def embedder_centre(self, texts: list[str], reason: str = "") -> dict[str, Any]:
        """The teacher-free embedder: centring only (μ = the texts' mean p, W = identity).

        Removing the direction every text shares fixes the anisotropy that makes raw cosines
        all ~1, without a teacher. The served embedding becomes ``normalize(p − μ)``.

        Args:
            texts: Texts of the corpus (see :func:`embedder_texts`).
            reason: Why no teacher ran, kept with the result for the page.
        """
        model = self._require_model()
        assert self.config is not None and self.tokenizer is not None
        if not texts:
            raise ConfigError("embedder_centre: no texts to centre on; add a corpus first")
        start = time.perf_counter()
        raw = GpuEmbedder(model.device, self.config, model.slots)
        eos = self.tokenizer.eos_id or 0
        dm = self.config.d_model
        total = [0.0] * dm
        ids = [self.tokenizer.encode(t) or [eos] for t in texts]
        # One event per forward batch: on a software GPU one batch can take seconds, and the
        # page shows the count while the model is not yet usable. A cancel (the ``embedder``
        # operation) stops before the next batch; the head is only set at the end, so the
        # model keeps the head it had.
        step = raw.batch_size
        with operation("embedder") as op:
            for done in range(0, len(ids), step):
                op.check()
                for vector in await raw.embed_ids(ids[done : done + step]):
                    for d in range(dm):
                        total[d] += vector[d]
                self.emit(
                    "embedder-progress",
                    stage="centre",
                    step=min(done + step, len(ids)),
                    steps=len(ids),
                    loss=None,
                    elapsed_s=round(time.perf_counter() - start, 2),
                )
            op.check()
        mean = array("f", [x / len(texts) for x in total])
        info = {
            "method": "centre",
            "teacher": "",
            "texts": len(texts),
            "dim": dm,
            "reason": reason,
            "seconds": round(time.perf_counter() - start, 2),
        }
        await self._keep_head(EmbedderHead(Tensor((dm,), mean), None, "centre"), info)
        return info

    def _set_head(self, head: EmbedderHead | None, info: dict[str, Any]) -> None:
        self.head, self._embedder_info = head, info
        self._embedder = None
        self._embedder_version += 1

    async def _keep_head(self, head: EmbedderHead, info: dict[str, Any]) -> None:
        """Serves ``head`` from now on and stores it with the weights it belongs to."""
        self._set_head(head, info)
        if self.trainer is None:
            return
        self.emit("embedder-progress", stage="save", step=0, steps=1, loss=None)
        # The distillation changed the weights: checkpoint them beside their head, so a
        # reload resumes the pair (one transaction).
        blob = await self.trainer.checkpoint()
        kv = await self.kv()
        await kv.write(
            "session",
            puts=[
                ("checkpoint", blob),
                ("meta", self._meta(self.trainer.step)),
                ("embedder", {"head": _head_to_json(head), "info": info}),
            ],
        )

    def embedder_info(self) -> dict[str, Any]:
        """What serves :meth:`embed` now: ``method`` ("distill", "centre" or None: the raw
        pooled vector), ``teacher``, ``dim``, ``texts`` and the ``fingerprint``."""
        base = {"method": None, "teacher": "", "dim": self.config.d_model if self.config else None}
        return {**base, **self._embedder_info, "fingerprint": self.embedder_fingerprint}

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Unit-norm sentence embeddings from the tab's model, as the exported package embeds.

        The L2-normalised mean pool ``p``; with a head (the embedder phase's, or the opened
        package's) ``normalize(W · (p − μ) + token term)``
        (:func:`evermind.package.head.apply_head`).
        """
        if self.on_cpu:
            return self._embed_on_cpu(texts)
        model = self._require_model()
        assert self.tokenizer is not None and self.config is not None
        if self._embedder is None:
            self._embedder = GpuEmbedder(model.device, self.config, model.slots, head=self.head)
        eos = self.tokenizer.eos_id or 0
        return await self._embedder.embed_ids([self.tokenizer.encode(t) or [eos] for t in texts])

    async def pooled(self, texts: list[str]) -> list[list[float]]:
        """The raw pooled vector ``p`` of each text (no head): what the affect head takes."""
        assert self.tokenizer is not None and self.config is not None
        eos = self.tokenizer.eos_id or 0
        if self.on_cpu:
            assert self._cpu_decoder is not None
            ids = [(self.tokenizer.encode(t) or [eos])[:CPU_EMBED_TOKENS] for t in texts]
            return self._cpu_decoder.embed_ids(ids, None)
        model = self._require_model()
        key = self.embedder_fingerprint
        if self._pooler is None or self._pooler[0] != key:
            self._pooler = (key, GpuEmbedder(model.device, self.config, model.slots, head=None))
        return await self._pooler[1].embed_ids([self.tokenizer.encode(t) or [eos] for t in texts])

    def current_affect(self) -> AffectHead | None:
        """The affect head when it was fitted on the model in the tab now, else None."""
        if self.affect is None or self.affect[1] != self.embedder_fingerprint:
            return None
        return self.affect[0]

    def _embed_on_cpu(self, texts: list[str]) -> list[list[float]]:
        """:meth:`embed` of an opened package without WebGPU (pure Python, the GPU path's
        128-token cut)."""
        assert self._cpu_decoder is not None and self.tokenizer is not None
        eos = self.tokenizer.eos_id or 0
        ids = [(self.tokenizer.encode(t) or [eos])[:CPU_EMBED_TOKENS] for t in texts]
        return self._cpu_decoder.embed_ids(ids, self.head)

    async def similarity(self, a: str, b: str) -> dict[str, Any]:
        """The cosine of two texts' embeddings, with the calibration that gives it meaning:
        how this embedder scores unrelated corpus sentences
        (:func:`~evermind.search.calibration.measure_calibration`, the cache's own rules) and
        the threshold a cache hit would need."""
        va, vb = await self.embed([a, b])
        cosine = dot(va, vb)
        calibration, scores = await self._similarity_calibration()
        # The verdict places the cosine among this embedder's unrelated-pair scores.
        meaning = similarity_meaning(cosine, calibration, scores)
        return {
            "cosine": cosine,
            "threshold": calibration.threshold,
            "unrelated": calibration.unrelated,
            "pairs": calibration.pairs,
            "collapsed": calibration.collapsed,
            "calibration": calibration.words.replace("stored queries", "corpus sentences"),
            **meaning,
        }

    async def _similarity_calibration(self) -> tuple[Calibration, list[float]]:
        """The calibration on the corpus's sentences and the ascending unrelated-pair cosines
        it was measured on (cached per embedder)."""
        key = self.embedder_fingerprint
        if self._similarity is not None and self._similarity[0] == key:
            return self._similarity[1], self._similarity[2]
        texts = embedder_texts(self.corpus_text, CALIBRATION_TEXTS)
        calibration = UNCALIBRATED
        scores: list[float] = []
        if len(texts) >= 2:
            vectors = await self._embed_cancellably(texts)

            def cosines(chosen: list[int], pairs: list[tuple[int, int]]) -> list[float]:
                scores[:] = [dot(vectors[chosen[i]], vectors[chosen[j]]) for i, j in pairs]
                return scores

            calibration = measure_calibration(texts, cosines, limit=len(texts))
        scores = sorted(s for s in scores if math.isfinite(s))
        self._similarity = (key, calibration, scores)
        return calibration, scores

    async def _embed_cancellably(self, texts: list[str]) -> list[list[float]]:
        """Embeds ``texts`` in batches as the ``similarity`` operation: a
        ``similarity-progress`` event (done, total) after each batch, and a cancel check
        before each (:mod:`evermind.studio.operations`); a cancel raises ``Cancelled`` and
        nothing is kept."""
        vectors: list[list[float]] = []
        with operation("similarity") as op:
            self.emit("similarity-progress", done=0, total=len(texts))
            for start in range(0, len(texts), SIMILARITY_BATCH):
                # Yield to the event loop first: the page's cancel call arrives only here
                # (the CPU path embeds synchronously).
                await asyncio.sleep(0)
                op.check()
                vectors += await self.embed(texts[start : start + SIMILARITY_BATCH])
                self.emit("similarity-progress", done=len(vectors), total=len(texts))
            op.check()
        return vectors

    @property
    def embedder_fingerprint(self) -> str:
        """Changes whenever the weights change (step), the model is rebuilt, or the embedder
        phase (or an opened package) changes the head: stored vectors under the old one are
        then stale (the Memory and Cache panels re-embed)."""
        step = self.trainer.step if self.trainer else 0
        cfg = self.config.to_hf_config() if self.config else {}
        head = self.head.describe() if self.head else None
        # id() of the GPU model, or of the CPU decoder of a package opened without WebGPU:
        # two packages of one config are still two embedders.
        model = id(self.model) if self.model is not None else id(self._cpu_decoder)
        key = (sorted(cfg.items()), step, model, self._embedder_version, repr(head))
        return "studio:" + hashlib.sha256(repr(key).encode()).hexdigest()[:16]

    async def evaluate(self, text: str | None) -> dict[str, Any]:
        """Cross-entropy, perplexity, bits/token and top-1/top-5 on held-out (or given) text."""
        model = self._require_model()
        assert self.tokenizer is not None and self.config is not None
        if text:
            tokens = array("i", self.tokenizer.encode(text))
            length = min(model.seq_len, len(tokens) - 1)
            if length < 1:
                raise ConfigError("evaluation needs a text of at least two tokens")
            runner = GpuMamba(model.device, self.config, 1, length, weights=model.slots)
            batches = eval_windows(tokens, 1, length, 64)
        else:
            if self.held_ids is None:
                raise ConfigError("no held-out text: paste a text to evaluate on")
            runner = model
            batches = eval_windows(self.held_ids, model.batch_size, model.seq_len, 4)
            if not batches:
                raise ConfigError("the held-out split is too short to evaluate; add more text")
        start = time.perf_counter()
        nll = 0.0
        count = top1 = top5 = 0
        v = self.config.vocab_size
        for batch in batches:
            loss_sum, n = await runner.eval_batch(batch)
            nll += loss_sum
            count += n
            logits = array("f")
            logits.frombytes(await runner.device.read(runner.logits, 4 * n * v))
            for row, target in enumerate(batch[1]):
                values = logits[row * v : (row + 1) * v]
                best = sorted(range(v), key=values.__getitem__, reverse=True)[:5]
                top1 += best[0] == target
                top5 += target in best
        return lm_metrics(nll, count, top1, top5, time.perf_counter() - start)

    async def export(self, name: str, version: str, dtype: str) -> dict[str, Any]:
        """The ``.evermind`` package of the current weights, base64-encoded."""
        on_cpu = self.on_cpu
        model = None if on_cpu else self._require_model()
        assert self.job is not None and self.config is not None and self.tokenizer is not None
        job = JobConfig(
            name=name,
            version=version,
            preset=self.job.preset,
            block=self.job.block,
            vocab_size=self.job.vocab_size,
            seed=self.job.seed,
            dtype=dtype,
            train=self.job.train,
            **self.job.cortex(),
        )
        if model is None:
            assert self.cpu_params is not None
            params = self.cpu_params
        else:
            params = await model.read_params()
        corpus = "; ".join(d for _, d in self.sources.values()) or "restored session"
        data = export_package(
            job,
            self.config,
            params,
            self.tokenizer,
            self.trainer.result() if self.trainer is not None else None,
            corpus,
            "cpu (browser)" if on_cpu else "webgpu (browser)",
            embedder=self.head,
            affect=self.current_affect(),
        )
        return {
            "filename": f"{name}-{version}.evermind",
            "bytes": len(data),
            "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
            "ref": f"evermind/{name}:{version}",
            "data_b64": base64.b64encode(data).decode("ascii"),
        }


def _run_entry(run_id: str, meta: dict[str, Any]) -> dict[str, Any]:
    """One saved run as the Train panel lists it."""
    return {
        "id": run_id,
        "step": meta.get("checkpoint_step") or 0,
        "steps": meta["train"]["steps"],
        "loss": meta.get("loss"),
        "eval_loss": meta.get("eval_loss"),
        "preset": "custom" if meta.get("custom") else meta.get("preset"),
        "updated_at": meta.get("updated_at"),
        "corpus_bytes": meta.get("corpus_bytes"),
    }


def _norm(values: list[float]) -> float:
    return math.sqrt(sum(x * x for x in values))


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _head_to_json(head: EmbedderHead) -> dict[str, Any]:
    """The head as plain numbers (the session store keeps JSON-like values)."""
    projection = head.projection
    return {
        "mean": list(head.mean.to_float32()),
        "projection": None
        if projection is None
        else {"shape": list(projection.shape), "data": list(projection.to_float32())},
        "method": head.method,
        "teacher": head.teacher,
        "tokens": None
        if head.tokens is None or head.token_weights is None
        else {
            "shape": list(head.tokens.shape),
            "data": list(head.tokens.to_float32()),
            "weights": list(head.token_weights.to_float32()),
        },
    }


def _head_from_json(value: dict[str, Any]) -> EmbedderHead:
    mean = array("f", value["mean"])
    proj = value.get("projection")
    projection = (
        None
        if proj is None
        else Tensor(tuple(int(x) for x in proj["shape"]), array("f", proj["data"]))
    )
    tokens = value.get("tokens")
    table = weights = None
    if tokens is not None:
        table = Tensor(tuple(int(x) for x in tokens["shape"]), array("f", tokens["data"]))
        weights = Tensor((len(tokens["weights"]),), array("f", tokens["weights"]))
    return EmbedderHead(
        Tensor((len(mean),), mean),
        projection,
        str(value["method"]),
        str(value["teacher"]),
        table,
        weights,
    )
