"""Work never lost and a session that comes back (issue 18, items 3-7), in Chromium.

One browser profile (IndexedDB and localStorage survive reloads) is shared by the tests of
this module, which run in order: train and reload before the first step-based checkpoint,
see everything come back and resume; Start with a saved run asks; checked inputs; numbers
with their meaning; the JS API's errors and its effect on the panels.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.conftest import BOOT_TIMEOUT_MS, ROOT, RecordedPage, show, wait_text
from tests.factories import TEXT

TIMEOUT_MS = 240_000
SHOTS = ROOT / "test-results" / "studio-work"
LISTEN = "() => { window.__events = []; window.evermind.on((e) => window.__events.push(e)); }"
CORPUS = "\n\n".join(f"Note {i}. {TEXT[: 600 + 7 * i]}" for i in range(40))


class Studio(RecordedPage):
    """A page on one profile, answering dialogs as told (``answers``), recording them."""

    def __init__(self, browser: object) -> None:
        super().__init__(browser)
        self.dialogs: list[tuple[str, str]] = []
        self.answers: list[bool] = []
        self.page.on("dialog", self._dialog)

    def _dialog(self, dialog) -> None:  # type: ignore[no-untyped-def]
        self.dialogs.append((dialog.type, dialog.message))
        if dialog.type == "beforeunload" or not self.answers or self.answers.pop(0):
            dialog.accept()
        else:
            dialog.dismiss()

    def wait_ready(self) -> None:
        self.page.wait_for_function("window.__done === true", timeout=BOOT_TIMEOUT_MS)
        boot = self.page.evaluate("window.__evermind")
        assert boot["ok"], f"studio failed to boot: {boot}\n" + "\n".join(self.console[-20:])


@pytest.fixture(scope="module")
def studio(browser, server) -> Iterator[Studio]:
    rec = Studio(browser)
    rec.page.set_viewport_size({"width": 1280, "height": 800})
    rec.page.goto(server.url + "index.html")
    rec.wait_ready()
    yield rec
    rec.close()


def shot(rec: Studio, name: str) -> None:
    """A screenshot for a human to look at (git-ignored)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    rec.page.screenshot(path=str(SHOTS / f"{name}.png"))


def text_of(rec: Studio, selector: str) -> str:
    return rec.page.locator(selector).inner_text()


#: The Compare verdicts (evermind.studio.similarity).
VERDICTS = ("similar", "related", "unclear", "unrelated", "collapsed", "uncalibrated")

#: Steps between step-based checkpoints in the reload test (``checkpoint-every``).
EVERY = 1000


