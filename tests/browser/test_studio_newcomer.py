"""The Studio a newcomer meets (issue 39, item 3), in Chromium.

One page on one browser profile (IndexedDB survives its reloads) is shared by the tests of
this module, which run in order: the corpus and tokenizer come back after a reload before
any training checkpoint, with a notice saying so; a damaged saved draft is dropped whole,
with a notice.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.browser.conftest import BOOT_TIMEOUT_MS, ROOT, RecordedPage, show, wait_text
from tests.factories import TEXT

SHOTS = ROOT / "test-results" / "studio-newcomer"
CORPUS = "\n\n".join(f"Note {i}. {TEXT[: 300 + 7 * i]}" for i in range(30))


class Studio(RecordedPage):
    def wait_ready(self) -> None:
        self.page.wait_for_function("window.__done === true", timeout=BOOT_TIMEOUT_MS)
        boot = self.page.evaluate("window.__evermind")
        assert boot["ok"], f"studio failed to boot: {boot}\n" + "\n".join(self.console[-20:])

    def reload(self) -> None:
        self.page.reload()
        self.wait_ready()

    def text(self, selector: str) -> str:
        return self.page.locator(selector).inner_text()


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


#: Rewrites the stored draft in the page's IndexedDB with `change(draft)` (one transaction).
EDIT_DRAFT = """(change) => new Promise((resolve, reject) => {
  const open = indexedDB.open('evermind-studio');
  open.onerror = () => reject(open.error);
  open.onsuccess = () => {
    const db = open.result;
    const tx = db.transaction('session', 'readwrite');
    const store = tx.objectStore('session');
    const get = store.get('draft');
    get.onsuccess = () => {
      const draft = get.result;
      if (!draft) { reject(new Error('no draft stored')); return; }
      new Function('draft', change)(draft);
      store.put(draft, 'draft');
    };
    tx.oncomplete = () => { db.close(); resolve(true); };
    tx.onerror = () => reject(tx.error);
  };
})"""

HAS_DRAFT = """() => new Promise((resolve, reject) => {
  const open = indexedDB.open('evermind-studio');
  open.onsuccess = () => {
    const db = open.result;
    const get = db.transaction('session').objectStore('session').get('draft');
    get.onsuccess = () => { db.close(); resolve(get.result !== undefined); };
    get.onerror = () => reject(get.error);
  };
  open.onerror = () => reject(open.error);
})"""


def test_a_reload_before_any_checkpoint_brings_back_corpus_and_tokenizer(studio: Studio) -> None:
    page = studio.page
    assert page.locator("#restore-notice").is_hidden()
    show(studio, "data")
    page.fill("#panel-data textarea[name=paste-text]", CORPUS)
    page.fill("#panel-data input[name=paste-name]", "notes.txt")
    page.locator("#panel-data button", has_text="Add pasted text").click()
    wait_text(studio, "#panel-data .sources", r"notes\.txt")
    show(studio, "tokenizer")
    page.fill("#panel-tokenizer input[name=vocab-size]", "300")
    page.click("#tokenizer-train")
    wait_text(studio, "#panel-tokenizer .message", r"Trained")
    vocab = studio.text("#step-tokenizer")

    studio.reload()
    notice = page.locator("#restore-notice")
    assert notice.is_visible() and notice.get_attribute("data-kind") == "restored"
    words = studio.text("#restore-notice-text")
    assert "corpus (1 source," in words and "tokenizer (" in words, words
    assert page.locator("#step-data").get_attribute("data-status") == "done"
    assert page.locator("#step-tokenizer").get_attribute("data-status") == "done"
    assert studio.text("#step-tokenizer") == vocab
    show(studio, "data")
    assert "notes.txt" in studio.text("#panel-data .sources")
    # The restored tokenizer is usable: Train is no longer gated on it.
    show(studio, "train")
    assert page.locator("#train-start").is_enabled()
    shot(studio, "restored-draft")


def test_a_damaged_draft_is_dropped_whole_with_a_notice(studio: Studio) -> None:
    page = studio.page
    # A partial write: the corpus text cut in half (the tokenizer itself is intact).
    page.evaluate(EDIT_DRAFT, "draft.sources[0][1] = draft.sources[0][1].slice(0, 100);")
    studio.reload()
    notice = page.locator("#restore-notice")
    assert notice.is_visible() and notice.get_attribute("data-kind") == "dropped"
    words = studio.text("#restore-notice-text")
    assert "could not be restored" in words and "dropped" in words, words
    # Nothing of it came back: neither the corpus nor the tokenizer.
    assert page.locator("#step-data").get_attribute("data-status") == "todo"
    assert page.locator("#step-tokenizer").get_attribute("data-status") == "todo"
    assert page.evaluate(HAS_DRAFT) is False
    shot(studio, "dropped-draft")
    # The next reload starts empty and quietly.
    studio.reload()
    assert page.locator("#restore-notice").is_hidden()


#: Polls the shadow DOM every 50 ms: the Train panel's messages, the embedder progress shown,
#: and every moment the page said "Finished" while the model could not be used.
WATCH = """() => {
  const root = document.querySelector('evermind-studio').shadowRoot;
  const q = (s) => root.querySelector(s);
  window.__watch = { violations: [], progress: [], messages: [], why: [] };
  const add = (list, text) => { if (text && list[list.length - 1] !== text) list.push(text); };
  window.__watchTimer = setInterval(() => {
    const msg = q('#panel-train .message').textContent;
    add(window.__watch.messages, msg);
    const tryStep = q('#step-try').textContent;
    if (/Finished/.test(msg) && (q('#try-generate').disabled || /needs a model/.test(tryStep)))
      add(window.__watch.violations, `${msg} | ${tryStep}`);
    const p = q('#embedder-progress');
    if (!p.hidden) {
      add(window.__watch.progress, p.textContent);
      add(window.__watch.why, `${q('#try-generate').title} | ${tryStep}`);
    }
  }, 50);
}"""


def add_corpus_and_tokenizer(studio: Studio) -> None:
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


def test_b_finished_only_when_the_model_is_usable_and_centring_shows_progress(
    studio: Studio,
) -> None:
    page = studio.page
    add_corpus_and_tokenizer(studio)
    show(studio, "train")
    for name, value in (("steps", "20"), ("batch_size", "4"), ("seq_len", "32")):
        page.fill(f"#panel-train input[name={name}]", value)
    page.evaluate(WATCH)
    page.click("#train-start")
    page.locator("#embedder-status[data-method=centre]").wait_for(timeout=180_000)
    wait_text(studio, "#panel-train .message", r"^Finished at step 20 of 20")
    page.evaluate("clearInterval(window.__watchTimer)")
    seen = page.evaluate("window.__watch")
    print(seen)
    assert not seen["violations"], seen["violations"]
    assert any(m.startswith("Trained 20 of 20 steps") for m in seen["messages"]), seen
    # The centring step counts its sentences as it goes, not "0 / n" until the end.
    counts = [
        (int(m.group(1)), int(m.group(2)))
        for m in (re.match(r"Centring: (\d+) / (\d+)", t) for t in seen["progress"])
        if m
    ]
    assert any(0 < done < total for done, total in counts), seen["progress"]
    # Meanwhile Generate says why it waits, with the count, and Try is "ready after".
    assert seen["why"] and all(
        "embedder phase is running" in w and "ready after the embedder" in w for w in seen["why"]
    ), seen["why"]
    assert "ready" in studio.text("#panel-train .message")
    assert page.locator("#try-generate").is_enabled()
    assert "model ready" in studio.text("#step-try")


#: What the Try panel calls each verdict, and the colour family it is drawn in.
LABELS = {
    "similar": ("Similar", "ok"),
    "related": ("Related", "ok"),
    "unclear": ("Can't tell", "warn"),
    "unrelated": ("Scores like unrelated texts", "err"),
    "collapsed": ("Not separating yet", "warn"),
    "uncalibrated": ("Not calibrated", "warn"),
}
CSS_COLOUR = """(el) => {
  const probe = document.createElement('span');
  el.parentNode.append(probe);
  const out = {};
  for (const name of ['ok', 'warn', 'err']) {
    probe.style.color = `var(--${name})`;
    out[name] = getComputedStyle(probe).color;
  }
  probe.remove();
  out.label = getComputedStyle(el).color;
  return out;
}"""


def compare(studio: Studio, a: str, b: str) -> dict:
    """The worker's numbers for a pair, then the same pair compared through the Try panel."""
    page = studio.page
    numbers = page.evaluate("([a, b]) => window.evermind.call('similarity', {a, b})", [a, b])
    page.fill("#panel-try textarea[name=sim-a]", a)
    page.fill("#panel-try textarea[name=sim-b]", b)
    page.click("#try-similarity")
    shown = wait_text(studio, "#try-cosine", rf"^{numbers['cosine']:.3f}$")
    wait_text(studio, "#try-sim-meaning", re.escape(numbers["words"][:40]))
    colours = page.locator("#try-sim-label").evaluate(CSS_COLOUR)
    return {"shown": shown, "r": numbers, "colours": colours}


