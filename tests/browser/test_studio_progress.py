"""Long Studio operations say what they are doing at once, with a time left, and cancel
(issue 39, item 3), in Chromium on SwiftShader WebGPU.

One page, in order: the default corpus's harvest shows bytes done, the time so far and the
time left, and its Cancel adds nothing; Stop during training changes the state, the message
and the Start button's reason at once ("stopping", not "Training is running." until the
checkpoint is written), then reads "Stopped at step N"; Compare's first measurement shows a
progress line (sentences done of the total, the time so far, the time left) and its Cancel
stops the work, leaves the page usable and keeps nothing, so the next Compare measures
afresh and completes; a reload says what it restored: the run at its step, that its
embedder phase had not run, the memory and the cached answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.browser.conftest import RecordedPage, open_studio, show, wait_text
from tests.factories import TEXT

CORPUS = "\n\n".join(f"Note {i}. {TEXT[: 300 + 7 * i]}" for i in range(30))
ROOT = "document.querySelector('evermind-studio').shadowRoot"
#: Collects every distinct text of the Try panel's progress line every 20 ms.
WATCH_PROGRESS = f"""() => {{
  const line = {ROOT}.querySelector('#try-sim-progress');
  window.__seen = [];
  window.__seenTimer = setInterval(() => {{
    const t = line.hidden ? '' : line.textContent;
    if (t && window.__seen[window.__seen.length - 1] !== t) window.__seen.push(t);
  }}, 20);
}}"""


@pytest.fixture(scope="module")
def studio(browser, server) -> Iterator[RecordedPage]:
    rec = open_studio(browser, server)
    try:
        yield rec
        rec.assert_offline()
    finally:
        rec.close()


def test_0_the_default_corpus_shows_bytes_and_time_left_and_cancels(
    studio: RecordedPage,
) -> None:
    page = studio.page
    show(studio, "data")
    line = page.locator("#data-default-progress")
    assert line.is_hidden()
    page.locator("#panel-data button", has_text="Use the default corpus").click()
    # Bytes harvested of at most the corpus size, the time so far and the time left.
    text = wait_text(
        studio,
        "#data-default-progress",
        r"docstrings: [\d.]+ (kB|MB) / 1\.0 MB · \d+ s so far · about .+ left",
        timeout=120_000,
    )
    print(text)
    line.locator("button", has_text="Cancel").click()
    said = wait_text(studio, "#panel-data .message", r"^Cancelled", timeout=60_000)
    assert "not added" in said, said
    assert line.is_hidden()
    # Nothing of the harvest was kept: no source, the Data step still to do.
    assert page.locator("#step-data").get_attribute("data-status") != "done"
    assert "Python standard library" not in page.locator("#panel-data .sources").inner_text()


def test_a_stop_says_stopping_at_once_then_stopped(studio: RecordedPage) -> None:
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
    for name, value in (("steps", "400"), ("batch_size", "4"), ("seq_len", "32")):
        page.fill(f"#panel-train input[name={name}]", value)
    page.click("#train-start")
    page.wait_for_function(
        f"Number(({ROOT}.querySelector('#train-step').textContent.split('/')[0])) >= 2",
        timeout=180_000,
    )
    assert studio.page.locator("#train-state").inner_text() == "running"
    page.click("#train-stop")
    # At once (well before the step and the checkpoint end): state, message, Start's reason.
    page.wait_for_function(
        f"{ROOT}.querySelector('#train-state').textContent === 'stopping'", timeout=1_000
    )
    said = page.locator("#panel-train .message").inner_text()
    assert said.startswith("Stopping: finishing the current step"), said
    reason = page.locator("#train-start").get_attribute("title")
    assert reason and reason.startswith("Stopping") and "Training is running" not in reason
    assert page.locator("#train-stop").is_disabled() and page.locator("#train-pause").is_disabled()
    stopped = wait_text(studio, "#panel-train .message", r"^Stopped at step \d+ of 400")
    assert page.locator("#train-state").inner_text() == "stopped", stopped
    assert page.locator("#train-start").is_enabled()


def test_b_compare_shows_progress_with_time_left_and_cancels(studio: RecordedPage) -> None:
    page = studio.page
    show(studio, "try")
    page.fill("#panel-try textarea[name=sim-a]", "Return the absolute value of a number.")
    page.fill("#panel-try textarea[name=sim-b]", "Compute the magnitude of x.")
    line = page.locator("#try-sim-progress")
    assert line.is_hidden()
    page.click("#try-similarity")
    # The first batch is under way: its count is known (0 of the total), then Cancel.
    page.locator("#try-sim-progress[data-total]").wait_for(timeout=60_000)
    total = int(line.get_attribute("data-total") or 0)
    assert total >= 16, total
    line.locator("button", has_text="Cancel").click()
    said = wait_text(studio, "#try-sim-message", r"Compare cancelled", timeout=60_000)
    assert "nothing was measured" in said
    assert line.is_hidden() and page.locator("#try-cosine").inner_text() == "–"
    assert page.locator("#try-similarity").is_enabled()
    # Nothing was kept: the next Compare measures from the start and completes, counting up
    # with the time so far and the time left.
    page.evaluate(WATCH_PROGRESS)
    page.click("#try-similarity")
    wait_text(studio, "#try-cosine", r"^-?\d\.\d{3}$", timeout=120_000)
    page.evaluate("clearInterval(window.__seenTimer)")
    seen = page.evaluate("window.__seen")
    print(seen)
    counts = [
        (int(m.group(1)), int(m.group(2)))
        for m in (re.search(r"(\d+) / (\d+) sentences", t) for t in seen)
        if m
    ]
    assert any(0 < done < total_ for done, total_ in counts), seen
    assert all(total_ == total for _, total_ in counts), seen
    assert any(re.search(r"so far · about \d+ (s|min \d+ s) left", t) for t in seen), seen
    assert line.is_hidden()
    assert page.locator("#try-sim-label").inner_text()


def test_c_a_reload_says_it_restored_the_run_memories_and_cache(studio: RecordedPage) -> None:
    page = studio.page
    stopped_at = int(page.locator("#train-step").inner_text().split("/")[0])
    show(studio, "memory")
    page.fill("#panel-memory input[name=memory-key]", "user.language")
    page.fill("#panel-memory textarea[name=memory-content]", "The user writes Python.")
    page.click("#memory-remember")
    wait_text(studio, "#memory-list", r"user\.language")
    show(studio, "cache")
    page.fill("#panel-cache input[name=cache-store-query]", "convert 100 USD to EUR")
    page.fill("#panel-cache textarea[name=cache-store-response]", "About 92 EUR.")
    page.locator("#panel-cache button", has_text="Store").click()
    wait_text(studio, "#panel-cache .message", r"^Stored")
    page.reload()
    page.wait_for_function("window.__done === true", timeout=120_000)
    notice = page.locator("#restore-notice")
    notice.wait_for(state="visible", timeout=60_000)
    assert notice.get_attribute("data-kind") == "restored"
    words = page.locator("#restore-notice-text").inner_text()
    print(words)
    assert f"the run at step {stopped_at} of 400" in words, words
    assert "its embedder phase had not run" in words, words
    assert words.endswith("; also 1 memory and 1 cached answer."), words
    # What it says came back is there: the model's step and the memory.
    assert page.locator("#train-step").inner_text().startswith(f"{stopped_at} /")
    show(studio, "memory")
    wait_text(studio, "#memory-list", r"user\.language")


def test_d_the_embedder_phase_cancels_and_keeps_nothing(studio: RecordedPage) -> None:
    page = studio.page
    show(studio, "train")
    before = page.evaluate("() => window.evermind.call('embedder_info', {})")
    assert before["method"] is None, before
    page.click("#train-embedder")
    cancel = page.locator("#embedder-cancel")
    cancel.wait_for(state="visible", timeout=60_000)  # the centring has begun
    assert page.locator("#embedder-progress").inner_text().startswith("Centring: ")
    cancel.click()
    said = wait_text(studio, "#embedder-status", r"^Embedder phase cancelled", timeout=60_000)
    assert "nothing of it was kept" in said, said
    assert cancel.is_hidden() and page.locator("#embedder-progress").is_hidden()
    after = page.evaluate("() => window.evermind.call('embedder_info', {})")
    assert after["method"] is None and after["fingerprint"] == before["fingerprint"], after
    # The phase runs again, whole.
    page.click("#train-embedder")
    wait_text(studio, "#embedder-status", r"^Centred embedder", timeout=120_000)
    assert page.evaluate("() => window.evermind.call('embedder_info', {})")["method"] == "centre"


#: Makes the worker's answer to `fn` arrive `ms` later (a slow call, as on a busy machine).
SLOW_CALL = """([fn, ms]) => {
  const rt = window.evermind;
  const call = rt.call.bind(rt);
  rt.call = async (name, kwargs) => {
    if (name === fn) await new Promise((resolve) => setTimeout(resolve, ms));
    return call(name, kwargs);
  };
}"""


def test_e_slow_work_says_it_is_still_working_then_clears(studio: RecordedPage) -> None:
    page = studio.page
    show(studio, "memory")
    page.evaluate(SLOW_CALL, ["memory_recall", 4_000])
    page.fill("#panel-memory input[name=memory-query]", "Which language does the user write?")
    page.click("#memory-recall")
    said = wait_text(
        studio, "#panel-memory .message", r"^Recall: still working… \d+ s so far$", timeout=10_000
    )
    print(said)
    page.locator("#memory-recall:not([aria-busy])").wait_for(timeout=30_000)
    wait_text(studio, "#memory-hits", r"user\.language")
    # Done: the line it wrote is gone (the hits say the rest).
    assert page.locator("#panel-memory .message").is_hidden()


def test_f_tokenizer_training_cancels_in_the_tab(studio: RecordedPage) -> None:
    """The tokenizer trains in synchronous loops; its Cancel still gets through (the first
    pass and the merge loop let the page's call in every 0.2 s) and no tokenizer is kept."""
    page = studio.page
    # Made-up words of many distinct letter pairs: thousands of merges to learn.
    syllables = [
        "ka",
        "to",
        "mi",
        "re",
        "su",
        "lo",
        "pe",
        "an",
        "ri",
        "go",
        "nu",
        "ve",
        "shi",
        "da",
        "ex",
        "or",
        "ba",
        "ty",
        "qu",
        "zen",
    ]
    words = [
        syllables[i % 20] + syllables[(i // 20) % 20] + syllables[(i * 7 // 400) % 20] + str(i % 97)
        for i in range(8000)
    ]
    big = "\n".join(
        " ".join(words[(n * 13 + k * 101) % 8000] for k in range(12)) for n in range(2500)
    )
    show(studio, "data")
    file = {"name": "big.txt", "mimeType": "text/plain", "buffer": big.encode()}
    page.set_input_files("#data-files", files=[file])  # a file chosen in the Data panel
    wait_text(studio, "#panel-data .sources", r"big\.txt", timeout=60_000)
    show(studio, "tokenizer")
    page.fill("#panel-tokenizer input[name=vocab-size]", "4000")
    page.click("#tokenizer-train")
    # Cancel at once: it lands in the first pass (counting the words) or at the first count
    # of merges, and the training stops there (test_studio_cancel.py pins the first pass).
    page.click("#tokenizer-cancel")
    said = wait_text(studio, "#panel-tokenizer .message", r"^Cancelled: ", timeout=60_000)
    print(said)
    assert page.locator("#tokenizer-cancel").is_hidden()
    assert page.locator("#step-tokenizer").get_attribute("data-status") != "done"
    info = page.evaluate("() => window.evermind.call('tokenizer_info', {}).catch((e) => e.message)")
    assert isinstance(info, str) and "train a tokenizer first" in info, info
