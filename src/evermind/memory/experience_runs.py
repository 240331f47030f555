"""Audited runs of the experience store (native-only: sqlite3).

Owns :class:`RunLog`: a run of a skill (its parameters bound, its plan resolved, secrets shown
as ``***`` and never written) or of free steps, recorded step by step with a timestamped audit
trail (started, each step, each refusal of an unapproved irreversible step, finished), and the
cap: starting a run prunes the namespace's runs beyond ``max_runs`` with their steps and audit.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from evermind.errors import AccessError, Conflict, InputError, NotFound
from evermind.memory.experience_db import (
    RUN_STATUSES,
    AuditEvent,
    ExperienceDB,
    RecordedStep,
    Run,
    new_id,
    parse_step,
)
from evermind.memory.skills import Step, bind_parameters, redact_args, redact_text, resolve_steps


class RunLog(ExperienceDB):
    """Runs of one namespace: start, record each step, finish, list, read with the audit."""

    def start_run(
        self,
        skill_id: str | None = None,
        title: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Run:
        """Starts a run of ``skill_id`` with ``params`` (or, without a skill, of free steps).

        Secret parameters are checked and shown as ``***``; their values are never written.
        Starting a run prunes the namespace's runs beyond ``max_runs`` and moves the skill's
        schedule on.

        Raises:
            NotFound: The skill does not exist.
            InputError: A parameter is unknown, mistyped or missing; neither a skill nor a
                title was given.
        """
        plan: list[Step] = []
        shown: dict[str, Any] = {}
        if skill_id is not None:
            skill = self.skill(skill_id)
            bound = bind_parameters(skill.parameters, params)
            secret = {p.name for p in skill.parameters if p.type == "secret"}
            shown = {k: "***" if k in secret else v for k, v in bound.items()}
            plan = resolve_steps(skill.steps, skill.parameters, bound)
            title = title or skill.name
        elif params:
            raise InputError("run_start: params need a skill_id; hint: pass skill_id")
        if not title or not isinstance(title, str) or len(title) > 500:
            raise InputError(
                f"run_start: expected a skill_id or a title of 1-500 characters, got {title!r}"
            )
        run_id, now = new_id("run"), self.clock()
        plan_json = [
            {"action": s.action, "args": s.args, "irreversible": s.irreversible} for s in plan
        ]
        with self._tx() as conn:
            seq = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM experience_runs WHERE namespace = ?",
                (self.namespace,),
            ).fetchone()[0]
            conn.execute(
                "INSERT INTO experience_runs VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, NULL, '')",
                (
                    self.namespace,
                    run_id,
                    seq,
                    skill_id,
                    redact_text(title),
                    json.dumps(shown),
                    json.dumps(plan_json),
                    now,
                ),
            )
            self._audit(conn, run_id, "started", skill_id=skill_id, params=shown)
            if skill_id is not None:
                conn.execute(
                    "UPDATE experience_schedules SET last_run = ?, next_due = ? + every_minutes "
                    "* 60.0 WHERE namespace = ? AND skill_id = ?",
                    (now, now, self.namespace, skill_id),
                )
            self._prune(conn, seq)
        return self.run(run_id)

    def _prune(self, conn: sqlite3.Connection, newest: int) -> None:
        old = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM experience_runs WHERE namespace = ? AND seq <= ?",
                (self.namespace, newest - self.max_runs),
            )
        ]
        for run_id in old:
            for sql in (
                "DELETE FROM experience_runs WHERE namespace = ? AND id = ?",
                "DELETE FROM experience_audit WHERE namespace = ? AND run_id = ?",
            ):
                conn.execute(sql, (self.namespace, run_id))
            conn.execute(
                "DELETE FROM experience_steps WHERE namespace = ? AND owner = ?",
                (self.namespace, f"run:{run_id}"),
            )

    def _run_row(self, run_id: str) -> tuple[Any, ...]:
        rows = self._read(
            "SELECT id, skill_id, title, status, params, plan, started_at, finished_at, note "
            "FROM experience_runs WHERE namespace = ? AND id = ?",
            (run_id,),
        )
        if not rows:
            raise NotFound(
                f"run {run_id!r} not found (or pruned: the newest {self.max_runs} are kept); "
                "hint: run_list shows this tenant's runs"
            )
        return rows[0]

    def run(self, run_id: str) -> Run:
        """The run with its steps and audit trail.

        Raises:
            NotFound: No run of this namespace has the id (it may have been pruned).
        """
        r = self._run_row(run_id)
        plan = [Step(s["action"], s["args"], "", bool(s["irreversible"])) for s in json.loads(r[5])]
        audit = [
            AuditEvent(a[0], a[1], a[2], json.loads(a[3]))
            for a in self._read(
                "SELECT seq, at, event, detail FROM experience_audit WHERE namespace = ? AND "
                "run_id = ? ORDER BY seq",
                (run_id,),
            )
        ]
        return Run(
            r[0],
            r[1],
            r[2],
            r[3],
            json.loads(r[4]),
            plan,
            r[6],
            r[7],
            r[8],
            self._steps(f"run:{run_id}"),
            audit,
        )

    def runs(self, limit: int = 20, status: str | None = None) -> list[Run]:
        """The newest runs (without steps and audit), optionally of one status."""
        where, args = ("AND status = ? ", (status, limit)) if status else ("", (limit,))
        rows = self._read(
            f"SELECT id FROM experience_runs WHERE namespace = ? {where}ORDER BY seq DESC LIMIT ?",
            args,
        )
        out = []
        for (run_id,) in rows:
            r = self._run_row(run_id)
            out.append(Run(r[0], r[1], r[2], r[3], json.loads(r[4]), [], r[6], r[7], r[8]))
        return out

    def record_step(
        self,
        run_id: str,
        result: str = "",
        *,
        action: str | None = None,
        args: Mapping[str, Any] | None = None,
        ok: bool = True,
        irreversible: bool = False,
        approved: bool = False,
    ) -> RecordedStep:
        """Records the run's next step (a skill run: the next step of its plan).

        Raises:
            NotFound: The run does not exist.
            Conflict: The run is finished, or its plan has no step left.
            InputError: The step is malformed or is not the plan's next action.
            AccessError: The step is irreversible and ``approved`` is not true (the refusal
                is written to the audit trail; no step is recorded).
        """
        run = self.run(run_id)
        if run.status != "running":
            raise Conflict(f"run {run_id!r} is {run.status}; hint: start a new run with run_start")
        index = len(run.steps)
        step = self._next_step(run, result, action, args, irreversible)
        safe_args, _ = redact_args(step.args)
        step = Step(step.action, safe_args, redact_text(step.result), step.irreversible)
        if step.irreversible and approved is not True:
            with self._tx() as conn:
                self._audit(
                    conn,
                    run_id,
                    "refused",
                    step=index + 1,
                    action=step.action,
                    reason="irreversible step without approval",
                )
            raise AccessError(
                f"run {run_id!r} step {index + 1} ({step.action}) is irreversible and was not "
                "approved; nothing was recorded; hint: ask the user, then call run_step again "
                "with approved=true"
            )
        with self._tx() as conn:
            self._unchanged(conn, run_id, index)
            recorded = self._insert_step(conn, f"run:{run_id}", index, step, ok, approved)
            self._audit(
                conn,
                run_id,
                "step",
                step=index + 1,
                action=step.action,
                ok=ok,
                approved=approved,
                irreversible=step.irreversible,
            )
        return recorded

    def _unchanged(self, conn: sqlite3.Connection, run_id: str, index: int) -> None:
        """Refuses (inside the write) when another call recorded or finished the run meanwhile."""
        row = conn.execute(
            "SELECT status, (SELECT COUNT(*) FROM experience_steps WHERE namespace = ? AND "
            "owner = ?) FROM experience_runs WHERE namespace = ? AND id = ?",
            (self.namespace, f"run:{run_id}", self.namespace, run_id),
        ).fetchone()
        if row is None or row[0] != "running" or row[1] != index:
            raise Conflict(
                f"run {run_id!r} changed while step {index + 1} was recorded (another call "
                "recorded a step or finished it); nothing was recorded; hint: run_get, then retry"
            )

    @staticmethod
    def _next_step(
        run: Run,
        result: str,
        action: str | None,
        args: Mapping[str, Any] | None,
        irreversible: bool,
    ) -> Step:
        """The step ``run`` records next: its plan's next step, or the free step given."""
        index = len(run.steps)
        if run.skill_id is None:
            return parse_step(
                {"action": action, "args": args, "result": result, "irreversible": irreversible},
                f"run {run.id!r} step {index + 1}",
            )
        if index >= len(run.plan):
            raise Conflict(
                f"run {run.id!r}: all {len(run.plan)} planned steps are recorded; hint: call "
                "run_finish"
            )
        planned = run.plan[index]
        if action is not None and action != planned.action:
            raise InputError(
                f"run {run.id!r} step {index + 1}: the plan's action is {planned.action!r}, "
                f"got {action!r}; hint: follow the plan, or finish the run as failed"
            )
        return Step(planned.action, planned.args, result, planned.irreversible)

    def finish_run(self, run_id: str, status: str, note: str = "") -> Run:
        """Ends the run as ``succeeded``, ``failed`` or ``cancelled``.

        Raises:
            NotFound: The run does not exist.
            Conflict: It is already finished, or it would succeed with planned steps missing.
            InputError: ``status`` is not one of the three.
        """
        if status not in RUN_STATUSES:
            raise InputError(f"run_finish: status must be one of {RUN_STATUSES}, got {status!r}")
        run = self.run(run_id)
        if run.status != "running":
            raise Conflict(f"run {run_id!r} is already {run.status}")
        if status == "succeeded" and run.skill_id is not None and len(run.steps) < len(run.plan):
            raise Conflict(
                f"run {run_id!r}: {len(run.steps)} of {len(run.plan)} planned steps recorded, so "
                "it cannot have succeeded; hint: record the rest, or finish it as failed"
            )
        with self._tx() as conn:
            changed = conn.execute(
                "UPDATE experience_runs SET status = ?, finished_at = ?, note = ? WHERE "
                "namespace = ? AND id = ? AND status = 'running'",
                (status, self.clock(), redact_text(note), self.namespace, run_id),
            ).rowcount
            if changed == 0:
                raise Conflict(f"run {run_id!r} was finished by another call meanwhile")
            self._audit(conn, run_id, "finished", status=status, steps=len(run.steps))
        return self.run(run_id)


__all__ = ["RunLog"]
