"""A loaded ``.evermind`` model on the CPU: generate, embed, classify affect, evaluate
(native-only, numpy).

``evermind.load(path_or_bytes)`` returns a :class:`Model`. Generation is recurrent — the
prompt is fed once through the O(1)-per-token step, then each new token costs one step —
and streams text without splitting UTF-8 sequences. The runtime serves with this class. An
int8 package (docs/format.md) runs on its int8 weights: the projections (and the tied
embedding / LM head when quantised) stay int8 in memory, their products scaled per row.
"""

from __future__ import annotations

import functools
import os
import random
import time
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from evermind.errors import ConfigError
from evermind.metrics import lm_metrics
from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba
from evermind.model.cpu_mamba2 import CpuMamba2
from evermind.model.quantize import QuantizedRows
from evermind.model.sampling import sample
from evermind.ops.cross_entropy import cross_entropy_fwd
from evermind.ops.pool import pool_fwd
from evermind.package import AffectHead, EmbedderHead, Package, Tensor, read_package
from evermind.tokenizer import Tokenizer

#: Longest text (in tokens) an embedding looks at; longer texts are cut.
EMBED_MAX_TOKENS = 512
#: Window of the parallel forward in :meth:`Model.evaluate`.
EVAL_WINDOW = 256


class TextEmbedder(Protocol):
    """What embeds a package's texts in place of its pooled state: the static embedder the
    package carries (:class:`evermind.embedder.static.StaticEmbedder`, built from the
    package's file by :func:`evermind.embedder.packaged.model_of`; this layer cannot import
    it)."""

    @property
    def dims(self) -> int:
        """Width of the vectors."""
        ...

    @property
    def fingerprint(self) -> str:
        """``static-`` and the file's sha256 prefix (the manifest field's ``fingerprint``)."""
        ...

    def embed_with_counts(self, texts: Sequence[str]) -> tuple[Any, list[int]]:
        """(N, dims) float32 unit vectors and the tokens each text's embedding read."""
        ...


