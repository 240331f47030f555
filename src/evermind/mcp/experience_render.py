"""How the experience tools answer: records of ``evermind.memory.experience`` as JSON data.

Owns the plain-data form of each record (a step, a recorded step, a compiled skill, a stored
skill, a run with its plan, steps and audit trail) and :func:`as_json`, the text every
experience tool returns. Secrets never reach here: the records carry markers and ``***``.
Native-only (the records come from the SQLite experience store).
"""

from __future__ import annotations

import json
from typing import Any

from evermind.memory.experience_db import RecordedStep, Run, Skill
from evermind.memory.skills import CompiledSkill, Step


def as_json(data: Any) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False, default=str)


def step_data(step: Step) -> dict[str, Any]:
    return {"action": step.action, "args": step.args, "irreversible": step.irreversible}


def recorded_data(step: RecordedStep) -> dict[str, Any]:
    return step_data(step.step) | {
        "step": step.index + 1,
        "result": step.step.result,
        "ok": step.ok,
        "approved": step.approved,
        "at": step.at,
        "learned": step.learned,
    }


def compiled_data(skill: CompiledSkill) -> dict[str, Any]:
    return {
        "parameters": [p.to_dict() for p in skill.parameters],
        "steps": [step_data(s) for s in skill.steps],
        "needs_approval": skill.irreversible_steps,
    }


def skill_data(skill: Skill) -> dict[str, Any]:
    schedule = skill.schedule
    return {
        "id": skill.id,
        "name": skill.name,
        "description": skill.description,
        "episode_id": skill.episode_id,
        "created_at": skill.created_at,
        "schedule": None
        if schedule is None
        else {
            "every_minutes": schedule.every_minutes,
            "next_due": schedule.next_due,
            "last_run": schedule.last_run,
        },
    } | compiled_data(CompiledSkill(skill.parameters, skill.steps))


def run_data(run: Run, full: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": run.id,
        "skill_id": run.skill_id,
        "title": run.title,
        "status": run.status,
        "params": run.params,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "note": run.note,
    }
    if full:
        out["plan"] = [step_data(s) | {"step": n} for n, s in enumerate(run.plan, start=1)]
        out["steps"] = [recorded_data(s) for s in run.steps]
        out["audit"] = [{"seq": a.seq, "at": a.at, "event": a.event} | a.detail for a in run.audit]
    return out


__all__ = [
    "as_json",
    "compiled_data",
    "recorded_data",
    "run_data",
    "skill_data",
    "step_data",
]