def test_d_the_compare_label_matches_the_embedders_own_unrelated_scores(studio: Studio) -> None:
    show(studio, "try")
    # The pair the user met ("Unrelated" in red at 0.720), and a text with itself.
    for a, b in (
        ("Return the absolute value of a number.", "Compute the magnitude of x."),
        ("Return the absolute value of a number.", "Return the absolute value of a number."),
    ):
        got = compare(studio, a, b)
        r, colours = got["r"], got["colours"]
        print(a, "|", b, {k: r[k] for k in ("cosine", "verdict", "median", "share", "unrelated")})
        assert got["shown"] == f"{r['cosine']:.3f}"
        # The verdict follows from where the cosine falls among unrelated-pair scores.
        if not r["collapsed"] and r["threshold"] is not None:
            expected = (
                "similar"
                if r["cosine"] >= r["threshold"]
                else "related"
                if r["cosine"] > r["unrelated"]
                else "unclear"
                if r["cosine"] > r["median"]
                else "unrelated"
            )
            assert r["verdict"] == expected, r
            assert 0.0 <= r["share"] <= 1.0
        label, family = LABELS[r["verdict"]]
        assert studio.text("#try-sim-label") == label
        assert studio.page.locator("#try-sim-bar").get_attribute("data-verdict") == r["verdict"]
        assert colours["label"] == colours[family], colours
        # Red means "scores like unrelated texts", never a score above their median.
        if colours["label"] == colours["err"]:
            assert r["cosine"] <= r["median"], r
        assert studio.text("#try-sim-meaning") == r["words"]
    shot(studio, "compare-1280")


