// Tokenizer panel: vocabulary size, Train (with a progress bar fed by tokenizer-progress
// events), the result's numbers, and example encodings drawn as one chip per piece.
import { h, field, formatCount } from "../dom.js";
import { timeWords } from "../progress.js";

/** Makes whitespace inside a piece visible: "·" for a space, "↵" for a newline. */
function showPiece(piece) {
  return String(piece).replace(/Ġ| /g, "·").replace(/Ċ|\n/g, "↵").replace(/ĉ|\t/g, "⇥");
}

/** A row of chips, one per token piece, with the id in the tooltip. */
export function chips(pieces, ids = []) {
  return h(
    "ol",
    { class: "chips", "aria-label": `${pieces.length} tokens` },
    ...pieces.map((p, i) => h("li", { class: `chip c${i % 6}`, title: ids[i] !== undefined ? `id ${ids[i]}` : "", text: showPiece(p) })),
  );
}

export function tokenizerPanel(app) {
  const message = h("p", { class: "message", role: "status", "aria-live": "polite", hidden: true });
  const vocab = field("Vocabulary size", h("input", { type: "number", name: "vocab-size", min: 260, max: 65536, step: 1, value: 2048, inputmode: "numeric" }), "Bigger vocabularies need more text; 512–4096 suits a small corpus.");
  vocab.field.classList.add("narrow");
  const hint = h("small", { class: "hint gate-hint", hidden: true });
  const trainButton = app.gate(
    h("button", { type: "button", class: "primary", id: "tokenizer-train", text: "Train tokenizer", dataset: { ownProgress: "true" } }),
    () => (!app.state.corpus?.bytes ? "Add data first (step 1)." : app.state.training === "running" ? "Training is running." : null),
    hint,
  );
  const bar = h("progress", { id: "tokenizer-progress", max: 1, value: 0, "aria-label": "Tokenizer training progress" });
  const barText = h("span", { class: "progress-text", text: "" });
  // The training checks for a cancel between pieces of the first pass (counting the words)
  // and between merges (in the tab it lets the page's call in).
  const cancel = h("button", { type: "button", class: "quiet small", id: "tokenizer-cancel", text: "Cancel", hidden: true });
  cancel.addEventListener("click", () => {
    cancel.disabled = true;
    barText.textContent = "Cancelling…";
    app.call("operation_cancel", { name: "tokenizer" }).catch(() => {});
  });
  const results = h("div", { class: "stats" });
  // Why the vocabulary came out smaller than asked (the corpus had fewer distinct merges).
  const shortNote = h("p", { class: "warning", id: "tokenizer-short", role: "status", hidden: true });
  const examples = h("div", { class: "examples" });
  const tryInput = field("Encode your own text", h("input", { type: "text", name: "encode-text", placeholder: "Type something…", autocomplete: "off" }));
  const tryOut = h("div", { class: "encoded", "aria-live": "polite" });
  const tryButton = app.gate(h("button", { type: "button", text: "Encode" }), () => (app.state.tokenizer ? null : "Train the tokenizer first."));

  let started = performance.now(); // when the current stage began (the time left)
  let stage = null; // "count" (the first pass) or "merge"
  trainButton.addEventListener("click", () => app.run(trainButton, async () => {
    const size = Number(vocab.input.value);
    bar.value = 0;
    bar.removeAttribute("value"); // indeterminate until the first progress event
    barText.textContent = "Starting…";
    started = performance.now();
    stage = null;
    cancel.disabled = false;
    cancel.hidden = false;
    let result;
    try {
      result = await app.trainTokenizer(size);
    } catch (err) {
      if (err?.name !== "Cancelled") throw err;
      bar.max = 1;
      bar.value = 0;
      barText.textContent = "";
      app.say(message, app.state.tokenizer ? "Cancelled: the tokenizer is the one you had." : "Cancelled: no tokenizer was trained.");
      return;
    } finally {
      cancel.hidden = true;
    }
    bar.max = 1;
    bar.value = 1;
    barText.textContent = `Done in ${result.seconds?.toFixed?.(1) ?? "?"} s`;
    app.say(message, `Trained ${formatCount(result.vocab_size)} tokens (${formatCount(result.num_merges)} merges).`, "ok");
    app.say(shortNote, result.short_reason ? `Vocabulary smaller than asked: ${result.short_reason}` : "");
  }, message));

  const encode = () => app.run(tryButton, async () => {
    const r = await app.call("tokenizer_encode", { text: tryInput.input.value });
    tryOut.replaceChildren(chips(r.pieces, r.ids), h("small", { class: "hint", text: `${r.ids.length} tokens for ${tryInput.input.value.length} characters` }));
  }, message);
  tryButton.addEventListener("click", encode);
  tryInput.input.addEventListener("keydown", (e) => { if (e.key === "Enter" && !tryButton.disabled) encode(); });

  const element = h(
    "section",
    {},
    h("header", { class: "panel-head" }, h("h2", { id: "heading-tokenizer", text: "Tokenizer" }), h("p", { class: "lead", text: "A byte-level BPE vocabulary learned from your corpus, in Hugging Face tokenizer.json form." })),
    message,
    h(
      "section",
      { class: "sub-card" },
      h("div", { class: "row align-end" }, vocab.field, trainButton, hint),
      h("div", { class: "progress-row" }, bar, barText, cancel),
      results,
      shortNote,
    ),
    h("section", { class: "sub-card" }, h("h3", { text: "Example encodings" }), examples, h("div", { class: "row align-end" }, tryInput.field, tryButton), tryOut),
  );

  let shown = null;
  function update() {
    const t = app.state.tokenizer;
    if (t === shown) return;
    shown = t;
    app.say(shortNote, t?.short_reason ? `Vocabulary smaller than asked: ${t.short_reason}` : "");
    if (!t) {
      results.replaceChildren();
      examples.replaceChildren(h("p", { class: "hint", text: "Encodings of a few corpus lines appear here after training." }));
      return;
    }
    const stat = (label, value) => h("div", { class: "stat" }, h("span", { class: "stat-label", text: label }), h("span", { class: "stat-value", text: value }));
    results.replaceChildren(
      stat("Vocabulary", formatCount(t.vocab_size)),
      stat("Merges", formatCount(t.num_merges)),
      stat("Corpus tokens", formatCount(t.tokens)),
      stat("Train / held-out", `${formatCount(t.train_tokens)} / ${formatCount(t.held_out_tokens)}`),
      ...(t.seconds != null ? [stat("Time", `${Number(t.seconds).toFixed(1)} s`)] : []),
    );
    examples.replaceChildren(
      ...(t.examples ?? []).map((ex) => h("figure", { class: "example" }, h("figcaption", { text: ex.text }), chips(ex.pieces, ex.ids))),
    );
  }

  return {
    id: "tokenizer",
    title: "Tokenizer",
    element,
    update,
    onEvent(e) {
      if (e.event === "tokenizer-progress" && e.total > 0 && !(cancel.disabled && !cancel.hidden)) {
        bar.max = e.total;
        bar.value = e.done;
        // The first pass counts the words (characters read); then the merges.
        if (e.stage === "count") {
          if (stage !== "count") started = performance.now();
          barText.textContent = `Counting words: ${formatCount(e.done)} / ${formatCount(e.total)} characters${timeWords(e.done, e.total, started)}`;
        } else {
          if (stage === "count") started = performance.now();
          barText.textContent = `${formatCount(e.done)} / ${formatCount(e.total)}${timeWords(e.done, e.total, started)}`;
        }
        stage = e.stage ?? "merge";
      }
    },
    status: () => (app.state.tokenizer ? "done" : app.state.tokenizerRunning ? "active" : "todo"),
    summary: () => (app.state.tokenizer ? `${formatCount(app.state.tokenizer.vocab_size)} tokens` : app.state.tokenizerRunning ? "training…" : "not trained"),
  };
}
