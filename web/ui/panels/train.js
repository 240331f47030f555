// Train panel: preset or custom size, block type, steps/LR/batch/sequence,
// Start/Pause/Resume/Stop, a live loss chart (train and held-out), and the numbers a person
// watches: step, tokens/s, ETA, parameter count, GPU adapter. Offers "Resume from step N"
// when a checkpoint is saved.
// The embedder phase (run when training finishes, or by the "Embedder" button) shows which
// embedder it fitted — distilled from the runtime's teacher, or centred without one — and why.
import { h, field, formatCount, formatDuration, formatNumber } from "../dom.js";
import { LossChart } from "../chart.js";
import { describeError, isRecoverable } from "../errors.js";
import { MEASURE_AFTER_STEPS, etaWords, saveSpeed, speedKey } from "../speed.js";
import { timeWords } from "../progress.js";

/** Saved runs kept in the browser (evermind.studio.session.KEEP_RUNS). */
const KEEP_RUNS = 3;
const runDate = (r) => (r.updated_at ? new Date(r.updated_at * 1000).toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "short" }) : "unknown date");

const PRESETS = {
  nano: "nano — 128 wide, 4 layers",
  small: "small — 256 wide, 6 layers",
  base: "base — 512 wide, 8 layers",
  custom: "custom…",
};

/** Block types (evermind.model.config.BLOCKS). */
// What Pause and Stop say between the click and the loop's end (app.state.halting).
const HALTING = {
  stop: "Stopping: finishing the current step and saving a checkpoint…",
  pause: "Pausing: finishing the current step and saving a checkpoint…",
};
const HALTING_STATE = { stop: "stopping", pause: "pausing" };
const BLOCKS = {
  mamba1: "Mamba-1 — selective scan",
  mamba2: "Mamba-2 — SSD, heads of 64",
};

/** Loss (nats/token) in words: perplexity and bits, against a uniform guess over the
 * vocabulary and against the run's first step. */
// "Cortex routing: load-balancing loss 2.013 · layer 0: 31% 22% 25% 22% · ...": each
// expert's share of the routed (token, slot) assignments, per layer.
export function routingText(routing) {
  const layers = Object.entries(routing.layers ?? {}).map(([index, layer]) => {
    const total = layer.fractions.reduce((a, b) => a + b, 0) || 1;
    return `layer ${index}: ${layer.fractions.map((f) => `${Math.round((100 * f) / total)}%`).join(" ")}`;
  });
  return [`Cortex routing: load-balancing loss ${formatNumber(routing.aux_loss, 3)}`, ...layers].join(" · ");
}

