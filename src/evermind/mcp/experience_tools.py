"""The MCP experience tools: episodes, skills, schedules, audited runs and ``experience_train``.

Owns :class:`ExperienceSettings` (what the server gives the experience tools: the private
model, whether this tenant owns it, the run cap, the adaptation settings), :class:`ExperienceTools`
(the tool bodies over one :class:`~evermind.memory.experience.ExperienceStore`) and
:func:`register_experience_tools`. The tools are registered only when the server is opted in
(``ServerConfig.experience``: ``--experience`` or ``EVERMIND_EXPERIENCE=1``); their tenant is
the store namespace of the server they are registered on, so over HTTP it is the tenant the
bearer token chose, and no tool takes a tenant argument. ``experience_train`` is registered
only for the tenant that owns the private model. Native-only (imports the ``mcp`` SDK).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from evermind.agent.experience_train import describe, train_on_experience
from evermind.errors import EvermindError
from evermind.mcp.experience_render import (
    as_json,
    compiled_data,
    recorded_data,
    run_data,
    skill_data,
)
from evermind.memory import MemoryStore
from evermind.memory.experience import (
    FORGET_ALL_CONFIRM,
    ExperienceStore,
    cron_minutes,
)
from evermind.train.adapt import AdaptConfig

Id = Annotated[str, Field(min_length=1, max_length=64, description="An id from a list tool.")]
Limit = Annotated[int, Field(ge=1, le=500, description="How many at most, newest first.")]
Steps = Annotated[
    list[dict[str, Any]],
    Field(
        min_length=1,
        description=(
            "The steps in order, each {action, args, result, irreversible}: action the tool or "
            "command run, args its arguments (an object), result what came back, irreversible "
            "true when it cannot be undone (a payment, a deletion, a sent message)."
        ),
    ),
]
Params = Annotated[
    dict[str, Any] | None,
    Field(description="Parameter values by name (skill_get lists them); secrets are required."),
]

READ_TOOLS = (
    "experience_info",
    "episode_list",
    "episode_get",
    "skill_preview",
    "skill_list",
    "skill_get",
    "skills_due",
    "run_list",
    "run_get",
)
WRITE_TOOLS = (
    "experience_forget_all",
    "episode_save",
    "episode_forget",
    "skill_compile",
    "skill_forget",
    "skill_schedule",
    "run_start",
    "run_step",
    "run_finish",
)
TRAIN_TOOL = "experience_train"

DESCRIPTIONS = {
    "experience_info": "Counts of this user's recorded experience: episodes, skills, "
    "schedules, runs by status, steps learned and still to learn by the private model.",
    "experience_forget_all": "Delete ALL of this user's experience (episodes, skills, "
    f"schedules, runs, audit). Only when the user asks; confirm must be {FORGET_ALL_CONFIRM!r}.",
    "episode_save": "Record a demonstration: a title and the steps done, in order. Call this "
    "after completing a task the user may want repeated. Secrets (keys, tokens, passwords) "
    "are removed before anything is stored.",
    "episode_list": "List recorded episodes, newest first (id, title, step count).",
    "episode_get": "Return one episode with all its steps.",
    "episode_forget": "Delete one episode (skills compiled from it keep working).",
    "skill_preview": "Show what skill_compile would make of an episode: its parameters (typed "
    "values, secrets as required parameters) and which steps need approval. Writes nothing.",
    "skill_compile": "Compile an episode into a reusable skill: every literal value becomes a "
    "named, typed parameter (the recorded value its default); secrets become required "
    "parameters and are never stored; irreversible steps need approval when run.",
    "skill_list": "List the skills, newest first, with their parameters and schedules.",
    "skill_get": "Return one skill: parameters, steps, schedule.",
    "skill_forget": "Delete one skill and its schedule.",
    "skill_schedule": "Make a skill due every N minutes (every_minutes, or cron '*/N * * * *', "
    "'@hourly', '@daily'); cancel=true removes the schedule. skills_due lists what is due.",
    "skills_due": "List the scheduled skills due now (or at 'now', epoch seconds), with the "
    "required parameters a run must be given.",
    "run_start": "Start a run of a skill with its parameters (returns the plan to carry out), "
    "or, with only a title, a run of free steps. Record each step with run_step.",
    "run_step": "Record the run's next step once done: its result and ok. In a skill run the "
    "step is the plan's next; in a free run pass action and args. An irreversible step is "
    "refused unless approved=true, which you may pass only after the user approved it.",
    "run_finish": "Finish a run as succeeded, failed or cancelled, with an optional note.",
    "run_list": "List runs, newest first (the newest runs are kept; older are pruned).",
    "run_get": "Return one run: its plan, recorded steps and full timestamped audit trail.",
    TRAIN_TOOL: "Adapt the private model on the steps it has not learned yet. Keeps the "
    "previous model as <model>.prev when the adapted one is better on held-out steps; rolls "
    "back (changes nothing) when it is not, and says why. Slow (CPU training): only when the "
    "user asks.",
}


@dataclass(frozen=True)
class ExperienceSettings:
    """What one server's experience tools are given.

    Attributes:
        model_file: The private ``.evermind`` package ``experience_train`` adapts (the
            server's ``--model``); None: training answers that it needs one.
        owns_model: This server's tenant owns the private model; when False (another tenant
            over HTTP) ``experience_train`` is not registered.
        train: The adaptation settings (LoRA rank, steps, held-out share, ``min_improvement``,
            ``max_forgetting``, …).
        corpus: Rehearsal text (None: the embedded default corpus).
        clock: Epoch seconds (injectable for tests).
    """

    model_file: Path | None = None
    owns_model: bool = True
    train: AdaptConfig = field(default_factory=lambda: AdaptConfig(steps=40))
    corpus: str | None = None
    clock: Callable[[], float] = time.time


class ExperienceTools:
    """The bodies of the experience tools over one tenant's experience store.

    Args:
        store: The memory store whose file and namespace the experience lives in.
        settings: The private model and training settings.
        max_runs: Runs kept for this tenant.

    Raises:
        StorageError: The experience tables cannot be opened.
    """

    def __init__(self, store: MemoryStore, settings: ExperienceSettings, max_runs: int) -> None:
        path = getattr(store.backend, "path", None)
        self.settings = settings
        self.experience = ExperienceStore(
            path if isinstance(path, str) else ":memory:",
            store.backend.namespace,
            max_runs=max_runs,
            clock=settings.clock,
        )
        self._training = asyncio.Lock()

    async def _call(self, tool: str, function: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        try:
            return await asyncio.to_thread(function, *args, **kw)
        except EvermindError as err:
            raise ToolError(f"{tool}: {err}") from err

    async def info(self) -> str:
        """Counts of this tenant's experience."""
        info = await self._call("experience_info", self.experience.info)
        model = self.settings.model_file
        info["private_model"] = str(model) if model and self.settings.owns_model else None
        return as_json(info)

    async def forget_all(self, confirm: str) -> str:
        """Deletes all of this tenant's experience when ``confirm`` is the exact phrase."""
        deleted = await self._call("experience_forget_all", self.experience.forget_all, confirm)
        return as_json({"deleted": deleted})

    async def episode_save(self, title: str, steps: Steps) -> str:
        """Records an episode."""
        episode = await self._call("episode_save", self.experience.save_episode, title, steps)
        return as_json(
            {
                "id": episode.id,
                "title": episode.title,
                "steps": len(episode.steps),
                "secrets_removed": episode.secrets_removed,
            }
        )

    async def episode_list(self, limit: Limit = 20) -> str:
        """The newest episodes."""
        found = await self._call("episode_list", self.experience.episodes, limit)
        return as_json(
            [
                {"id": e.id, "title": e.title, "created_at": e.created_at, "steps": n}
                for e, n in found
            ]
        )

    async def episode_get(self, episode_id: Id) -> str:
        """One episode with its steps."""
        e = await self._call("episode_get", self.experience.episode, episode_id)
        steps = [recorded_data(s) for s in e.steps]
        return as_json({"id": e.id, "title": e.title, "created_at": e.created_at, "steps": steps})

    async def episode_forget(self, episode_id: Id) -> str:
        """Deletes one episode."""
        gone = await self._call("episode_forget", self.experience.forget_episode, episode_id)
        return f"forgot episode {episode_id!r}" if gone else f"no episode {episode_id!r}"

    async def skill_preview(self, episode_id: Id) -> str:
        """What compiling the episode would give."""
        compiled = await self._call("skill_preview", self.experience.preview_skill, episode_id)
        return as_json(compiled_data(compiled))

    async def skill_compile(self, episode_id: Id, name: str, description: str = "") -> str:
        """Compiles and stores a skill."""
        skill = await self._call(
            "skill_compile", self.experience.compile_skill, episode_id, name, description
        )
        return as_json(skill_data(skill))

    async def skill_list(self) -> str:
        """Every skill."""
        return as_json(
            [skill_data(s) for s in await self._call("skill_list", self.experience.skills)]
        )

    async def skill_get(self, skill_id: Id) -> str:
        """One skill."""
        return as_json(skill_data(await self._call("skill_get", self.experience.skill, skill_id)))

    async def skill_forget(self, skill_id: Id) -> str:
        """Deletes one skill."""
        gone = await self._call("skill_forget", self.experience.forget_skill, skill_id)
        return f"forgot skill {skill_id!r}" if gone else f"no skill {skill_id!r}"

    async def skill_schedule(
        self,
        skill_id: Id,
        every_minutes: Annotated[int | None, Field(ge=1, le=525_600)] = None,
        cron: str | None = None,
        cancel: bool = False,
    ) -> str:
        """Schedules (or with ``cancel`` unschedules) a skill."""
        if cancel:
            await self._call("skill_schedule", self.experience.schedule, skill_id, None)
            return f"skill {skill_id!r} is no longer scheduled"
        if (every_minutes is None) == (cron is None):
            raise ToolError(
                "skill_schedule: expected exactly one of every_minutes or cron; hint: "
                "every_minutes=60, or cron='*/15 * * * *', or cancel=true"
            )
        minutes = every_minutes
        if cron is not None:
            minutes = await self._call("skill_schedule", cron_minutes, cron)
        schedule = await self._call("skill_schedule", self.experience.schedule, skill_id, minutes)
        return as_json(
            {"skill_id": skill_id, "every_minutes": minutes, "next_due": schedule.next_due}
        )

    async def skills_due(self, now: float | None = None) -> str:
        """The skills due at ``now`` (epoch seconds; default the server's clock)."""
        due = await self._call("skills_due", self.experience.due, now)
        return as_json(
            [
                {
                    "skill_id": s.id,
                    "name": s.name,
                    "next_due": s.schedule.next_due if s.schedule else None,
                    "required_params": [p.name for p in s.parameters if p.required],
                }
                for s in due
            ]
        )

    async def run_start(
        self, skill_id: str | None = None, title: str | None = None, params: Params = None
    ) -> str:
        """Starts a run; returns its id and plan."""
        run = await self._call("run_start", self.experience.start_run, skill_id, title, params)
        return as_json(run_data(run))

    async def run_step(
        self,
        run_id: Id,
        result: str = "",
        action: str | None = None,
        args: dict[str, Any] | None = None,
        ok: bool = True,
        irreversible: bool = False,
        approved: bool = False,
    ) -> str:
        """Records the run's next step."""
        step = await self._call(
            "run_step",
            self.experience.record_step,
            run_id,
            result,
            action=action,
            args=args,
            ok=ok,
            irreversible=irreversible,
            approved=approved,
        )
        return as_json({"run_id": run_id} | recorded_data(step))

    async def run_finish(
        self,
        run_id: Id,
        status: Literal["succeeded", "failed", "cancelled"],
        note: str = "",
    ) -> str:
        """Finishes a run."""
        run = await self._call("run_finish", self.experience.finish_run, run_id, status, note)
        return as_json(run_data(run, full=False) | {"steps": len(run.steps)})

    async def run_list(
        self,
        limit: Limit = 20,
        status: Literal["running", "succeeded", "failed", "cancelled"] | None = None,
    ) -> str:
        """The newest runs."""
        runs = await self._call("run_list", self.experience.runs, limit, status)
        return as_json([run_data(r, full=False) for r in runs])

    async def run_get(self, run_id: Id) -> str:
        """One run with its audit trail."""
        return as_json(run_data(await self._call("run_get", self.experience.run, run_id)))

    async def train(
        self,
        min_improvement: Annotated[
            float | None,
            Field(ge=0.0, description="Demand more gain than the server's (never less)."),
        ] = None,
    ) -> str:
        """Adapts the private model on unlearned steps; accepted or rolled back."""
        model = self.settings.model_file
        if model is None:
            raise ToolError(
                "experience_train: training needs the private model; nothing was changed. "
                "hint: start the server with --model x.evermind"
            )
        config = self.settings.train
        if min_improvement is not None and min_improvement > config.min_improvement:
            config = replace(config, min_improvement=float(min_improvement))
        if self._training.locked():
            raise ToolError("experience_train: a training is already running; try again later")
        async with self._training:
            result = await self._call(
                TRAIN_TOOL,
                train_on_experience,
                self.experience,
                model,
                config,
                corpus=self.settings.corpus,
            )
        out = describe(result)
        if result.accepted:
            out["note"] = "this server keeps serving the model it loaded until it is restarted"
        return as_json(out)


