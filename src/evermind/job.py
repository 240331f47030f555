"""The main job, written once: corpus → tokenizer → model config → train → package.

Browser-safe (standard library and ``evermind`` only). ``evermind train`` (natively, on
wgpu-py or numpy), the Studio session in the tab (on ``navigator.gpu``) and headless
training (the Studio page in headless Chromium) all run these steps; only the backend and
who reports the progress differ. The backend is passed in (the caller builds the GPU
model on its device, or the numpy :class:`~evermind.train.cpu_backend.CpuBackend`), and
progress goes to a callback as :data:`JobEvent` values; nothing here prints.

Steps: :func:`read_corpus` (or :func:`default_corpus`), :func:`train_tokenizer`,
:func:`tokenize_split`, :func:`model_config`, training through
:class:`~evermind.train.loop.Trainer`, :func:`export_package`. :func:`run_job` strings
them together for a run from start to end; the Studio session calls them one by one, as
the user clicks through its panels, and adds checkpoints and resume.
"""

from __future__ import annotations

import random
import sys
from array import array
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import evermind
from evermind.errors import ConfigError
from evermind.model.config import BLOCKS, PRESETS, MambaConfig
from evermind.model.config_moe import check_moe
from evermind.model.init import init_params
from evermind.package import Tensor, write_package
from evermind.package.affect import AffectHead
from evermind.package.head import EmbedderHead
from evermind.package.manifest import DTYPES, utc_timestamp
from evermind.package.reader import Package
from evermind.package.static_member import StaticEmbedderFile
from evermind.tokenizer import Tokenizer
from evermind.train.corpus import harvest_stdlib_docstrings
from evermind.train.data import split_held_out
from evermind.train.loop import Backend, Trainer
from evermind.train.sources import TEXT_SUFFIXES, extract_text
from evermind.types import Progress, TrainConfig, TrainResult

DEFAULT_CORPUS_BYTES = 1_000_000
#: Suffixes :func:`read_corpus` picks up from a folder.
CORPUS_SUFFIXES = (*TEXT_SUFFIXES, ".json", ".jsonl", ".ndjson", ".csv")
#: Model shape keys a custom (non-preset) model config may set.
CUSTOM_MODEL_KEYS = frozenset({"d_model", "n_layer", "d_state", "expand", "d_conv"})


@dataclass
class JobConfig:
    """What to train and how to name the result.

    Attributes:
        name: Package name, served as ``evermind/<name>:<version>``.
        version: Package version.
        preset: Model size preset (``nano``, ``small``, ``base``).
        block: Block type, ``mamba1`` (default) or ``mamba2`` (the SSD block; the CPU, the
            native GPU and the Studio page train it).
        vocab_size: Tokenizer vocabulary size to train.
        held_out: Fraction of the token stream kept for evaluation (the tail).
        seed: Seed of the weights (the batches use ``train.seed``).
        dtype: Stored weight precision in the package (``float32``, ``float16`` or
            ``int8``: the projections int8 per row, see docs/format.md).
        train: Optimisation settings.
        moe_experts: The cortex's routed experts (0, the default: no cortex); see
            :class:`~evermind.model.config.MambaConfig` for it and the fields below.
        moe_top_k: Routed experts per token.
        moe_intermediate: Width of each routed expert (0: d_model).
        moe_shared_intermediate: Width of the shared expert (0: 2 * d_model).
        moe_every: Layer i carries the cortex when (i + 1) % moe_every == 0.
        router_aux_loss_coef: Weight of the load-balancing loss.
    """

    name: str = "evermind-default"
    version: str = "0.1.0"
    preset: str = "nano"
    block: str = "mamba1"
    vocab_size: int = 2048
    held_out: float = 0.05
    seed: int = 0
    dtype: str = "float32"
    train: TrainConfig = field(default_factory=TrainConfig)
    moe_experts: int = 0
    moe_top_k: int = 2
    moe_intermediate: int = 0
    moe_shared_intermediate: int = 0
    moe_every: int = 1
    router_aux_loss_coef: float = 0.01

    def cortex(self) -> dict[str, Any]:
        """The cortex fields, as :class:`MambaConfig` keywords."""
        return {
            "moe_experts": self.moe_experts, "moe_top_k": self.moe_top_k,
            "moe_intermediate": self.moe_intermediate,
            "moe_shared_intermediate": self.moe_shared_intermediate,
            "moe_every": self.moe_every, "router_aux_loss_coef": self.router_aux_loss_coef,
        }  # fmt: skip

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ConfigError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        if self.block not in BLOCKS:
            raise ConfigError(
                f"unknown block {self.block!r}; choose one of {', '.join(BLOCKS)} "
                "(hint: mamba1 is the selective scan, mamba2 the SSD block)"
            )
        check_dtype(self.dtype)
        # The cortex's fields, checked now (types, ranges, k <= experts, the block) rather than
        # after the tokenizer has trained; moe_every against n_layer is the model's check.
        shape = PRESETS[self.preset]
        check_moe(d_model=shape["d_model"], n_layer=1 << 30, block=self.block, **_as_check(self))