#: Line boxes of an element's text and its text's own width: a word broken letter by letter
#: ("1.00e-9" stacked) has as many lines as letters and a box narrower than its text.
LINES = r"""(el) => {
  const range = document.createRange();
  range.selectNodeContents(el);
  const rects = [...range.getClientRects()].filter((r) => r.width > 0);
  const tops = new Set(rects.map((r) => Math.round(r.top)));
  const probe = el.cloneNode(true);
  probe.style.cssText = 'position:absolute;visibility:hidden;white-space:nowrap;width:auto';
  el.parentNode.append(probe);
  const natural = probe.getBoundingClientRect().width;
  let longest = 0;
  for (const word of el.textContent.split(/\s+/)) {
    probe.textContent = word;
    longest = Math.max(longest, probe.getBoundingClientRect().width);
  }
  probe.remove();
  const width = el.getBoundingClientRect().width;
  return { lines: tops.size, width, natural, longest, text: el.textContent };
}"""
#: Each step of the strip: whether its whole box is inside the strip's visible box (not
#: clipped by a scroller) and inside the viewport.
STEPS_SEEN = """() => {
  const root = document.querySelector('evermind-studio').shadowRoot;
  const strip = root.querySelector('ol.steps').getBoundingClientRect();
  return [...root.querySelectorAll('button.step')].map((b) => {
    const r = b.getBoundingClientRect();
    return { id: b.id, seen: r.left >= strip.left - 0.5 && r.right <= strip.right + 0.5
      && r.right <= window.innerWidth + 0.5 && r.width > 0 };
  });
}"""


