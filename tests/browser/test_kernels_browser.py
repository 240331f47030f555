"""Every kernel's small cases, run in headless Chromium through Pyodide and navigator.gpu.

The inputs and the expected outputs come from the numpy references on this side; the tab
only runs the launchers (see evermind.kernels.harness) and sends the raw bytes back.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from tests.browser.conftest import RecordedPage, open_studio
from tests.kernel_cases import all_cases

CASES = all_cases()


@pytest.fixture(scope="module")
def studio(browser, server) -> Iterator[RecordedPage]:
    rec = open_studio(browser, server)
    assert rec.page.evaluate("window.__evermind.ok"), rec.console
    yield rec
    rec.assert_offline()
    rec.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kernel_case_in_browser(studio: RecordedPage, case) -> None:
    outputs = studio.page.evaluate(
        "(spec) => window.evermind.call('kernel_case', {spec})", case.spec(b64=True)
    )
    case.check({name: base64.b64decode(data) for name, data in outputs.items()})
