// Cache panel: try a query against the semantic cache (hit or miss, tier, score, and which
// guard refused a near-miss and why), and store a response for a query. With a runtime URL
// (the Export panel's) and the agents' gateway model set here, a lookup goes L1 (this tab)
// then L2 (the runtime's gateway cache), and a store writes through to it.
import { h, field, formatNumber } from "../dom.js";
import { ProgressLine } from "../progress.js";

export function cachePanel(app) {
  const message = h("p", { class: "message", role: "status", "aria-live": "polite", hidden: true });
  const query = field("Query", h("input", { type: "search", name: "cache-query", autocomplete: "off", placeholder: "convert 100 USD to EUR" }));
  const threshold = field("Threshold", h("input", { type: "number", name: "cache-threshold", min: 0, max: 1, step: 0.01, placeholder: "default" }));
  threshold.field.classList.add("tiny");
  const lookup = app.gate(h("button", { type: "button", class: "primary", id: "cache-lookup", text: "Look up" }), () => (query.input.value.trim() ? null : "Type a query."));
  query.input.addEventListener("input", () => app.refresh());
  const verdict = h("div", { class: "verdict", id: "cache-verdict", "aria-live": "polite" });

  const storeQuery = field("Query", h("input", { type: "text", name: "cache-store-query", autocomplete: "off", placeholder: "convert 100 USD to EUR" }));
  const storeResponse = field("Response", h("textarea", { name: "cache-store-response", rows: 3, placeholder: "100 USD is about 92 EUR." }));
  const storeHint = h("small", { class: "hint gate-hint", hidden: true });
  const lastStored = h("p", { class: "hint", id: "cache-last-stored" });
  const store = app.gate(
    h("button", { type: "button", id: "cache-store", text: "Store" }),
    () => (storeQuery.input.value.trim() && storeResponse.input.value.trim() ? null : "Enter a query and its response."),
    storeHint,
  );
  for (const input of [storeQuery.input, storeResponse.input]) input.addEventListener("input", () => app.refresh());

  const agentModel = field(
    "Agents' model",
    h("input", { type: "text", name: "cache-agent-model", autocomplete: "off", placeholder: "openai/gpt-4o-mini" }),
    "The gateway model id your agents ask; the runtime URL and token are the Export panel's.",
  );
  const sharing = h("p", { class: "hint", id: "cache-sharing" });
  /** The runtime a cache call shares with ({url, token, model}), or undefined: L1 only. */
  const runtime = () => {
    const { url, token } = app.runtimeSettings();
    const model = agentModel.input.value.trim();
    return url && model ? { url, token, model } : undefined;
  };
  const showSharing = () => {
    const r = runtime();
    sharing.textContent = r ? `Sharing with ${r.model} agents at ${r.url}: L1 (this tab), then L2 (the runtime).` : "This tab only (L1): set a runtime URL in Export and an agents' model to share.";
  };
  agentModel.input.addEventListener("input", showSharing);
  showSharing();
  // Before a lookup or a store, the cached questions the model has not embedded yet (all of
  // them after a new model) are embedded: counted here, and Cancel stops it between batches
  // (the lookup then serves nothing, the store stores nothing).
  const indexProgress = new ProgressLine({
    id: "cache-progress",
    label: "Embedding the cached questions for this model",
    unit: "questions",
    onCancel: () => app.call("operation_cancel", { name: "cache" }).catch(() => {}),
  });
  /** Runs `work` (a lookup or a store): its embedding shows on the progress line; a Cancel
   * of it says `cancelled` and resolves with null. */
  const cancellable = (work, cancelled) =>
    indexProgress.run(work, () => app.say(message, cancelled));
  const tierWords = (tier) => (tier === "l1" ? "L1 (this tab)" : tier === "l2" ? "L2 (the runtime)" : "–");

  const doLookup = () => app.run(lookup, async () => {
    const kwargs = { query: query.input.value, runtime: runtime() };
    if (threshold.input.value !== "") kwargs.threshold = Number(threshold.input.value);
    showSharing();
    const r = await cancellable(
      () => app.call("cache_lookup", kwargs),
      "Look-up cancelled: nothing was served. The questions embedded before the cancel keep their vectors; the next look-up or store embeds the rest.",
    );
    if (!r) {
      verdict.replaceChildren();
      delete verdict.dataset.hit;
      delete verdict.dataset.tier;
      return;
    }
    const row = (label, value, cls = "") => [h("dt", { text: label }), h("dd", { class: cls, text: value })];
    // Plain words first (what was served, or why not); the numbers and labels on demand.
    verdict.replaceChildren(
      h("p", { class: `badge ${r.hit ? "hit" : "miss"}`, text: r.hit ? "Hit" : "Miss" }),
      h("p", { class: "cache-words", id: "cache-words", text: r.words ?? "" }),
      h(
        "dl",
        { class: "facts" },
        ...(r.hit ? row("Tier", tierWords(r.tier)) : []),
        ...(r.hit ? row("Response", r.response ?? "") : []),
        ...(r.l2 ? row("Runtime", r.l2) : []),
      ),
      h(
        "details",
        { class: "hit-details", id: "cache-details" },
        h("summary", { text: "Details" }),
        h(
          "dl",
          { class: "facts" },
          row("Score", formatNumber(r.score, 3)),
          row("Ranked by", r.ranked_by ?? "–"),
          ...(r.probability != null ? row("Same question (verifier)", formatNumber(r.probability, 3)) : []),
          ...(r.max_error != null ? row("Error bound δ", String(r.max_error)) : []),
          ...(r.refused_by ? row("Refused by", r.refused_by, "mono") : []),
          ...(r.reason ? row("Reason", r.reason) : []),
        ),
      ),
    );
    verdict.dataset.hit = String(Boolean(r.hit));
    verdict.dataset.tier = r.tier ?? "";
  }, message);
  lookup.addEventListener("click", doLookup);
  query.input.addEventListener("keydown", (e) => { if (e.key === "Enter" && !lookup.disabled) doLookup(); });

  store.addEventListener("click", () => app.run(store, async () => {
    showSharing();
    const r = await cancellable(
      () => app.call("cache_store", { query: storeQuery.input.value, response: storeResponse.input.value, runtime: runtime() }),
      "Store cancelled: nothing was stored. The questions embedded before the cancel keep their vectors; the next look-up or store embeds the rest.",
    );
    if (!r) return;
    const shared = r.l2 ? ` Runtime: ${r.l2}.` : "";
    app.say(message, r.stored ? `Stored.${shared} Look up a paraphrase to see it hit.` : "Not stored.", r.stored ? (r.l2 && r.l2.startsWith("L1 only") ? "" : "ok") : "");
    if (!query.input.value) query.input.value = storeQuery.input.value;
    app.refresh();
  }, message));

  const element = h(
    "section",
    {},
    h("header", { class: "panel-head" }, h("h2", { id: "heading-cache", text: "Cache" }), h("p", { class: "lead", text: "A semantic cache that serves a stored answer to a paraphrase only when a learned verifier says the two ask the same thing, within an error bound (δ = 0.01 by default) — so near-misses (other numbers, negations, swapped directions) are refused even when they look alike." })),
    message,
    indexProgress.element,
    h(
      "div",
      { class: "grid-2" },
      h("section", { class: "sub-card" }, h("h3", { text: "Look up" }), h("div", { class: "row align-end" }, query.field, threshold.field, lookup), verdict),
      h("section", { class: "sub-card" }, h("h3", { text: "Store a response" }), storeQuery.field, storeResponse.field, h("div", { class: "row" }, store, storeHint), lastStored),
    ),
    h("section", { class: "sub-card" }, h("h3", { text: "Share with agents" }), agentModel.field, sharing),
  );

  return {
    id: "cache",
    title: "Cache",
    element,
    onEvent(e) {
      if (e.event === "cache-progress") {
        if (e.done >= e.total) indexProgress.finish();
        else {
          if (indexProgress.element.hidden) indexProgress.start();
          indexProgress.update(e.done, e.total);
        }
        return;
      }
      // Entries stored by the JS API (or another Studio on this page) count here too.
      if (e.event !== "studio-data" || !e.fn.startsWith("cache_")) return;
      const added = e.fn === "cache_store" ? (e.result?.stored ? 1 : 0) : (e.result?.stored ?? e.result?.count ?? 0);
      if (added) app.setState({ cacheStored: app.state.cacheStored + Number(added) }, { share: false });
      if (e.fn === "cache_store" && e.result?.stored) lastStored.textContent = `Last stored: “${e.kwargs?.query ?? ""}”`;
    },
    status: () => (app.state.cacheStored > 0 ? "done" : "todo"),
    summary: () => (app.state.cacheStored > 0 ? `${app.state.cacheStored} stored` : "empty"),
  };
}
