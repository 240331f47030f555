"""The Studio's app logic, running in the tab's worker (and testable natively).

``api.call(name, kwargs_json)`` is the single entry the JS worker uses; each handler is an
async function on a handler module's :class:`~evermind.studio.rpc.Router`, merged once into
:data:`evermind.studio.api.HANDLERS`.
"""
