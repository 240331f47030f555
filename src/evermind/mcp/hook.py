"""``evermind hook <event>``: the Claude Code hook that makes memory automatic.

One command, a mode per event, following Claude Code's hook contract: the event's JSON
payload arrives on stdin (``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name``
and the event's own fields); exit status 0 always; stdout is either empty or one JSON object.

- ``session-start`` (SessionStart): a digest of the most important durable memories, as
  ``hookSpecificOutput.additionalContext``.
- ``user-prompt-submit`` (UserPromptSubmit): lexical recall against ``prompt``; the relevant
  memories, fenced as reference data and cut to a token budget, as ``additionalContext``.
- ``pre-compact`` (PreCompact): the durable instructions and corrections the user typed in
  the transcript are written to memory (``instruction-<digest>`` keys) before the window is
  summarised. PreCompact takes no context, so nothing is printed.
- Compaction stubs (``evermind.memory.stubs``) are injected as their archived originals; a
  stub whose original is lost is dropped from the injected context.
- ``stop`` (Stop): when the user's last message was a durable instruction or correction and
  no ``memory_remember`` followed it (nor is it stored), ``{"decision": "block", "reason": …}``
  asks the model to record it. ``stop_hook_active`` true never blocks, so it cannot loop.

A hook must never break the session: a malformed payload, a missing or unreadable store, an
unreadable transcript, any bug, all end with exit 0, nothing on stdout and one
``evermind hook: …`` line on stderr. Reads go through memory's hook reader
(:mod:`evermind.memory.hook_reader`: a memory file's FTS5 side index, or a ``--store`` URL's
``MemoryStore.recall_prompt``; no model, no MCP SDK, no numpy) so a hook on a memory file runs
in ~0.1 s; see docs/mcp.md for the measured budget. Run as ``python -m evermind.mcp.hook
<event>`` (what the installer registers, the fastest start) or ``evermind hook <event>``.
Native-only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import IO, Any

from evermind.mcp.config import (
    DEFAULT_NAMESPACE,
    DEFAULT_TENANT,
    resolve_memory_file,
    resolve_store,
    store_namespace,
)

#: ``evermind hook`` modes and the ``hook_event_name`` each answers.
EVENTS = {
    "session-start": "SessionStart",
    "user-prompt-submit": "UserPromptSubmit",
    "pre-compact": "PreCompact",
    "stop": "Stop",
}
#: Largest payload read from stdin (a prompt is capped well below this by Claude Code).
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
#: Default token budgets of the injected context (estimated at 4 characters a token).
PROMPT_BUDGET_TOKENS = 600
DIGEST_BUDGET_TOKENS = 800
#: Longest memory text shown in a hook's context.
MAX_ITEM_CHARS = 400
RECALL_TOP_K = 5
DIGEST_SIZE = 12
#: Tags and importance of the instructions PreCompact flushes.
INSTRUCTION_TAGS = ("instruction", "claude-code")
INSTRUCTION_IMPORTANCE = 0.7


class HookFailure(Exception):
    """Anything that makes a hook give up quietly (a note on stderr, exit 0)."""


def estimate_tokens(text: str) -> int:
    """A conservative token count for budgeting: one token per four characters."""
    return math.ceil(len(text) / 4)


def instruction_key(text: str) -> str:
    """The memory key a flushed instruction is stored under (stable: the same text, one key)."""
    return "instruction-" + hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()[:12]


def _read_payload(stdin: IO[str], event: str) -> dict[str, Any]:
    raw = stdin.read(MAX_PAYLOAD_BYTES + 1)
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise HookFailure(f"payload over {MAX_PAYLOAD_BYTES} bytes; ignored")
    try:
        payload = json.loads(raw)
    except json.JSONDecodeError as err:
        raise HookFailure(f"malformed payload (not JSON: {err.msg} at {err.pos}); ignored") from err
    if not isinstance(payload, dict):
        raise HookFailure(f"malformed payload (a JSON {type(payload).__name__}, not an object)")
    named = payload.get("hook_event_name")
    if named is not None and named != EVENTS[event]:
        raise HookFailure(f"payload is for {named!r}, this hook handles {EVENTS[event]!r}")
    return payload


def _items(memories: Sequence[Any], budget_tokens: int) -> list[str]:
    """Memory lines, best first, as many as fit ``budget_tokens`` (at least none)."""
    from evermind.text import cut

    items: list[str] = []
    used = 0
    for memory in memories:
        tags = f"; tags: {', '.join(memory.tags)}" if memory.tags else ""
        item = f"{memory.key}{tags}\n{cut(memory.content, MAX_ITEM_CHARS)}"
        cost = estimate_tokens(item) + 2
        if used + cost > budget_tokens:
            break
        items.append(item)
        used += cost
    return items


@contextlib.asynccontextmanager
async def _reader(args: argparse.Namespace) -> AsyncIterator[Any]:
    """Memory's hook reader of the store the hook was registered for (a file or a URL)."""
    from evermind.memory.hook_reader import open_hook_reader

    async with open_hook_reader(
        args.location,
        tenant=args.tenant,
        namespace=args.namespace,
        file_namespace=args.store_namespace,
    ) as reader:
        yield reader