@dataclass
class Completion:
    """A finished generation with its token counts (OpenAI ``usage``)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (eos or a stop string) or "length"


class Model:
    """A trained Evermind model with its tokenizer.

    Args:
        package: A verified package from :func:`evermind.package.read_package`.
        text_embedder: The static embedder built from the file the package carries
            (``package.static_embedder``), which :meth:`embed` then uses; given by
            :func:`evermind.load` (:func:`evermind.embedder.packaged.model_of`). A package
            that carries one, loaded without it, refuses to embed rather than embed otherwise.

    Raises:
        ConfigError: ``text_embedder`` is not the package's (another fingerprint), or is
            given for a package that carries none.
    """

    def __init__(self, package: Package, text_embedder: TextEmbedder | None = None) -> None:
        carried = package.manifest.get("static_embedder")
        if text_embedder is not None and (
            carried is None or carried["fingerprint"] != text_embedder.fingerprint
        ):
            raise ConfigError(
                f"text_embedder {text_embedder.fingerprint} is not the static embedder "
                f"{package.ref} carries ({'none' if carried is None else carried['fingerprint']})"
            )
        self.package = package
        self.text_embedder = text_embedder
        self.config = MambaConfig.from_hf_config(package.config)
        summary = package.manifest.get("tokenizer", {})
        self.tokenizer = Tokenizer.from_json(
            package.tokenizer_json,
            eos=summary.get("eos"),
            bos=summary.get("bos"),
            pad=summary.get("pad"),
        )
        # CpuMamba copies what it is given: hand it the package's float32 arrays as they are
        # (a to_float32() copy first would hold every weight twice more during a push), and
        # an int8 package's int8 weights as int8 (never a float copy of them). A Mamba-2
        # package gets the Mamba-2 block, on float32 weights (int8 ones dequantised: its
        # block has no int8 product yet).
        if self.config.block == "mamba2":
            weights = {
                k: t.to_float32() if t.dtype == "I8" else _weight(t)
                for k, t in package.tensors.items()
            }
            self.cpu: CpuMamba = CpuMamba2(self.config, weights)
        else:
            self.cpu = CpuMamba(self.config, {k: _weight(t) for k, t in package.tensors.items()})
        #: Identifies the weights: embeddings made by another model never mix with these.
        self.fingerprint = package.digest

    @property
    def name(self) -> str:
        """``<name>:<version>`` of the package."""
        return f"{self.package.name}:{self.package.version}"

    # -- generation -------------------------------------------------------------------------
    def _prompt_ids(self, prompt: str) -> list[int]:
        ids = self.tokenizer.encode(prompt)
        if not ids:
            bos = self.tokenizer.bos_id
            ids = [bos if bos is not None else self.config.eos_token_id]
        return ids

    def stream(
        self,
        prompt: str,
        max_new_tokens: int = 64,
        temperature: float = 0.8,
        top_k: int | None = 40,
        top_p: float | None = 0.95,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> Iterator[str]:
        """Yields the continuation of ``prompt`` piece by piece (complete UTF-8 only).

        Ends at ``max_new_tokens``, the end-of-text token, or a ``stop`` string (which is
        not emitted). The last finish reason is in :attr:`last_finish_reason`.
        """
        completion = self._run(prompt, max_new_tokens, temperature, top_k, top_p, seed, stop)
        yield from completion

    def _run(
        self,
        prompt: str,
        max_new_tokens: int,
        temperature: float,
        top_k: int | None,
        top_p: float | None,
        seed: int | None,
        stop: Sequence[str] | None,
    ) -> Iterator[str]:
        if max_new_tokens < 0:
            raise ConfigError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if temperature < 0 or (top_p is not None and not 0 < top_p <= 1):
            raise ConfigError(
                f"temperature must be >= 0 and top_p in (0, 1]; got {temperature}, {top_p}"
            )
        rng = random.Random(seed)
        stops = [s for s in (stop or []) if s]
        ids = self._prompt_ids(prompt)
        self.last_prompt_tokens, self.last_completion_tokens = len(ids), 0
        self.last_finish_reason = "length"
        state = self.cpu.init_state(1)
        logits = None
        for token in ids:
            logits, state = self.cpu.step(np.array([token]), state)
        decoder = self.tokenizer.stream_decoder()
        pending = ""  # text held back while it could still become a stop string
        eos = self.tokenizer.eos_id
        for _ in range(max_new_tokens):
            assert logits is not None
            token = sample(logits[0].tolist(), temperature, top_k, top_p, rng)
            self.last_completion_tokens += 1
            if token == eos:
                self.last_finish_reason = "stop"
                break
            pending += decoder.feed(token)
            if stops:
                hit = min((pending.find(s) for s in stops if s in pending), default=-1)
                if hit >= 0:
                    if pending[:hit]:
                        yield pending[:hit]
                    self.last_finish_reason = "stop"
                    return
                keep = max(len(s) - 1 for s in stops)
                if len(pending) > keep:
                    yield pending[: len(pending) - keep]
                    pending = pending[len(pending) - keep :]
            elif pending:
                yield pending
                pending = ""
            logits, state = self.cpu.step(np.array([token]), state)
        pending += decoder.flush()
        if pending:
            yield pending

    def complete(self, prompt: str, **options: Any) -> Completion:
        """Generates the whole continuation at once (see :meth:`stream` for options)."""
        text = "".join(self.stream(prompt, **options))
        return Completion(
            text, self.last_prompt_tokens, self.last_completion_tokens, self.last_finish_reason
        )

    def generate(self, prompt: str, **options: Any) -> Iterator[str]:
        """Alias of :meth:`stream`: ``generate(prompt, max_new_tokens, temperature, top_k,
        top_p, seed, stop)`` streams text."""
        return self.stream(prompt, **options)

    # -- embeddings --------------------------------------------------------------------------
    @property
    def similarity_trained(self) -> bool:
        """Whether :meth:`embed` was trained to place paraphrases together: the package has
        an embedding head fitted to a target (``evermind distill-embedder``; a centring-only
        head is not) or records embedding tuning or distillation in its manifest. An untrained
        model's pooled states score surface likeness, so a semantic cache does not read its
        high scores as confidence. A package with a static embedder embeds with it, which was
        trained for similarity."""
        training = self.package.manifest.get("training", {})
        head = self.package.embedder
        return (
            self.package.static_embedder is not None
            or (head is not None and head.method != "centre")
            or "embedding_tuning" in training
            or "embedding_distillation" in training
        )

    @property
    def embed_dim(self) -> int:
        """Width of :meth:`embed`'s vectors (the static embedder's dims, else the head's
        ``dim``, else ``d_model``)."""
        static = self.package.manifest.get("static_embedder")
        if static is not None:
            return int(static["dims"])
        head = self.package.embedder
        return head.dim if head is not None else self.config.d_model

    def embed(self, texts: Sequence[str], batch_size: int = 16) -> np.ndarray:
        """The package's sentence embedding of each text: (N, :attr:`embed_dim`) float32.

        The raw vector is the mean-pooled final hidden state, L2-normalised; a package with an
        embedding head maps it (and the ids it pooled) to
        ``normalize(W · (raw − μ) + token term)`` (see :mod:`evermind.package.head`), exactly
        as the tab does. A package with a static embedder (docs/format.md) embeds with it
        instead (:attr:`text_embedder`).
        """
        if self.package.static_embedder is not None:
            return self.embed_counted(texts)[0]
        encoded = self.embed_ids(texts)
        raw = self.embed_raw_ids(encoded, batch_size)
        return apply_head_rows(self.package.embedder, raw, encoded)

    def embed_counted(
        self, texts: Sequence[str], batch_size: int = 16
    ) -> tuple[np.ndarray, list[int]]:
        """:meth:`embed` of ``texts`` and how many tokens each text's embedding read (the
        static embedder's WordPiece tokens when the package has one, else the model's)."""
        if self.package.static_embedder is not None:
            if isinstance(texts, str):
                raise ConfigError("embed takes a list of texts; wrap a single text in a list")
            if self.text_embedder is None:
                raise ConfigError(
                    f"{self.package.ref} carries a static embedder, which this Model was built "
                    "without; hint: load the package with evermind.load"
                )
            vectors, counts = self.text_embedder.embed_with_counts(list(texts))
            return np.asarray(vectors, np.float32), counts
        encoded = self.embed_ids(texts)
        raw = self.embed_raw_ids(encoded, batch_size)
        vectors = apply_head_rows(self.package.embedder, raw, encoded)
        return vectors, [len(ids) for ids in encoded]

    def embed_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The token ids each text's embedding pools (the prompt ids, cut to 512)."""
        if isinstance(texts, str):
            raise ConfigError("embed takes a list of texts; wrap a single text in a list")
        return [self._prompt_ids(t)[:EMBED_MAX_TOKENS] for t in texts]

    def embed_raw(self, texts: Sequence[str], batch_size: int = 16) -> np.ndarray:
        """Mean-pooled final hidden state of each text, L2-normalised: (N, d_model) float32
        (no head: what distillation fits the head on)."""
        return self.embed_raw_ids(self.embed_ids(texts), batch_size)

    def embed_raw_ids(self, encoded: Sequence[Sequence[int]], batch_size: int = 16) -> np.ndarray:
        """:meth:`embed_raw` of token-id sequences (from :meth:`embed_ids`)."""
        out = np.zeros((len(encoded), self.config.d_model), np.float32)
        order = sorted(
            range(len(encoded)), key=lambda i: len(encoded[i])
        )  # similar lengths batch well
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = max(len(encoded[i]) for i in rows)
            ids = np.zeros((len(rows), width), np.int64)
            mask = np.zeros((len(rows), width), bool)
            for r, i in enumerate(rows):
                ids[r, : len(encoded[i])] = encoded[i]
                mask[r, : len(encoded[i])] = True
            out[rows] = self.cpu.embed(ids, mask)
        return out

    # -- affect ------------------------------------------------------------------------------
    @property
    def has_affect(self) -> bool:
        """Whether the package has an affect head (``evermind train-affect``)."""
        return self.package.affect is not None

    def affect(self, texts: Sequence[str], batch_size: int = 16) -> list[dict[str, float]]:
        """Label -> probability of each text from the package's affect head: a linear softmax
        classifier over the raw pooled vector (:mod:`evermind.package.affect`).

        Raises:
            ConfigError: The package has no affect head, or ``texts`` is a single string.
        """
        return self.affect_raw(self.embed_raw(texts, batch_size))

    def affect_raw(self, raw: np.ndarray) -> list[dict[str, float]]:
        """:meth:`affect` of raw pooled rows (N, d_model) from :meth:`embed_raw`.

        Raises:
            ConfigError: The package has no affect head.
        """
        head = self.package.affect
        if head is None:
            raise ConfigError(
                f"{self.name} has no affect head; hint: fit one with `evermind train-affect`"
            )
        probs = affect_rows(head, raw)
        return [
            {label: float(p) for label, p in zip(head.labels, row, strict=True)} for row in probs
        ]

    # -- evaluation --------------------------------------------------------------------------
    def evaluate(self, text: str) -> dict[str, float]:
        """The bench metrics of ``text``: cross-entropy (nats), perplexity, bits per token,
        top-1 and top-5 next-token accuracy, tokens and tokens/s."""
        ids = np.array(self.tokenizer.encode(text), np.int64)
        if ids.size < 2:
            raise ConfigError("evaluate needs a text of at least two tokens")
        start = time.perf_counter()
        nll, top1, top5, count = 0.0, 0, 0, 0
        for lo in range(0, ids.size - 1, EVAL_WINDOW):
            window = ids[lo : lo + EVAL_WINDOW + 1]
            logits = self.cpu.forward(window[None, :-1])[0].astype(np.float64)  # (L, V)
            targets = window[1:]
            nll += float(np.sum(cross_entropy_fwd(logits, targets)))
            top = np.argsort(-logits, axis=1)[:, :5]
            top1 += int(np.sum(top[:, 0] == targets))
            top5 += int(np.sum((top == targets[:, None]).any(1)))
            count += targets.size
        return lm_metrics(nll, count, top1, top5, time.perf_counter() - start)