def _as_check(job: JobConfig) -> dict[str, Any]:
    """:func:`check_moe`'s keywords of a job's cortex fields."""
    c = job.cortex()
    return {
        "experts": c["moe_experts"], "top_k": c["moe_top_k"], "intermediate": c["moe_intermediate"],
        "shared_intermediate": c["moe_shared_intermediate"], "every": c["moe_every"],
        "aux_coef": c["router_aux_loss_coef"],
    }  # fmt: skip


def check_dtype(dtype: str) -> None:
    """Refuse a package weight precision the format does not have.

    Raises:
        ConfigError: ``dtype`` is not one of ``float32``, ``float16``, ``int8``.
    """
    if dtype not in DTYPES:
        raise ConfigError(
            f"unknown package dtype {dtype!r}; choose one of {', '.join(DTYPES)} "
            "(hint: int8 stores the projections as int8 per row, float16 halves every tensor)"
        )


# -- progress events -------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenizerProgress:
    """Merges learned so far; ``finished`` is set once, when the tokenizer is done."""

    done: int
    total: int
    finished: bool = False


@dataclass(frozen=True)
class ModelReady:
    """The model is configured and initialised; training starts next."""

    preset: str
    n_params: int
    vocab_size: int
    train_tokens: int
    held_out_tokens: int


@dataclass(frozen=True)
class Note:
    """A one-line fact about a stage (``topic``: ``corpus``, ``device``, ...).

    ``interrupts`` marks a message that arrives in the middle of a stage (an error in the
    browser), so a progress display should break its line first.
    """

    topic: str
    text: str
    interrupts: bool = False


#: Everything a job reports: tokenizer progress, the model line, each training step
#: (:class:`~evermind.types.Progress`) and notes.
JobEvent = TokenizerProgress | ModelReady | Progress | Note
OnEvent = Callable[[JobEvent], None]


def _ignore(event: JobEvent) -> None:
    return None


# -- corpus ----------------------------------------------------------------------------------
def default_corpus(max_bytes: int = DEFAULT_CORPUS_BYTES) -> tuple[str, str]:
    """The embedded default corpus: this Python's standard-library docstrings.

    Returns:
        (text, description) — the description goes into the package's training summary.
    """
    text = harvest_stdlib_docstrings(max_bytes)
    return text, describe_default_corpus(text)


def describe_default_corpus(text: str) -> str:
    """The default corpus's description (the package's training summary names it)."""
    version = ".".join(map(str, sys.version_info[:3]))
    return f"Python {version} standard library docstrings ({len(text.encode()):,} bytes)"


