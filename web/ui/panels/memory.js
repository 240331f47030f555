// Memory panel: remember (key, content, tags, importance), recall with scores and how each
// hit was ranked, forget, and the most recent entries. Stored in this browser (IndexedDB),
// embedded by the tab's own model when one is trained or opened (lexical ranking otherwise).
// Every call goes to one namespace (empty: "studio", where the Data panel sends files).
import { h, field, formatNumber } from "../dom.js";
import { ProgressLine } from "../progress.js";

const splitTags = (text) => text.split(",").map((t) => t.trim()).filter(Boolean);
// What write-through cognition did with a remember, in plain words (the summary follows).
const OUTCOME = {
  augment: "Remembered as a new memory",
  confirm: "Already known, confirmed",
  supersede: "Replaced an older memory (the old value is kept in its history)",
  contested: "Kept both: this may contradict another memory",
  reject: "Not remembered",
  put: "Saved",
};

// The technical side of a hit, on demand: the ranking steps, the raw score and its signals.
const SIGNALS = { bm25: "BM25 (shared words)", cosine: "cosine (meaning)", fused: "fused", rrf: "reciprocal rank", relevance: "relevance (best = 1)", importance_factor: "importance factor", recency_factor: "recency factor" };
function hitDetails(hit) {
  const row = (label, value) => [h("dt", { text: label }), h("dd", { text: value })];
  const signals = Object.entries(hit.signals ?? {}).filter(([name]) => SIGNALS[name]);
  return h(
    "details",
    { class: "hit-details" },
    h("summary", { text: "Details" }),
    h(
      "dl",
      { class: "facts" },
      h("dt", { text: "Ranked by" }),
      h("dd", {}, h("span", { class: "ranked-by", text: hit.ranked_by })),
      row("Score", formatNumber(hit.score, 3)),
      ...signals.map(([name, value]) => row(SIGNALS[name], formatNumber(value, 3))),
    ),
  );
}

