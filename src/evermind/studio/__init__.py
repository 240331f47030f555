"""The Studio's app logic, running in the tab's worker (and testable natively).

``api.call(name, kwargs_json)`` is the single entry the JS worker uses; each handler is an
async function registered in :data:`evermind.studio.api.HANDLERS`.
"""
