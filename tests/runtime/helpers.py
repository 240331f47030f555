"""Shared helpers of the runtime tests: tokens, headers, error checks, a subprocess server."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from evermind.runtime.config import RuntimeConfig
from tests import procs

TOKEN_A = "tok-alpha-write-7f3a9c"
TOKEN_A_READ = "tok-alpha-read-51d2e8"
TOKEN_B = "tok-bravo-write-c0ffee"
#: The shared server's push cap: the test packages (~45 KB) fit, 150 KB does not.
PACKAGE_CAP = 100_000


def write_tokens(path: Path) -> Path:
    """A tokens file: tenant alpha (write + read-only token) and tenant bravo."""
    path.write_text(
        "# token tenant access\n"
        f"{TOKEN_A} alpha write\n"
        f"{TOKEN_A_READ} alpha read   # read-only\n"
        f"{TOKEN_B} bravo\n",
        encoding="utf-8",
    )
    return path


def gateway_config(root: Path, upstreams: dict[str, Any]) -> RuntimeConfig:
    """A runtime under ``root`` whose ``--upstreams`` file holds ``upstreams`` (the test's
    loopback upstreams, cache and auto settings; ``verify_sample`` 0 unless given), with the
    shared tokens, no rate limit and two worker threads."""
    config_file = root / "upstreams.json"
    # Paid checks of the verified cache are drawn at random (verify_sample, 0.05 by default):
    # tests that count upstream calls or spans get none unless they ask for them
    # (test_gateway_verified.py sets its own).
    cache = upstreams.get("cache")
    if isinstance(cache, dict) and "verify_sample" not in cache:
        upstreams = {**upstreams, "cache": {**cache, "verify_sample": 0.0}}
    config_file.write_text(json.dumps(upstreams), encoding="utf-8")
    return RuntimeConfig(
        data_dir=root / "data",
        port=0,
        tokens_file=write_tokens(root / "tokens.txt"),
        rate_limit=0,
        worker_threads=2,
        upstreams_file=config_file,
    )


def bearer(token: str) -> dict[str, str]:
    """The Authorization header of ``token``."""
    return {"Authorization": f"Bearer {token}"}


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> str:
    """Checks an OpenAI-style error response; returns its message."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code"}
    assert error["message"]
    if code is not None:
        assert error["code"] == code, error
    return str(error["message"])


def model_ids(client: httpx.Client) -> list[str]:
    """The ids ``GET /v1/models`` lists for the client's tenant."""
    response = client.get("/v1/models")
    assert response.status_code == 200, response.text
    return [m["id"] for m in response.json()["data"]]


#: ``python -c`` program: ``evermind`` with a file-descriptor limit (as a small server has).
_LIMITED = (
    "import resource, sys; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit})); "
    "from evermind.cli import main; sys.exit(main(sys.argv[1:]))"
)


class ServerProcess:
    """``evermind serve`` in a subprocess on a free loopback port (for crash tests).

    Args:
        data: The data directory.
        tokens_file: The tokens file.
        log: Where the server's output goes.
        max_open_files: RLIMIT_NOFILE of the server process (None: inherited).
        args: More ``evermind serve`` options.
    """

    def __init__(
        self,
        data: Path,
        tokens_file: Path,
        log: Path,
        max_open_files: int | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        from evermind.runtime.server import free_port

        self.data = data
        self.tokens_file = tokens_file
        self.log = log
        self.max_open_files = max_open_files
        self.args = args
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> ServerProcess:
        """Starts the server and waits until ``/healthz`` answers."""
        launcher = ["-m", "evermind.cli"]
        if self.max_open_files is not None:
            launcher = ["-c", _LIMITED.format(limit=self.max_open_files)]
        command = [
            sys.executable, *launcher, "serve",
            "--port", str(self.port), "--data", str(self.data),
            "--tokens-file", str(self.tokens_file), "--log-level", "warning", *self.args,
        ]  # fmt: skip
        with open(self.log, "ab") as sink:
            self.process = procs.popen(command, stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.kill()
        raise AssertionError(f"server did not start: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers run, exactly like a crash."""
        if self.process is not None:
            procs.kill_group(self.process)  # the server and anything it spawned

    def stop(self) -> None:
        """A graceful stop (SIGTERM), then SIGKILL if it hangs."""
        if self.process is not None:
            procs.stop_group(self.process)
