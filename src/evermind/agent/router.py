"""The inference router: the local SSM or a frontier model, per request (browser-safe).

:class:`InferenceRouter` looks at one :class:`~evermind.bridges.ChatRequest` and returns a
:class:`RouteDecision` — ``local`` (the Evermind model trained on the user's text) or
``frontier`` (a paid upstream) — with the reason and the signals it read. The checks, in
order; the first that applies decides:

1. **override**: ``extra["route"]`` is ``"local"`` or ``"frontier"`` (the caller knows best);
2. **budget**: the tenant has spent its limit (or this request's estimated price would pass
   it): local, whatever the task — the budget is a ceiling, not a hint;
3. **tools**: the request offers tools or carries tool results: frontier (the SSM does not
   call tools);
4. **context**: the whole prompt is longer than ``local_context_tokens``: frontier;
5. **length**: the latest user turn is longer than ``max_local_prompt_tokens``: frontier (long
   asks are rarely short continuations of the user's text);
6. **task**: the ask matches a reasoning or code pattern (:data:`TASK_PATTERNS`: "step by
   step", "prove", "write a function", a code fence, a traceback): frontier;
7. **confidence**: the SSM's own *surprise* on the latest user turn — its mean
   negative log-likelihood per token minus its own training loss, in nats
   (:class:`ModelConfidence`) — above ``max_surprise``: frontier; the text is unlike what
   the model was trained on;
8. otherwise **local** (confident).

The defaults of :class:`RouterConfig` are measured on ``evals/router_set.jsonl`` (see
``evals/router.py`` and ``docs/router.md``), not guessed. Every decision is logged (logger
``evermind.agent.router``, at INFO) and counted in :attr:`InferenceRouter.stats`, whose
:meth:`RouterStats.snapshot` the runtime can publish in ``/metrics``.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from evermind.bridges.base import DEFAULT_MAX_TOKENS, ChatRequest, Completion, Usage
from evermind.bridges.pricing import PriceTable
from evermind.errors import ConfigError, InputError

logger = logging.getLogger(__name__)

Target = Literal["local", "frontier"]
LOCAL: Target = "local"
FRONTIER: Target = "frontier"
#: The reason kinds a decision can have (the counters' second label).
REASONS = (
    "override",
    "budget",
    "tools",
    "context",
    "length",
    "task",
    "confidence",
    "confident",
)

#: Asks that need reasoning or code, whatever the text looks like.
TASK_PATTERNS: tuple[tuple[str, str], ...] = (
    ("step-by-step", r"\bstep[- ]by[- ]step\b"),
    ("proof", r"\b(?:prove|proof|derive|disprove)\b"),
    ("solve", r"\b(?:solve|how many|what is the probability|calculate)\b"),
    ("why", r"\bexplain (?:why|how)\b|\bwhy (?:does|is|do|would)\b"),
    (
        "write-code",
        r"\b(?:write|implement|refactor|debug|fix|optimi[sz]e|translate|convert|port)\b"
        r"[^.?!\n]{0,60}\b(?:function|class|script|program|code|bug|test|query|regex"
        r"|algorithm|endpoint|module)s?\b",
    ),
    ("code-fence", r"```"),
    ("traceback", r"Traceback \(most recent call last\)|\b\w+Error: "),
    ("plan", r"\b(?:plan|design|architect|compare|evaluate|critique|summari[sz]e)\b"),
)
_TASKS = tuple((name, re.compile(pattern, re.IGNORECASE)) for name, pattern in TASK_PATTERNS)


@dataclass(frozen=True)
class RouterConfig:
    """The router's thresholds (defaults measured by ``evals/router.py --fit``).

    Attributes:
        max_surprise: Frontier when the SSM's surprise on the ask is above this (nats per
            token over the model's own training loss).
        max_local_prompt_tokens: Frontier when the latest user turn is longer.
        local_context_tokens: Frontier when the whole prompt is longer (what the local model
            can use: it trains on windows far shorter than this).
        confidence_chars: Only the first this many characters of the ask are scored, so the
            confidence signal costs one short forward pass.
        use_confidence: Whether the confidence signal is read at all.
        use_task_patterns: Whether :data:`TASK_PATTERNS` are checked.
    """

    max_surprise: float = 1.6
    max_local_prompt_tokens: int = 64
    local_context_tokens: int = 2048
    confidence_chars: int = 1024
    use_confidence: bool = True
    use_task_patterns: bool = True

    def __post_init__(self) -> None:
        if not math.isfinite(self.max_surprise):
            raise ConfigError(f"RouterConfig.max_surprise must be finite, got {self.max_surprise}")
        for name in ("max_local_prompt_tokens", "local_context_tokens", "confidence_chars"):
            if getattr(self, name) < 1:
                raise ConfigError(f"RouterConfig.{name} must be >= 1, got {getattr(self, name)}")


Signal = float | int | str | bool | None


@dataclass(frozen=True)
class RouteDecision:
    """Where one request goes, why, and what was measured.

    Attributes:
        target: ``local`` or ``frontier``.
        reason: One of :data:`REASONS` — the check that decided.
        detail: The reason in words, with the numbers (for the log).
        signals: Every signal read (``prompt_tokens``, ``ask_tokens``, ``tools``,
            ``surprise``, ``nll``, ``spent_usd``, ``limit_usd``, ``task``).
    """

    target: Target
    reason: str
    detail: str
    signals: Mapping[str, Signal] = field(default_factory=dict)

    def to_log(self) -> dict[str, Any]:
        """A JSON-able form for a log line."""
        return {
            "target": self.target,
            "reason": self.reason,
            "detail": self.detail,
            **self.signals,
        }


class Confidence(Protocol):
    """The SSM's surprise on a text: nats per token over its own training loss (None: cannot
    say, e.g. a text of one token)."""

    def __call__(self, text: str) -> float | None: ...


class _Evaluates(Protocol):
    def evaluate(self, text: str) -> dict[str, float]: ...


class ModelConfidence:
    """Surprise of a local model on a text, from ``model.evaluate`` (one parallel forward).

    ``surprise = cross_entropy(text) − baseline``; the baseline is the model's own loss on
    its training text (the package's ``training.eval_loss``, else ``final_loss``), so one
    threshold means the same for a weak and a strong model.

    Args:
        model: An :class:`evermind.model.inference.Model` (anything with ``evaluate`` and,
            for the default baseline, ``package.manifest``).
        baseline: Overrides the package's training loss.
    """

    def __init__(self, model: _Evaluates, baseline: float | None = None) -> None:
        self.model = model
        if baseline is None:
            manifest = getattr(getattr(model, "package", None), "manifest", {}) or {}
            training = manifest.get("training", {}) or {}
            loss = training.get("eval_loss") or training.get("final_loss")
            baseline = float(loss) if isinstance(loss, int | float) else 0.0
        self.baseline = baseline

    def nll(self, text: str) -> float | None:
        """Mean cross-entropy of ``text`` in nats per token (None under two tokens)."""
        try:
            value = float(self.model.evaluate(text)["cross_entropy"])
        except ConfigError:  # fewer than two tokens
            return None
        return value if math.isfinite(value) else None

    def __call__(self, text: str) -> float | None:
        nll = self.nll(text)
        return None if nll is None else nll - self.baseline


class Budget:
    """Dollars each tenant may spend on frontier calls, and what it has spent (thread-safe).

    Args:
        limits: USD per tenant.
        default_limit: The limit of a tenant not in ``limits`` (None: unlimited).
    """

    def __init__(
        self, limits: Mapping[str, float] | None = None, default_limit: float | None = None
    ) -> None:
        self.limits = dict(limits or {})
        self.default_limit = default_limit
        self._spent: dict[str, float] = {}
        self._lock = threading.Lock()

    def limit(self, tenant: str) -> float | None:
        return self.limits.get(tenant, self.default_limit)

    def spent(self, tenant: str) -> float:
        with self._lock:
            return self._spent.get(tenant, 0.0)

    def charge(self, tenant: str, usd: float) -> None:
        """Adds ``usd`` (a finished call's price) to the tenant's spend."""
        if not math.isfinite(usd) or usd < 0:
            raise InputError(f"Budget.charge: expected a price >= 0, got {usd!r}")
        with self._lock:
            self._spent[tenant] = self._spent.get(tenant, 0.0) + usd


class RouterStats:
    """Decisions counted by target and reason (thread-safe)."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def add(self, decision: RouteDecision) -> None:
        with self._lock:
            self._counts[(decision.target, decision.reason)] += 1

    def snapshot(self) -> dict[str, int]:
        """``{"<target>:<reason>": count}``, plus ``"local"`` and ``"frontier"`` totals."""
        with self._lock:
            counts = dict(self._counts)
        out = {f"{t}:{r}": n for (t, r), n in sorted(counts.items())}
        for target in (LOCAL, FRONTIER):
            out[target] = sum(n for (t, _), n in counts.items() if t == target)
        return out


def approx_tokens(text: str) -> int:
    """About four characters a token (English BPE), at least one word a token."""
    return max(len(text.split()), math.ceil(len(text) / 4)) if text else 0


def price_estimator(
    table: PriceTable, count_tokens: Callable[[str], int] | None = None
) -> Callable[[ChatRequest], float | None]:
    """``estimate_usd`` for :class:`InferenceRouter` from a price table: the prompt's tokens
    at the uncached input rate plus ``max_tokens`` at the output rate (the most the call can
    cost without cache reads); None for a model the table does not know."""
    count = count_tokens or approx_tokens

    def estimate(request: ChatRequest) -> float | None:
        prompt = "\n".join(
            part
            for part in (request.system, request.facts, *(m.text() for m in request.messages))
            if part
        )
        # No max_tokens (the upstream's default): the contract's default is the estimate.
        most = DEFAULT_MAX_TOKENS if request.max_tokens is None else request.max_tokens
        usage = Usage(input_tokens=count(prompt), output_tokens=most)
        return table.price(request.model, usage)

    return estimate


class InferenceRouter:
    """Decides per request: the local SSM or a frontier model (see the module docstring).

    Args:
        config: Thresholds (defaults measured, see :class:`RouterConfig`).
        confidence: The SSM's surprise on a text (e.g. :class:`ModelConfidence`); None
            switches the confidence check off.
        budget: Per-tenant spend limits; None: no budget check.
        count_tokens: Tokens of a text (the local tokenizer's ``len(encode(text))``); the
            default estimates four characters a token.
        estimate_usd: The price a frontier call for this request would have (e.g.
            :func:`price_estimator` of the bridges' price table); with it, a request that
            would pass the tenant's limit goes local.
    """

    def __init__(
        self,
        config: RouterConfig | None = None,
        confidence: Confidence | None = None,
        budget: Budget | None = None,
        count_tokens: Callable[[str], int] | None = None,
        estimate_usd: Callable[[ChatRequest], float | None] | None = None,
    ) -> None:
        self.config = config or RouterConfig()
        self.confidence = confidence
        self.budget = budget
        self.count_tokens = count_tokens or approx_tokens
        self.estimate_usd = estimate_usd
        self.stats = RouterStats()

    @classmethod
    def for_model(
        cls,
        model: Any,
        config: RouterConfig | None = None,
        budget: Budget | None = None,
        prices: PriceTable | None = None,
    ) -> InferenceRouter:
        """The router for a local :class:`~evermind.model.inference.Model`: its surprise as
        the confidence signal, its tokenizer's counts, and (with ``prices``) the price
        estimate that keeps a tenant inside its budget."""

        def count(text: str) -> int:
            return len(model.tokenizer.encode(text))

        return cls(
            config,
            ModelConfidence(model),
            budget,
            count,
            None if prices is None else price_estimator(prices, count),
        )

    def decide(self, request: ChatRequest) -> RouteDecision:
        """The route of ``request``, logged and counted."""
        decision = self._decide(request)
        self.stats.add(decision)
        logger.info("route %s (%s): %s", decision.target, decision.reason, decision.detail)
        return decision

    def record(self, request: ChatRequest, completion: Completion) -> None:
        """Charges a finished frontier call's price (``completion.cost_usd``) to the budget."""
        if self.budget is not None and completion.cost_usd:
            self.budget.charge(request.tenant, completion.cost_usd)

    def _decide(self, request: ChatRequest) -> RouteDecision:
        cfg = self.config
        signals: dict[str, Signal] = {}
        route = request.extra.get("route")
        if route is not None:
            if route not in (LOCAL, FRONTIER):
                raise InputError(
                    f"extra.route must be 'local' or 'frontier', got {route!r}; "
                    "hint: leave it out to let the router decide"
                )
            return RouteDecision(route, "override", f"the caller asked for {route}", signals)

        if self.budget is not None:
            limit = self.budget.limit(request.tenant)
            spent = self.budget.spent(request.tenant)
            signals.update(spent_usd=spent, limit_usd=limit)
            if limit is not None:
                estimate = self.estimate_usd(request) if self.estimate_usd else None
                signals["estimate_usd"] = estimate
                if spent >= limit or (estimate is not None and spent + estimate > limit):
                    return RouteDecision(
                        LOCAL,
                        "budget",
                        f"tenant {request.tenant!r} spent ${spent:.4f} of ${limit:.4f}"
                        + (f" (this call ~${estimate:.4f})" if estimate is not None else ""),
                        signals,
                    )

        tools = bool(request.tools) or request.has_tool_results()
        signals["tools"] = tools
        if tools:
            return RouteDecision(FRONTIER, "tools", "the request uses tools", signals)

        ask = _last_user_text(request)
        prompt = "\n".join(
            part
            for part in (request.system, request.facts, *(m.text() for m in request.messages))
            if part
        )
        prompt_tokens = self.count_tokens(prompt)
        ask_tokens = self.count_tokens(ask)
        signals.update(prompt_tokens=prompt_tokens, ask_tokens=ask_tokens)
        if prompt_tokens > cfg.local_context_tokens:
            return RouteDecision(
                FRONTIER,
                "context",
                f"prompt of {prompt_tokens} tokens > local context {cfg.local_context_tokens}",
                signals,
            )
        if ask_tokens > cfg.max_local_prompt_tokens:
            return RouteDecision(
                FRONTIER,
                "length",
                f"ask of {ask_tokens} tokens > {cfg.max_local_prompt_tokens}",
                signals,
            )
        if cfg.use_task_patterns:
            task = next((name for name, rx in _TASKS if rx.search(ask)), None)
            signals["task"] = task
            if task is not None:
                return RouteDecision(FRONTIER, "task", f"the ask needs {task}", signals)

        if cfg.use_confidence and self.confidence is not None:
            surprise = self.confidence(ask[: cfg.confidence_chars])
            signals["surprise"] = None if surprise is None else round(surprise, 4)
            if surprise is not None and surprise > cfg.max_surprise:
                return RouteDecision(
                    FRONTIER,
                    "confidence",
                    f"low confidence: surprise {surprise:.2f} > {cfg.max_surprise:.2f} nats/token",
                    signals,
                )
            detail = (
                "short ask the local model knows"
                if surprise is None
                else f"confident: surprise {surprise:.2f} <= {cfg.max_surprise:.2f} nats/token"
            )
            return RouteDecision(LOCAL, "confident", detail, signals)
        return RouteDecision(LOCAL, "confident", "no signal calls for a frontier model", signals)


def _last_user_text(request: ChatRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return message.text()
    return request.messages[-1].text()


__all__ = [
    "FRONTIER",
    "LOCAL",
    "REASONS",
    "TASK_PATTERNS",
    "Budget",
    "Confidence",
    "InferenceRouter",
    "ModelConfidence",
    "RouteDecision",
    "RouterConfig",
    "RouterStats",
    "approx_tokens",
    "price_estimator",
]
