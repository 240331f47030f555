"""The agent layer: the inference router, online distillation and the memory-injecting agent.

- :class:`InferenceRouter` (:mod:`~evermind.agent.router`): the local SSM or a frontier model,
  per request, with the reason;
- :class:`SSMAgent` (:mod:`~evermind.agent.ssm_agent`): an agent loop over any bridge that
  injects recalled facts and writes new ones back through write-through cognition
  (:func:`evermind.memory.write_through.remember_fact`);
- :class:`~evermind.agent.graph.AgentGraph` (:mod:`~evermind.agent.graph`): durable agent
  graphs, run in supersteps and checkpointed every step (docs/agents.md);
- ``DistillationEngine`` (:mod:`~evermind.agent.distillation`, native-only: numpy): frontier
  answers collected per tenant become fine-tuning data for the SSM, with rollback.

Browser-safe: ``DistillationEngine`` is imported from its module, not here.
"""

from evermind.agent.router import (
    Budget,
    InferenceRouter,
    ModelConfidence,
    RouteDecision,
    RouterConfig,
    RouterStats,
)

__all__ = [
    "Budget",
    "InferenceRouter",
    "ModelConfidence",
    "RouteDecision",
    "RouterConfig",
    "RouterStats",
]