def one_line(studio: Studio, selector: str) -> dict:
    box = studio.page.locator(selector).first.evaluate(LINES)
    assert box["lines"] == 1 and box["width"] + 0.5 >= box["natural"], (selector, box)
    return box


def whole_words(studio: Studio, selector: str) -> dict:
    """A sentence may wrap between words, never inside one."""
    box = studio.page.locator(selector).first.evaluate(LINES)
    words = len(box["text"].split())
    assert box["width"] + 0.5 >= box["longest"] and box["lines"] <= words, (selector, box)
    return box


@pytest.mark.parametrize("width", [390, 1280])
def test_e_layout_keys_scores_title_and_steps_stay_whole(studio: Studio, width: int) -> None:
    page = studio.page
    page.set_viewport_size({"width": width, "height": 800})
    # The title is one line, never "Evermin / d Studio".
    one_line(studio, ".topbar h1")
    # Every step of the strip is visible (no step hidden behind a silent scroll).
    hidden = [s["id"] for s in page.evaluate(STEPS_SEEN) if not s["seen"]]
    assert not hidden, f"steps not visible at {width}px: {hidden}"
    page.evaluate("window.scrollTo(0, 0)")
    shot(studio, f"steps-{width}")
    # A recall card: the key, the match words and the score each stay whole; the sentence
    # on how it was found wraps between words only.
    show(studio, "memory")
    if not page.locator("#memory-list li[data-key='user.prefers.language']").count():
        page.fill("#panel-memory input[name=memory-key]", "user.prefers.language")
        page.fill(
            "#panel-memory textarea[name=memory-content]",
            "The user writes Python and prefers short answers.",
        )
        page.click("#memory-remember")
        wait_text(studio, "#memory-list", r"user\.prefers\.language")
    page.fill("#panel-memory input[name=memory-query]", "Which language does the user write?")
    page.evaluate(
        "document.querySelector('evermind-studio').shadowRoot"
        ".querySelector('#memory-hits').replaceChildren()"
    )
    page.click("#memory-recall")
    page.locator("#memory-hits .hit-head").first.wait_for()
    hit = "#memory-hits li[data-key='user.prefers.language']"
    card = f"{hit} .hit-head"
    boxes = {part: one_line(studio, f"{card} {part}") for part in ("code", ".match", ".score")}
    boxes["why"] = whole_words(studio, f"{hit} .hit-why")
    # With a trained model the ranking label is the convex one: it waits behind Details.
    seen = page.locator(hit).inner_text()
    assert "convex" not in seen and "mmr" not in seen and "Ranked by meaning" in seen, seen
    shot(studio, f"layout-{width}")
    # The details on demand: the ranking label and the raw numbers, once opened.
    page.locator(f"{hit} details.hit-details summary").click()
    assert "convex" in page.locator(f"{hit} details.hit-details").inner_text()
    shot(studio, f"recall-details-{width}")
    # The score the user saw stacked: the same card with a tiny score's text stays whole.
    page.locator(f"{card} .score").evaluate("el => { el.textContent = '1.00e-9'; }")
    boxes["1.00e-9"] = one_line(studio, f"{card} .score")
    print(width, boxes)
