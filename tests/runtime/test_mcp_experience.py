"""The experience tools over MCP with the official SDK client.

The full cycle in process (the SDK's in-memory transport, a real SQLite memory file, a real
tiny `.evermind` package): episode → skill (typed parameters, a secret never stored) → run
(audit trail, an irreversible step refused until approved) → ``experience_train`` accepted
(held-out loss falls, ``<model>.prev`` holds the old bytes) → a second train that cannot
improve enough rolls back (model bytes unchanged). Then: the tools are absent without the
opt-in, the run cap prunes the oldest runs, and over a real ``evermind mcp --http`` one
tenant never sees another's experience and only the model's owner may train it.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from evermind.errors import ConfigError
from evermind.mcp.config import ServerConfig, experience_enabled
from evermind.mcp.experience_tools import READ_TOOLS, TRAIN_TOOL, WRITE_TOOLS, ExperienceSettings
from evermind.mcp.inprocess import memory_client
from evermind.memory import MemoryStore
from evermind.train.adapt import AdaptConfig
from tests import procs
from tests.factories import TEXT, tiny_package
from tests.runtime.test_mcp_server import free_port, http_client, stdio_client, wait_healthy

ALL_EXPERIENCE = {*READ_TOOLS, *WRITE_TOOLS, TRAIN_TOOL}
API_KEY = "sk-" + "Q7x" * 8  # the shape of a provider key: must never reach the file
PASSWORD = "correct horse battery staple"
#: Tiny training: a few optimizer steps on a 16-wide model take well under a second.
TRAIN = AdaptConfig(steps=12, batch_size=4, seq_len=48, lr=1e-2, held_out=0.3, rehearsal=1.0)

DEPLOY_STEPS: list[dict[str, Any]] = [
    {"action": "git.push", "args": {"branch": "main", "remote": "origin"}, "result": "pushed"},
    {
        "action": "http.post",
        "args": {"url": "https://deploy.example/run", "api_key": API_KEY, "replicas": 3},
        "result": f"deployed with {API_KEY}",
        "irreversible": True,
    },
    {"action": "db.login", "args": {"user": "ops", "password": PASSWORD}, "result": "ok"},
    {"action": "slack.send", "args": {"channel": "ops", "dry_run": False}, "result": "sent"},
]


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


async def call(client: Client, tool: str, **args: Any) -> Any:
    """Calls ``tool``; asserts it succeeded; returns its JSON answer (or text)."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, f"{tool}: {text_of(result)}"
    text = text_of(result)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


async def refused(client: Client, tool: str, **args: Any) -> str:
    """Calls ``tool``; asserts it came back as a tool error; returns the message."""
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool} should have failed: {text_of(result)}"
    return text_of(result)


@contextlib.asynccontextmanager
async def experience_client(
    memory_file: Path,
    namespace: str = "default/default",
    config: ServerConfig | None = None,
    settings: ExperienceSettings | None = None,
) -> AsyncIterator[Client]:
    store = MemoryStore(memory_file, namespace=namespace)
    try:
        chosen = config or ServerConfig(experience=True)
        async with memory_client(store, chosen, None, settings) as client:
            yield client
    finally:
        await store.close()


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "private.evermind"
    path.write_bytes(tiny_package("private", "1.0.0", steps=30))
    return path


def experience_rows(memory_file: Path) -> str:
    """Every row of every experience table, as one string (what is on disk)."""
    with contextlib.closing(sqlite3.connect(memory_file)) as conn:
        tables = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if r[0].startswith("experience_")
        ]
        return "\n".join(str(conn.execute(f"SELECT * FROM {t}").fetchall()) for t in tables)


