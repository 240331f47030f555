"""Wall time of the Claude Code memory hooks as Claude Code runs them: one process per event.

Builds a memory file of ``--memories`` memories (default 10,000; 15-60 words each drawn from
a 6,000-word vocabulary with a Zipf-like skew, so terms are shared as in real notes), then
runs ``python -m evermind.mcp.hook`` as a subprocess with the event's JSON on stdin and times
it end to end (interpreter start, imports, side-index check, recall, JSON out): the first
UserPromptSubmit (which builds the side index), ``--runs`` more with different prompts
(p50, p95, max), one after a write (incremental re-index), SessionStart and Stop; and
``evermind hook`` (the console script, which loads the whole CLI) once for comparison. No
model. Run as ``python -m benchmarks.mcp_hooks``; it measures, it asserts nothing.

``--store URL`` (e.g. a ``postgresql://…`` of a scratch database) writes the memories there
instead (tenant ``default``, namespace ``default``) and fires the hooks with ``--store URL``:
UserPromptSubmit is then answered by Postgres's own text search, SessionStart loads the
namespace. The token comparison is made for the memory file only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.children import run_child

NAMESPACE = "default/default"


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = {"".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size)}
    return sorted(words)


def build(memory_file: Path, count: int, seed: int, store_url: str | None = None) -> list[str]:
    """Writes ``count`` memories (to ``store_url`` when given); returns the vocabulary."""
    from evermind.memory import MemoryStore
    from evermind.memory.shared_memory import shared_memory

    rng = random.Random(seed)
    vocab = _vocabulary(rng, 6000)
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    now = time.time()
    entries = [
        {
            "key": f"m{i}",
            "content": " ".join(rng.choices(vocab, weights, k=rng.randint(15, 60))),
            "tags": [f"t{i % 7}"],
            "importance": rng.random(),
            "created_at": now - 2e6,
            "updated_at": now - rng.random() * 1e6,
        }
        for i in range(count)
    ]

    async def write() -> None:
        if store_url is not None:
            async with shared_memory(
                store_url, None, tenant="default", namespace="default"
            ) as shared:
                for start in range(0, len(entries), 500):  # a put's key check is one IN list
                    await shared.import_(entries[start : start + 500])
            return
        store = MemoryStore(memory_file, namespace=NAMESPACE)
        await store.import_(entries)
        await store.close()

    asyncio.run(write())
    return vocab


#: A hook that runs longer than this is stopped (with its process group) and the run ends.
HOOK_TIMEOUT_S = 120.0


def fire(command: list[str], payload: dict[str, object]) -> tuple[float, str]:
    """Runs one hook as Claude Code does; its process group is stopped on a timeout or Ctrl-C."""
    start = time.perf_counter()
    done = run_child(command, input=json.dumps(payload), timeout_s=HOOK_TIMEOUT_S)
    return time.perf_counter() - start, done.stdout


def report_tokens(memory_file: Path, injected: list[str]) -> None:
    """Prints tokens injected per prompt against the whole store pasted as one memory file."""
    from evermind.mcp.hook import estimate_tokens
    from evermind.memory.sync import SyncMemoryStore

    with SyncMemoryStore(memory_file, namespace=NAMESPACE) as store:
        dump = "\n".join(f"- {m['key']}: {m['content']}" for m in store.export())
    contexts = [
        json.loads(out)["hookSpecificOutput"]["additionalContext"] if out.strip() else ""
        for out in injected
    ]
    per_prompt = sorted(estimate_tokens(text) for text in contexts)
    whole = estimate_tokens(dump)
    median = statistics.median(per_prompt)
    print("| tokens (4 chars/token) | per prompt p50 | per prompt max | whole file |")
    print("|---|---|---|---|")
    print(f"| UserPromptSubmit vs dump | {median:.0f} | {per_prompt[-1]} | {whole} |")
    print(f"injected per prompt is {100 * median / max(whole, 1):.3f}% of the whole file")


def main(argv: list[str] | None = None) -> int:
    """Prints one line per measurement."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mcp_hooks")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--store", help="a store URL to write to and hook on (not a file)")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed + 1)
    with tempfile.TemporaryDirectory() as tmp:
        memory_file = Path(tmp) / "memory.db"
        transcript = Path(tmp) / "t.jsonl"
        transcript.write_text(
            json.dumps({"type": "user", "message": {"role": "user", "content": "hello"}}) + "\n"
        )
        vocab = build(memory_file, args.memories, args.seed, args.store)
        hook = [sys.executable, "-m", "evermind.mcp.hook"]
        tail = ["--store", args.store] if args.store else ["--memory-file", str(memory_file)]
        common = {"session_id": "bench", "transcript_path": str(transcript), "cwd": tmp}

        def prompt() -> dict[str, object]:
            words = " ".join(rng.choice(vocab[:2000]) for _ in range(rng.randint(5, 20)))
            return {**common, "hook_event_name": "UserPromptSubmit", "prompt": words}

        ups = [*hook, "user-prompt-submit", *tail]
        first, _ = fire(ups, prompt())
        fired = [fire(ups, prompt()) for _ in range(args.runs)]
        times = sorted(elapsed for elapsed, _ in fired)
        p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
        where = "a store URL" if args.store else "a memory file"
        version = sys.version.split()[0]
        print(f"memories: {args.memories} in {where}; runs: {args.runs}; python {version}")
        print(f"UserPromptSubmit first (a file: builds the side index): {first * 1000:.0f} ms")
        print(
            f"UserPromptSubmit: p50 {statistics.median(times) * 1000:.0f} ms, "
            f"p95 {p95 * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms"
        )
        hits = sum(1 for _, out in fired if out.strip())
        print(f"prompts that injected memories: {hits} of {len(fired)}")
        if args.store:
            return _rest_on_store(args, hook, tail, common, ups, prompt)
        report_tokens(memory_file, [out for _, out in fired])
        from evermind.memory.sync import SyncMemoryStore

        store = SyncMemoryStore(memory_file, namespace=NAMESPACE)
        store.remember("bench-new", "a freshly written memory about zebras", ["bench"], 0.5)
        store.close()
        after, _ = fire(ups, prompt())
        print(f"UserPromptSubmit after one write (incremental re-index): {after * 1000:.0f} ms")
        start, _ = fire([*hook, "session-start", *tail], {**common, "source": "startup"})
        print(f"SessionStart (digest): {start * 1000:.0f} ms")
        stop, _ = fire([*hook, "stop", *tail], {**common, "stop_hook_active": False})
        print(f"Stop (transcript check): {stop * 1000:.0f} ms")
        script = Path(sys.executable).with_name("evermind")
        if script.is_file():
            via_cli, _ = fire([str(script), "hook", "user-prompt-submit", *tail], prompt())
            print(f"UserPromptSubmit via the evermind console script: {via_cli * 1000:.0f} ms")
    return 0


def _rest_on_store(
    args: argparse.Namespace,
    hook: list[str],
    tail: list[str],
    common: dict[str, object],
    ups: list[str],
    prompt: Any,
) -> int:
    """SessionStart and Stop on a store URL (no side index, no token comparison)."""
    start, _ = fire([*hook, "session-start", *tail], {**common, "source": "startup"})
    print(f"SessionStart (digest: loads the namespace): {start * 1000:.0f} ms")
    stop, _ = fire([*hook, "stop", *tail], {**common, "stop_hook_active": False})
    print(f"Stop (transcript check): {stop * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