def _weight(tensor: Tensor) -> Any:
    """A package tensor as CpuMamba takes it: float32 data, or int8 rows with their scales."""
    data = tensor.data
    if tensor.dtype == "I8" and tensor.scale is not None and isinstance(data, bytes):
        values = np.frombuffer(data, np.int8).reshape(tensor.shape)
        scale = np.array(tensor.scale.to_float32(), np.float32)
        return QuantizedRows(values, scale)
    return data if isinstance(data, array) and data.typecode == "f" else tensor.to_float32()


@dataclass(frozen=True)
class HeadArrays:
    """A head's tensors as float64 numpy arrays in their shapes (None where absent)."""

    mean: np.ndarray
    projection: np.ndarray | None
    tokens: np.ndarray | None
    token_weights: np.ndarray | None


@functools.lru_cache(maxsize=16)
def head_arrays(head: EmbedderHead) -> HeadArrays:
    """The numpy form of ``head``, converted once per head (heads are immutable and hash by
    identity), not on every embedding call: the token table alone is vocab × dim."""

    def dense(tensor: Tensor | None) -> np.ndarray | None:
        if tensor is None:
            return None
        return np.asarray(tensor.to_float32(), np.float64).reshape(tensor.shape)

    mean = dense(head.mean)
    assert mean is not None
    return HeadArrays(mean, dense(head.projection), dense(head.tokens), dense(head.token_weights))


