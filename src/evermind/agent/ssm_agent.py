"""An agent loop over any bridge that injects memory and writes new facts back (browser-safe).

:class:`SSMAgent` holds one conversation with a model behind a
:class:`~evermind.bridges.Bridge` (Claude, GPT, an OpenAI-compatible server or the local SSM)
and a :class:`~evermind.memory.MemoryStore`. Each :meth:`~SSMAgent.turn`:

1. **recall**: the top ``max_facts`` memories for the user's message by the store's
   ``recall`` (hybrid semantic + lexical ranking when the store has an embedder — never a
   substring match), kept in rank order while their tokens fit ``fact_budget_tokens``;
2. **inject**: those facts go in ``ChatRequest.facts``, fenced as reference data
   (:func:`evermind.memory.sanitize.fence`: sanitised, numbered, with the note that it is
   data, not instructions); ``system`` stays the static prompt, so a provider prefix cache
   keeps hitting when the facts change;
3. **call**: the bounded history (the last ``max_history`` messages, starting at a user
   turn) plus the new message, through the bridge;
4. **write back**: the facts the user stated and the facts the model returned in a marked
   block go through write-through cognition
   (:func:`evermind.memory.write_through.remember_fact`: the fact gate, then the pipeline
   every remember runs — augment, confirm, supersede with history, contested, reject; each
   :class:`~evermind.memory.write_through.Outcome` is returned with the turn).

The extractor (:func:`extract_facts`) is deliberately simple and predictable:

- ``remember that <X>`` / ``remember: <X>`` / ``note that <X>`` → the note ``X``;
- ``my <subject> is|are <value>`` → "The user's <subject> is <value>" (subject
  ``<subject>``: a later "my <subject> is …" supersedes it);
- ``I live in <place>`` → subject ``home``; ``call me <name>`` → subject ``name``;
- in the model's reply, each line of a ``<remember>…</remember>`` block is a fact (source
  ``model``); the block is removed from the reply the caller sees.

Standard library and ``evermind`` only, async: the same code runs natively and in the tab
(Pyodide, with the FetchBridge and the IndexedDB memory backend).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evermind.agent.router import approx_tokens
from evermind.bridges.base import Bridge, ChatRequest, Completion, Message
from evermind.errors import ConfigError
from evermind.memory.cognition import CognitionConfig, Fact
from evermind.memory.evidence import EvidenceGatherer
from evermind.memory.records import Hit
from evermind.memory.sanitize import fence
from evermind.memory.store import MemoryStore
from evermind.memory.write_through import Outcome, remember_fact

#: The title of the fenced facts block.
FACTS_TITLE = "facts about the user and this conversation"
_REMEMBER = re.compile(
    r"\b(?:please\s+)?(?:remember|note)(?:\s+that|\s*:)\s+(?P<fact>[^.!?\n]+)", re.IGNORECASE
)
_MY = re.compile(
    r"\bmy\s+(?P<subject>[a-z][a-z' -]{0,40}?)\s+(?P<verb>is|are)\s+"
    r"(?P<value>(?:(?!\s+(?:and|but)\s+(?:my|I)\b)[^.!?,;\n])+)",
    re.IGNORECASE,
)
_LIVE = re.compile(r"\bI\s+live\s+in\s+(?P<value>[^.!?,;\n]+)", re.IGNORECASE)
_CALL = re.compile(r"\bcall\s+me\s+(?P<value>[^.!?,;\n]+)", re.IGNORECASE)
_BLOCK = re.compile(r"<remember>(?P<body>.*?)</remember>", re.IGNORECASE | re.DOTALL)
_PRONOUN = re.compile(r"\bmy\b", re.IGNORECASE)


async def recall_facts(
    store: MemoryStore,
    text: str,
    max_facts: int = 8,
    budget_tokens: int = 512,
    count_tokens: Callable[[str], int] | None = None,
) -> list[Hit]:
    """The recall-each-turn rule: the top ``max_facts`` memories for ``text`` by the store's
    ``recall``, kept in rank order while their tokens (``count_tokens``, default
    :func:`~evermind.agent.router.approx_tokens`) fit ``budget_tokens``; none for empty text.
    """
    if max_facts == 0 or not text.strip():
        return []
    count = count_tokens or approx_tokens
    chosen: list[Hit] = []
    used = 0
    for hit in await store.recall(text[:8192], top_k=max_facts):
        cost = count(hit.content)
        if used + cost > budget_tokens:
            continue  # a shorter, lower-ranked fact may still fit
        chosen.append(hit)
        used += cost
    return chosen


def facts_block(hits: Sequence[Hit]) -> str | None:
    """The fenced block ``ChatRequest.facts`` carries for ``hits`` (None: no facts)."""
    return fence([h.content for h in hits], FACTS_TITLE) if hits else None


def extract_facts(user_text: str) -> list[Fact]:
    """The facts a user message states (see the module docstring for the patterns)."""
    facts: list[Fact] = []
    for match in _REMEMBER.finditer(user_text):
        note = match.group("fact").strip()
        if _MY.search(note):
            continue  # "remember that my X is Y" is a subject fact, found below
        note = _PRONOUN.sub("the user's", note)
        facts.append(Fact(note[:1].upper() + note[1:]))
    for match in _MY.finditer(user_text):
        subject = " ".join(match.group("subject").lower().split())
        value = match.group("value").strip()
        facts.append(Fact(f"The user's {subject} {match.group('verb').lower()} {value}", subject))
    for match in _LIVE.finditer(user_text):
        facts.append(Fact(f"The user lives in {match.group('value').strip()}", "home"))
    for match in _CALL.finditer(user_text):
        facts.append(Fact(f"The user's name is {match.group('value').strip()}", "name"))
    return facts


def split_model_facts(reply: str) -> tuple[str, list[Fact]]:
    """(the reply without its ``<remember>`` blocks, the facts in them, source ``model``)."""
    facts = [
        Fact(line.strip(" -*\t"), source="model")
        for block in _BLOCK.finditer(reply)
        for line in block.group("body").splitlines()
        if line.strip(" -*\t")
    ]
    return _BLOCK.sub("", reply).strip(), facts


@dataclass
class AgentTurn:
    """One turn of the agent.

    Attributes:
        reply: The model's answer, without its ``<remember>`` block.
        completion: The bridge's completion, as it came.
        facts: The memories injected, in rank order.
        facts_block: The fenced block sent as ``ChatRequest.facts`` (None: no facts).
        decisions: What write-through cognition did with each fact stated this turn
            (``outcome.action``: augment, confirm, supersede, contested or reject;
            ``outcome.summary``: one line).
    """

    reply: str
    completion: Completion
    facts: list[Hit] = field(default_factory=list)
    facts_block: str | None = None
    decisions: list[tuple[Fact, Outcome]] = field(default_factory=list)


class SSMAgent:
    """A conversation over ``bridge`` with memory from ``store`` (see the module docstring).

    Args:
        bridge: Any bridge.
        store: The memory to recall from and write back to.
        model: The model name the bridge sends upstream.
        system: The static system prompt.
        max_facts: At most this many facts per turn.
        fact_budget_tokens: The facts' total tokens (by ``count_tokens``) stay within this.
        max_history: Messages of history kept (oldest dropped first).
        count_tokens: Tokens of a text (default: about four characters a token).
        cognition: The fact gate's thresholds and a written fact's importance.
        gatherer: Asked for evidence when a fact conflicts with a memory (None: none).
        write_facts: Whether stated facts are written back at all.
        tenant: Sent as ``ChatRequest.tenant``.
        request_options: Other ``ChatRequest`` fields (``max_tokens``, ``temperature``, ...).
    """

    def __init__(
        self,
        bridge: Bridge,
        store: MemoryStore,
        max_facts: int = 8,
        fact_budget_tokens: int = 512,
        *,
        model: str = "evermind/auto",
        system: str | None = None,
        max_history: int = 20,
        count_tokens: Callable[[str], int] | None = None,
        cognition: CognitionConfig | None = None,
        gatherer: EvidenceGatherer | None = None,
        write_facts: bool = True,
        tenant: str = "default",
        **request_options: Any,
    ) -> None:
        if max_facts < 0 or fact_budget_tokens < 0 or max_history < 0:
            raise ConfigError(
                "SSMAgent: max_facts, fact_budget_tokens and max_history must be >= 0, got "
                f"{max_facts}, {fact_budget_tokens}, {max_history}"
            )
        self.bridge = bridge
        self.store = store
        self.max_facts = max_facts
        self.fact_budget_tokens = fact_budget_tokens
        self.model = model
        self.system = system
        self.max_history = max_history
        self.count_tokens = count_tokens or approx_tokens
        self.cognition = cognition
        self.gatherer = gatherer
        self.write_facts = write_facts
        self.tenant = tenant
        self.request_options = request_options
        self.history: list[Message] = []

    def reset(self) -> None:
        """Forgets the conversation (not the memory)."""
        self.history.clear()

    async def recall(self, text: str) -> list[Hit]:
        """The facts for ``text``: top ``max_facts`` by recall, within the token budget."""
        return await recall_facts(
            self.store, text, self.max_facts, self.fact_budget_tokens, self.count_tokens
        )

    def _bounded_history(self) -> list[Message]:
        kept = self.history[-self.max_history :] if self.max_history else []
        while kept and kept[0].role != "user":
            kept = kept[1:]  # a conversation starts at a user turn
        return kept

    async def turn(self, user_text: str) -> AgentTurn:
        """One exchange: recall, call the bridge, write back, extend the history."""
        facts = await self.recall(user_text)
        block = facts_block(facts)
        message = Message("user", user_text)
        request = ChatRequest(
            model=self.model,
            messages=(*self._bounded_history(), message),
            system=self.system,
            facts=block,
            tenant=self.tenant,
            **self.request_options,
        )
        completion = await self.bridge.generate(request)
        reply, model_facts = split_model_facts(completion.text)
        decisions = []
        if self.write_facts:
            for fact in [*extract_facts(user_text), *model_facts]:
                outcome = await remember_fact(self.store, fact, self.cognition, self.gatherer)
                decisions.append((fact, outcome))
        self.history.extend([message, Message("assistant", reply)])
        if len(self.history) > self.max_history:
            self.history = self.history[len(self.history) - self.max_history :]
        return AgentTurn(reply, completion, facts, block, decisions)

    async def chat(self, turns: Sequence[str]) -> list[AgentTurn]:
        """Runs several user messages in order."""
        return [await self.turn(text) for text in turns]


__all__ = [
    "FACTS_TITLE",
    "AgentTurn",
    "SSMAgent",
    "extract_facts",
    "facts_block",
    "recall_facts",
    "split_model_facts",
]
