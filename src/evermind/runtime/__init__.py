"""The agent runtime: serves pushed ``.evermind`` packages over HTTP (native-only).

``evermind serve`` runs an ASGI app (FastAPI on uvicorn) that receives packages
(``POST /v1/models``), installs them atomically per tenant, and serves them: OpenAI-style
completions, chat completions and embeddings, the memory store over HTTP, a shared L2
semantic cache, Prometheus metrics. ``evermind push`` is the client side of an install.

Modules, one idea each:

- ``config``: :class:`RuntimeConfig` and the default data directory.
- ``errors``: :class:`ApiError`, the OpenAI-style JSON error; routes raise it for bad
  requests, and ``app`` maps every library error to it in one table (nothing below the routes
  imports it).
- Tokens, the per-tenant rate limit and the failed-authentication limiter are
  :mod:`evermind.auth`'s (shared with the MCP server); ``app`` turns their errors into 401/429.
- ``installs``: packages on disk — atomic install, scan, delete.
- ``registry``: refs to installs, the lazily loaded models in an LRU by memory budget.
- ``generation``: what a generation request asks for and what it produced (the chat template
  is :mod:`evermind.model.chat`'s, re-exported there).
- ``scheduler``: continuous batching, one scheduler thread per served model, fair across
  tenants; embeddings batched across clients. ``devices``: the decoder it drives (numpy or
  wgpu-py, ``--device``). ``ids``: response ids and default seeds without a system call.
- ``schemas``: the request bodies (pydantic) that become the OpenAPI docs.
- ``state``: the app's long-lived services and the request dependencies that reach them.
- ``routes_models``, ``routes_openai``, ``routes_affect``, ``routes_memory``,
  ``routes_cache``: the endpoints.
- The L2 semantic cache's stores are the cache's (:mod:`evermind.cache.l2_sqlite` in the
  runtime database, :mod:`evermind.cache.l2_vectorstore` on the ``--store`` engine, which is
  :class:`evermind.vectorstore.shared.SharedStore`, on a lane).
- ``gateway/``: the caching gateway to frontier models (its own subpackage).
- ``memory_service``: the memory store per tenant and namespace (SQLite or ``--store``).
- ``metrics``: counters and latency histograms, Prometheus text; ``telemetry``: the OTLP
  export and the GenAI operations of local models.
- ``app``: :func:`create_app`, middleware and error handlers.
- ``server``: running the app on uvicorn (foreground or a background thread).
- ``push``: the push client. The commands are :mod:`evermind.cli.serve`'s; the serving
  benchmark is the checkout's ``benchmarks/serve.py``.

Nothing is imported eagerly here, so ``evermind --help`` stays fast.
"""

from __future__ import annotations