def apply_head_rows(
    head: EmbedderHead | None,
    raw: np.ndarray,
    encoded: Sequence[Sequence[int]] | None = None,
) -> np.ndarray:
    """numpy form of :func:`evermind.package.head.apply_head` for rows (N, d_model).

    Args:
        head: The head (None: ``raw`` is returned).
        raw: Raw pooled vectors (N, d_model).
        encoded: The ids each row pooled; required when the head has a token term.
    """
    if head is None:
        return raw
    arrays = head_arrays(head)
    x = raw.astype(np.float64) - arrays.mean
    if arrays.projection is not None:
        x = x @ arrays.projection.T
    if head.tokens is not None:
        if encoded is None or len(encoded) != len(raw):
            raise ConfigError("this embedder head has a token term: pass the ids of every row")
        x = x + token_term(head, encoded)
    return unit_rows(x)


def affect_rows(head: AffectHead, raw: np.ndarray) -> np.ndarray:
    """numpy form of :func:`evermind.package.affect.affect_scores` for rows: probabilities
    (N, L) of raw pooled rows (N, d_model), ``softmax(raw Wᵀ + b)``."""
    weight = np.asarray(head.weight.to_float32(), np.float64).reshape(head.weight.shape)
    bias = np.asarray(head.bias.to_float32(), np.float64)
    logits = raw.astype(np.float64) @ weight.T + bias  # (N, L)
    logits -= logits.max(1, keepdims=True)
    probs = np.exp(logits)
    out: np.ndarray = probs / probs.sum(1, keepdims=True)
    return out