def test_episode_skill_run_train_and_rollback_cycle(tmp_path: Path, model_file: Path) -> None:
    memory_file = tmp_path / "memory.db"
    settings = ExperienceSettings(model_file=model_file, train=TRAIN, corpus=TEXT)

    async def scenario() -> None:
        async with experience_client(memory_file, settings=settings) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names >= ALL_EXPERIENCE and "memory_recall" in names
            assert "need at least 2" in await refused(client, TRAIN_TOOL)  # no steps yet

            # Episode: secrets are removed before anything is written.
            episode = await call(client, "episode_save", title="Deploy", steps=DEPLOY_STEPS)
            assert episode["steps"] == 4 and episode["secrets_removed"] == 3
            shown = await call(client, "episode_get", episode_id=episode["id"])
            assert shown["steps"][1]["args"]["api_key"] == {"$secret": "api_key"}
            assert shown["steps"][1]["result"] == "deployed with ***"
            assert (await call(client, "episode_list"))[0]["id"] == episode["id"]

            # Skill: typed parameters, secrets required and without a default.
            preview = await call(client, "skill_preview", episode_id=episode["id"])
            skill = await call(client, "skill_compile", episode_id=episode["id"], name="deploy")
            assert preview["parameters"] == skill["parameters"]
            params = {p["name"]: p for p in skill["parameters"]}
            assert params["replicas"] == {
                "name": "replicas", "type": "integer", "default": 3, "required": False,
                "steps": [2],
            }  # fmt: skip
            assert params["branch"]["type"] == "string" and params["branch"]["default"] == "main"
            assert params["dry_run"]["type"] == "boolean"
            assert params["api_key"]["type"] == "secret" and params["api_key"]["required"]
            assert params["password"]["default"] is None and params["password"]["required"]
            assert skill["needs_approval"] == [2]

            # Run: bad input is refused clearly.
            assert "not found" in await refused(client, "run_start", skill_id="skill-nope")
            missing = await refused(client, "run_start", skill_id=skill["id"], params={})
            assert "missing required 'api_key', 'password'" in missing
            typed = await refused(
                client, "run_start", skill_id=skill["id"],
                params={"api_key": "k", "password": "p", "replicas": "many"},
            )  # fmt: skip
            assert "'replicas': expected type integer" in typed
            run = await call(
                client, "run_start", skill_id=skill["id"],
                params={"api_key": "sk-" + "R4nd0m" * 4, "password": "s3cret!", "replicas": 5},
            )  # fmt: skip
            assert run["params"]["api_key"] == "***" and run["params"]["replicas"] == 5
            assert run["plan"][1]["args"] == {
                "url": "https://deploy.example/run", "api_key": "***", "replicas": 5
            }  # fmt: skip
            await call(client, "run_step", run_id=run["id"], result="pushed")
            refusal = await refused(client, "run_step", run_id=run["id"], result="deployed")
            assert "irreversible and was not approved" in refusal
            step = await call(
                client, "run_step", run_id=run["id"], result="deployed", approved=True
            )
            assert step["step"] == 2 and step["approved"] and step["irreversible"]
            early = await refused(client, "run_finish", run_id=run["id"], status="succeeded")
            assert "2 of 4 planned steps" in early
            await call(client, "run_step", run_id=run["id"], result="logged in")
            await call(client, "run_step", run_id=run["id"], result="sent")
            await call(client, "run_finish", run_id=run["id"], status="succeeded")
            trail = await call(client, "run_get", run_id=run["id"])
            events = [a["event"] for a in trail["audit"]]
            assert events == ["started", "step", "refused", "step", "step", "step", "finished"]
            times = [a["at"] for a in trail["audit"]]
            assert times == sorted(times) and all(isinstance(t, float) for t in times)
            assert "is succeeded" in await refused(client, "run_step", run_id=run["id"])

            # Schedule: due after its interval, not before.
            sched = await call(client, "skill_schedule", skill_id=skill["id"], cron="*/30 * * * *")
            assert sched["every_minutes"] == 30
            due_at = sched["next_due"]
            assert await call(client, "skills_due", now=due_at - 60) == []
            due = await call(client, "skills_due", now=due_at + 1)
            assert [d["skill_id"] for d in due] == [skill["id"]]
            assert due[0]["required_params"] == ["api_key", "password"]
            assert "every-N-minutes" in await refused(
                client, "skill_schedule", skill_id=skill["id"], cron="0 9 * * 1"
            )

            # Train: accepted, the previous bytes kept as <model>.prev.
            before = model_file.read_bytes()
            info = await call(client, "experience_info")
            assert info["steps_to_learn"] == 8 and info["private_model"] == str(model_file)
            trained = await call(client, TRAIN_TOOL)
            assert trained["outcome"] == "accepted", trained
            assert trained["held_out_loss_after"] < trained["held_out_loss_before"]
            prev = model_file.with_name(model_file.name + ".prev")
            assert prev.read_bytes() == before and model_file.read_bytes() != before
            assert (await call(client, "experience_info"))["steps_to_learn"] == 0

            # A free run gives new steps; a train that must gain 100 nats/token rolls back.
            free = await call(client, "run_start", title="Rotate logs")
            for action in ("logs.rotate", "logs.compress", "logs.upload"):
                await call(client, "run_step", run_id=free["id"], action=action, result="done")
            await call(client, "run_finish", run_id=free["id"], status="succeeded")
            adapted, kept = model_file.read_bytes(), prev.read_bytes()
            rolled = await call(client, TRAIN_TOOL, min_improvement=100.0)
            assert rolled["outcome"] == "rolled back" and not rolled["accepted"], rolled
            assert "does not beat" in rolled["reason"]
            assert rolled["held_out_loss_after"] is not None
            assert model_file.read_bytes() == adapted and prev.read_bytes() == kept
            assert (await call(client, "experience_info"))["steps_to_learn"] == 3

            wrong = await refused(client, "experience_forget_all", confirm="yes")
            assert "nothing deleted" in wrong
            assert (await call(client, "experience_info"))["episodes"] == 1

        stored = experience_rows(memory_file)
        assert API_KEY not in stored and PASSWORD not in stored and "s3cret!" not in stored
        assert "R4nd0m" not in stored and "Deploy" in stored

        async with experience_client(memory_file, settings=settings) as client:
            gone = await call(client, "experience_forget_all", confirm="forget all experience")
            assert gone["deleted"]["episodes"] == 1 and gone["deleted"]["runs"] == 2
            info = await call(client, "experience_info")
            assert info["episodes"] == info["runs"] == info["steps"] == 0

    anyio.run(scenario)