def read_corpus(spec: str, max_bytes: int) -> tuple[str, str]:
    """(text, description) of a corpus spec: ``default``, a file, or a folder of files.

    Text, Markdown, JSON, JSONL and CSV files are read with the Studio's rules
    (:mod:`evermind.train.sources`), in name order, until ``max_bytes`` characters.

    Raises:
        ConfigError: The path does not exist or holds no text.
    """
    if spec == "default":
        return default_corpus(max_bytes)
    path = Path(spec)
    if not path.exists():
        raise ConfigError(f"--corpus {spec!r}: no such file or folder")
    files = (
        sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in CORPUS_SUFFIXES)
        if path.is_dir()
        else [path]
    )
    if not files:
        raise ConfigError(f"--corpus {spec!r}: no text, Markdown, JSON, JSONL or CSV files inside")
    parts, used = [], 0
    for file in files:
        text = extract_text(file.name, file.read_bytes())
        if used + len(text) > max_bytes:
            text = text[: max_bytes - used]
        parts.append(text)
        used += len(text)
        if used >= max_bytes:
            break
    text = "\n\n".join(p for p in parts if p)
    if not text.strip():
        raise ConfigError(f"--corpus {spec!r}: the files hold no text")
    return text, f"{len(files)} file(s) from {path.name} ({len(text.encode()):,} bytes)"


def sample_text(text: str, chars: int = 400, seed: int = 0) -> str:
    """A short excerpt of the corpus (shown in the Studio's data panel)."""
    if len(text) <= chars:
        return text
    start = random.Random(seed).randrange(0, len(text) - chars)
    return text[start : start + chars]


# -- tokenizer and data ----------------------------------------------------------------------
def train_tokenizer(
    text: str | Iterable[str],
    vocab_size: int,
    on_progress: Callable[[int, int], None] | None = None,
) -> Tokenizer:
    """Trains the byte-level BPE tokenizer (``<|endoftext|>`` as eos/bos/pad) on ``text``, or
    on documents streamed once (e.g. :func:`~evermind.tokenizer.trainer.counting_pieces`)."""
    return Tokenizer.train(text, vocab_size, on_progress=on_progress)


def tokenize(tokenizer: Tokenizer, text: str) -> array[int]:
    """Encodes the corpus into one int32 token stream."""
    return array("i", tokenizer.encode(text))


def split(job: JobConfig, tokens: array[int]) -> tuple[array[int], array[int]]:
    """(train, held-out) token streams."""
    return split_held_out(tokens, job.held_out)


def tokenize_split(
    tokenizer: Tokenizer, text: str, held_out: float
) -> tuple[array[int], array[int]]:
    """Encodes the corpus and splits off the held-out tail: (train, held-out) token ids."""
    return split_held_out(tokenize(tokenizer, text), held_out)


# -- model -----------------------------------------------------------------------------------
def model_config(
    job: JobConfig, tokenizer: Tokenizer, custom: dict[str, Any] | None = None
) -> MambaConfig:
    """The model's hyperparameters with the tokenizer's vocabulary and special ids.

    Args:
        job: The job; its ``preset`` gives the shape unless ``custom`` does.
        tokenizer: The trained tokenizer.
        custom: Shape keys (:data:`CUSTOM_MODEL_KEYS`) instead of the preset.

    Raises:
        ConfigError: ``custom`` has a key that is not a shape key.
    """
    eos = tokenizer.eos_id or 0
    ids = {
        "eos_token_id": eos,
        "bos_token_id": tokenizer.bos_id if tokenizer.bos_id is not None else eos,
        "pad_token_id": tokenizer.pad_id if tokenizer.pad_id is not None else eos,
    }
    if custom:
        unknown = set(custom) - CUSTOM_MODEL_KEYS
        if unknown:
            raise ConfigError(
                f"custom model config: unknown keys {sorted(unknown)}; "
                f"allowed {sorted(CUSTOM_MODEL_KEYS)}"
            )
        return MambaConfig(
            vocab_size=tokenizer.vocab_size, block=job.block, **custom, **ids, **job.cortex()
        )
    return MambaConfig.preset(
        job.preset, tokenizer.vocab_size, block=job.block, **ids, **job.cortex()
    )


