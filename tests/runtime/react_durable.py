"""A ReAct agent file for the SIGKILL proof (run by ``evermind agent run``).

The OpenAI SDK bridge talks to the loopback server at ``$REACT_UPSTREAM`` (the test's).
Both tools append ``<tool> <pid>`` to ``$REACT_LOG`` when they start; with ``REACT_HANG=1``
``slow`` writes ``$REACT_LOG.ready`` and sleeps, and the test kills the process there.
"""

from __future__ import annotations

import os
import time

from evermind.agent.prebuilt import create_react_agent
from evermind.bridges.openai import OpenAIBridge


def _log(name: str) -> None:
    with open(os.environ["REACT_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{name} {os.getpid()}\n")


def fast(city: str) -> str:
    """The dates of the offsite in a city."""
    _log("fast")
    return "12-14 May"


def slow(city: str) -> str:
    """The weather in a city."""
    _log("slow")
    if os.environ.get("REACT_HANG") == "1":
        open(os.environ["REACT_LOG"] + ".ready", "w").close()
        time.sleep(600)
    return "sunny"


bridge = OpenAIBridge(
    api_key="sk-loopback-test", base_url=os.environ["REACT_UPSTREAM"] + "/v1", max_retries=0
)
graph = create_react_agent(bridge, "gpt-x", [fast, slow], name="react_durable")
