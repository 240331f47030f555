"""Claude Code itself through the gateway: ``claude --print`` with ``ANTHROPIC_BASE_URL`` at
the runtime and the runtime token as ``ANTHROPIC_API_KEY``, the gateway's ``anthropic``
upstream the loopback Messages server of :mod:`tests.upstreams`.

Claude Code is an npm package (``@anthropic-ai/claude-code``) the project does not install:
the test runs where ``claude`` is on ``PATH`` or ``EVERMIND_CLAUDE_CODE`` names it, and is
skipped elsewhere (``npm install @anthropic-ai/claude-code`` in any folder, then
``EVERMIND_CLAUDE_CODE=<folder>/node_modules/.bin/claude``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from evermind.runtime.server import ServerThread
from tests.runtime.helpers import TOKEN_A, gateway_config
from tests.upstreams import AnthropicUpstream

CLAUDE = os.environ.get("EVERMIND_CLAUDE_CODE") or shutil.which("claude")
KEY = "sk-ant-loopback-claude-code"

pytestmark = pytest.mark.skipif(
    CLAUDE is None, reason="Claude Code is not installed (set EVERMIND_CLAUDE_CODE)"
)


@pytest.fixture(scope="module")
def upstream() -> Iterator[AnthropicUpstream]:
    with AnthropicUpstream(KEY) as running:
        yield running


def test_claude_code_runs_a_turn_through_the_gateway(
    upstream: AnthropicUpstream, tmp_path: Path
) -> None:
    config = gateway_config(
        tmp_path,
        {
            "cache": {"embedder": "terms"},
            "upstreams": {
                "anthropic": {"base_url": upstream.url, "api_key": KEY, "max_retries": 0}
            },
        },
    )
    home = tmp_path / "home"
    home.mkdir()
    with ServerThread(config) as gateway:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": gateway.url,
            "ANTHROPIC_API_KEY": TOKEN_A,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        assert CLAUDE is not None
        done = subprocess.run(
            [CLAUDE, "--print", "Say hello in five words", "--output-format", "json"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            start_new_session=True,
        )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["is_error"] is False, result
    sent = [r for r in upstream.requests if r.path == "/v1/messages"]
    assert sent, "Claude Code's request never reached the upstream"
    body, headers = sent[-1].body, sent[-1].headers
    assert "/" not in body["model"]  # its bare id, resolved through [default_upstreams]
    assert body["max_tokens"] > 4096  # its own value, not a cap of ours
    assert body["stream"] is True and body["tools"]  # its tools, as it sent them
    assert "anthropic-beta" in headers  # its betas reach the upstream
