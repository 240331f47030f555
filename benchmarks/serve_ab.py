"""Two checkouts' runtimes on loopback, :mod:`benchmarks.serve`'s cells interleaved (native-only).

``python -m benchmarks.serve_ab --before /path/to/other/checkout``: one ``evermind serve``
from ``--before``'s ``src`` and one from this checkout's, the same package pushed to both; then,
round after round, every (kind, clients) cell of :mod:`benchmarks.serve` (the raw keep-alive
client) runs against one server and at once against the other, the order swapped every round.
Only one server is loaded at a time and both see the machine's load at nearly the same
moments: on shared cores that gives fair ratios where whole runs minutes apart do not.
Reported per round and side: the cells, issue 17's ratios (completion tokens/s at the most
clients over one client, p99 at 8 clients over one, embeddings req/s at the most clients over
one) and the load average; and for every completion cell the server's CPU time per generated
token by thread (:func:`thread_cpu`: the scheduler thread, the event loop, the rest), which
the machine's load barely moves where tokens/s swing with it. It measures; it asserts
nothing about time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from benchmarks.serve import PROMPT, Server, _cell, nano_package, ratios

ROOT = Path(__file__).resolve().parent.parent
SIDES = ("before", "after")


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of process ``pid`` so far, by thread id,
    from /proc ({} where it is missing)."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, float] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return {}
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return found


def _per_token(
    pid: int, before: dict[int, float], after: dict[int, float], tokens: int
) -> dict[str, float]:
    """Microseconds of CPU per generated token between two :func:`thread_cpu` readings, by
    role: ``event_loop`` (the main thread), ``scheduler`` (the busiest other thread during
    a completion cell: Python 3.11 gives threads no OS name to tell it by) and ``other``
    (worker pool, BLAS)."""
    if not before or not after or not tokens:
        return {}
    used = {tid: seconds - before.get(tid, 0.0) for tid, seconds in after.items()}
    loop = used.pop(pid, 0.0)
    scheduler = max(used, key=used.__getitem__, default=None)
    busiest = used.pop(scheduler, 0.0) if scheduler is not None else 0.0
    roles = {"event_loop": loop, "scheduler": busiest, "other": sum(used.values())}
    roles["total"] = sum(roles.values())
    return {role: round(seconds * 1e6 / tokens, 1) for role, seconds in roles.items()}


def _serve(root: Path, folder: Path) -> Server:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root)])
    return Server(folder / "data", "cpu", env=env, cwd=root, start_s=120)


def run_ab(
    before: Path,
    package: bytes | None = None,
    rounds: int = 3,
    seconds: float = 3.0,
    concurrency: Sequence[int] = (1, 8, 32),
    max_tokens: int = 32,
) -> dict[str, Any]:
    """The document: per round, each side's cells and ratios, and the load average."""
    from evermind.runtime.push import push_package

    package = package if package is not None else nano_package()
    servers: dict[str, Server] = {}
    out: dict[str, Any] = {"before": str(before), "after": str(ROOT), "rounds": []}
    try:
        with tempfile.TemporaryDirectory(prefix="evermind-bench-serve-ab-") as tmp:
            folder = Path(tmp)
            file = folder / "model.evermind"
            file.write_bytes(package)
            models: dict[str, str] = {}
            for side, root in zip(SIDES, (before.resolve(), ROOT), strict=True):
                servers[side] = _serve(root, folder / side)
                models[side] = push_package(file, servers[side].url)["id"]
                warm = {"model": models[side], "prompt": PROMPT, "max_tokens": 2}
                httpx.post(servers[side].url + "/v1/completions", json=warm, timeout=60)
            for index in range(rounds):
                order = SIDES if index % 2 == 0 else SIDES[::-1]
                rows: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
                load = os.getloadavg()[0]
                for kind in ("embeddings", "completions"):
                    for clients in concurrency:
                        for side in order:
                            cell = _cell(
                                servers[side].url, kind, models[side], clients, seconds, max_tokens
                            )
                            pid = servers[side].process.pid
                            used = thread_cpu(pid)
                            row = asyncio.run(cell)
                            if kind == "completions":
                                row["cpu_us_per_token"] = _per_token(
                                    pid, used, thread_cpu(pid), row["completion_tokens"]
                                )
                            rows[side].append(row)
                entry: dict[str, Any] = {"round": index + 1, "first": order[0]}
                entry["load"] = [round(load, 2), round(os.getloadavg()[0], 2)]
                for side in SIDES:
                    entry[side] = {"rows": rows[side], "ratios": ratios({"rows": rows[side]})}
                out["rounds"].append(entry)
    finally:
        for server in servers.values():
            server.stop()
    return out


