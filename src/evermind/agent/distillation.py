"""Online distillation: frontier answers the router paid for become training data for the SSM
(native-only: numpy, sqlite3).

:class:`DistillationEngine` is **off by default** and enabled per tenant
(:class:`DistillationPolicy`). :meth:`~DistillationEngine.collect` keeps one frontier answer
per normalised prompt and tenant, in a SQLite file under the data dir, with its provenance
(upstream, model, completion id, time, tenant); it drops empty answers, refusals, answers or
prompts that are too long, truncated or filtered answers, tool calls, requests with tool
results and cache hits — each drop with its reason.

:meth:`~DistillationEngine.fine_tune` fine-tunes an Evermind package on the collected pairs
natively, with the project's trainer (:class:`~evermind.train.loop.Trainer` on the numpy
:class:`~evermind.train.cpu_backend.CpuBackend`):

- each pair is one text, :data:`PAIR_TEMPLATE`: the conversation in the runtime's chat
  template (``User: …`` then ``Assistant:``, as :class:`~evermind.bridges.evermind.EvermindBridge`
  renders it), the answer, the end-of-text token — so the model learns to answer where the
  local bridge will ask it to;
- a held-out slice of the pairs (``held_out``, seeded) is never trained on; its loss (mean
  nats per token, the same forward as ``Model.evaluate``) is measured before and after;
- **rehearsal**: the training stream mixes the pairs with about ``rehearsal`` times as many
  tokens of the original corpus (the default corpus or a given text), so the model does not
  forget it; the corpus loss before and after is reported too;
- **rollback**: the new package is written only when its held-out loss beats the previous
  one's by ``min_improvement`` and its corpus loss rose by at most ``max_forgetting``;
  otherwise (no gain, forgetting, zero steps, a diverged run) nothing is
  written and the previous package stays the one served. Writes are atomic (a temporary
  file, then a rename).
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evermind.bridges.base import ChatRequest, Completion
from evermind.errors import ConfigError, StorageError, TrainingDiverged
from evermind.job import JobConfig, default_corpus, export_package
from evermind.model.chat import render_chat
from evermind.model.inference import Model
from evermind.package import read_package
from evermind.paths import data_dir
from evermind.train.acceptance import (
    bump_version,
    judge,
    rehearsal_slices,
    sequence_loss,
    split_held_out,
)
from evermind.types import Progress, TrainConfig, TrainResult

#: How a pair becomes training text (then the end-of-text token is appended): the prompt is
#: the conversation in the chat template, ending ``Assistant:``; the answer follows a space.
PAIR_TEMPLATE = "{prompt} {answer}"
#: Answers that refuse rather than answer (never learnt from).
REFUSAL = re.compile(
    r"^\s*(?:i'?m sorry|i am sorry|sorry,|i can(?:'|no)t (?:help|assist|comply|do that)"
    r"|i cannot (?:help|assist|comply|provide)|i won'?t (?:help|be able)|as an ai\b"
    r"|i'?m (?:not able|unable) to)",
    re.IGNORECASE,
)
_SPACE = re.compile(r"\s+")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS pairs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant      TEXT NOT NULL,
    prompt_hash TEXT NOT NULL,
    prompt      TEXT NOT NULL,
    answer      TEXT NOT NULL,
    upstream    TEXT NOT NULL,
    model       TEXT NOT NULL,
    response_id TEXT NOT NULL,
    created_at  REAL NOT NULL,
    UNIQUE (tenant, prompt_hash)
)
"""


def default_path() -> Path:
    """``<data dir>/distill/pairs.db``."""
    return data_dir() / "distill" / "pairs.db"


def normalise_prompt(prompt: str) -> str:
    """Case-folded, whitespace collapsed: two prompts that differ only so are one."""
    return _SPACE.sub(" ", prompt).strip().casefold()


def prompt_hash(prompt: str) -> str:
    """Hex SHA-256 of the normalised prompt (the deduplication key, per tenant)."""
    return hashlib.sha256(normalise_prompt(prompt).encode("utf-8")).hexdigest()


def prompt_of(request: ChatRequest) -> str:
    """The prompt a pair keeps: the request's turns in the runtime's chat template
    (:func:`evermind.model.chat.render_chat`, ending ``Assistant:``) — the text the local model
    reads when the router sends it the same conversation. The system prompt and the facts
    block are deployment context, not the question, and are left out. Empty when no turn has
    text."""
    turns = [(m.role, m.text().strip()) for m in request.messages]
    if not any(text for role, text in turns if role == "user"):
        return ""
    return render_chat(turns)


