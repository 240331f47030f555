"""The MCP memory server: any MCP agent recalls and remembers through Evermind (native-only).

``evermind mcp`` serves five tools over stdio (or streamable HTTP with ``--http``):
``memory_recall``, ``memory_get``, ``memory_recall_by_tag``, ``memory_remember`` and
``memory_forget``, backed by the SQLite memory store (one file shared by every host, and by
the runtime), with server-side caps so recall saves tokens. ``evermind install-mcp`` registers
the server in the MCP hosts' configs. See docs/mcp.md.

Modules, one idea each:

- ``config``: :class:`ServerConfig` (caps, read-only) and where the memory file lives.
- ``render``: the text of every tool answer (fenced, capped previews, the ranking line).
- ``tools``: the tool bodies and their descriptions; ``server``: the stdio server.
- ``http``: streamable HTTP with tokens, tenants, constant-time auth and rate limits.
- ``hosts``: each MCP host's config path and shape; ``installer``: editing those files.
- ``hook``: the Claude Code hooks (``evermind hook <event>``), reading through memory's fast
  FTS5 path (``evermind.memory.hook_index``); ``transcript``: reading Claude Code's
  transcript; ``hook_install``: the hooks and the skill (``data/SKILL.md``) in Claude Code's
  settings.
- ``commands``: the CLI.

Nothing is imported eagerly here, so ``evermind --help`` stays fast.
"""

from __future__ import annotations