export function memoryPanel(app) {
  const message = h("p", { class: "message", role: "status", "aria-live": "polite", hidden: true });
  const namespaceField = field("Namespace", h("input", { type: "text", name: "memory-namespace", autocomplete: "off", placeholder: "studio", spellcheck: "false" }), "Empty: studio, where the Data panel sends files.");
  const namespace = () => namespaceField.input.value.trim() || null;
  const key = field("Key", h("input", { type: "text", name: "memory-key", autocomplete: "off", placeholder: "user.prefers.language" }));
  const content = field("Content", h("textarea", { name: "memory-content", rows: 3, placeholder: "The user writes Python and prefers short answers." }));
  const tags = field("Tags", h("input", { type: "text", name: "memory-tags", autocomplete: "off", placeholder: "preferences, profile" }), "Comma-separated.");
  const importance = field("Importance", h("input", { type: "range", name: "memory-importance", min: 0, max: 1, step: 0.05, value: 0.5 }));
  const rememberHint = h("small", { class: "hint gate-hint", hidden: true });
  const remember = app.gate(
    h("button", { type: "button", class: "primary", id: "memory-remember", text: "Remember" }),
    () => (key.input.value.trim() && content.input.value.trim() ? null : "Enter a key and some content."),
    rememberHint,
  );
  for (const input of [key.input, content.input]) input.addEventListener("input", () => app.refresh());

  const query = field("Query", h("input", { type: "search", name: "memory-query", autocomplete: "off", placeholder: "What language does the user like?" }));
  const topK = field("Top k", h("input", { type: "number", name: "memory-top-k", min: 1, max: 50, value: 5 }));
  topK.field.classList.add("tiny");
  const recall = app.gate(h("button", { type: "button", id: "memory-recall", text: "Recall" }), () => (query.input.value.trim() ? null : "Type a query."));
  query.input.addEventListener("input", () => app.refresh());
  const hits = h("ol", { class: "hits", id: "memory-hits", "aria-live": "polite" });
  // Before a recall or a remember ranks by meaning, the memories the model has not embedded
  // yet (all of them after a new model) are embedded: counted here, and Cancel stops it
  // between batches (the recall or the remember then does nothing).
  const indexProgress = new ProgressLine({
    id: "memory-progress",
    label: "Embedding the stored memories for this model",
    unit: "memories",
    onCancel: () => app.call("operation_cancel", { name: "memory" }).catch(() => {}),
  });
  /** Runs `work` (a recall or a remember): its embedding shows on the progress line; a Cancel
   * of it says `cancelled` and resolves with null. */
  const cancellable = (work, cancelled) =>
    indexProgress.run(work, () => app.say(message, cancelled));
  const recent = h("ul", { class: "hits compact", id: "memory-list" });

  const forgetButton = (k) => {
    const b = app.gate(h("button", { type: "button", class: "quiet small", "aria-label": `Forget ${k}`, text: "Forget" }), () => null);
    b.addEventListener("click", () => app.run(b, async () => {
      const r = await app.call("memory_forget", { key: k, namespace: namespace() });
      app.say(message, r.forgotten ? `Forgot ${k}.` : `${k} was not stored.`, r.forgotten ? "ok" : "");
      for (const li of hits.querySelectorAll("li")) if (li.dataset.key === k) li.remove();
      await list();
    }, message));
    return b;
  };

  async function list() {
    const r = await app.call("memory_list", { limit: 20, namespace: namespace() });
    app.setState({ memoryCount: r.items.length }, { share: false });
    recent.replaceChildren(
      ...(r.items.length
        ? r.items.map((it) => h("li", { dataset: { key: it.key } }, h("code", { text: it.key }), h("span", { class: "hit-content", text: it.content }), ...(it.tags ?? []).map((t) => h("span", { class: "tag", text: t })), forgetButton(it.key)))
        : [h("li", { class: "hint", text: "Nothing remembered yet." })]),
    );
  }

  remember.addEventListener("click", () => app.run(remember, async () => {
    const k = key.input.value.trim();
    const r = await cancellable(
      () => app.call("memory_remember", { key: k, content: content.input.value, tags: splitTags(tags.input.value), importance: Number(importance.input.value), namespace: namespace() }),
      `Remember cancelled: ${k} was not written. The memories embedded before the cancel keep their vectors; the next recall or remember embeds the rest.`,
    );
    if (!r) return;
    app.say(message, `${OUTCOME[r.action] ?? "Done"}. ${r.summary}`, r.action === "reject" || r.action === "contested" ? "" : "ok");
    if (r.action === "reject") return;
    key.input.value = "";
    content.input.value = "";
    tags.input.value = "";
    await list();
  }, message));

  const doRecall = () => app.run(recall, async () => {
    const r = await cancellable(
      () => app.call("memory_recall", { query: query.input.value, top_k: Number(topK.input.value), namespace: namespace() }),
      "Recall cancelled: nothing was recalled. The memories embedded before the cancel keep their vectors; the next recall embeds the rest.",
    );
    if (!r) {
      hits.replaceChildren();
      return;
    }
    hits.replaceChildren(
      ...(r.hits.length
        ? r.hits.map((hit) => h(
          "li",
          { dataset: { key: hit.key } },
          h(
            "div",
            { class: "hit-head" },
            h("code", { text: hit.key }),
            h("span", { class: "match", dataset: { level: hit.match.level }, text: hit.match.words }),
            h("span", { class: "score", title: "This hit's score as a share of the best hit's", text: hit.match.percent }),
            forgetButton(hit.key),
          ),
          hit.source ? h("small", { class: "hint hit-source", text: `from ${hit.source}` }) : null,
          h("p", { class: "hit-content", text: hit.content }),
          h("div", {}, ...(hit.tags ?? []).map((t) => h("span", { class: "tag", text: t }))),
          h("p", { class: "hint hit-why", text: hit.match.why }),
          hitDetails(hit),
        ))
        : [h("li", { class: "hint", text: "No memories match." })]),
    );
  }, message);
  recall.addEventListener("click", doRecall);
  query.input.addEventListener("keydown", (e) => { if (e.key === "Enter" && !recall.disabled) doRecall(); });

  const element = h(
    "section",
    {},
    h("header", { class: "panel-head" }, h("h2", { id: "heading-memory", text: "Memory" }), h("p", { class: "lead", text: "An agent memory kept in this browser. Recall mixes keyword and meaning (once a model is trained or a package opened) and says how each hit was ranked." })),
    message,
    indexProgress.element,
    h("div", { class: "row align-end" }, namespaceField.field),
    h(
      "div",
      { class: "grid-2" },
      h("section", { class: "sub-card" }, h("h3", { text: "Remember" }), key.field, content.field, h("div", { class: "grid-2 tight" }, tags.field, importance.field), h("div", { class: "row" }, remember, rememberHint)),
      h("section", { class: "sub-card" }, h("h3", { text: "Recall" }), h("div", { class: "row align-end" }, query.field, topK.field, recall), hits),
    ),
    h("section", { class: "sub-card" }, h("h3", { text: "Recent" }), recent),
  );

  let listed = false;
  namespaceField.input.addEventListener("change", () => {
    hits.replaceChildren();
    if (app.state.phase === "ready") list().catch((err) => app.say(message, String(err.message), "error"));
  });
  return {
    id: "memory",
    title: "Memory",
    element,
    onEvent(e) {
      if (e.event === "memory-progress") {
        if (e.done >= e.total) indexProgress.finish();
        else {
          if (indexProgress.element.hidden) indexProgress.start();
          indexProgress.update(e.done, e.total);
        }
      }
      // A memory changed by the JS API (or another Studio on this page) is listed here too.
      if (e.event === "studio-data" && e.fn.startsWith("memory_") && app.state.phase === "ready") {
        listed = true;
        list().catch((err) => app.say(message, String(err.message), "error"));
      }
    },
    onShow() {
      if (!listed && app.state.phase === "ready") {
        listed = true;
        list().catch((err) => { listed = false; app.say(message, String(err.message), "error"); });
      }
    },
    status: () => (app.state.memoryCount > 0 ? "done" : "todo"),
    summary: () => (app.state.memoryCount > 0 ? `${app.state.memoryCount} remembered` : "empty"),
  };
}
