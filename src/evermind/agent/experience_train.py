"""Training the private model on experience: the steps it has not learned yet (native-only:
numpy through the LoRA adapter recipe).

Owns :func:`train_on_experience`, the body of the MCP tool ``experience_train``. It renders each
unlearned episode and run step of one namespace (``ExperienceStore.unlearned``) as a text pair —
the task and step number in the runtime's chat template, then the action, its arguments and
what came back — and hands them to :func:`evermind.train.adapt.adapt`, the adaptation recipe
(a LoRA adapter on the block projections, a held-out slice, rehearsal on the original corpus,
rollback). Nothing here trains by itself.

- **Accepted** (the held-out loss fell by ``min_improvement`` and the original corpus's loss
  rose by at most ``max_forgetting``): the merged package is written beside the model, the
  previous bytes are kept as ``<model>.prev`` (atomically), the candidate replaces the model
  by a rename, and the steps are marked learned.
- **Rolled back** (no gain, forgetting, divergence): nothing is written, no step is marked,
  and the result says why, with the held-out loss before and after.

The model file is re-read just before the swap; when another writer changed it during training
the candidate is dropped (a conflict) rather than overwriting their model.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evermind.agent.distillation import Pair
from evermind.errors import Conflict, InputError
from evermind.memory.experience import ExperienceStore, LearnableStep
from evermind.model.chat import render_chat
from evermind.train.adapt import AdaptConfig, AdaptResult, adapt

#: The suffix of the previous model kept when a training is accepted.
PREV_SUFFIX = ".prev"
#: The longest rendered step answer, in characters (a long tool output is cut).
MAX_ANSWER_CHARS = 600


@dataclass(frozen=True)
class ExperienceTrainResult:
    """What :func:`train_on_experience` did.

    Attributes:
        accepted: The adapted model replaced the served one.
        reason: Why, in words (the adaptation's reason).
        steps_used: Unlearned steps rendered as pairs (trained on and held out).
        steps_marked: Steps marked learned (0 when rolled back).
        model: The model file.
        previous: ``<model>.prev`` when accepted, else None.
        adaptation: The adaptation's result (held-out and original losses before/after, …).
    """

    accepted: bool
    reason: str
    steps_used: int
    steps_marked: int
    model: str
    previous: str | None
    adaptation: AdaptResult


def render_pair(step: LearnableStep) -> Pair:
    """One step as a training pair: the task and step in the chat template, then what was done."""
    prompt = render_chat([("user", f"Task: {step.task}. Step {step.index + 1}: what do you do?")])
    args = json.dumps(step.step.args, sort_keys=True, ensure_ascii=False)
    answer = f"{step.step.action} {args}"
    if step.step.result:
        answer += f" -> {step.step.result}"
    return Pair(
        prompt=prompt,
        answer=answer[:MAX_ANSWER_CHARS],
        tenant="",
        upstream="experience",
        model="",
        response_id=f"{step.owner}#{step.index}",
        created_at=0.0,
    )


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def train_on_experience(
    store: ExperienceStore,
    model_file: str | os.PathLike[str],
    config: AdaptConfig | None = None,
    *,
    corpus: str | None = None,
) -> ExperienceTrainResult:
    """Adapts ``model_file`` on ``store``'s unlearned steps; keeps or rolls back (module docstring).

    Args:
        store: The namespace's experience.
        model_file: The private ``.evermind`` package (replaced only when accepted).
        config: The adaptation settings (default :class:`~evermind.train.adapt.AdaptConfig`).
        corpus: Rehearsal text (None: the embedded default corpus).

    Raises:
        InputError: Fewer than two steps are unlearned (one to train on, one to hold out).
        Conflict: The model file changed while training; nothing was written.
        PackageError: The model file is not a valid package.
    """
    path = Path(model_file)
    steps = store.unlearned()
    if len(steps) < 2:
        raise InputError(
            f"experience_train: {len(steps)} step(s) not learned yet; need at least 2 (one to "
            "train on, one to hold out); hint: record episodes or runs first"
        )
    before = path.read_bytes()
    digest = hashlib.sha256(before).hexdigest()
    candidate = path.with_name(f".{path.name}.candidate-{os.getpid()}")
    result = adapt(before, [render_pair(s).text() for s in steps], config, corpus=corpus)
    if not result.accepted or result.package is None:
        return ExperienceTrainResult(False, result.reason, len(steps), 0, str(path), None, result)
    try:
        _write_atomic(candidate, result.package)
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise Conflict(
                f"experience_train: {path} changed while training; the adapted model was "
                "dropped and nothing was replaced; hint: run experience_train again"
            )
        previous = path.with_name(path.name + PREV_SUFFIX)
        _write_atomic(previous, before)
        os.replace(candidate, path)
    finally:
        candidate.unlink(missing_ok=True)
    marked = store.mark_learned(steps)
    return ExperienceTrainResult(
        True, result.reason, len(steps), marked, str(path), str(previous), result
    )


def describe(result: ExperienceTrainResult) -> dict[str, Any]:
    """The result as plain data (what the MCP tool answers)."""
    tuned = result.adaptation
    adapter = tuned.adapter
    return {
        "accepted": result.accepted,
        "outcome": "accepted" if result.accepted else "rolled back",
        "reason": result.reason,
        "held_out_loss_before": round(tuned.held_out_before, 4),
        "held_out_loss_after": None
        if tuned.held_out_after is None
        else round(tuned.held_out_after, 4),
        "steps_marked_learned": result.steps_marked,
        "original_loss_before": None
        if tuned.original_before is None
        else round(tuned.original_before, 4),
        "original_loss_after": None
        if tuned.original_after is None
        else round(tuned.original_after, 4),
        "method": "lora",
        "adapter_rank": None if adapter is None else adapter.rank,
        "adapter_params": None if adapter is None else adapter.n_params,
        "steps_used": result.steps_used,
        "train_pairs": tuned.train_texts,
        "held_out_pairs": tuned.held_out_texts,
        "optimizer_steps": tuned.steps,
        "model": result.model,
        "previous_model": result.previous,
        "version": tuned.version,
    }


__all__ = [
    "MAX_ANSWER_CHARS",
    "PREV_SUFFIX",
    "ExperienceTrainResult",
    "describe",
    "render_pair",
    "train_on_experience",
]