def test_a_reload_before_any_step_checkpoint_keeps_the_run_and_the_whole_session(
    studio: Studio,
) -> None:
    page = studio.page
    show(studio, "data")
    page.fill("#panel-data textarea[name=paste-text]", CORPUS)
    page.fill("#panel-data input[name=paste-name]", "notes.txt")
    page.locator("#panel-data button", has_text="Add pasted text").click()
    wait_text(studio, "#panel-data .sources", r"notes\.txt")
    show(studio, "tokenizer")
    page.fill("#panel-tokenizer input[name=vocab-size]", "300")
    page.click("#tokenizer-train")
    wait_text(studio, "#panel-tokenizer .message", r"Trained")
    show(studio, "train")
    # Before any run this device's speed is unknown, and the form says so.
    assert "not measured yet" in text_of(studio, "#train-eta-before")
    for name, value in (("steps", "400"), ("batch_size", "4"), ("seq_len", "64")):
        page.fill(f"#panel-train input[name={name}]", value)
    assert "400 steps × 4 × 64 = 102,400 training tokens" in text_of(studio, "#train-eta-before")
    # Step-based checkpoints far apart (the default is 25), so the first one comes by time
    # (20 s) on any machine: a fast one reached step 25 first, a quiet one step 28 by 20 s.
    page.evaluate(
        f"document.querySelector('evermind-studio').setAttribute('checkpoint-every', '{EVERY}')"
    )
    page.evaluate(LISTEN)
    page.click("#train-start")
    # The first checkpoint comes by time (20 s), long before a step-based one.
    page.wait_for_function(
        "window.__events.some(e => e.event === 'train-checkpoint')", timeout=TIMEOUT_MS
    )
    saved = page.evaluate("window.__events.find(e => e.event === 'train-checkpoint').step")
    assert 1 <= saved < EVERY, saved
    page.wait_for_function(
        f"window.__events.some(e => e.event === 'train-progress' && e.step > {saved})",
        timeout=TIMEOUT_MS,
    )
    # Steps past the checkpoint are unsaved: leaving the page asks first.
    warned = page.evaluate(
        "(() => { const e = new Event('beforeunload', {cancelable: true});"
        " window.dispatchEvent(e); return e.defaultPrevented; })()"
    )
    assert warned
    wait_text(studio, "#train-runs", rf"step {saved} / 400")
    last = page.evaluate(
        "Math.max(...window.__events.filter(e => e.event === 'train-checkpoint').map(e => e.step))"
    )
    assert last < EVERY, last

    page.reload()
    studio.wait_ready()
    # The whole session came back: the run, its settings, the chart, the panel states.
    runs = text_of(studio, "#train-runs")
    match = re.search(r"step (\d+) / 400", runs)
    assert match and int(match.group(1)) >= saved and "current" in runs, runs
    step = int(match.group(1))
    assert page.locator("#step-data").get_attribute("data-status") == "done"
    assert page.locator("#step-tokenizer").get_attribute("data-status") == "done"
    assert "not trained" not in text_of(studio, "#step-tokenizer")
    assert "notes.txt" in text_of(studio, "#panel-data .sources")
    show(studio, "train")
    assert page.locator("#panel-train input[name=steps]").input_value() == "400"
    assert page.locator("#panel-train input[name=seq_len]").input_value() == "64"
    assert int(page.locator("#panel-train svg.chart").get_attribute("data-train-points")) == step
    shot(studio, "train-after-reload")
    assert text_of(studio, "#train-state") == "paused"
    assert page.locator("#train-start").is_enabled()
    assert not page.locator("#panel-train .gate-hint", has_text="tokenizer").first.is_visible()
    # This device's speed was measured during the first steps: the form now gives a time.
    assert re.search(
        r"about .+ at the [\d,]+ tokens/s measured", text_of(studio, "#train-eta-before")
    )
    # It resumes from the checkpoint, keeping the chart's earlier points.
    page.evaluate(LISTEN)
    page.click("#train-resume")
    page.wait_for_function(
        f"window.__events.some(e => e.event === 'train-progress' && e.step === {step + 2})",
        timeout=TIMEOUT_MS,
    )
    assert (
        int(page.locator("#panel-train svg.chart").get_attribute("data-train-points")) >= step + 2
    )
    page.click("#train-pause")
    wait_text(studio, "#train-state", r"^paused$")


def test_start_with_a_saved_run_asks_and_keeps_it(studio: Studio) -> None:
    page = studio.page
    show(studio, "train")
    before = text_of(studio, "#train-runs")
    studio.answers = [False]
    page.click("#train-start")
    wait_text(studio, "#panel-train .message", r"Nothing started")
    kind, words = studio.dialogs[-1]
    assert kind == "confirm" and "is kept under Saved runs" in words, words
    assert text_of(studio, "#train-runs") == before
    assert text_of(studio, "#train-state") == "paused"
    # Accepting starts a new run; the old one stays listed, resumable.
    studio.answers = [True]
    page.fill("#panel-train input[name=steps]", "3")
    page.click("#train-start")
    wait_text(studio, "#train-state", r"^finished$")
    items = page.locator("#train-runs li")
    wait_text(studio, "#train-runs", r"step 3 / 3")
    assert items.count() == 2
    assert "step 3 / 3" in items.nth(0).inner_text() and "current" in items.nth(0).inner_text()
    assert "/ 400" in items.nth(1).inner_text()
    shot(studio, "train-saved-runs")


def test_numbers_come_with_their_meaning(studio: Studio) -> None:
    page = studio.page
    show(studio, "train")
    meaning = text_of(studio, "#train-meaning")
    assert "uniform guess over the 300-token vocabulary has perplexity 300" in meaning, meaning
    assert "at the run's first step the perplexity was" in meaning
    assert text_of(studio, "#train-eval") != "–"
    show(studio, "try")
    bar = page.locator("#try-sim-bar")
    assert bar.evaluate("b => b.value === b.min") and bar.get_attribute("data-verdict") == "none"
    page.click("#try-similarity")
    wait_text(studio, "#try-cosine", r"^-?\d\.\d{3}$")
    verdict = bar.get_attribute("data-verdict")
    assert verdict in VERDICTS, verdict
    words = text_of(studio, "#try-sim-meaning")
    assert re.search(r"cache hit needs|Not calibrated|does not separate", words), words
    shot(studio, "try-meaning")
    page.click("#try-evaluate")
    ev = wait_text(studio, "#try-eval-meaning", r"perplexity")
    assert "uniform guess over the 300-token vocabulary" in ev, ev
    # A vocabulary smaller than asked says why.
    show(studio, "tokenizer")
    page.fill("#panel-tokenizer input[name=vocab-size]", "8000")
    page.click("#tokenizer-train")
    short = wait_text(studio, "#tokenizer-short", r"smaller than asked")
    assert "asked for 8,000" in short and "distinct merges" in short, short
    shot(studio, "tokenizer-short")


