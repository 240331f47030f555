"""The Studio's affect-head RPC handlers: fit the limbic classifier head in the tab.

``affect_train`` takes pasted ``label<TAB>text`` lines, embeds them with the tab's model
(the raw pooled vector, :meth:`Session.pooled`), fits the head with the pure-Python
optimiser of :mod:`evermind.train.affect_fit` (the numpy fit's twin: a few hundred texts)
and reports the held-out accuracy and macro-F1; ``export_package`` then writes it as
``affect.safetensors``. ``affect_scores`` classifies texts with it, ``affect_info`` says what
is fitted, ``affect_clear`` drops it. The head belongs to the weights it was fitted on: once
the model changes (training, the embedder phase, another package) it is no longer exported.
Registered on this module's ``router``, which :mod:`evermind.studio.api` merges. Browser-safe.
"""

from __future__ import annotations

import time
from typing import Any

from evermind.errors import ConfigError
from evermind.package.affect import affect_scores as head_scores
from evermind.studio.rpc import Router, session
from evermind.train.affect_fit import (
    AffectConfig,
    check_examples,
    fit_affect_features,
    parse_labelled_lines,
)

router = Router()
handler = router.handler

#: Most examples the tab fits on (the pure-Python fit is sized for a few hundred).
MAX_AFFECT_EXAMPLES = 2000


@handler
async def affect_train(
    lines: str,
    labels: list[str] | None = None,
    l2: float = 0.1,
    holdout: float = 0.2,
    seed: int = 0,
) -> dict[str, Any]:
    """Fits the affect head on ``label<TAB>text`` lines; returns its held-out scores
    (``accuracy``, ``macro_f1``, ``train_accuracy``), ``labels``, ``train``, ``held_out``."""
    texts, found = parse_labelled_lines(str(lines))
    if len(texts) > MAX_AFFECT_EXAMPLES:
        raise ConfigError(
            f"affect_train: {len(texts)} examples, the tab fits at most {MAX_AFFECT_EXAMPLES}; "
            "hint: use `evermind train-affect` for more"
        )
    config = AffectConfig(l2=float(l2), holdout=float(holdout), seed=int(seed))
    known = None if labels is None else [str(x) for x in labels]
    s = session()
    start = time.perf_counter()
    # Check the labels before the model runs: a typo fails at once, not after embedding.
    check_examples(texts, found, known, config.min_per_label)
    vectors = await s.pooled(texts)
    fitted = time.perf_counter()
    fit = fit_affect_features(vectors, found, texts, known, config, source="studio paste")
    s.affect = (fit.head, s.embedder_fingerprint)
    return {
        **fit.summary(),
        "embed_s": round(fitted - start, 2),
        "fit_s": round(time.perf_counter() - fitted, 2),
    }


@handler
async def affect_scores(texts: list[str]) -> dict[str, Any]:
    """Label -> probability of each text, and its top label."""
    head = session().current_affect()
    if head is None:
        raise ConfigError("no affect head for this model; train one with affect_train first")
    vectors = await session().pooled([str(t) for t in texts])
    rows = [head_scores(head, v) for v in vectors]
    return {
        "data": [{"label": max(r, key=r.__getitem__), "scores": r} for r in rows],
        "labels": list(head.labels),
    }


@handler
async def affect_info() -> dict[str, Any]:
    """The fitted head's description (labels, metrics, trained_on) and whether the export
    will carry it (``current``: fitted on the model in the tab now)."""
    s = session()
    if s.affect is None:
        return {"head": None, "current": False}
    return {"head": s.affect[0].describe(), "current": s.current_affect() is not None}


@handler
async def affect_clear() -> dict[str, Any]:
    """Drops the affect head (the next export has none)."""
    session().affect = None
    return {"head": None, "current": False}