def test_training_without_a_model_or_with_too_few_steps_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with experience_client(tmp_path / "m.db") as client:
            assert "--model" in await refused(client, TRAIN_TOOL)
        settings = ExperienceSettings(model_file=tmp_path / "absent.evermind", train=TRAIN)
        async with experience_client(tmp_path / "m.db", settings=settings) as client:
            await call(client, "episode_save", title="one", steps=[{"action": "a"}])
            assert "need at least 2" in await refused(client, TRAIN_TOOL)

    anyio.run(scenario)


def test_tools_absent_without_the_opt_in_and_read_only_keeps_reads(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with experience_client(tmp_path / "m.db", config=ServerConfig()) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "memory_recall" in names and not names & ALL_EXPERIENCE
        readonly = ServerConfig(experience=True, readonly=True)
        async with experience_client(tmp_path / "m.db", config=readonly) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names & ALL_EXPERIENCE == set(READ_TOOLS)

    anyio.run(scenario)
    assert experience_enabled({"EVERMIND_EXPERIENCE": "1"})
    assert not experience_enabled({}) and not experience_enabled({"EVERMIND_EXPERIENCE": "0"})
    with pytest.raises(ConfigError, match="EVERMIND_EXPERIENCE"):
        experience_enabled({"EVERMIND_EXPERIENCE": "maybe"})


def test_only_the_newest_runs_are_kept(tmp_path: Path) -> None:
    config = ServerConfig(experience=True, max_runs=4)

    async def scenario() -> None:
        async with experience_client(tmp_path / "m.db", config=config) as client:
            ids = []
            for n in range(7):
                run = await call(client, "run_start", title=f"run {n}")
                await call(client, "run_step", run_id=run["id"], action="work", result=f"{n}")
                ids.append(run["id"])
            listed = [r["id"] for r in await call(client, "run_list", limit=50)]
            assert listed == ids[::-1][:4]
            assert "pruned" in await refused(client, "run_get", run_id=ids[0])
            info = await call(client, "experience_info")
            assert info["runs"] == 4 and info["steps"] == 4 and info["max_runs"] == 4

    anyio.run(scenario)
    assert ServerConfig().max_runs == 500
    with pytest.raises(ConfigError, match="max_runs"):
        ServerConfig(max_runs=0)


def test_http_tenants_never_see_each_others_experience(tmp_path: Path, model_file: Path) -> None:
    tokens = {name: secrets.token_urlsafe(24) for name in ("alice", "bob")}
    tokens_file = tmp_path / "tokens.txt"
    tokens_file.write_text(f"{tokens['alice']} alice write\n{tokens['bob']} bob write\n")
    port = free_port()
    command = [
        sys.executable,
        *("-m", "evermind.cli", "mcp", "--http", "--port", str(port), "--experience"),
        *("--tokens-file", str(tokens_file), "--memory-file", str(tmp_path / "memory.db")),
        *("--model", str(model_file), "--experience-owner", "alice"),
    ]
    log = (tmp_path / "server.log").open("wb")
    process = procs.popen(command, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    url = base + "/mcp"

    async def scenario() -> None:
        async with http_client(url, tokens["alice"]) as alice:
            names = {t.name for t in (await alice.list_tools()).tools}
            assert names >= ALL_EXPERIENCE
            episode = await call(alice, "episode_save", title="Alice's deploy", steps=DEPLOY_STEPS)
            skill = await call(alice, "skill_compile", episode_id=episode["id"], name="deploy")
            run = await call(alice, "run_start", title="Alice's run")
        async with http_client(url, tokens["bob"]) as bob:
            names = {t.name for t in (await bob.list_tools()).tools}
            assert (ALL_EXPERIENCE - {TRAIN_TOOL}) <= names and TRAIN_TOOL not in names
            assert await call(bob, "episode_list") == []
            assert await call(bob, "skill_list") == [] and await call(bob, "run_list") == []
            assert "not found" in await refused(bob, "episode_get", episode_id=episode["id"])
            assert "not found" in await refused(bob, "skill_get", skill_id=skill["id"])
            assert "not found" in await refused(bob, "run_get", run_id=run["id"])
            assert "not found" in await refused(
                bob, "run_step", run_id=run["id"], action="x", result="hijack"
            )
            await call(bob, "experience_forget_all", confirm="forget all experience")
            info = await call(bob, "experience_info")
            assert info["namespace"] == "bob/default" and info["private_model"] is None
        async with http_client(url, tokens["alice"]) as alice:
            info = await call(alice, "experience_info")
            assert info["namespace"] == "alice/default"
            assert info["episodes"] == 1 and info["skills"] == 1 and info["runs"] == 1

    try:
        wait_healthy(base, process)
        anyio.run(scenario)
    finally:
        procs.stop_group(process, grace_s=10)
        log.close()


def test_stdio_opt_in_by_environment_trains_with_the_default_settings(
    tmp_path: Path, model_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVERMIND_EXPERIENCE", "1")
    memory_file = tmp_path / "memory.db"

    async def scenario() -> None:
        async with stdio_client(memory_file, "--model", str(model_file)) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names >= ALL_EXPERIENCE
            await call(client, "episode_save", title="Deploy", steps=DEPLOY_STEPS)
            trained = await call(client, TRAIN_TOOL)
            assert trained["outcome"] in ("accepted", "rolled back"), trained
            assert trained["train_pairs"] + trained["held_out_pairs"] == 4
            prev = model_file.with_name(model_file.name + ".prev")
            assert prev.exists() == trained["accepted"]
        monkeypatch.setenv("EVERMIND_EXPERIENCE", "0")
        async with stdio_client(memory_file) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert not names & ALL_EXPERIENCE

    anyio.run(scenario)