@dataclass(frozen=True)
class DistillationPolicy:
    """Who may be distilled from, and what is kept.

    Attributes:
        tenants: The tenants whose frontier answers are collected (empty: nobody — off).
        all_tenants: Collect for every tenant (a single-user deployment).
        max_prompt_chars: Longer prompts are dropped.
        max_answer_chars: Longer answers are dropped.
        min_answer_chars: Shorter answers (after stripping) are dropped as empty.
    """

    tenants: frozenset[str] = frozenset()
    all_tenants: bool = False
    max_prompt_chars: int = 2000
    max_answer_chars: int = 4000
    min_answer_chars: int = 2

    def enabled(self, tenant: str) -> bool:
        return self.all_tenants or tenant in self.tenants


@dataclass(frozen=True)
class Collected:
    """What :meth:`DistillationEngine.collect` did: ``stored`` or not, and why."""

    stored: bool
    reason: str


@dataclass(frozen=True)
class Pair:
    """One collected prompt and frontier answer, with its provenance."""

    prompt: str
    answer: str
    tenant: str
    upstream: str
    model: str
    response_id: str
    created_at: float

    def text(self) -> str:
        return PAIR_TEMPLATE.format(prompt=self.prompt, answer=self.answer)


@dataclass(frozen=True)
class FineTuneConfig:
    """How :meth:`DistillationEngine.fine_tune` trains.

    Attributes:
        steps: Optimizer steps (0: measure only; the package is never promoted then).
        batch_size: Windows per step.
        seq_len: Tokens per window.
        lr: Peak learning rate (lower than pre-training: the model is only nudged).
        held_out: Fraction of the pairs kept out of training to judge the result.
        rehearsal: Corpus tokens mixed in per pair token.
        min_improvement: Nats per token the held-out loss must fall by to promote.
        max_forgetting: Nats per token the corpus loss may rise by (None: unchecked); more
            is a rollback — the model would forget what it was trained on.
        seed: Seeds the held-out split and the batches.
    """

    steps: int = 60
    batch_size: int = 4
    seq_len: int = 64
    lr: float = 1e-3
    held_out: float = 0.2
    rehearsal: float = 3.0
    min_improvement: float = 1e-3
    max_forgetting: float | None = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ConfigError(f"FineTuneConfig.steps must be >= 0, got {self.steps}")
        if not 0 < self.held_out < 1:
            raise ConfigError(f"FineTuneConfig.held_out must be in (0, 1), got {self.held_out}")
        if self.rehearsal < 0:
            raise ConfigError(f"FineTuneConfig.rehearsal must be >= 0, got {self.rehearsal}")