def token_bags(weights: np.ndarray, encoded: Sequence[Sequence[int]], vocab: int) -> np.ndarray:
    """Row n: the ``weights``-weighted share of each token id in ``encoded[n]`` (N, vocab);
    an empty row is all zero. ``bags @ T`` is the head's token term."""
    bags = np.zeros((len(encoded), vocab), np.float64)
    for row, ids in enumerate(encoded):
        if len(ids):
            bags[row] = np.bincount(np.asarray(ids, np.int64), minlength=vocab)
    bags *= weights[None, :]
    mass = bags.sum(1, keepdims=True)
    out: np.ndarray = np.divide(bags, mass, out=np.zeros_like(bags), where=mass > 0)
    return out


def token_term(head: EmbedderHead, encoded: Sequence[Sequence[int]]) -> np.ndarray:
    """The head's token term of each id sequence: (N, dim) float64."""
    arrays = head_arrays(head)
    table, weights = arrays.tokens, arrays.token_weights
    if table is None or weights is None:
        raise ConfigError("this embedder head has no token term")
    out = np.zeros((len(encoded), table.shape[1]), np.float64)
    for row, seq in enumerate(encoded):
        if not len(seq):
            continue
        ids = np.asarray(seq, np.int64)
        if ids.min() < 0 or ids.max() >= head.vocab:
            raise ConfigError(f"token id outside the head's token table ({head.vocab})")
        a = weights[ids]
        out[row] = (a[:, None] * table[ids]).sum(0) / a.sum()
    return out


def unit_rows(rows: np.ndarray) -> np.ndarray:
    """Rows (N, D) L2-normalised, float32: the one pool reference over one position each."""
    return np.asarray(pool_fwd(rows[:, None, :], np.ones(len(rows), np.int64)), np.float32)


def compare(a: dict[str, float], b: dict[str, float], tie_band: float = 0.01) -> dict[str, Any]:
    """A/B of two :meth:`Model.evaluate` results on the same text.

    The model with the lower cross-entropy wins unless the relative difference is inside
    ``tie_band`` (1 % by default), which is reported as a tie.
    """
    ce_a, ce_b = a["cross_entropy"], b["cross_entropy"]
    rel = (ce_b - ce_a) / max(abs(ce_a), 1e-12)
    winner = "tie" if abs(rel) <= tie_band else ("a" if ce_a < ce_b else "b")
    return {
        "winner": winner,
        "relative_difference": rel,
        "tie_band": tie_band,
        "cross_entropy": {"a": ce_a, "b": ce_b},
    }


def load(source: bytes | bytearray | memoryview | str | os.PathLike[str]) -> Model:
    """Loads and verifies a ``.evermind`` package (path or bytes) into a :class:`Model`,
    without the static embedder a package may carry (:func:`evermind.load` adds it)."""
    return Model(read_package(source))
