"""The experience store's value rules and tables, without a server.

The secret detector (what it flags and what it leaves), skill compilation (shared and
distinct parameters, nested arguments, secrets), parameter binding errors, the cron-like
schedule forms, and the store on real SQLite: namespaces apart, schedules moving on after a
run, the forget-all confirmation.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from evermind.errors import Conflict, InputError, NotFound
from evermind.memory.experience import FORGET_ALL_CONFIRM, ExperienceStore, cron_minutes
from evermind.memory.sanitize import is_secret, is_secret_name, redact_secrets
from evermind.memory.skills import (
    PARAM_MARK,
    SECRET_MARK,
    Step,
    bind_parameters,
    compile_skill,
    redact_args,
)

SECRETS = [
    ("sk-ant-api03-" + "a1B2c3D4" * 3, ""),
    ("ghp_" + "x" * 36, ""),
    ("AKIAIOSFODNN7EXAMPLE", ""),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXBhcnQ", ""),
    ("Bearer abcdefghijklmnop1234", ""),
    ("https://bob:hunter2@db.example/prod", ""),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", ""),
    ("Xk9pQ2mZ7vB4nR8sT1wY6uE3", ""),  # long and random-looking
    ("hunter2", "password"),
    ("abc", "apiKey"),
    ("abc", "GH_TOKEN"),
    (1234, "pin"),
]
NOT_SECRETS = [
    ("main", "branch"),
    ("hello world", ""),
    ("0123456789abcdef0123456789abcdef01234567", "commit"),  # a git hash: hex, low entropy
    ("/usr/local/lib/python3.11/site-packages", "path"),
    (512, "max_tokens"),
    ("Ada", "author"),
    (True, "password_set"),
]


@pytest.mark.parametrize(("value", "name"), SECRETS)
def test_secrets_are_flagged(value: object, name: str) -> None:
    assert is_secret(value, name)


@pytest.mark.parametrize(("value", "name"), NOT_SECRETS)
def test_ordinary_values_are_not(value: object, name: str) -> None:
    assert not is_secret(value, name)


def test_redaction_of_free_text_and_secret_names() -> None:
    text, count = redact_secrets(
        "login password=hunter2, key sk-abcdefghijklmnopqrstu at https://u:pw1@h/x; fine"
    )
    assert text == "login password=***, key *** at https://***@h/x; fine" and count == 3
    assert is_secret_name("client_secret") and is_secret_name("X-Api-Key")
    assert is_secret_name("token") and not is_secret_name("max_tokens")


def test_compile_shares_equal_values_and_splits_different_ones() -> None:
    steps = [
        Step("git.clone", {"repo": "evermind", "depth": 1}),
        Step("git.push", {"repo": "evermind", "branch": "main", "force": False}),
        Step("git.tag", {"repo": "other", "tags": ["v1", "v2"], "meta": {"rate": 0.5}}),
        Step("deploy", {"token": "t0ps3cr3t"}, irreversible=True),
    ]
    redacted = [Step(s.action, redact_args(s.args)[0], "", s.irreversible) for s in steps]
    skill = compile_skill(redacted)
    params = {p.name: p for p in skill.parameters}
    assert params["repo"].steps == (1, 2) and params["repo"].default == "evermind"
    assert params["repo_2"].default == "other" and params["repo_2"].steps == (3,)
    assert params["depth"].type == "integer" and params["force"].type == "boolean"
    assert params["meta_rate"].type == "number" and params["tags_1"].default == "v2"
    assert params["token"].type == "secret" and params["token"].required
    assert params["token"].default is None
    assert skill.steps[3].args == {"token": {PARAM_MARK: "token"}}
    assert redacted[3].args == {"token": {SECRET_MARK: "token"}}
    assert skill.irreversible_steps == [4]
    with pytest.raises(InputError, match="no steps"):
        compile_skill([])
    with pytest.raises(InputError, match="JSON values"):
        redact_args({"when": object()})


def test_binding_refuses_unknown_mistyped_and_missing() -> None:
    params = compile_skill([Step("a", {"n": 2, "x": 1.5, "pw": {SECRET_MARK: "pw"}})]).parameters
    assert bind_parameters(params, {"pw": "p", "x": 3}) == {"n": 2, "x": 3, "pw": "p"}
    with pytest.raises(InputError, match="unknown 'nope'"):
        bind_parameters(params, {"pw": "p", "nope": 1})
    with pytest.raises(InputError, match="'n': expected type integer"):
        bind_parameters(params, {"pw": "p", "n": True})
    with pytest.raises(InputError, match="missing required 'pw'"):
        bind_parameters(params, {})


def test_cron_forms() -> None:
    assert cron_minutes("*/15 * * * *") == 15 and cron_minutes("@hourly") == 60
    assert cron_minutes(" @daily ") == 1440 and cron_minutes("* * * * *") == 1
    for bad in ("0 9 * * 1", "*/0 * * * *", "*/x * * * *", "every hour"):
        with pytest.raises(InputError, match="every-N-minutes"):
            cron_minutes(bad)


def test_store_namespaces_schedules_and_forget_all(tmp_path: Path) -> None:
    now = [1_000_000.0]
    path = tmp_path / "memory.db"
    alice = ExperienceStore(path, "alice/default", clock=lambda: now[0])
    bob = ExperienceStore(path, "bob/default", clock=lambda: now[0])
    try:
        episode = alice.save_episode("backup", [{"action": "tar", "args": {"dir": "/srv"}}])
        skill = alice.compile_skill(episode.id, "backup")
        with pytest.raises(NotFound):
            bob.episode(episode.id)
        with pytest.raises(NotFound):
            bob.start_run(skill.id)
        assert bob.info()["episodes"] == 0 and alice.info()["episodes"] == 1

        alice.schedule(skill.id, 10)
        assert alice.due(now[0] + 599) == [] and [s.id for s in alice.due(now[0] + 600)] == [
            skill.id
        ]
        now[0] += 900
        alice.start_run(skill.id)  # a run moves the schedule on from now
        assert alice.due(now[0] + 599) == [] and alice.due(now[0] + 600)
        assert bob.due(now[0] + 10_000) == []

        with pytest.raises(InputError, match="nothing deleted"):
            alice.forget_all("yes please")
        deleted = alice.forget_all(FORGET_ALL_CONFIRM)
        assert deleted["episodes"] == deleted["skills"] == deleted["runs"] == 1
        assert alice.info()["steps"] == 0
    finally:
        alice.close()
        bob.close()


def test_concurrent_steps_of_one_run_never_share_a_place(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    stores = [ExperienceStore(path, "t/d") for _ in range(3)]
    run = stores[0].start_run(title="busy")
    outcomes: list[str] = []

    def worker(store: ExperienceStore, n: int) -> None:
        for k in range(6):
            try:
                store.record_step(run.id, f"{n}.{k}", action="work")
                outcomes.append("ok")
            except Conflict:
                outcomes.append("conflict")

    threads = [threading.Thread(target=worker, args=(s, n)) for n, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    recorded = stores[1].run(run.id)
    assert [s.index for s in recorded.steps] == list(range(outcomes.count("ok")))
    assert [a.event for a in recorded.audit].count("step") == outcomes.count("ok")
    assert len(outcomes) == 18 and outcomes.count("ok") >= 6
