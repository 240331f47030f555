"""The caching gateway: frontier models behind the runtime's cache, per tenant (native-only).

``evermind serve --upstreams FILE`` serves model ids ``<upstream>/<name>`` and
``evermind/auto`` through this package, one idea per module:

- ``config``: the ``--upstreams`` file (upstreams, keys, the cache policy, ``[auto]``);
- ``core``: :class:`~evermind.runtime.gateway.core.Gateway` (a model id to the tenant's
  caching bridge, the L2 adapter, accounting, key scrubbing);
- ``openai``: ``/v1/chat/completions`` in the OpenAI wire shape, JSON and SSE;
- ``anthropic``: ``/v1/messages`` in Anthropic's Messages shape, JSON and SSE;
- ``auto``: ``evermind/auto``, the router between a local model and a frontier one.

The upstreams' wire protocols are the registry of :mod:`evermind.bridges.protocols`, which
the tab's fetch bridge reads too. Nothing is imported eagerly here.
"""
