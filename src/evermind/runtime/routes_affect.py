"""The affect head over HTTP: ``POST /v1/affect`` (native-only).

A package fitted with ``evermind train-affect`` carries a classifier head over the model's
pooled hidden state (:mod:`evermind.package.affect`); this route returns its label
probabilities for each input text. It is a classifier head, no more: the scores say which of
the package's labels the head picks, as well as its held-out metrics (in ``GET
/v1/models/{id}``'s manifest) allow. :func:`affect_of` is also what a chat request with
``"evermind": {"affect": true}`` uses.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from evermind.model.inference import Model
from evermind.runtime.errors import ApiError
from evermind.runtime.installs import Install
from evermind.runtime.schemas import AffectRequest
from evermind.runtime.state import Reader, Runtime, RuntimeDep

router = APIRouter(tags=["evermind"])


def require_affect(install: Install, model: Model) -> None:
    """400 naming the model when its package has no affect head."""
    if not model.has_affect:
        raise ApiError(
            400,
            f"model: {install.ref} has no affect head; hint: fit one with `evermind "
            "train-affect MODEL.evermind LABELLED.jsonl --out NEW.evermind` and push that",
            "model_has_no_affect_head",
        )


def _affect_job(model: Model, texts: list[str]) -> tuple[list[dict[str, float]], int]:
    encoded = model.embed_ids(texts)
    return model.affect_raw(model.embed_raw_ids(encoded)), sum(len(ids) for ids in encoded)


async def affect_of(
    runtime: Runtime, model: Model, texts: list[str]
) -> tuple[list[dict[str, Any]], int]:
    """``[{"index", "label", "scores"}]`` of ``texts`` (the head must exist) and the tokens
    read, computed on the worker pool."""
    loop = asyncio.get_running_loop()
    scores, tokens = await loop.run_in_executor(runtime.executor, _affect_job, model, texts)
    items = [
        {"index": i, "label": max(row, key=row.__getitem__), "scores": row}
        for i, row in enumerate(scores)
    ]
    return items, tokens


@router.post("/v1/affect", summary="Affect scores of texts (the package's classifier head)")
async def affect(body: AffectRequest, runtime: RuntimeDep, who: Reader) -> JSONResponse:
    """The affect head's label probabilities of each input text, and its top label."""
    texts = [body.input] if isinstance(body.input, str) else body.input
    config = runtime.config
    if not texts or len(texts) > config.max_embedding_inputs:
        raise ApiError(
            400,
            f"input: expected 1 to {config.max_embedding_inputs} texts, got {len(texts)}",
            "invalid_input",
        )
    for i, text in enumerate(texts):
        if len(text) > config.max_input_chars:
            raise ApiError(
                400,
                f"input[{i}]: {len(text)} characters, this server accepts at most "
                f"{config.max_input_chars}; hint: shorten it",
                "input_too_long",
            )
    install = runtime.registry.resolve(who.tenant, body.model)
    model = await runtime.registry.model(install)
    require_affect(install, model)
    data, tokens = await affect_of(runtime, model, texts)
    stats = runtime.registry.stats_for(install)
    stats.requests += 1
    stats.last_used = time.time()
    runtime.metrics.add_tokens("embedding", tokens)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return JSONResponse({"object": "list", "data": data, "model": install.ref, "usage": usage})