# -- package ---------------------------------------------------------------------------------
def export_package(
    job: JobConfig,
    config: MambaConfig,
    params: dict[str, array[float]],
    tokenizer: Tokenizer,
    result: TrainResult | None,
    corpus: str,
    device: str,
    bench: dict[str, float] | None = None,
    created_at: datetime | None = None,
    embedder: EmbedderHead | None = None,
    affect: AffectHead | None = None,
    static_embedder: StaticEmbedderFile | None = None,
) -> bytes:
    """Writes the ``.evermind`` package bytes of a trained model (with ``embedder``, its
    embedding head, ``affect``, its affect classifier head, and ``static_embedder``, a static
    embedder's file it then embeds with)."""
    shapes = config.param_shapes()
    tensors = {name: Tensor(shapes[name], params[name]) for name in shapes}
    training: dict[str, Any] = {"corpus": corpus, "device": device, "preset": job.preset}
    if result is not None:
        training.update(
            steps=result.steps,
            tokens=result.tokens,
            initial_loss=result.initial_loss,
            final_loss=result.final_loss,
            eval_loss=result.eval_loss,
            tokens_per_second=result.tokens_per_second,
            batch_size=job.train.batch_size,
            seq_len=job.train.seq_len,
            lr=job.train.lr,
            seed=job.seed,
        )
    return write_package(
        name=job.name,
        version=job.version,
        created_at=utc_timestamp(created_at or datetime.now(UTC)),
        producer=f"evermind {evermind.__version__} ({device})",
        config=config.to_hf_config(),
        tensors=tensors,
        tokenizer_json=tokenizer.to_json(),
        training=training,
        bench=bench,
        dtype=job.dtype,
        embedder=embedder,
        affect=affect,
        static_embedder=static_embedder,
    )


def with_embedder(
    package: Package, spec: str, dtype: str | None = None, *, int8_embedding: bool | None = None
) -> bytes:
    """``package`` again (same weights, dtype and heads) carrying the static embedder
    ``spec`` names, which it then embeds with (docs/format.md, "The static embedder").

    Args:
        package: A verified package (:func:`evermind.package.read_package`).
        spec: ``base`` (the shipped base embedder), the path of an embedder file
            (``evermind build-embedder``), or ``none`` to remove the one it carries.
        dtype: Re-store the weights at this precision too (see :func:`convert_package`);
            None keeps the package's.
        int8_embedding: See :func:`convert_package`; None with the package's own dtype
            keeps whether its embedding was int8.

    Returns:
        The new package bytes (name, version and creation time kept).

    Raises:
        InputError: ``spec`` names no readable file.
        PackageError: The file is not an embedder file.
    """
    from evermind.embedder.shipped import BASE, spec_file

    own = str(package.manifest["model"]["dtype"])
    if dtype is None and int8_embedding is None and own == "int8":
        quantised = package.manifest["quantization"]["tensors"]
        int8_embedding = "backbone.embeddings.weight" in quantised
    source = spec if spec in (BASE, "none") else Path(spec).name
    static: StaticEmbedderFile | None = None
    if spec != "none":
        static = StaticEmbedderFile(spec_file(spec)[1], source[:256])
    return convert_package(
        package,
        dtype or own,
        int8_embedding=int8_embedding,
        producer=f"evermind {evermind.__version__} (--embedder {source})"[:256],
        static_embedder=static,
    )