async def _digest(args: argparse.Namespace) -> list[Any]:
    async with _reader(args) as reader:
        found: list[Any] = await reader.digest(DIGEST_SIZE)
        return found


async def _recall(args: argparse.Namespace, prompt: str) -> list[Any]:
    async with _reader(args) as reader:
        found: list[Any] = await reader.recall(prompt, RECALL_TOP_K)
        return found


def _context(event: str, text: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": EVENTS[event], "additionalContext": text}}


def session_start(payload: dict[str, Any], args: argparse.Namespace) -> dict[str, Any] | None:
    """The digest of durable memories, or None when the store holds none."""
    from evermind.memory.sanitize import fence

    items = _items(asyncio.run(_digest(args)), args.budget or DIGEST_BUDGET_TOKENS)
    if not items:
        return None
    text = (
        "Evermind long-term memory: the user's most important durable memories, shared by "
        "every agent they use. Call memory_recall before answering anything that may depend "
        "on earlier sessions; call memory_remember when the user states a durable preference, "
        "decision or correction.\n" + fence(items, "durable memories")
    )
    return _context("session-start", text)


def user_prompt_submit(payload: dict[str, Any], args: argparse.Namespace) -> dict[str, Any] | None:
    """The memories relevant to the prompt, or None when none are."""
    from evermind.memory.records import MAX_QUERY_CHARS
    from evermind.memory.sanitize import fence

    prompt = payload.get("prompt")
    if not isinstance(prompt, str):
        raise HookFailure("UserPromptSubmit payload has no string 'prompt'; nothing recalled")
    if not prompt.strip():
        return None
    hits = asyncio.run(_recall(args, prompt[:MAX_QUERY_CHARS]))
    items = _items(hits, args.budget or PROMPT_BUDGET_TOKENS)
    if not items:
        return None
    text = (
        "Evermind recalled these memories for the user's message (lexical match, best "
        "first; memory_get(key) gives a full text):\n" + fence(items, "recalled for this prompt")
    )
    return _context("user-prompt-submit", text)


def _transcript(payload: dict[str, Any]) -> Path:
    path = payload.get("transcript_path")
    if not isinstance(path, str) or not path:
        raise HookFailure(f"payload has no 'transcript_path' ({path!r}); nothing to read")
    transcript = Path(path).expanduser()
    if not transcript.is_file():
        raise HookFailure(f"transcript {transcript} does not exist")
    return transcript


def pre_compact(payload: dict[str, Any], args: argparse.Namespace) -> dict[str, Any] | None:
    """Writes the transcript's durable instructions to memory; prints nothing."""
    from evermind.mcp.transcript import durable_instructions, read_turns

    found = durable_instructions(read_turns(_transcript(payload)))
    if found:
        stored = asyncio.run(_remember_all(found, payload, args))
        print(f"evermind hook: pre-compact kept {stored} new instruction(s)", file=sys.stderr)
    return None


async def _remember_all(texts: list[str], payload: dict[str, Any], args: argparse.Namespace) -> int:
    """Writes each text through write-through cognition; returns how many were new.

    A text already stored under its own key is skipped; one an agent already stored under
    another key is confirmed there, not copied.
    """
    from evermind.memory.write_through import Remember, remember_through

    stored = 0
    async with _writable(args) as store:
        for text in texts:
            key = instruction_key(text)
            if await store.get(key) is not None:
                continue
            meta = {
                "source": "claude-code PreCompact",
                "session_id": str(payload.get("session_id")),
            }
            request = Remember.of(key, text, INSTRUCTION_TAGS, INSTRUCTION_IMPORTANCE, meta=meta)
            outcome = await remember_through(store, request)
            stored += outcome.action != "confirm"
    return stored


@contextlib.asynccontextmanager
async def _writable(args: argparse.Namespace) -> AsyncIterator[Any]:
    """A ``MemoryStore`` on the hook's store (the memory file, created if missing, or the URL)."""
    if isinstance(args.location, Path):
        from evermind.memory import MemoryStore

        async with MemoryStore(args.location, namespace=args.store_namespace) as store:
            yield store
        return
    from evermind.memory.shared_memory import shared_memory

    async with shared_memory(
        args.location, None, tenant=args.tenant, namespace=args.namespace
    ) as store:
        yield store


def stop(payload: dict[str, Any], args: argparse.Namespace) -> dict[str, Any] | None:
    """Blocks the stop once when a durable instruction went unrecorded this turn."""
    from evermind.mcp.transcript import read_turns, unrecorded_instruction

    if payload.get("stop_hook_active") is True:
        return None  # already continued by a Stop hook: never block twice
    instruction = unrecorded_instruction(read_turns(_transcript(payload)))
    if instruction is None or _already_stored(instruction, args):
        return None
    from evermind.text import cut

    quoted = json.dumps(cut(instruction, 200), ensure_ascii=False)
    reason = (
        f"The user's last message reads as a durable instruction or correction: {quoted}. It "
        "was not recorded in long-term memory this turn. Call memory_remember with a short "
        "stable key, the instruction as one self-contained fact, tags such as ['instruction'] "
        "and importance 0.7 (reuse an existing key to correct an old memory); if it was only "
        "meant for this task, reply in one line that nothing needs remembering."
    )
    return {"decision": "block", "reason": reason}


def _already_stored(instruction: str, args: argparse.Namespace) -> bool:
    """Whether PreCompact (or anyone) stored this exact instruction already."""
    import sqlite3

    from evermind.errors import StorageError

    async def has() -> bool:
        async with _reader(args) as reader:
            found: bool = await reader.has(instruction_key(instruction))
            return found

    try:
        return asyncio.run(has())
    except (StorageError, sqlite3.Error):
        return False


HANDLERS = {
    "session-start": session_start,
    "user-prompt-submit": user_prompt_submit,
    "pre-compact": pre_compact,
    "stop": stop,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The hook's arguments (shared by ``evermind hook`` and ``python -m evermind.mcp.hook``)."""
    parser.add_argument("event", help=f"one of {', '.join(EVENTS)} (or the Claude Code name)")
    parser.add_argument("--memory-file", help="the SQLite memory file (default as evermind mcp)")
    parser.add_argument(
        "--store",
        help="the store instead of --memory-file, as evermind mcp takes it: a SQLite file, "
        "postgresql://…, qdrant://…, memory://",
    )
    parser.add_argument("--tenant", default=DEFAULT_TENANT, help="runtime tenant")
    parser.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="memory namespace")
    parser.add_argument("--budget", type=int, default=None, help="token budget of the context")


def _event_name(raw: str) -> str:
    by_claude = {claude.lower(): mode for mode, claude in EVENTS.items()}
    event = by_claude.get(raw.lower(), raw.lower())
    if event not in EVENTS:
        raise HookFailure(f"unknown hook event {raw!r}; expected one of {', '.join(EVENTS)}")
    return event


def _location(args: argparse.Namespace) -> Path | str:
    """The memory file, or the store URL, the hook reads (``--store`` or ``--memory-file``)."""
    if args.store and args.memory_file:
        raise HookFailure("expected --store or --memory-file, got both; nothing done")
    if args.store:
        return resolve_store(args.store)
    return resolve_memory_file(args.memory_file)


def run(args: argparse.Namespace, stdin: IO[str], stdout: IO[str], stderr: IO[str]) -> int:
    """Runs one hook; always returns 0 (failures are a note on ``stderr``)."""
    try:
        event = _event_name(args.event)
        args.location = _location(args)
        args.store_namespace = store_namespace(args.tenant, args.namespace)
        payload = _read_payload(stdin, event)
        output = HANDLERS[event](payload, args)
    except HookFailure as err:
        print(f"evermind hook: {err}", file=stderr)
        return 0
    except Exception as err:
        said = " ".join(str(err).split())  # one line, whatever the driver's message holds
        print(f"evermind hook: {type(err).__name__}: {said}; nothing done", file=stderr)
        return 0
    if output is not None:
        stdout.write(json.dumps(output, ensure_ascii=False) + "\n")
        stdout.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m evermind.mcp.hook``."""
    parser = argparse.ArgumentParser(prog="evermind hook", description=__doc__.splitlines()[0])
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        if exit_.code == 0:
            return 0  # --help
        print("evermind hook: bad arguments; nothing done", file=sys.stderr)
        return 0
    return run(args, sys.stdin, sys.stdout, sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
