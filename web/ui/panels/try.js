// Try panel: streamed generation with sampling controls, embedding cosine between two texts,
// and evaluation on held-out text (perplexity, bits/token, top-1/top-5 accuracy).
import { h, field, formatCount, formatNumber } from "../dom.js";
import { lossMeaning } from "./train.js";
import { ProgressLine } from "../progress.js";

/** Why Evaluate is off for a package opened without WebGPU (the CPU path has no evaluation). */
const EVALUATE_NEEDS_GPU = "Evaluating needs WebGPU; without it an opened package generates, compares and exports.";

export function tryPanel(app) {
  const needModel = () => (app.hasModel ? null : app.embedderWait() ?? (app.state.training === "running" ? "Wait for training to pause or finish." : "Train a model first (step 3), or open a package above."));

  // Opening a package: verified in the worker; without WebGPU it runs on the CPU.
  const openMessage = h("p", { class: "message", role: "status", "aria-live": "polite", hidden: true });
  const openInput = h("input", { type: "file", id: "try-open-package", name: "open-package", accept: ".evermind,application/zip" });
  const openFacts = h("p", { class: "hint", id: "try-package", text: "A .evermind file (from Export, or evermind pack): read in this tab, never uploaded." });
  openInput.addEventListener("change", () => {
    const file = openInput.files[0];
    if (!file) return;
    app.run(null, async () => {
      const r = await app.openPackage(file);
      const where = r.device === "cpu" ? "on the CPU (no WebGPU: generation and embeddings in pure Python)" : "on the GPU";
      openFacts.textContent = `Opened ${r.ref} (${formatCount(r.n_params)} parameters, vocabulary ${formatCount(r.vocab_size)}) ${where}.`;
      app.say(openMessage, `Opened ${file.name}.`, "ok");
    }, openMessage).finally(() => { openInput.value = ""; });
  });

  // Generation.
  const genMessage = h("p", { class: "message", id: "try-generate-message", role: "status", "aria-live": "polite", hidden: true });
  const prompt = field("Prompt", h("textarea", { name: "prompt", rows: 3, id: "try-prompt" }));
  prompt.input.value = "The";
  const temperature = field("Temperature", h("input", { type: "number", name: "temperature", value: 0.8, min: 0, max: 2, step: 0.05 }));
  const topK = field("Top-k", h("input", { type: "number", name: "top_k", value: 40, min: 0, max: 65536, step: 1 }));
  const topP = field("Top-p", h("input", { type: "number", name: "top_p", value: 0.95, min: 0, max: 1, step: 0.01 }));
  const maxTokens = field("Max tokens", h("input", { type: "number", name: "max_new_tokens", value: 64, min: 1, max: 2048, step: 1 }));
  const genHint = h("small", { class: "hint gate-hint", hidden: true });
  const genButton = app.gate(h("button", { type: "button", class: "primary", id: "try-generate", text: "Generate", dataset: { ownProgress: "true" } }), needModel, genHint);
  const output = h("output", { class: "generation", id: "try-output", "aria-live": "polite" });
  const outPrompt = h("span", { class: "prompt-echo" });
  const outText = h("span", { class: "generated" });
  output.append(outPrompt, outText);
  let streaming = false;
  genButton.addEventListener("click", () => app.run(genButton, async () => {
    outPrompt.textContent = prompt.input.value;
    outText.textContent = "";
    streaming = true;
    try {
      const r = await app.generate(prompt.input.value, {
        temperature: Number(temperature.input.value),
        top_k: Number(topK.input.value),
        top_p: Number(topP.input.value),
        max_new_tokens: Number(maxTokens.input.value),
      });
      outText.textContent = r.text;
      app.setState({ tried: true }, { share: false });
      app.say(genMessage, `${r.tokens} tokens at ${formatCount(r.tokens_per_second)} tokens/s.`, "ok");
    } finally {
      streaming = false;
    }
  }, genMessage));

  // Similarity.
  const simMessage = h("p", { class: "message", id: "try-sim-message", role: "status", "aria-live": "polite", hidden: true });
  const textA = field("Text A", h("textarea", { name: "sim-a", rows: 2 }));
  const textB = field("Text B", h("textarea", { name: "sim-b", rows: 2 }));
  textA.input.value = "Return the absolute value of a number.";
  textB.input.value = "Compute the magnitude of x.";
  const simButton = app.gate(h("button", { type: "button", id: "try-similarity", text: "Compare", dataset: { ownProgress: "true" } }), needModel);
  const simValue = h("span", { class: "big-number", id: "try-cosine", text: "–" });
  // Empty until a comparison; then coloured by where the cosine falls among this embedder's
  // own scores of unrelated corpus sentence pairs (evermind.studio.similarity): red at or
  // below their median, amber up to what a cache hit needs, green above it.
  const simBar = h("meter", { id: "try-sim-bar", min: 0, max: 1, value: 0, "aria-label": "cosine similarity", dataset: { verdict: "none" } });
  const simLabel = h("strong", { id: "try-sim-label", class: "sim-label" });
  const simMeaning = h("p", { class: "hint", id: "try-sim-meaning", text: "Compare two texts: the bar fills and is coloured by what this embedder scores unrelated texts." });
  const LABELS = { similar: "Similar", related: "Related", unclear: "Can't tell", unrelated: "Scores like unrelated texts", collapsed: "Not separating yet", uncalibrated: "Not calibrated" };
  // The first Compare with an embedder measures its unrelated-pair scores (seconds to
  // minutes without WebGPU): a progress line with the time left, and Cancel.
  const simProgress = new ProgressLine({
    id: "try-sim-progress",
    label: "Measuring how this model scores unrelated sentences",
    unit: "sentences",
    onCancel: () => app.call("operation_cancel", { name: "similarity" }).catch(() => {}),
  });
  simButton.addEventListener("click", () => app.run(simButton, async () => {
    simProgress.start();
    let r;
    try {
      r = await app.call("similarity", { a: textA.input.value, b: textB.input.value });
    } catch (err) {
      if (err?.name !== "Cancelled") throw err;
      app.say(simMessage, "Compare cancelled: nothing was measured, the model is unchanged. Compare again to measure afresh.");
      return;
    } finally {
      simProgress.finish();
    }
    simValue.textContent = r.cosine.toFixed(3);
    if (r.median != null && r.threshold != null) {
      simBar.low = Math.max(0, r.median);
      simBar.high = Math.min(1, r.threshold);
      simBar.optimum = 1;
    } else {
      simBar.removeAttribute("low");
      simBar.removeAttribute("high");
      simBar.removeAttribute("optimum");
    }
    simBar.value = Math.max(0, Math.min(1, r.cosine));
    simBar.dataset.verdict = r.verdict;
    simLabel.textContent = LABELS[r.verdict] ?? r.verdict;
    simLabel.dataset.verdict = r.verdict;
    simMeaning.textContent = r.words;
  }, simMessage));

  // Evaluation.
  const evalMessage = h("p", { class: "message", role: "status", "aria-live": "polite", hidden: true });
  const evalText = field("Text (empty: the held-out split)", h("textarea", { name: "eval-text", rows: 2 }));
  const evalHint = h("small", { class: "hint gate-hint", hidden: true });
  const needGpuModel = () => needModel() ?? (app.state.opened?.device === "cpu" ? EVALUATE_NEEDS_GPU : null);
  const evalButton = app.gate(h("button", { type: "button", id: "try-evaluate", text: "Evaluate" }), needGpuModel, evalHint);
  const evalStats = h("div", { class: "stats", id: "try-eval" });
  const evalMeaning = h("p", { class: "hint", id: "try-eval-meaning" });
  evalButton.addEventListener("click", () => app.run(evalButton, async () => {
    const text = evalText.input.value.trim();
    const r = await app.call("evaluate", text ? { text } : {});
    const stat = (label, value) => h("div", { class: "stat" }, h("span", { class: "stat-label", text: label }), h("span", { class: "stat-value", text: value }));
    evalStats.replaceChildren(
      stat("Perplexity", formatNumber(r.perplexity, 4)),
      stat("Bits/token", formatNumber(r.bits_per_token, 3)),
      stat("Top-1", `${(r.top1_accuracy * 100).toFixed(1)} %`),
      stat("Top-5", `${(r.top5_accuracy * 100).toFixed(1)} %`),
      stat("Tokens", formatCount(r.tokens)),
    );
    const sum = app.state.summary;
    const vocab = sum?.vocab_size ?? app.state.tokenizer?.vocab_size;
    evalMeaning.textContent = lossMeaning(r.cross_entropy, vocab, sum?.initial_loss);
  }, evalMessage));

  const element = h(
    "section",
    {},
    h("header", { class: "panel-head" }, h("h2", { id: "heading-try", text: "Try" }), h("p", { class: "lead", text: "Talk to the model, compare meanings, and measure it on text it has not seen." })),
    h(
      "section",
      { class: "sub-card" },
      h("h3", { text: "Open a package" }),
      h("div", { class: "field" }, h("label", { for: openInput.id, text: "Package file" }), openInput),
      openFacts,
      openMessage,
    ),
    h(
      "section",
      { class: "sub-card" },
      h("h3", { text: "Generate" }),
      prompt.field,
      h("div", { class: "grid-4 tight" }, temperature.field, topK.field, topP.field, maxTokens.field),
      h("div", { class: "row" }, genButton, genHint),
      output,
      genMessage,
    ),
    h(
      "div",
      { class: "grid-2" },
      h("section", { class: "sub-card" }, h("h3", { text: "Embedding similarity" }), textA.field, textB.field, h("div", { class: "row" }, simButton, simValue, simBar, simLabel), simProgress.element, simMeaning, simMessage),
      h("section", { class: "sub-card" }, h("h3", { text: "Evaluate" }), evalText.field, h("div", { class: "row" }, evalButton, evalHint), evalStats, evalMeaning, evalMessage),
    ),
  );

  return {
    id: "try",
    title: "Try",
    element,
    onEvent(e) {
      if (e.event === "generate-token" && streaming) outText.textContent += e.text;
      if (e.event === "similarity-progress") simProgress.update(e.done, e.total);
    },
    status: () => (app.state.tried ? "done" : app.hasModel ? "active" : "todo"),
    summary: () => (app.state.opened && app.hasModel ? app.state.opened.ref : app.hasModel ? "model ready" : app.state.embedderRunning ? "ready after the embedder" : "needs a model"),
  };
}
