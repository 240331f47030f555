"""The MCP memory server: any MCP agent recalls and remembers through Evermind (native-only).

``evermind mcp`` serves eight tools over stdio (or streamable HTTP with ``--http``):
``memory_recall``, ``memory_get``, ``memory_recall_by_tag``, ``docs_search`` (cited passages
from the documents ``evermind ingest`` stored), ``memory_remember``, ``memory_forget``,
``memory_compact`` and ``memory_restore`` (a read-only server: the first four), plus the
opt-in experience tools, backed by the SQLite memory store (one file shared by every host,
and by the runtime), with server-side caps so recall saves tokens.
``evermind install-mcp`` registers the server in the MCP hosts' configs. See docs/mcp.md.

Modules, one idea each:

- ``config``: :class:`ServerConfig` (caps, read-only) and where the memory file lives.
- ``render``: the text of every tool answer (fenced, capped previews, the ranking line).
- ``tools``: the tool bodies and their descriptions; ``server``: the stdio server.
- ``compact_tools``: ``memory_compact`` and ``memory_restore``; ``experience_tools`` and
  ``experience_render``: the opt-in experience tools and their JSON answers.
- ``inprocess``: the same tools over the SDK's in-memory transport; ``agent_sdk``: the same
  tools in a Claude Agent SDK agent.
- ``http``: streamable HTTP with tokens, tenants, constant-time auth and rate limits.
- ``hosts``: each MCP host's config path and shape; ``installer``: editing those files.
- ``hook``: the Claude Code hooks (``evermind hook <event>``), reading through memory's fast
  FTS5 path (``evermind.memory.hook_index``); ``transcript``: reading Claude Code's
  transcript; ``hook_install``: the hooks and the skill (``data/SKILL.md``) in Claude Code's
  settings.
- The commands are :mod:`evermind.cli.mcp`'s.

Nothing is imported eagerly here, so ``evermind --help`` stays fast.
"""

from __future__ import annotations
