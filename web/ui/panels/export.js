// Export panel: "Download .evermind" (a Blob from export_package's bytes, saved through an
// <a download>) and "Push to runtime" (POST to <url>/v1/models with a bearer token), showing
// the served id evermind/<name>:<version> or the server's own error; and the optional affect
// head (affect_train on pasted label<TAB>text lines), which the package then carries.
import { h, field, formatBytes, formatNumber } from "../dom.js";
import { describeError } from "../errors.js";

/** Saves `blob` as `filename` through a temporary <a download>. */
export function saveBlob(blob, filename, container) {
  const url = URL.createObjectURL(blob);
  const a = h("a", { href: url, download: filename, hidden: true });
  container.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

export function exportPanel(app) {
  const needModel = () => (app.hasModel ? null : app.embedderWait() ?? (app.state.training === "running" ? "Wait for training to pause or finish." : "Train a model first (step 3)."));
  const message = h("p", { class: "message", role: "status", "aria-live": "polite", hidden: true });
  const name = field("Name", h("input", { type: "text", name: "package-name", value: "evermind-studio", autocomplete: "off" }), "Lower-case letters, digits, . _ -");
  const version = field("Version", h("input", { type: "text", name: "package-version", value: "0.1.0", autocomplete: "off" }));
  const hint = h("small", { class: "hint gate-hint", hidden: true });
  const download = app.gate(h("button", { type: "button", class: "primary", id: "export-download", text: "Download .evermind" }), needModel, hint);
  const facts = h("dl", { class: "facts", id: "export-facts", hidden: true });

  const exportNow = async () => {
    const result = await app.exportPackage({ name: name.input.value.trim(), version: version.input.value.trim() });
    facts.replaceChildren(
      h("dt", { text: "File" }), h("dd", { text: result.filename }),
      h("dt", { text: "Size" }), h("dd", { text: formatBytes(result.bytes) }),
      h("dt", { text: "Digest" }), h("dd", { class: "mono", text: result.digest }),
      h("dt", { text: "Reference" }), h("dd", { class: "mono", text: result.ref ?? "–" }),
    );
    facts.hidden = false;
    return result;
  };
  download.addEventListener("click", () => app.run(download, async () => {
    const result = await exportNow();
    saveBlob(result.blob, result.filename, element);
    app.say(message, `Saved ${result.filename} (${formatBytes(result.bytes)}).`, "ok");
  }, message));

  // Push.
  const pushMessage = h("p", { class: "message", role: "status", "aria-live": "polite", hidden: true, id: "push-result" });
  const url = field("Runtime URL", h("input", { type: "url", name: "runtime-url", value: app.options.runtimeUrl || "", placeholder: "http://127.0.0.1:8080", autocomplete: "url" }));
  const token = field("Token", h("input", { type: "password", name: "runtime-token", autocomplete: "off", placeholder: "bearer token" }), "Sent only to the runtime URL above.");
  const pushHint = h("small", { class: "hint gate-hint", hidden: true });
  const push = app.gate(h("button", { type: "button", id: "export-push", text: "Push to runtime" }), () => needModel() ?? (url.input.value.trim() ? null : "Enter the runtime URL."), pushHint);
  url.input.addEventListener("input", () => app.refresh());
  // The embedder phase asks the same runtime for its teacher (POST <url>/v1/embeddings).
  app.runtimeFields = () => ({ url: url.input.value.trim(), token: token.input.value });
  push.addEventListener("click", () => app.run(push, async () => {
    app.say(pushMessage, "Exporting and pushing…");
    try {
      await exportNow();
      const served = await app.push(url.input.value.trim(), token.input.value);
      pushMessage.replaceChildren("Served as ", h("code", { class: "served-id", text: served.id }));
      pushMessage.dataset.kind = "ok";
    } catch (err) {
      app.say(pushMessage, describeError(err), "error");
      app.fail(err);
    }
  }));

  // Affect head: a classifier over the model's pooled hidden state, fitted in this tab.
  const affectMessage = h("p", { class: "message", id: "affect-message", role: "status", "aria-live": "polite", hidden: true });
  const affectLines = field(
    "Labelled texts",
    h("textarea", { name: "affect-lines", id: "affect-lines", rows: 6, spellcheck: "false", placeholder: "positive\tThanks, that fixed it!\nnegative\tIt broke again.\nneutral\tThe meeting is at ten." }),
    "One label<TAB>text per line, at least 5 per label; a fifth of each label is held out to score the head.",
  );
  const affectHint = h("small", { class: "hint gate-hint", hidden: true });
  const affectTrain = app.gate(h("button", { type: "button", id: "affect-train", text: "Train affect head" }), () => needModel() ?? (affectLines.input.value.trim() ? null : "Paste labelled lines first."), affectHint);
  affectLines.input.addEventListener("input", () => app.refresh());
  const affectFacts = h("dl", { class: "facts", id: "affect-facts", hidden: true });
  affectTrain.addEventListener("click", () => app.run(affectTrain, async () => {
    app.say(affectMessage, "Embedding and fitting…");
    const r = await app.call("affect_train", { lines: affectLines.input.value });
    app.lastExport = null; // the next download or push carries the head
    affectFacts.replaceChildren(
      h("dt", { text: "Labels" }), h("dd", { text: r.labels.join(", ") }),
      h("dt", { text: "Held-out accuracy" }), h("dd", { id: "affect-accuracy", text: formatNumber(r.accuracy, 3) }),
      h("dt", { text: "Macro-F1" }), h("dd", { id: "affect-macro-f1", text: formatNumber(r.macro_f1, 3) }),
      h("dt", { text: "Examples" }), h("dd", { text: `${r.train} to fit, ${r.held_out} held out` }),
    );
    affectFacts.hidden = false;
    app.say(affectMessage, `Affect head fitted in ${formatNumber(r.embed_s + r.fit_s, 2)} s; the exported package carries it.`, "ok");
  }, affectMessage));

  const element = h(
    "section",
    {},
    h("header", { class: "panel-head" }, h("h2", { id: "heading-export", text: "Export" }), h("p", { class: "lead", text: "Take the model with you: one .evermind file with weights, tokenizer and config, or straight into an agent runtime." })),
    message,
    h(
      "div",
      { class: "grid-2" },
      h("section", { class: "sub-card" }, h("h3", { text: "Package" }), h("div", { class: "grid-2 tight" }, name.field, version.field), h("div", { class: "row" }, download, hint), facts),
      h("section", { class: "sub-card" }, h("h3", { text: "Push to runtime" }), url.field, token.field, h("div", { class: "row" }, push, pushHint), pushMessage),
    ),
    h(
      "section",
      { class: "sub-card", id: "affect-card" },
      h("h3", { text: "Affect head (optional)" }),
      h("p", { class: "hint", text: "A classifier head over the model's hidden state (your labels, e.g. negative / neutral / positive), served on /v1/affect. It knows only the labels you give it." }),
      affectLines.field,
      h("div", { class: "row" }, affectTrain, affectHint),
      affectFacts,
      affectMessage,
    ),
  );

  return {
    id: "export",
    title: "Export",
    element,
    setRuntimeUrl(value) { url.input.value = value ?? ""; app.refresh(); },
    status: () => (app.state.pushed || app.state.exported ? "done" : "todo"),
    summary: () => (app.state.pushed ? app.state.pushed.id : app.state.exported ? app.state.exported.filename : "not exported"),
  };
}