export function lossMeaning(loss, vocab, initial) {
  if (!Number.isFinite(loss)) return "";
  const ppl = Math.exp(loss);
  const bits = loss / Math.LN2;
  const parts = [`Loss ${formatNumber(loss, 3)} nats/token = perplexity ${formatCount(ppl)} (${formatNumber(bits, 3)} bits/token): the model is as unsure as a uniform pick among ${formatCount(ppl)} tokens`];
  if (vocab > 0) {
    const ratio = vocab / ppl;
    parts.push(`a uniform guess over the ${formatCount(vocab)}-token vocabulary has perplexity ${formatCount(vocab)} (${formatNumber(Math.log2(vocab), 3)} bits), ${ratio >= 1 ? `${formatNumber(ratio, 3)}× worse` : `${formatNumber(1 / ratio, 3)}× better`}`);
  }
  if (Number.isFinite(initial)) parts.push(`at the run's first step the perplexity was ${formatCount(Math.exp(initial))}`);
  return `${parts.join("; ")}.`;
}

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
  // The block type: Mamba-1 (the selective scan) or Mamba-2 (the SSD block, heads of 64).
  const block = field("Block", h("select", { name: "block", id: "train-block" }, ...Object.entries(BLOCKS).map(([v, t]) => h("option", { value: v, text: t }))));
  // The cortex: routed experts of a shared-expert MoE FFN after each Mamba-1 mixer (0: none).
  const cortex = field("Experts per layer (0: none)", numberInput("moe_experts", 0, { min: 0, max: 64, id: "train-moe-experts" }), "A mixture-of-experts layer (the cortex) after each Mamba-1 layer; 0 trains a plain model.");
  // The block type and the experts are choices for people who know them: behind "Advanced".
  const advanced = h("details", { class: "advanced", id: "train-advanced" }, h("summary", { text: "Advanced: block type and experts" }), block.field, cortex.field);
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
    if (app.state.halting) return HALTING[app.state.halting];
    if (training() === "running") return "Training is running.";
    return null;
  }, hint);
  const pauseButton = app.gate(h("button", { type: "button", id: "train-pause", text: "Pause" }), () => (app.state.halting ? HALTING[app.state.halting] : training() === "running" ? null : "Nothing is training."));
  const resumeNow = app.gate(h("button", { type: "button", id: "train-resume", text: "Resume" }), () => (training() === "paused" || ((training() === "error" || training() === "idle") && app.state.checkpoint) ? null : "Nothing is paused."));
  const stopButton = app.gate(h("button", { type: "button", id: "train-stop", class: "danger", text: "Stop" }), () => (app.state.halting === "stop" ? HALTING.stop : training() === "running" || training() === "paused" ? null : "Nothing is training."));

  // What the chosen steps mean in time on this device, before Start.
  const etaBefore = h("p", { class: "hint", id: "train-eta-before" });
  function speedLabel() {
    return preset.input.value === "custom" ? `d_model ${custom.d_model.input.value} × ${custom.n_layer.input.value} layers` : preset.input.value;
  }
  function updateEtaBefore() {
    const o = options();
    const tokens = o.steps * o.batch_size * o.seq_len;
    if (!(tokens > 0)) { etaBefore.textContent = ""; return; }
    etaBefore.textContent = `${formatCount(o.steps)} steps × ${o.batch_size} × ${o.seq_len} = ${formatCount(tokens)} training tokens: ${etaWords(tokens, speedKey(o), speedLabel())}.`;
  }
  for (const input of [preset.input, steps.input, batch.input, seq.input, ...Object.values(custom).map((f) => f.input)]) input.addEventListener("input", updateEtaBefore);
  preset.input.addEventListener("change", updateEtaBefore);

  // The run's own settings in the form (after a reload or when a saved run is opened).
  let shownSettings = null;
  function fillSettings(settings) {
    if (!settings || settings === shownSettings) return;
    shownSettings = settings;
    preset.input.value = settings.config ? "custom" : (PRESETS[settings.preset] ? settings.preset : preset.input.value);
    if (BLOCKS[settings.block]) block.input.value = settings.block;
    cortex.input.value = settings.cortex?.moe_experts ?? 0;
    if (block.input.value !== "mamba1" || Number(cortex.input.value) > 0) advanced.open = true;
    customBox.hidden = preset.input.value !== "custom";
    for (const [k, f] of Object.entries(custom)) if (settings.config?.[k] != null) f.input.value = settings.config[k];
    const set = { steps, lr, batch_size: batch, seq_len: seq };
    for (const [k, f] of Object.entries(set)) if (settings[k] != null) f.input.value = settings[k];
    updateEtaBefore();
  }

  // A reload while a run has steps not yet checkpointed asks first.
  let savedStep = 0;
  const unsaved = () => app.state.training === "running" && (app.state.progress?.step ?? 0) > savedStep;
  window.addEventListener("beforeunload", (e) => {
    if (!unsaved()) return;
    e.preventDefault();
    e.returnValue = "Training has steps that are not saved yet.";
  });

  function options() {
    const o = { steps: Number(steps.input.value), lr: Number(lr.input.value), batch_size: Number(batch.input.value), seq_len: Number(seq.input.value) };
    o.warmup_steps = Math.min(30, Math.max(0, Math.floor(o.steps / 10)));
    if (preset.input.value === "custom") o.config = Object.fromEntries(Object.entries(custom).map(([k, f]) => [k, Number(f.input.value)]));
    else o.preset = preset.input.value;
    o.block = block.input.value;
    const experts = Number(cortex.input.value);
    if (experts > 0) o.cortex = { moe_experts: experts };
    return o;
  }

  const report = (err) => {
    const recoverable = isRecoverable(err);
    app.say(message, describeError(err) + (recoverable && app.state.checkpoint ? ` Saved at step ${app.state.checkpoint.step}.` : ""), "error");
  };
  const losses = (summary) => `loss ${formatNumber(summary.initial_loss, 3)} → ${formatNumber(summary.final_loss, 3)}${summary.eval_loss != null ? `, held-out ${formatNumber(summary.eval_loss, 3)}` : ""}`;
  const finished = (summary) => {
    if (!summary) return;
    const words = { finished: "Finished", paused: "Paused", stopped: "Stopped" }[summary.state] ?? summary.state;
    const ready = summary.state === "finished" ? " The model is ready: try it in step 4." : "";
    app.say(message, `${words} at step ${summary.step} of ${summary.steps}: ${losses(summary)}.${ready}`, "ok");
  };
  // Said when the steps are done, before the embedder phase that follows: the model is not
  // usable until that phase ends, so this never says "Finished".
  app.addEventListener("trained", (e) => {
    const s = e.detail;
    if (!e.detail.embedderFollows) return finished(s);
    app.say(message, `Trained ${s.step} of ${s.steps} steps: ${losses(s)}. Now fitting the embedder (progress below); the model is ready to try when it ends.`);
  });
  startButton.addEventListener("click", () => {
    app.say(message, "");
    const saved = (app.state.runs ?? []).find((r) => r.current);
    if (saved) {
      const earlier = (app.state.runs ?? []).filter((r) => !r.current);
      const oldest = earlier.length >= KEEP_RUNS - 1 ? earlier[earlier.length - 1] : null;
      const text = `Start a new run? The saved run (step ${saved.step} of ${saved.steps}${saved.loss != null ? `, loss ${formatNumber(saved.loss, 3)}` : ""}) is kept under Saved runs, resumable.` +
        (oldest ? ` This browser keeps the ${KEEP_RUNS} latest runs, so the oldest (step ${oldest.step}, ${runDate(oldest)}) will be deleted.` : "");
      if (!window.confirm(text)) {
        app.say(message, `Nothing started: the saved run at step ${saved.step} is kept.`);
        return;
      }
    }
    app.train(options()).then(finished, report);
  });
  const resume = () => {
    app.say(message, "");
    app.resume().then(finished, report);
  };
  resumeNow.addEventListener("click", resume);
  resumeButton.addEventListener("click", resume);
  // Pause and Stop take effect after the current step and a checkpoint (seconds on a slow
  // GPU): the state, the message and every button say so at once, not when it is over.
  const halt = (button, what) => app.run(button, () => {
    if (training() === "running") app.say(message, HALTING[what]);
    return what === "stop" ? app.stop() : app.pause();
  }, message);
  pauseButton.addEventListener("click", () => halt(pauseButton, "pause"));
  stopButton.addEventListener("click", () => halt(stopButton, "stop"));
  // Discard drops this checkpoint's run only; earlier saved runs stay.
  discardButton.addEventListener("click", () => app.run(discardButton, async () => {
    const id = app.state.checkpoint?.run_id;
    if (id) await app.deleteRun(id);
    else await app.call("session_clear");
    app.setState({ checkpoint: null });
  }, message));

  // Saved runs: the current one and the latest earlier ones, resumable and deletable.
  const runsList = h("ul", { class: "hits compact", id: "train-runs", "aria-label": "Saved runs" });
  const runsBox = h("section", { class: "sub-card", "aria-label": "Saved runs", hidden: true }, h("h3", { text: "Saved runs" }), h("p", { class: "hint", text: `Kept in this browser: the ${KEEP_RUNS} latest runs. Start never deletes one without asking.` }), runsList);
  let runsKey = null;
  function renderRuns() {
    const runs = app.state.runs ?? [];
    const key = JSON.stringify([runs, app.state.training === "running"]);
    if (key === runsKey) return;
    runsKey = key;
    runsBox.hidden = !runs.length;
    runsList.replaceChildren(...runs.map((r) => {
      const busy = () => (app.state.training === "running" ? "Training is running." : null);
      const resume = app.gate(h("button", { type: "button", class: "small", text: "Resume", "aria-label": `Resume the run at step ${r.step}` }), busy);
      const remove = app.gate(h("button", { type: "button", class: "quiet small", text: "Delete", "aria-label": `Delete the run at step ${r.step}` }), busy);
      resume.addEventListener("click", () => app.run(resume, async () => {
        if (!r.current) await app.openRun(r.id);
        app.say(message, "");
        app.resume().then(finished, report);
      }, message));
      remove.addEventListener("click", () => {
        if (!window.confirm(`Delete the saved run at step ${r.step} of ${r.steps} (${runDate(r)})? This cannot be undone.`)) return;
        app.run(remove, () => app.deleteRun(r.id), message);
      });
      const words = `step ${r.step} / ${r.steps} · loss ${formatNumber(r.loss, 3)} · ${r.preset ?? "custom"} · ${runDate(r)}${r.current ? " · current" : ""}`;
      return h("li", { dataset: { run: r.id, current: String(Boolean(r.current)) } }, h("span", { class: "run-words", text: words }), resume, remove);
    }));
  }

  // The embedder phase.
  const embedderHint = h("small", { class: "hint gate-hint", hidden: true });
  const embedderButton = app.gate(h("button", { type: "button", id: "train-embedder", text: "Embedder" }), () => {
    if (app.state.embedderRunning) return "The embedder phase is running.";
    return app.hasModel ? null : "Train a model first.";
  }, embedderHint);
  const embedderStatus = h("p", { class: "status-line", id: "embedder-status", role: "status", "aria-live": "polite", hidden: true });
  const embedderProgress = h("p", { class: "hint", id: "embedder-progress", hidden: true });
  // The teacher's requests, the distillation and the centring stop at their next batch or
  // step and keep nothing (the distillation puts the weights back); the vocabulary stage
  // comes after the distilled head is kept, so it has no Cancel.
  const embedderCancel = h("button", { type: "button", class: "quiet small", id: "embedder-cancel", text: "Cancel", hidden: true });
  embedderCancel.addEventListener("click", () => {
    embedderCancel.disabled = true;
    app.cancelEmbedder();
  });
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
  const meaning = h("p", { class: "hint", id: "train-meaning" });
  // The cortex (a mixture-of-experts FFN after each mixer): its routing, when the run has one.
  const routing = h("p", { class: "hint", id: "train-routing", hidden: true });

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
        advanced,
        h("div", { class: "grid-2 tight" }, steps.field, lr.field, batch.field, seq.field),
        etaBefore,
        h("div", { class: "row controls" }, startButton, pauseButton, resumeNow, stopButton),
        hint,
      ),
      h("section", { class: "sub-card", "aria-label": "Progress" }, h("h3", { text: "Progress" }), chart.element, metrics, meaning, routing, adapter),
    ),
    runsBox,
    h(
      "section",
      { class: "sub-card", "aria-label": "Embedder" },
      h("h3", { text: "Embedder" }),
      h("p", { class: "hint", text: "After training, the model becomes the Memory and Cache panels' embedder: distilled from the runtime's teacher (/v1/embeddings at the Export panel's runtime URL), or, without one, centred on the corpus." }),
      h("div", { class: "row" }, embedderButton, embedderHint),
      h("div", { class: "row" }, embedderProgress, embedderCancel),
      embedderStatus,
    ),
  );

  const STAGES = { teacher: "Asking the teacher", train: "Distilling on the GPU", vocab: "Asking the teacher for the vocabulary", centre: "Centring", save: "Saving the model with its embedder" };
  function updateEmbedder() {
    const s = app.state;
    const p = s.embedderProgress;
    embedderProgress.hidden = !(s.embedderRunning && p);
    const cancellable = Boolean(s.embedderRunning && ["teacher", "train", "centre"].includes(p?.stage));
    if (embedderCancel.hidden === cancellable) embedderCancel.disabled = false;
    embedderCancel.hidden = !cancellable;
    if (p) embedderProgress.textContent = p.stage === "save" ? `${STAGES.save}…` : `${STAGES[p.stage] ?? p.stage}: ${p.done} / ${p.total}${p.loss != null ? ` · loss ${formatNumber(p.loss, 4)}` : ""}${timeWords(p.done, p.total, p.t0)}`;
    const e = s.embedder;
    if (s.embedderRunning) app.say(embedderStatus, "Embedder phase running…");
    else if (e?.error) app.say(embedderStatus, `Embedder phase failed: ${e.error}`, "error");
    else if (e?.cancelled) app.say(embedderStatus, "Embedder phase cancelled: nothing of it was kept, and the model embeds as it did before it. Embedder runs the phase again.");
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
    // The latest held-out value stays until the next evaluation replaces it.
    const lastHeld = chart.held.length ? chart.held[chart.held.length - 1][1] : null;
    m.eval.textContent = formatNumber(p?.eval_loss ?? lastHeld ?? sum?.eval_loss, 4);
    const heldLoss = p?.eval_loss ?? lastHeld ?? sum?.eval_loss;
    const vocab = sum?.vocab_size ?? app.state.tokenizer?.vocab_size;
    const initial = chart.train.length ? chart.train[0][1] : sum?.initial_loss;
    meaning.textContent = Number.isFinite(heldLoss) ? `Held-out: ${lossMeaning(heldLoss, vocab, initial)}` : Number.isFinite(p?.loss ?? sum?.final_loss) ? lossMeaning(p?.loss ?? sum?.final_loss, vocab, initial) : "";
    routing.hidden = !p?.routing;
    routing.textContent = p?.routing ? routingText(p.routing) : "";
    m.tps.textContent = p?.tokens_per_second || sum?.tokens_per_second ? formatCount(p?.tokens_per_second ?? sum.tokens_per_second) : "–";
    m.eta.textContent = s.training === "running" && p ? formatDuration(p.eta_s) : "–";
    m.params.textContent = formatCount(sum?.n_params ?? s.nParams ?? NaN);
    // The steps are done but the model is not usable until the embedder phase ends.
    const shown = s.halting && s.training === "running" ? HALTING_STATE[s.halting] : s.embedderRunning && s.training === "finished" ? "fitting embedder" : s.training;
    m.state.textContent = shown;
    m.state.dataset.state = shown;
    const a = s.device?.adapter;
    adapter.textContent = s.device?.gpu === false ? "GPU: none (training is off)" : a ? `GPU: ${[a.vendor, a.architecture, a.device, a.description].filter(Boolean).join(" · ") || "unnamed adapter"}` : "";
    updateEmbedder();
    fillSettings(s.settings);
    renderRuns();
    if (!etaBefore.textContent) updateEtaBefore();
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
        if (e.step >= MEASURE_AFTER_STEPS && e.tokens_per_second > 0) {
          saveSpeed(speedKey(app.state.settings ?? app.state.trainOptions), e.tokens_per_second);
          if (e.step === MEASURE_AFTER_STEPS) updateEtaBefore();
        }
        if (app.state.nParams === undefined) {
          app.state.nParams = null; // ask once per page: the size is in the summary, not the event
          app.call("train_summary").then((s) => app.setState({ nParams: s.n_params }, { share: false }), () => {});
        }
      } else if (e.event === "train-state" && e.state) {
        const state = { training: "running", recovering: "running" }[e.state] ?? e.state;
        if (e.state === "recovering") app.say(message, `${e.message ?? "The GPU device was lost."} Recovering from the last checkpoint…`, "error");
        app.setState({ training: state }, { share: false });
      } else if (e.event === "embedder-progress") {
        app.setEmbedderProgress(e.stage ?? (e.loss == null ? "centre" : "train"), e.step, e.steps, e.loss);
      } else if (e.event === "train-checkpoint") {
        m.state.title = `checkpoint saved at step ${e.step}`;
        savedStep = e.step;
        app.refreshRuns();
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
      if (app.state.embedderRunning && app.state.summary) return `fitting embedder · step ${app.state.summary.step}`;
      if (app.state.summary) return `${app.state.summary.state} · step ${app.state.summary.step}`;
      if (app.state.checkpoint) return `checkpoint at step ${app.state.checkpoint.step}`;
      return "no model yet";
    },
  };
}