def _cells(side: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(row["kind"], row["clients"]): row for row in side["rows"]}


def format_table(result: dict[str, Any]) -> str:
    """One Markdown row per round and side, then the medians of the ratios."""
    lines = [
        "| round | side | compl. tok/s 1 / 8 / 32 | p50 ms 1 | p99 ms 1 / 8 "
        "| emb. req/s 1 / 8 / 32 | errors | tok/s 32÷1 | p99 8÷1 | emb. 32÷1 | load |",
        "| ---: | --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    medians: dict[str, dict[str, list[float]]] = {side: {} for side in SIDES}
    for entry in result["rounds"]:
        for side in SIDES:
            cells = _cells(entry[side])
            counts = sorted(c for k, c in cells if k == "completions")
            tok = " / ".join(
                f"{cells[('completions', c)]['completion_tokens_per_s']:,.0f}" for c in counts
            )
            emb = " / ".join(
                f"{cells[('embeddings', c)]['requests_per_s']:,.0f}"
                for c in sorted(c for k, c in cells if k == "embeddings")
            )
            p99 = " / ".join(str(cells[("completions", c)]["p99_ms"]) for c in counts[:2])
            found = entry[side]["ratios"]
            for name, value in found.items():
                medians[side].setdefault(name, []).append(value)
            errors = sum(row["errors"] for row in entry[side]["rows"])
            p50 = cells[("completions", counts[0])]["p50_ms"]
            lines.append(
                f"| {entry['round']} | {side} | {tok} | {p50} | {p99} | {emb} | {errors} "
                f"| {found.get('completion_tok_s_32_over_1', '')} "
                f"| {found.get('completion_p99_8_over_1', '')} "
                f"| {found.get('embedding_req_s_32_over_1', '')} "
                f"| {entry['load'][0]}–{entry['load'][1]} |"
            )
    lines += [
        "",
        "| round | side | clients | server CPU µs/token: total | scheduler thread | event loop "
        "| other |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for entry in result["rounds"]:
        for side in SIDES:
            for (kind, clients), row in sorted(_cells(entry[side]).items()):
                used = row.get("cpu_us_per_token") or {}
                if kind != "completions" or not used:
                    continue
                lines.append(
                    f"| {entry['round']} | {side} | {clients} | {used['total']} "
                    f"| {used['scheduler']} | {used['event_loop']} | {used['other']} |"
                )
    lines.append("")
    for side in SIDES:
        summary = ", ".join(
            f"{name} {statistics.median(values):.2f}" for name, values in medians[side].items()
        )
        lines.append(f"{side} (median of {len(result['rounds'])} rounds): {summary}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.serve_ab --before DIR``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serve_ab", description=__doc__)
    parser.add_argument("--before", required=True, help="the other checkout (its src/ is served)")
    parser.add_argument("--package", help="serve this .evermind file (default: nano model)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of interleaved cells")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per cell")
    parser.add_argument("--clients", default="1,8,32", help="comma-separated client counts")
    parser.add_argument("--max-tokens", type=int, default=32, help="completion length")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    result = run_ab(
        Path(args.before),
        Path(args.package).read_bytes() if args.package else None,
        rounds=args.rounds,
        seconds=args.seconds,
        concurrency=[int(c) for c in args.clients.split(",")],
        max_tokens=args.max_tokens,
    )
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