def register_experience_tools(
    server: MCPServer[Any], tools: ExperienceTools, readonly: bool
) -> list[str]:
    """Adds the experience tools to ``server`` (the read tools only when ``readonly``).

    Returns:
        The names of the tools registered.
    """
    read = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    write = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
    destroy = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)
    table: list[tuple[str, Any, ToolAnnotations]] = [
        ("experience_info", tools.info, read),
        ("episode_list", tools.episode_list, read),
        ("episode_get", tools.episode_get, read),
        ("skill_preview", tools.skill_preview, read),
        ("skill_list", tools.skill_list, read),
        ("skill_get", tools.skill_get, read),
        ("skills_due", tools.skills_due, read),
        ("run_list", tools.run_list, read),
        ("run_get", tools.run_get, read),
    ]
    if not readonly:
        table += [
            ("experience_forget_all", tools.forget_all, destroy),
            ("episode_save", tools.episode_save, write),
            ("episode_forget", tools.episode_forget, destroy),
            ("skill_compile", tools.skill_compile, write),
            ("skill_forget", tools.skill_forget, destroy),
            ("skill_schedule", tools.skill_schedule, write),
            ("run_start", tools.run_start, write),
            ("run_step", tools.run_step, write),
            ("run_finish", tools.run_finish, write),
        ]
        if tools.settings.owns_model:
            table.append((TRAIN_TOOL, tools.train, write))
    for name, function, hints in table:
        server.add_tool(
            function,
            name=name,
            description=DESCRIPTIONS[name],
            annotations=hints,
            structured_output=False,
        )
    return [name for name, _, _ in table]


__all__ = [
    "DESCRIPTIONS",
    "READ_TOOLS",
    "TRAIN_TOOL",
    "WRITE_TOOLS",
    "ExperienceSettings",
    "ExperienceTools",
    "register_experience_tools",
]