def test_bad_files_are_refused_and_a_large_one_gets_an_eta(studio: Studio, tmp_path: Path) -> None:
    page = studio.page
    show(studio, "data")
    noise = tmp_path / "noise.txt"
    noise.write_bytes(random.Random(0).randbytes(36_000))
    page.set_input_files("#data-files", str(noise))
    refused = wait_text(studio, "#panel-data .message", r"refused as binary")
    assert "NUL" in refused, refused
    assert "noise.txt" not in text_of(studio, "#panel-data .sources")
    broken = tmp_path / "broken.csv"
    broken.write_text('id,body\n1,fine\n2,"never closed\n3,more\n')
    page.set_input_files("#data-files", str(broken))
    problem = wait_text(studio, "#panel-data .message", r"CSV problem")
    assert "line 3" in problem, problem
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("id,body\n1,ok\n2,too,many\n")
    page.set_input_files("#data-files", str(ragged))
    assert "line 3 has 3 fields" in wait_text(studio, "#panel-data .message", r"fields")
    big = tmp_path / "big.txt"
    big.write_text((CORPUS + "\n\n") * (2_100_000 // len(CORPUS) + 1))
    page.set_input_files("#data-files", str(big))
    warning = wait_text(studio, "#data-size-warning", r"Large corpus")
    assert re.search(r"One pass over it: about .+ at the [\d,]+ tokens/s measured", warning), (
        warning
    )
    shot(studio, "data-checks")


def test_the_js_api_reports_failures_and_the_panels_follow_it(studio: Studio) -> None:
    page = studio.page
    result = page.evaluate(
        """async () => {
          const el = window.studio; const errors = [];
          window.addEventListener('evermind-error', (e) => errors.push(e.detail));
          const outcomes = [];
          for (const call of [
            () => el.cache.lookup('q', { threshold: 5 }),
            () => el.memory.remember('', ''),
            () => el.push('not a url', ''),
            () => el.generate('x', { max_new_tokens: -1 }),
          ]) {
            try { await call(); outcomes.push('resolved'); }
            catch (err) { outcomes.push(err.name); }
          }
          await el.memory.remember('api.added', 'Added through the JS API', { tags: ['api'] });
          await el.cache.store('what is the api', 'an answer stored by the API');
          return { errors, outcomes };
        }"""
    )
    failed = [o for o in result["outcomes"] if o != "resolved"]
    assert len(result["errors"]) == len(failed) >= 3, result
    assert all(e["message"] and e["text"] for e in result["errors"]), result
    show(studio, "memory")
    wait_text(studio, "#memory-list", r"api\.added")
    assert "1 remembered" in text_of(studio, "#step-memory") or "remembered" in text_of(
        studio, "#step-memory"
    )
    show(studio, "cache")
    assert "what is the api" in text_of(studio, "#cache-last-stored")
    assert page.locator("#step-cache").get_attribute("data-status") == "done"


def test_no_request_left_loopback(studio: Studio) -> None:
    studio.assert_offline()


def test_a_second_visit_starts_python_from_the_first_visits_snapshot(browser, server) -> None:
    """The warm start: the first visit stores a Python memory snapshot (after it is ready);
    the next visit in the same profile boots from it and its Python works as a fresh one."""
    import base64

    from evermind.model.inference import load
    from tests.factories import tiny_package

    rec = RecordedPage(browser)
    try:
        first = rec.page
        first.goto(server.url + "index.html")
        first.wait_for_function("window.__done === true", timeout=BOOT_TIMEOUT_MS)
        assert first.evaluate("window.__evermind.boot.snapshot") == "none"
        first.wait_for_function("window.__snapshotMade === true", timeout=BOOT_TIMEOUT_MS)
        first.close()
        again = rec.context.new_page()
        again.goto(server.url + "index.html")
        again.wait_for_function("window.__done === true", timeout=BOOT_TIMEOUT_MS)
        facts = again.evaluate("window.__evermind")
        assert facts["ok"] and facts["boot"]["snapshot"] == "loaded", facts
        print("python ready from the snapshot:", facts["python_ready_ms"], "ms", facts["boot"])
        # The snapshot's Python opens a package and generates exactly as natively.
        data = tiny_package()
        call = "([fn, kwargs]) => window.evermind.call(fn, kwargs)"
        again.evaluate(call, ["package_load", {"data_b64": base64.b64encode(data).decode()}])
        options = {"max_new_tokens": 8, "temperature": 0.0, "seed": 0}
        got = again.evaluate(call, ["generate", {"prompt": "The quick", **options}])
        assert got["text"] == load(data).complete("The quick", **options).text
    finally:
        rec.close()
