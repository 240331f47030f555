"""``evermind eval run CASES --gate GATES --against MODEL``: a launch check (native-only).

Each case's input is sent as one user message to ``MODEL`` through an OpenAI-compatible
endpoint (by default the local runtime, ``evermind serve``, which also fronts upstreams
through its gateway) with the official ``openai`` client; the reply's text becomes the
outcome's ``answer``, the gateway's ``evermind.cost_usd`` (when the reply carries it) its
cost, and :func:`~evermind.evaluation.run_eval` measures its latency. The graders and gates
come from the gate file (:mod:`evermind.evaluation.gatefile`). Exit 0 when every gate
passes, 1 when any fails (a file with no gate is vacuous and fails), 2 for bad input.

The SDK does not retry here (``max_retries=0``): a launch check measures what one call does,
and a call that fails is a failed case, named in the report.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evermind.cli.args import HelpFormatter, text_file

if TYPE_CHECKING:
    from evermind.evaluation import Case, Outcome, Report

#: ``evermind serve``'s OpenAI-compatible API on its default port.
DEFAULT_BASE_URL = "http://127.0.0.1:8377/v1"


def register(evaluate: argparse.ArgumentParser) -> None:
    """Adds the ``run`` sub-command to the ``eval`` parser (whose own flags keep working)."""
    sub = evaluate.add_subparsers(dest="eval_command", title="sub-command", metavar="run")
    run = sub.add_parser(
        "run",
        prog="evermind eval run",
        help="run a labelled set against a model and check its gates (exit 1: a gate failed)",
        description="Send each case's input to MODEL through an OpenAI-compatible endpoint, "
        "grade the answers, report pass rates, cost and latency, and check the gates of "
        "GATES.toml. Exit 0: every gate passed; 1: a gate failed (a file with no gate fails "
        "as vacuous); 2: bad input. See docs/evaluation.md.",
        formatter_class=HelpFormatter,
    )
    run.add_argument(
        "cases", metavar="CASES", type=text_file, help="JSONL cases: id, input and labels"
    )
    run.add_argument(
        "--gate",
        required=True,
        metavar="GATES",
        type=text_file,
        help="TOML file naming the graders and the gates",
    )
    run.add_argument("--against", required=True, metavar="MODEL", help="the model to ask")
    run.add_argument(
        "--base-url", default=DEFAULT_BASE_URL, help="OpenAI-compatible API (evermind serve)"
    )
    run.add_argument(
        "--token",
        default=os.environ.get("EVERMIND_TOKEN"),
        help="bearer token (default: $EVERMIND_TOKEN)",
    )
    run.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="cases asked at once (latency is measured under this load)",
    )
    run.add_argument(
        "--json", action="store_true", help="print the report and verdicts as one JSON object"
    )
    run.set_defaults(func=cmd_eval_run)


def _cost(reply: Any) -> float | None:
    """The gateway's ``evermind.cost_usd`` on a reply, when it is a finite number ≥ 0."""
    extra = getattr(reply, "model_extra", None) or {}
    field = extra.get("evermind")
    cost = field.get("cost_usd") if isinstance(field, dict) else None
    if isinstance(cost, bool) or not isinstance(cost, int | float):
        return None
    return float(cost) if math.isfinite(cost) and cost >= 0 else None


async def _evaluate(args: argparse.Namespace, name: str, cases: list[Case], graders: Any) -> Report:
    import openai

    from evermind.cli.progress import ProgressBar
    from evermind.evaluation import Outcome, run_eval

    client = openai.AsyncOpenAI(
        base_url=args.base_url, api_key=args.token or "unused", max_retries=0
    )
    bar = ProgressBar("eval", len(cases))
    done = 0

    async def ask(case: Case) -> Outcome:
        nonlocal done
        try:
            try:
                reply = await client.chat.completions.create(
                    model=args.against, messages=[{"role": "user", "content": case.input}]
                )
            except openai.APIConnectionError as err:
                raise ConnectionError(
                    f"cannot reach {args.base_url} ({err}); is `evermind serve` running?"
                ) from err
            if not reply.choices:
                raise ValueError("the reply has no choices")
            text = reply.choices[0].message.content or ""
            return Outcome({"answer": text}, cost_usd=_cost(reply))
        finally:
            done += 1
            bar.update(done)

    try:
        return await run_eval(name, cases, ask, graders, concurrency=args.concurrency)
    finally:
        await client.close()


def cmd_eval_run(args: argparse.Namespace) -> int:
    import asyncio

    from evermind.errors import InputError
    from evermind.evaluation import check_gates, load_cases, load_gate_file

    if args.model is not None or args.text_file is not None:
        raise InputError("--model and --text-file belong to `evermind eval`, not `eval run`")
    if args.concurrency < 1:
        raise InputError(f"--concurrency must be ≥ 1, got {args.concurrency}")
    gate_file = load_gate_file(Path(args.gate))  # bad gates fail before any call is made
    cases = load_cases(Path(args.cases))
    for case in cases:
        if not isinstance(case.input, str):
            raise InputError(
                f"{args.cases}: case {case.id!r}: input must be a string (the chat message), "
                f"got {type(case.input).__name__}"
            )
    name = f"{Path(args.cases).name} against {args.against}"
    report = asyncio.run(_evaluate(args, name, cases, gate_file.graders))
    result = check_gates(report, gate_file.gates)
    if args.json:
        verdicts = [
            {"gate": v.gate, "passed": v.passed, "vacuous": v.vacuous, "detail": v.detail}
            for v in result.verdicts
        ]
        document = {
            "report": report.to_dict(),
            "gates": {"passed": result.passed, "verdicts": verdicts},
        }
        print(json.dumps(document, ensure_ascii=False))
    else:
        print(report.render())
        print(result.render())
    sys.stdout.flush()
    return 0 if result.passed else 1
