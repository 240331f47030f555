// Train panel: preset or custom size, steps/LR/batch/sequence, Start/Pause/Resume/Stop, a
// live loss chart (train and held-out), and the numbers a person watches: step, tokens/s,
// ETA, parameter count, GPU adapter. Offers "Resume from step N" when a checkpoint is saved.
// The embedder phase (run when training finishes, or by the "Embedder" button) shows which
// embedder it fitted — distilled from the runtime's teacher, or centred without one — and why.
import { h, field, formatCount, formatDuration, formatNumber } from "../dom.js";
import { LossChart } from "../chart.js";
import { describeError, isRecoverable } from "../errors.js";

const PRESETS = {
  nano: "nano — 128 wide, 4 layers",
  small: "small — 256 wide, 6 layers",
  base: "base — 512 wide, 8 layers",
  custom: "custom…",
};

function numberInput(name, value, attrs = {}) {
  return h("input", { type: "number", name, value, inputmode: "decimal", ...attrs });
}

export function trainPanel(app) {
  const message = h("p", { class: "message", role: "status", "aria-live": "polite", hidden: true });
  const chart = new LossChart();

  // Resume banner.
  const resumeText = h("span");
  const resumeButton = app.gate(h("button", { type: "button", class: "primary", id: "train-resume-checkpoint", text: "Resume" }), () => (app.state.training === "running" ? "Training is running." : null));
  const discardButton = app.gate(h("button", { type: "button", class: "quiet", text: "Discard" }), () => (app.state.training === "running" ? "Training is running." : null));
  const banner = h("div", { class: "banner", role: "region", "aria-label": "Saved checkpoint", hidden: true }, resumeText, h("span", { class: "row" }, resumeButton, discardButton));

  // Settings.
  const preset = field("Model size", h("select", { name: "preset", id: "train-preset" }, ...Object.entries(PRESETS).map(([v, t]) => h("option", { value: v, text: t }))));
  preset.input.value = PRESETS[app.options.preset] ? app.options.preset : "nano";
  const custom = {
    d_model: field("d_model", numberInput("d_model", 128, { min: 8, step: 8 })),
    n_layer: field("n_layer", numberInput("n_layer", 4, { min: 1, max: 48 })),
    d_state: field("d_state", numberInput("d_state", 16, { min: 1, max: 256 })),
    expand: field("expand", numberInput("expand", 2, { min: 1, max: 8 })),
  };
  const customBox = h("fieldset", { class: "custom", hidden: true }, h("legend", { text: "Custom size" }), ...Object.values(custom).map((f) => f.field));
  preset.input.addEventListener("change", () => { customBox.hidden = preset.input.value !== "custom"; });
  const steps = field("Steps", numberInput("steps", 300, { min: 1, max: 1000000, id: "train-steps" }));
  const lr = field("Learning rate", numberInput("lr", 0.003, { min: 0, step: "any", id: "train-lr" }));
  const batch = field("Batch", numberInput("batch_size", 4, { min: 1, max: 512, id: "train-batch" }));
  const seq = field("Sequence", numberInput("seq_len", 128, { min: 8, max: 4096, id: "train-seq" }));

  // Controls.
  const hint = h("small", { class: "hint gate-hint", hidden: true });
  const training = () => app.state.training;
  const startButton = app.gate(h("button", { type: "button", class: "primary", id: "train-start", text: "Start" }), () => {
    if (!app.state.tokenizer) return "Train the tokenizer first (step 2).";
    if (training() === "running") return "Training is running.";
    return null;
  }, hint);
  const pauseButton = app.gate(h("button", { type: "button", id: "train-pause", text: "Pause" }), () => (training() === "running" ? null : "Nothing is training."));
  const resumeNow = app.gate(h("button", { type: "button", id: "train-resume", text: "Resume" }), () => (training() === "paused" || ((training() === "error" || training() === "idle") && app.state.checkpoint) ? null : "Nothing is paused."));
  const stopButton = app.gate(h("button", { type: "button", id: "train-stop", class: "danger", text: "Stop" }), () => (training() === "running" || training() === "paused" ? null : "Nothing is training."));

  function options() {
    const o = { steps: Number(steps.input.value), lr: Number(lr.input.value), batch_size: Number(batch.input.value), seq_len: Number(seq.input.value) };
    o.warmup_steps = Math.min(30, Math.max(0, Math.floor(o.steps / 10)));
    if (preset.input.value === "custom") o.config = Object.fromEntries(Object.entries(custom).map(([k, f]) => [k, Number(f.input.value)]));
    else o.preset = preset.input.value;
    return o;
  }

  const report = (err) => {
    const recoverable = isRecoverable(err);
    app.say(message, describeError(err) + (recoverable && app.state.checkpoint ? ` Saved at step ${app.state.checkpoint.step}.` : ""), "error");
  };
  const finished = (summary) => {
    if (!summary) return;
    const words = { finished: "Finished", paused: "Paused", stopped: "Stopped" }[summary.state] ?? summary.state;
    app.say(message, `${words} at step ${summary.step} of ${summary.steps}: loss ${formatNumber(summary.initial_loss, 3)} → ${formatNumber(summary.final_loss, 3)}${summary.eval_loss != null ? `, held-out ${formatNumber(summary.eval_loss, 3)}` : ""}.`, "ok");
  };
  // Said when training finishes, before the embedder phase that follows it.
  app.addEventListener("trained", (e) => finished(e.detail));
  startButton.addEventListener("click", () => {
    app.say(message, "");
    app.train(options()).then(finished, report);
  });
  const resume = () => {
    app.say(message, "");
    app.resume().then(finished, report);
  };
  resumeNow.addEventListener("click", resume);
  resumeButton.addEventListener("click", resume);
  pauseButton.addEventListener("click", () => app.run(pauseButton, () => app.pause(), message));
  stopButton.addEventListener("click", () => app.run(stopButton, () => app.stop(), message));
  discardButton.addEventListener("click", () => app.run(discardButton, async () => {
    await app.call("session_clear");
    app.setState({ checkpoint: null });
  }, message));

  // The embedder phase.
  const embedderHint = h("small", { class: "hint gate-hint", hidden: true });
  const embedderButton = app.gate(h("button", { type: "button", id: "train-embedder", text: "Embedder" }), () => {
    if (app.state.embedderRunning) return "The embedder phase is running.";
    return app.hasModel ? null : "Train a model first.";
  }, embedderHint);
  const embedderStatus = h("p", { class: "status-line", id: "embedder-status", role: "status", "aria-live": "polite", hidden: true });
  const embedderProgress = h("p", { class: "hint", id: "embedder-progress", hidden: true });
  embedderButton.addEventListener("click", () => app.run(embedderButton, () => app.embedder(), embedderStatus));

  // Numbers.
  const m = {};
  const metric = (key, label) => h("div", { class: "stat" }, h("span", { class: "stat-label", text: label }), (m[key] = h("span", { class: "stat-value", id: `train-${key}`, text: "–" })));
  const metrics = h(
    "div",
    { class: "stats metrics", "aria-live": "off" },
    metric("step", "Step"),
    metric("loss", "Loss"),
    metric("eval", "Held-out"),
    metric("tps", "Tokens/s"),
    metric("eta", "ETA"),
    metric("params", "Parameters"),
    metric("state", "State"),
  );
  const adapter = h("p", { class: "hint adapter-line" });

  app.addEventListener("train-reset", (e) => {
    if (!e.detail.resume) chart.reset(e.detail.steps ?? 0);
  });

  const element = h(
    "section",
    {},
    h("header", { class: "panel-head" }, h("h2", { id: "heading-train", text: "Train" }), h("p", { class: "lead", text: "A Mamba-style language model trained on your GPU, right here. Checkpoints go to this browser's storage, so a reload resumes." })),
    banner,
    message,
    h(
      "div",
      { class: "train-grid" },
      h(
        "section",
        { class: "sub-card settings", "aria-label": "Settings" },
        h("h3", { text: "Settings" }),
        preset.field,
        customBox,
        h("div", { class: "grid-2 tight" }, steps.field, lr.field, batch.field, seq.field),
        h("div", { class: "row controls" }, startButton, pauseButton, resumeNow, stopButton),
        hint,
      ),
      h("section", { class: "sub-card", "aria-label": "Progress" }, h("h3", { text: "Progress" }), chart.element, metrics, adapter),
    ),
    h(
      "section",
      { class: "sub-card", "aria-label": "Embedder" },
      h("h3", { text: "Embedder" }),
      h("p", { class: "hint", text: "After training, the model becomes the Memory and Cache panels' embedder: distilled from the runtime's teacher (/v1/embeddings at the Export panel's runtime URL), or, without one, centred on the corpus." }),
      h("div", { class: "row" }, embedderButton, embedderHint),
      embedderProgress,
      embedderStatus,
    ),
  );

  const STAGES = { teacher: "Asking the teacher", train: "Distilling on the GPU", centre: "Centring" };
  function updateEmbedder() {
    const s = app.state;
    const p = s.embedderProgress;
    embedderProgress.hidden = !(s.embedderRunning && p);
    if (p) embedderProgress.textContent = `${STAGES[p.stage] ?? p.stage}: ${p.done} / ${p.total}${p.loss != null ? ` · loss ${formatNumber(p.loss, 4)}` : ""}`;
    const e = s.embedder;
    if (s.embedderRunning) app.say(embedderStatus, "Embedder phase running…");
    else if (e?.error) app.say(embedderStatus, `Embedder phase failed: ${e.error}`, "error");
    else if (e?.method) {
      const what = e.method === "distill" ? `Distilled embedder (${e.dim} dimensions, loss ${formatNumber(e.first_loss, 3)} → ${formatNumber(e.loss, 3)})` : `Centred embedder (${e.dim} dimensions, no teacher)`;
      app.say(embedderStatus, `${what}: ${e.why}`, e.method === "distill" ? "ok" : "");
    }
    embedderStatus.dataset.method = e?.method ?? (e?.error ? "error" : "");
  }

  function update() {
    const s = app.state;
    const p = s.progress;
    const sum = s.summary;
    const cp = s.checkpoint;
    if (sum && !chart.train.length && sum.losses?.length) chart.load(sum.losses, sum.eval_losses, sum.steps);
    banner.hidden = !(cp && s.training !== "running");
    if (cp) {
      resumeButton.textContent = `Resume from step ${cp.step}`;
      resumeText.textContent = `A checkpoint from step ${cp.step}${cp.steps ? ` of ${cp.steps}` : ""}${cp.preset ? ` (${cp.preset})` : ""} is saved in this browser.`;
    }
    m.step.textContent = p ? `${p.step} / ${p.steps}` : sum ? `${sum.step} / ${sum.steps}` : "–";
    m.loss.textContent = formatNumber(p?.loss ?? sum?.final_loss, 4);
    m.eval.textContent = formatNumber(p?.eval_loss ?? sum?.eval_loss, 4);
    m.tps.textContent = p?.tokens_per_second || sum?.tokens_per_second ? formatCount(p?.tokens_per_second ?? sum.tokens_per_second) : "–";
    m.eta.textContent = s.training === "running" && p ? formatDuration(p.eta_s) : "–";
    m.params.textContent = formatCount(sum?.n_params ?? s.nParams ?? NaN);
    m.state.textContent = s.training;
    m.state.dataset.state = s.training;
    const a = s.device?.adapter;
    adapter.textContent = a ? `GPU: ${[a.vendor, a.architecture, a.device, a.description].filter(Boolean).join(" · ") || "unnamed adapter"}` : "";
    updateEmbedder();
  }

  return {
    id: "train",
    title: "Train",
    element,
    update,
    chart,
    onEvent(e) {
      if (e.event === "train-progress") {
        // A new run (or a resume from an earlier checkpoint) restarts the line at its step.
        chart.train = chart.train.filter(([step]) => step < e.step);
        chart.held = chart.held.filter(([step]) => step < e.step);
        chart.add(e.step, e.loss, e.eval_loss, e.steps);
        app.setState({ progress: e, training: "running" }, { share: false });
        if (app.state.nParams === undefined) {
          app.state.nParams = null; // ask once per page: the size is in the summary, not the event
          app.call("train_summary").then((s) => app.setState({ nParams: s.n_params }, { share: false }), () => {});
        }
      } else if (e.event === "train-state" && e.state) {
        const state = { training: "running", recovering: "running" }[e.state] ?? e.state;
        if (e.state === "recovering") app.say(message, `${e.message ?? "The GPU device was lost."} Recovering from the last checkpoint…`, "error");
        app.setState({ training: state }, { share: false });
      } else if (e.event === "embedder-progress") {
        app.setState({ embedderProgress: { stage: e.loss == null ? "centre" : "train", done: e.step, total: e.steps, loss: e.loss } }, { share: false });
      } else if (e.event === "train-checkpoint") {
        m.state.title = `checkpoint saved at step ${e.step}`;
      }
    },
    status: () => {
      const t = app.state.training;
      if (t === "running" || t === "paused") return "active";
      return app.state.summary?.step > 0 ? "done" : app.state.checkpoint ? "active" : "todo";
    },
    summary: () => {
      const p = app.state.progress;
      if (app.state.training === "running" && p) return `step ${p.step}/${p.steps} · loss ${formatNumber(p.loss, 3)}`;
      if (app.state.summary) return `${app.state.summary.state} · step ${app.state.summary.step}`;
      if (app.state.checkpoint) return `checkpoint at step ${app.state.checkpoint.step}`;
      return "no model yet";
    },
  };
}