def convert_package(
    package: Package,
    dtype: str,
    *,
    int8_embedding: bool | None = None,
    producer: str = "",
    static_embedder: StaticEmbedderFile | str | None = "keep",
) -> bytes:
    """The same model re-stored at another precision (``evermind export --dtype``).

    Name, version, creation time, training summary, bench numbers, tokenizer, generation
    config, embedding head, affect head and static embedder are kept; the model card is
    rendered anew (it states the dtype). Converting down loses what the lower precision
    cannot hold; converting an int8 package to float32 stores its dequantised values.

    Args:
        package: A verified package (:func:`evermind.package.read_package`).
        dtype: ``float32``, ``float16`` or ``int8``.
        int8_embedding: With ``int8``, also quantise the embedding / LM head; None: the
            writer's default (:data:`evermind.package.int8.INT8_EMBEDDING`).
        producer: What converted it; default: this evermind, after the old producer.
        static_embedder: A static embedder's file to store instead of the package's (None
            removes it); ``"keep"`` keeps the package's.

    Returns:
        The new package bytes.

    Raises:
        ConfigError: ``dtype`` is unknown.
        PackageError: A weight does not fit the new dtype (float16 overflow, non-finite).
    """
    check_dtype(dtype)
    extra: dict[str, Any] = {}
    if int8_embedding is not None:
        extra["int8_embedding"] = int8_embedding
    manifest = package.manifest
    static = package.static_embedder if static_embedder == "keep" else static_embedder
    if isinstance(static, str):
        raise ConfigError(f"static_embedder: expected a file, None or 'keep', got {static!r}")
    return write_package(
        name=package.name,
        version=package.version,
        created_at=str(manifest["created_at"]),
        producer=producer
        or f"evermind {evermind.__version__} (export from {manifest['producer']})"[:256],
        config=package.config,
        tensors=package.tensors,
        tokenizer_json=package.tokenizer_json,
        training=manifest["training"],
        bench=manifest["bench"],
        dtype=dtype,
        generation_config=package.generation_config,
        embedder=package.embedder,
        affect=package.affect,
        static_embedder=static,
        **extra,
    )


# -- the whole job ---------------------------------------------------------------------------
@dataclass
class JobBackend:
    """A backend built for the job, how to read its weights back, and what to call it.

    Attributes:
        backend: The model and optimizer (``GpuBackend`` or ``CpuBackend``, both in
            :mod:`evermind.train`).
        read_params: Returns the trained weights (HF names).
        device: What trained, for the package's training summary (``"wgpu gpu"``).
    """

    backend: Backend
    read_params: Callable[[], Awaitable[dict[str, array[float]]]]
    device: str


#: Builds the backend once the model's config and initial weights are known.
MakeBackend = Callable[[MambaConfig, dict[str, "array[float]"], TrainConfig], Awaitable[JobBackend]]


@dataclass
class JobOutput:
    """What :func:`run_job` made: the package bytes and how training went."""

    package: bytes
    result: TrainResult
    config: MambaConfig
    tokenizer: Tokenizer


async def run_job(
    job: JobConfig,
    text: str,
    corpus: str,
    make_backend: MakeBackend,
    on_event: OnEvent | None = None,
) -> JobOutput:
    """Runs the job from corpus text to package bytes.

    Args:
        job: What to train and how to name it.
        text: The corpus text.
        corpus: Its description (goes into the package's training summary).
        make_backend: Builds the backend for the model config and initial weights.
        on_event: Receives :data:`JobEvent` values as the job goes.

    Returns:
        The package bytes, the training result, the model config and the tokenizer.
    """
    emit = on_event or _ignore
    tokenizer = train_tokenizer(
        text, job.vocab_size, on_progress=lambda done, total: emit(TokenizerProgress(done, total))
    )
    emit(TokenizerProgress(job.vocab_size, job.vocab_size, finished=True))
    train_ids, held = split(job, tokenize(tokenizer, text))
    config = model_config(job, tokenizer)
    params = init_params(config, job.seed)
    emit(ModelReady(job.preset, config.n_params, config.vocab_size, len(train_ids), len(held)))
    built = await make_backend(config, params, job.train)
    trainer = Trainer(built.backend, train_ids, held, job.train, on_progress=emit)
    result = await trainer.run()
    final = await built.read_params()
    data = export_package(job, config, final, tokenizer, result, corpus, built.device)
    return JobOutput(data, result, config, tokenizer)