@dataclass
class FineTuneResult:
    """How one fine-tune went.

    Attributes:
        promoted: Whether the new package was written (its held-out loss was better).
        reason: Why (or why not) in words.
        held_out_before: Held-out pair loss of the previous package (nats/token).
        held_out_after: The same for the fine-tuned weights (None when no step ran).
        rehearsal_before: Loss on a corpus slice not trained on, before.
        rehearsal_after: The same after (None when no step ran).
        train_pairs: Pairs trained on.
        held_out_pairs: Pairs held out.
        steps: Steps run.
        version: The new package's version (None when not promoted).
        out: Where it was written (None when not promoted).
        train: The trainer's summary.
    """

    promoted: bool
    reason: str
    held_out_before: float
    held_out_after: float | None
    rehearsal_before: float | None
    rehearsal_after: float | None
    train_pairs: int
    held_out_pairs: int
    steps: int
    version: str | None = None
    out: str | None = None
    train: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class DistillationEngine:
    """Collects frontier answers per tenant and fine-tunes the SSM on them.

    Args:
        path: The SQLite file (created if missing; ``":memory:"`` for tests); default
            :func:`default_path`.
        policy: Who is collected for and the filters (default: nobody — off).
        clock: Seconds since the epoch (injectable for tests).

    Raises:
        StorageError: The file cannot be opened as a database.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        policy: DistillationPolicy | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = str(path if path is not None else default_path())
        self.policy = policy or DistillationPolicy()
        self.clock = clock
        self._lock = threading.Lock()
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA busy_timeout = 10000")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute(_SCHEMA)
        except sqlite3.DatabaseError as err:
            raise StorageError(
                f"distillation: cannot open {self.path!r}: {err}; "
                "hint: point --collected at a file `evermind` wrote"
            ) from err

    # -- collection -----------------------------------------------------------------------
    def check(self, request: ChatRequest, completion: Completion) -> str | None:
        """Why the pair would be dropped, or None when it is kept (nothing is stored)."""
        policy = self.policy
        if not policy.enabled(request.tenant):
            return f"distillation is off for tenant {request.tenant!r}"
        if completion.provider == "evermind":
            return "the answer came from the local model"
        if completion.cached is not None:
            return "a cache hit (the original answer was collected when it was paid for)"
        if completion.tool_calls or completion.finish_reason == "tool_calls":
            return "the answer calls tools"
        if request.tools or request.has_tool_results():
            return "the request uses tools"
        if completion.finish_reason in ("length", "content_filter"):
            return f"the answer was cut ({completion.finish_reason})"
        prompt, answer = prompt_of(request), completion.text.strip()
        if not prompt:
            return "the request has no user text"
        if len(prompt) > policy.max_prompt_chars:
            return f"prompt of {len(prompt)} characters > {policy.max_prompt_chars}"
        if len(answer) < policy.min_answer_chars:
            return "the answer is empty"
        if len(answer) > policy.max_answer_chars:
            return f"answer of {len(answer)} characters > {policy.max_answer_chars}"
        if REFUSAL.search(answer):
            return "the answer is a refusal"
        return None

    def collect(self, request: ChatRequest, completion: Completion) -> Collected:
        """Stores the frontier ``completion`` of ``request`` if the policy keeps it."""
        dropped = self.check(request, completion)
        if dropped is not None:
            return Collected(False, dropped)
        prompt = prompt_of(request)
        with self._lock:
            cursor = self._conn.execute(
                "INSERT OR IGNORE INTO pairs (tenant, prompt_hash, prompt, answer, upstream, "
                "model, response_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    request.tenant,
                    prompt_hash(prompt),
                    prompt,
                    completion.text.strip(),
                    completion.provider,
                    completion.model,
                    completion.id,
                    self.clock(),
                ),
            )
        if cursor.rowcount == 0:
            return Collected(False, "a duplicate: this prompt is already collected")
        return Collected(True, "stored")

    def pairs(self, tenant: str | None = None) -> list[Pair]:
        """The collected pairs (of ``tenant``, or all), oldest first."""
        query = "SELECT prompt, answer, tenant, upstream, model, response_id, created_at FROM pairs"
        args: tuple[str, ...] = ()
        if tenant is not None:
            query, args = query + " WHERE tenant = ?", (tenant,)
        with self._lock:
            rows = self._conn.execute(query + " ORDER BY id", args).fetchall()
        return [Pair(*row) for row in rows]

    def count(self, tenant: str | None = None) -> int:
        return len(self.pairs(tenant))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> DistillationEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- fine-tuning ----------------------------------------------------------------------
    def fine_tune(
        self,
        package: bytes | str | os.PathLike[str],
        out: str | os.PathLike[str],
        config: FineTuneConfig | None = None,
        *,
        tenant: str | None = None,
        corpus: str | None = None,
        version: str | None = None,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> FineTuneResult:
        """Fine-tunes ``package`` on the collected pairs; writes ``out`` only if better.

        Args:
            package: The package served now (bytes or a path).
            out: Where the new package goes (may be the same path: replaced atomically).
            config: Training settings (default :class:`FineTuneConfig`).
            tenant: Only this tenant's pairs (None: all).
            corpus: Rehearsal text (None: the embedded default corpus).
            version: The new version (default: the previous one's patch number + 1).
            on_progress: Receives each training step.

        Raises:
            ConfigError: Fewer than two pairs are collected.
        """
        return fine_tune(
            package,
            self.pairs(tenant),
            out,
            config,
            corpus=corpus,
            version=version,
            on_progress=on_progress,
        )


def fine_tune(
    package: bytes | str | os.PathLike[str],
    pairs: Sequence[Pair],
    out: str | os.PathLike[str],
    config: FineTuneConfig | None = None,
    *,
    corpus: str | None = None,
    version: str | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> FineTuneResult:
    """:meth:`DistillationEngine.fine_tune` on given pairs (see there)."""
    import asyncio

    from evermind.train.cpu_backend import CpuBackend
    from evermind.train.loop import Trainer

    cfg = config or FineTuneConfig()
    if len(pairs) < 2:
        raise ConfigError(
            f"distill: {len(pairs)} pair(s) collected; need at least 2 (one to train on, one "
            "to hold out); hint: enable collection for the tenant and let the router pay for some"
        )
    data = package if isinstance(package, bytes) else Path(package).read_bytes()
    previous = Model(read_package(data))
    tokenizer, mconfig = previous.tokenizer, previous.config
    eos = tokenizer.eos_id if tokenizer.eos_id is not None else mconfig.eos_token_id

    held_at, train_at = split_held_out(len(pairs), cfg.held_out, cfg.seed)
    held = [pairs[i] for i in held_at]
    train = [pairs[i] for i in train_at]
    held_ids = [[*tokenizer.encode(p.text()), eos] for p in held]
    pair_ids = array("i")
    for p in train:
        pair_ids.extend(tokenizer.encode(p.text()))
        pair_ids.append(eos)

    text = corpus if corpus is not None else default_corpus(200_000)[0]
    corpus_ids = array("i", tokenizer.encode(text)) if text else array("i")
    # The corpus tail is never rehearsed: it measures forgetting.
    rehearse, probe = rehearsal_slices(corpus_ids, int(len(pair_ids) * cfg.rehearsal), cfg.seed + 1)
    stream = array("i", pair_ids)
    stream.extend(rehearse)

    before = _loss(previous, held_ids)
    rehearsal_before = _loss(previous, [list(probe)]) if len(probe) else None
    base = FineTuneResult(
        promoted=False,
        reason="",
        held_out_before=before,
        held_out_after=None,
        rehearsal_before=rehearsal_before,
        rehearsal_after=None,
        train_pairs=len(train),
        held_out_pairs=len(held),
        steps=0,
    )
    if cfg.steps == 0:
        base.reason = "0 steps: nothing trained; the previous package stays"
        return base
    seq_len = max(2, min(cfg.seq_len, len(stream) - 1))
    train_cfg = TrainConfig(
        steps=cfg.steps,
        batch_size=cfg.batch_size,
        seq_len=seq_len,
        lr=cfg.lr,
        min_lr=cfg.lr / 10,
        warmup_steps=min(10, cfg.steps),
        eval_every=0,
        seed=cfg.seed,
    )
    params = {name: tensor.to_float32() for name, tensor in previous.package.tensors.items()}
    backend = CpuBackend(mconfig, params, train_cfg)
    trainer = Trainer(backend, stream, array("i"), train_cfg, on_progress=on_progress)
    try:
        result: TrainResult = asyncio.run(trainer.run())
    except TrainingDiverged as err:
        base.reason = f"training diverged ({err}); the previous package stays"
        base.steps = trainer.step
        return base
    manifest = previous.package.manifest
    new_version = version or bump_version(previous.package.version)
    job = JobConfig(
        name=previous.package.name,
        version=new_version,
        preset=str(manifest.get("training", {}).get("preset", "nano")),
        train=train_cfg,
    )
    description = (
        f"distilled from {len(train)} frontier pairs on {previous.name} "
        f"(rehearsal: {len(rehearse)} corpus tokens)"
    )
    written = export_package(
        job,
        mconfig,
        backend.params(),
        tokenizer,
        result,
        description,
        "cpu",
        embedder=previous.package.embedder,
        static_embedder=previous.package.static_embedder,
    )
    candidate = Model(read_package(written))
    after = _loss(candidate, held_ids)
    base.held_out_after = after
    base.rehearsal_after = _loss(candidate, [list(probe)]) if len(probe) else None
    base.steps = result.steps
    base.train = {k: v for k, v in result.to_dict().items() if k not in ("losses", "eval_losses")}
    accepted, base.reason = judge(
        before,
        after,
        rehearsal_before,
        base.rehearsal_after,
        cfg.min_improvement,
        cfg.max_forgetting,
    )
    if not accepted:
        return base
    _write_atomic(Path(out), written)
    base.promoted, base.version, base.out = True, new_version, str(out)
    return base


def _loss(model: Model, sequences: Iterable[Sequence[int]]) -> float:
    """Mean next-token loss (nats/token) over token sequences (one forward each)."""
    return sequence_loss(model.cpu, sequences)


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


__all__ = [
    "PAIR_TEMPLATE",
    "Collected",
    "DistillationEngine",
    "DistillationPolicy",
    "FineTuneConfig",
    "FineTuneResult",
    "Pair",
    "default_path",
    "fine_tune",
    "normalise_prompt",
    "prompt_hash",
    "prompt_of",
]
