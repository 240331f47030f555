// The Studio application: one object per mounted Studio (the page or an <evermind-studio>
// element). It owns the shell (header, step sidebar, panels), the state every panel reads,
// the RPC calls that change it, and the enabling of buttons by their prerequisites.
// Panels (./panels/*.js) only build markup and call the methods here, so the element's
// JS API and the buttons run exactly the same code.
import { formatDuration, h } from "./dom.js";
import { describeError, noGpuMessage } from "./errors.js";
import { dataPanel } from "./panels/data.js";
import { tokenizerPanel } from "./panels/tokenizer.js";
import { trainPanel } from "./panels/train.js";
import { tryPanel } from "./panels/try.js";
import { exportPanel } from "./panels/export.js";
import { memoryPanel } from "./panels/memory.js";
import { cachePanel } from "./panels/cache.js";
import { fromBase64, toBase64 } from "./dom.js";
import { modelsEndpoint, pushPackage } from "./push.js";
import { DEFAULT_TEACHER, teacherVectors } from "./teacher.js";

/** Most corpus sentences the embedder phase uses. */
export const EMBEDDER_TEXTS = 512;

const PANELS = [dataPanel, tokenizerPanel, trainPanel, tryPanel, exportPanel, memoryPanel, cachePanel];
const MARKS = { done: "✓", active: "●", todo: "○" };
const MARK_WORDS = { done: "done", active: "in progress", todo: "not started" };
/** Buttons that need WebGPU (training and the embedder phase): disabled, with the reason, without it. */
const GPU_BUTTONS = ["train-start", "train-resume", "train-resume-checkpoint", "train-embedder"];
const NO_GPU_REASON = "Training needs WebGPU, which this browser does not provide (see the banner at the top).";

let nextAppId = 1;
/** RPC calls after which the Memory and Cache panels re-read what they show. */
const CHANGES_DATA = /^(memory_(remember|forget|import|ingest|forget_source)|cache_(store|import))$/;

export class StudioApp extends EventTarget {
  /**
   * @param {ShadowRoot|HTMLElement} root where the Studio is drawn
   * @param {object} options {runtime, preset, corpusUrl, runtimeUrl, checkpointEvery: () => steps or undefined}
   */
  constructor(root, { runtime, preset = "nano", corpusUrl = null, runtimeUrl = "", checkpointEvery = () => undefined } = {}) {
    super();
    this.id = nextAppId++;
    this.root = root;
    this.runtime = runtime;
    this.options = { preset, corpusUrl, runtimeUrl, checkpointEvery };
    this.state = {
      phase: "booting", // booting | ready | error
      device: null,
      corpus: null,
      tokenizer: null,
      training: "idle", // idle | running | paused | finished | stopped | error
      halting: null, // "pause" | "stop" between the click and the training loop's end
      progress: null,
      summary: null,
      checkpoint: null,
      exported: null,
      memoryCount: 0,
      cacheStored: 0,
      embedder: null, // what the embedder phase did: {method, teacher, why, ...} or {error}
      embedderRunning: false,
      embedderProgress: null, // {stage: "teacher"|"train"|"centre", done, total}
    };
    this.gates = [];
    this.busyButtons = new Set();
    this.unsubscribe = runtime.on((e) => this._onEvent(e));
    this._build();
    this.ready = this._boot();
  }

  // ---- shell ---------------------------------------------------------------------------

  _build() {
    this.pill = h("span", { id: "status-pill", class: "pill", role: "status", "aria-live": "polite", dataset: { state: "booting" }, text: "starting" });
    this.adapterLine = h("span", { id: "fact-adapter", class: "adapter", title: "GPU adapter", text: "–" });
    const header = h(
      "header",
      { class: "topbar" },
      h("img", { src: new URL("../static/evermind.svg", import.meta.url).href, alt: "", width: 26, height: 26 }),
      h("h1", { text: "Evermind Studio" }),
      this.adapterLine,
      this.pill,
    );
    this.bootMessage = h("p", { id: "boot-message", text: "Loading…" });
    this.bootBar = h("div", { id: "boot-bar" });
    this.bootHelp = h("p", { id: "webgpu-help", class: "warning", hidden: true });
    this.bootCard = h(
      "section",
      { class: "boot card", "aria-label": "Starting" },
      this.bootMessage,
      h("div", { class: "progress", "aria-hidden": "true" }, this.bootBar),
      this.bootHelp,
    );
    this.facts = {};
    const fact = (key, label) => [h("dt", { text: label }), (this.facts[key] = h("dd", { id: `fact-${key}`, text: "–" }))];
    const factList = h(
      "dl",
      { id: "boot-facts", class: "facts" },
      fact("transport", "Transport"),
      fact("python", "Python"),
      fact("pyodide", "Pyodide"),
      fact("evermind", "Evermind"),
      fact("python-ready", "Python ready"),
      fact("device-ready", "Device ready"),
    );

    this.panels = PANELS.map((make) => make(this));
    this.stepButtons = [];
    const list = h("ol", { class: "steps" });
    this.panels.forEach((panel, index) => {
      panel.mark = h("span", { class: "mark", "aria-hidden": "true", text: MARKS.todo });
      panel.markWords = h("span", { class: "sr-only", text: MARK_WORDS.todo });
      panel.sub = h("small", { class: "sub" });
      const button = h(
        "button",
        {
          type: "button",
          class: "step",
          id: `step-${panel.id}`,
          "aria-controls": `panel-${panel.id}`,
          dataset: { panel: panel.id, status: "todo" },
          onclick: () => this.show(panel.id, { focus: false }),
          onkeydown: (e) => this._stepKey(e, index),
        },
        panel.mark,
        h("span", { class: "step-text" }, h("span", { class: "step-title", text: `${index + 1}. ${panel.title}` }), panel.sub),
        panel.markWords,
      );
      this.stepButtons.push(button);
      list.append(h("li", {}, button));
      panel.element.id = `panel-${panel.id}`;
      panel.element.classList.add("panel");
      panel.element.setAttribute("aria-labelledby", `heading-${panel.id}`);
      panel.element.setAttribute("tabindex", "-1");
      panel.element.hidden = true;
    });
    const nav = h(
      "nav",
      { class: "sidebar", "aria-label": "Studio steps" },
      h("div", { class: "sidebar-inner" }, list, h("details", { class: "runtime-facts" }, h("summary", { text: "Runtime" }), factList)),
    );
    this.gpuBanner = h("p", { id: "no-gpu-banner", class: "banner warning no-gpu", role: "alert", hidden: true });
    // What a reload brought back from this browser's storage (or dropped, and why).
    this.restoreText = h("span", { id: "restore-notice-text" });
    this.restoreNotice = h(
      "p",
      { id: "restore-notice", class: "banner", role: "status", hidden: true },
      this.restoreText,
      h("button", { type: "button", text: "Dismiss", onclick: () => { this.restoreNotice.hidden = true; } }),
    );
    this.main = h("main", { class: "panels" }, this.gpuBanner, this.restoreNotice, this.bootCard, ...this.panels.map((p) => p.element));
    this.shell = h("div", { class: "studio", dataset: { phase: "booting" } }, header, h("div", { class: "layout" }, nav, this.main));
    this.root.append(this.shell);
    this.show(this.panels[0].id, { focus: false });
    this.refresh();
  }

  _stepKey(e, index) {
    const n = this.stepButtons.length;
    const target = { ArrowDown: index + 1, ArrowRight: index + 1, ArrowUp: index - 1, ArrowLeft: index - 1, Home: 0, End: n - 1 }[e.key];
    if (target === undefined) return;
    e.preventDefault();
    const next = (target + n) % n;
    this.stepButtons[next].focus();
    this.show(this.panels[next].id, { focus: false });
  }

  /** Shows one panel; `focus` moves keyboard focus to its heading region. */
  show(id, { focus = true } = {}) {
    for (const panel of this.panels) {
      const on = panel.id === id;
      panel.element.hidden = !on;
      const button = this.stepButtons[this.panels.indexOf(panel)];
      if (button) {
        // Roving focus: only the current step is in the Tab order; arrows move within.
        button.tabIndex = on ? 0 : -1;
        if (on) button.setAttribute("aria-current", "step");
        else button.removeAttribute("aria-current");
      }
      if (on && panel.onShow) panel.onShow();
    }
    this.current = id;
    if (focus) this.panels.find((p) => p.id === id)?.element.focus();
  }

  /**
   * Ties `button`'s enabled state to a prerequisite: `reason()` returns null when it may be
   * pressed, or words saying what is missing (shown as the button's hint).
   */
  gate(button, reason, hintEl) {
    const entry = { button, reason, hintEl };
    this.gates.push(entry);
    this._applyGate(entry);
    return button;
  }

  _applyGate({ button, reason, hintEl }) {
    const phase = this.state.phase;
    let why = phase !== "ready" ? (phase === "error" ? "The runtime did not start." : "Starting…") : reason();
    // Without WebGPU nothing else a GPU button lacks matters: say that first.
    if (phase === "ready" && this._needsMissingGpu(button)) why = NO_GPU_REASON;
    button.disabled = Boolean(why) || this.busyButtons.has(button);
    button.title = why || "";
    if (hintEl) {
      hintEl.textContent = why || "";
      hintEl.hidden = !why;
    }
  }

  /** Whether `button` needs WebGPU and this tab booted without it. */
  _needsMissingGpu(button) {
    return this.state.device?.gpu === false && GPU_BUTTONS.includes(button.id);
  }

  /** After a boot without WebGPU: the banner, the pill, and the Runtime facts say so. */
  _showNoGpu(device) {
    this.gpuBanner.textContent = noGpuMessage(navigator.userAgent);
    this.gpuBanner.title = device.gpu_error?.message ?? "";
    this.gpuBanner.hidden = false;
    this.adapterLine.textContent = "no WebGPU: CPU only";
  }

  /** Re-evaluates every gate, the step marks and the header after a state change. */
  refresh() {
    // Buttons drawn for a list (e.g. a source's Remove) leave with their row.
    if (this.shell) {
      const home = this.shell.getRootNode();
      this.gates = this.gates.filter((g) => g.button.getRootNode() === home);
    }
    for (const entry of this.gates) this._applyGate(entry);
    this.panels.forEach((panel, index) => {
      const status = panel.status();
      const button = this.stepButtons[index];
      if (!button) return;
      button.dataset.status = status;
      panel.mark.textContent = MARKS[status];
      panel.markWords.textContent = `, ${MARK_WORDS[status]}`;
      panel.sub.textContent = panel.summary?.() ?? "";
      panel.update?.();
    });
  }

  /** Merges `patch` into the state; shares it with other Studios on the same runtime. */
  setState(patch, { share = true } = {}) {
    Object.assign(this.state, patch);
    this.refresh();
    if (share) this.runtime.emitLocal?.({ event: "studio-state", origin: this.id, patch });
  }

  /** Runs `task` with `button` busy; its error is shown in `messageEl` and re-thrown. Work
   * that takes over 2 s without a word of its own says so in `messageEl`, with the time so
   * far (a button whose panel draws its own progress sets `data-own-progress`). */
  async run(button, task, messageEl) {
    if (button) {
      this.busyButtons.add(button);
      button.setAttribute("aria-busy", "true");
      this.refresh();
    }
    if (messageEl) this.say(messageEl, "");
    const ticker = messageEl && !button?.dataset.ownProgress ? this._stillWorking(button, messageEl) : null;
    try {
      return await task();
    } catch (err) {
      ticker?.stop();
      if (messageEl) this.say(messageEl, describeError(err), "error");
      this.fail(err);
      return undefined;
    } finally {
      ticker?.stop();
      if (button) {
        this.busyButtons.delete(button);
        button.removeAttribute("aria-busy");
      }
      this.refresh();
    }
  }

  /** After 2 s, "Recall: still working… 3 s so far" in `messageEl`, every half second, unless
   * the task has said something there itself; `stop()` clears what it wrote. */
  _stillWorking(button, messageEl) {
    const t0 = performance.now();
    const what = button?.textContent.trim();
    let ours = null;
    const timer = setInterval(() => {
      const seconds = (performance.now() - t0) / 1000;
      if (seconds < 2 || (messageEl.textContent && messageEl.textContent !== ours)) return;
      ours = `${what ? `${what}: still` : "Still"} working… ${formatDuration(seconds)} so far`;
      this.say(messageEl, ours);
      messageEl.dataset.working = "true";
    }, 500);
    return {
      stop: () => {
        clearInterval(timer);
        if (ours !== null && messageEl.textContent === ours) this.say(messageEl, "");
        delete messageEl.dataset.working;
      },
    };
  }

  /** Writes a status line (kind: "" | "ok" | "error"). */
  say(el, text, kind = "") {
    el.textContent = text;
    el.dataset.kind = kind;
    el.hidden = !text;
  }

  /** Announces an error to listeners (the element turns it into `evermind-error`). */
  fail(err) {
    this.dispatchEvent(new CustomEvent("error", { detail: { name: err?.name ?? "Error", message: String(err?.message ?? err), text: describeError(err) } }));
  }

  // ---- runtime -------------------------------------------------------------------------

  async call(fn, kwargs = {}) {
    const result = await this.runtime.call(fn, kwargs);
    // Calls that change the memory or the cache (a panel's or the JS API's) tell every
    // Studio on this runtime, so their panels list what the call did.
    if (CHANGES_DATA.test(fn)) this.runtime.emitLocal?.({ event: "studio-data", fn, kwargs, result });
    return result;
  }

  _onEvent(e) {
    if (e.event === "boot" && this.state.phase === "booting") {
      this._bootStage(e.message, e.fraction ?? (e.stage === "python" ? 0.2 : 0.6));
    } else if (e.event === "studio-state" && e.origin !== this.id) {
      this.setState(e.patch, { share: false });
    } else if (e.event === "error" && e.stage) {
      this._bootFailed(new Error(e.message));
    }
    for (const panel of this.panels) panel.onEvent?.(e);
    this.dispatchEvent(new CustomEvent("runtime-event", { detail: e }));
  }

  _bootStage(message, fraction) {
    this.bootMessage.textContent = message;
    this.bootBar.style.width = `${Math.round(fraction * 100)}%`;
  }

  _setPill(text, state) {
    this.pill.textContent = text;
    this.pill.dataset.state = state;
    this.shell.dataset.phase = state;
  }

  _bootFailed(err) {
    if (this.state.phase === "error") return;
    this._bootStage(`Failed to start: ${err.message}`, 1);
    this.bootHelp.textContent = describeError(err);
    this.bootHelp.hidden = false;
    this._setPill(err.name === "NoAdapterError" ? "no-gpu" : "error", err.name === "NoAdapterError" ? "no-gpu" : "error");
    this.setState({ phase: "error" }, { share: false });
  }

  async _boot() {
    const t0 = performance.now();
    if (!("gpu" in navigator)) {
      this.bootHelp.textContent = describeError({ name: "NoAdapterError", message: "navigator.gpu is missing." });
      this.bootHelp.hidden = false;
    }
    this._bootStage("Starting the worker…", 0.05);
    try {
      const boot = await this.runtime.ready;
      const pythonReady = performance.now() - t0;
      this._bootStage("Opening the WebGPU device…", 0.85);
      const device = await this.runtime.device();
      const deviceReady = performance.now() - t0;
      const a = device.adapter ?? {};
      this.adapterLine.textContent = [a.vendor, a.architecture, a.device, a.description].filter(Boolean).join(" · ") || "unnamed adapter";
      this.facts.transport.textContent = device.transport;
      this.facts.python.textContent = device.python;
      this.facts.pyodide.textContent = boot.pyodide;
      this.facts.evermind.textContent = device.evermind;
      this.facts["python-ready"].textContent = `${(pythonReady / 1000).toFixed(2)} s`;
      this.facts["device-ready"].textContent = `${(deviceReady / 1000).toFixed(2)} s`;
      this._bootStage("Ready.", 1);
      this.bootCard.hidden = true;
      if (device.gpu === false) this._showNoGpu(device);
      this._setPill(device.gpu === false ? "ready · cpu only" : "ready", "ready");
      this.setState({ phase: "ready", device }, { share: false });
      await this._restore();
      const restored = performance.now() - t0;
      return { ok: true, boot, device, python_ready_ms: Math.round(pythonReady), device_ready_ms: Math.round(deviceReady), restored_ms: Math.round(restored) };
    } catch (err) {
      this._bootFailed(err);
      this.fail(err);
      return { ok: false, error: err.message, name: err.name };
    }
  }

  /**
   * After boot: the whole saved session comes back (corpus, tokenizer, the model at its
   * checkpoint, the run's settings, the chart's history and the saved runs); falls back to
   * offering the checkpoint when it cannot be restored here.
   */
  async _restore() {
    const back = await this.call("session_restore").catch(() => null);
    if (!back) return this._restoreStatus();
    const patch = { runs: back.runs ?? [] };
    if (back.corpus && back.corpus.bytes > 0) patch.corpus = back.corpus;
    if (back.tokenizer) patch.tokenizer = back.tokenizer;
    if (back.settings) patch.settings = back.settings;
    if (back.summary) {
      patch.summary = back.summary;
      patch.training = { training: "running" }[back.summary.state] ?? back.summary.state;
    }
    const embedder = await this.call("embedder_info").catch(() => null);
    if (embedder?.method) patch.embedder = { ...embedder, why: embedder.reason || (embedder.teacher ? `distilled from ${embedder.teacher}` : embedder.method) };
    this.setState(patch, { share: false });
    if (back.notice) {
      this.restoreText.textContent = back.notice;
      this.restoreNotice.dataset.kind = back.notice_kind ?? "restored";
      this.restoreNotice.classList.toggle("warning", back.notice_kind === "dropped");
      this.restoreNotice.hidden = false;
    }
    if (back.restored) this.dispatchEvent(new CustomEvent("restored", { detail: back }));
  }

  /** The saved runs into the state (the Train panel lists them). */
  async refreshRuns() {
    const r = await this.call("runs_list").catch(() => null);
    if (r) this.setState({ runs: r.runs });
    return r?.runs ?? [];
  }

  /** Makes a saved run the current one and restores it (then `resume()` continues it). */
  async openRun(id) {
    const back = await this.call("run_open", { id });
    this.lastExport = null;
    this.setState({ runs: back.runs, opened: null, corpus: back.corpus, tokenizer: back.tokenizer, settings: back.settings, summary: back.summary, progress: null, training: back.summary?.state ?? "paused", checkpoint: null });
    this.dispatchEvent(new CustomEvent("train-reset", { detail: { resume: false, steps: back.summary?.steps ?? 0 } }));
    return back;
  }

  async deleteRun(id) {
    const { runs } = await this.call("run_delete", { id });
    this.setState({ runs });
    return runs;
  }

  /** The older restore: what the worker holds and whether a checkpoint is saved. */
  async _restoreStatus() {
    const [corpus, session, summary, embedder] = await Promise.all([
      this.call("corpus_info").catch(() => null),
      this.call("session_status").catch(() => null),
      this.call("train_summary").catch(() => null), // rejects while no model exists
      this.call("embedder_info").catch(() => null),
    ]);
    const patch = {};
    if (embedder?.method) patch.embedder = { ...embedder, why: embedder.reason || (embedder.teacher ? `distilled from ${embedder.teacher}` : embedder.method) };
    if (corpus && corpus.bytes > 0) patch.corpus = corpus;
    if (summary) {
      patch.summary = summary;
      patch.training = { training: "running" }[summary.state] ?? summary.state;
      patch.tokenizer ??= { vocab_size: session?.vocab_size ?? null, restored: true };
    } else if (session?.has_checkpoint) {
      patch.checkpoint = session;
    }
    this.setState(patch, { share: false });
  }

  // ---- the work (shared by the panels and the element's JS API) --------------------------

  /** Loads the default corpus, or the `corpus-url` text when that attribute is set. */
  async useDefaultCorpus() {
    let corpus;
    if (this.options.corpusUrl) {
      const url = new URL(this.options.corpusUrl, document.baseURI);
      const response = await fetch(url);
      if (!response.ok) throw new Error(`corpus-url ${url.href}: HTTP ${response.status}; expected a text file`);
      const last = /^https?:$/.test(url.protocol) ? decodeURIComponent(url.pathname.split("/").pop()) : "";
      const name = last || "corpus.txt";
      corpus = await this.call("corpus_add", { name, text: await response.text() });
    } else {
      corpus = await this.call("corpus_default");
    }
    this.setState({ corpus, tokenizer: null }); // a new corpus needs a new tokenizer
    return corpus;
  }

  /** Adds text (a file's contents or a paste) under `name`; `column` picks a CSV column. */
  async addText(name, text, column = null) {
    const kwargs = { name, text };
    if (column) kwargs.column = column;
    const corpus = await this.call("corpus_add", kwargs);
    this.setState({ corpus, tokenizer: null }); // a new corpus needs a new tokenizer
    return corpus;
  }

  /** Adds a file's bytes (base64); the worker refuses binary content with the reason. */
  async addFile(name, dataB64) {
    const corpus = await this.call("corpus_add", { name, data_b64: dataB64 });
    this.setState({ corpus, tokenizer: null }); // a new corpus needs a new tokenizer
    return corpus;
  }

  async removeSource(name) {
    const corpus = await this.call("corpus_remove", { name });
    this.setState({ corpus, tokenizer: null }); // a new corpus needs a new tokenizer
    return corpus;
  }

  async trainTokenizer(vocabSize = 2048) {
    this.setState({ tokenizerRunning: true });
    try {
      const tokenizer = await this.call("tokenizer_train", { vocab_size: vocabSize });
      this.setState({ tokenizer, checkpoint: null });
      return tokenizer;
    } finally {
      this.setState({ tokenizerRunning: false });
    }
  }

  /**
   * Trains; resolves with the summary. With `prepare`, missing data and tokenizer are made
   * first (the default corpus or `corpus-url`, then a tokenizer of `vocab_size`).
   */
  async train(options = {}, { prepare = false, resume = false } = {}) {
    if (this.state.training === "running") throw new Error("training is already running; pause or stop it first");
    if (prepare && !resume) {
      if (!this.state.corpus || !this.state.corpus.bytes) await this.useDefaultCorpus();
      if (!this.state.tokenizer || (options.vocab_size && options.vocab_size !== this.state.tokenizer.vocab_size)) {
        await this.trainTokenizer(options.vocab_size ?? 2048);
      }
    }
    this.lastExport = null; // the model is about to change
    const kwargs = { ...options };
    const embedderPhase = kwargs.embedder ?? true;
    delete kwargs.vocab_size;
    delete kwargs.embedder;
    if (!kwargs.config) kwargs.preset ??= this.options.preset;
    kwargs.checkpoint_every ??= this.options.checkpointEvery?.();
    if (kwargs.checkpoint_every === undefined) delete kwargs.checkpoint_every;
    const settings = resume ? this.state.settings : { preset: kwargs.config ? "custom" : kwargs.preset, config: kwargs.config ?? null, block: kwargs.block ?? "mamba1", cortex: kwargs.cortex ?? null, steps: kwargs.steps, lr: kwargs.lr, batch_size: kwargs.batch_size, seq_len: kwargs.seq_len };
    this.setState({ training: "running", opened: null, nParams: undefined, progress: resume ? this.state.progress : null, summary: resume ? this.state.summary : null, trainOptions: kwargs, settings });
    this.dispatchEvent(new CustomEvent("train-reset", { detail: { resume, steps: kwargs.steps } }));
    try {
      const summary = resume ? await this.call("train_resume") : await this.call("train_start", kwargs);
      this.setState({ training: summary.state, summary, checkpoint: null, halting: null });
      this.refreshRuns();
      if (summary.state === "finished") {
        this.dispatchEvent(new CustomEvent("trained", { detail: { ...summary, embedderFollows: Boolean(embedderPhase) } }));
        // The default flow ends with a working embedder (its failure never fails training).
        if (embedderPhase) summary.embedder = await this.embedder(typeof embedderPhase === "object" ? embedderPhase : {}).catch((err) => ({ error: describeError(err) }));
      }
      return summary;
    } catch (err) {
      const session = await this.call("session_status").catch(() => null);
      this.setState({ training: "error", trainError: err, checkpoint: session?.has_checkpoint ? session : null, halting: null });
      this.refreshRuns();
      throw err;
    }
  }

  resume() {
    return this.train({}, { resume: true });
  }

  async pause() {
    return this._halt("pause");
  }

  async stop() {
    return this._halt("stop");
  }

  /** Asks the loop to pause or stop; `halting` says so at once, until `train()` resolves. */
  async _halt(what) {
    const running = this.state.training === "running";
    if (running) this.setState({ halting: what }, { share: false });
    try {
      const r = await this.call(what === "stop" ? "train_stop" : "train_pause");
      // A paused run stops without a loop to wait for; a loop that had ended needs no wait.
      const asked = String(r?.state ?? "").endsWith("-requested");
      if (!asked || this.state.training !== "running") this.setState({ halting: null }, { share: false });
      return r;
    } catch (err) {
      this.setState({ halting: null }, { share: false });
      throw err;
    }
  }

  /** The embedder phase's progress into the state; each stage's time left is measured from
   * that stage's own start (`t0`). */
  setEmbedderProgress(stage, done, total, loss = null) {
    const before = this.state.embedderProgress;
    const t0 = before?.stage === stage && before.done <= done && done > 0 ? before.t0 : performance.now();
    this.setState({ embedderProgress: { stage, done, total, loss, t0 } }, { share: false });
  }

  /** Why the model cannot be used yet while the embedder phase runs (null when it does not). */
  embedderWait() {
    if (!this.state.embedderRunning) return null;
    const p = this.state.embedderProgress;
    const where = !p ? "" : p.stage === "save" ? " (saving)" : ` (${p.done} of ${p.total})`;
    return `The embedder phase is running${where}; the model is ready when it ends (step 3).`;
  }

  /** Whether a model is in the worker: trained (by this or another Studio) or an opened package. */
  get hasModel() {
    if (this.state.opened && this.state.training !== "running") return true;
    const s = this.state.summary;
    return Boolean(s && s.step > 0 && this.state.training !== "running" && !this.state.embedderRunning);
  }

  /**
   * Opens a `.evermind` package (a File or Blob) in the worker: verified there, then it
   * generates, embeds (Memory and Cache rank by it) and exports; without WebGPU on the CPU.
   * Resolves with `package_load`'s facts {device, ref, digest, n_params, vocab_size, training}.
   */
  async openPackage(file) {
    if (this.state.training === "running" || this.state.embedderRunning) throw new Error("training is running; pause or stop it before opening a package");
    const opened = await this.call("package_load", { data_b64: toBase64(await file.arrayBuffer()) });
    const embedder = await this.call("embedder_info").catch(() => null);
    this.lastExport = null; // the model changed
    this.setState({
      opened: { ...opened, filename: file.name ?? "" },
      summary: null,
      training: "idle",
      progress: null,
      tried: false,
      embedder: embedder?.method ? { ...embedder, why: `the package's head (${embedder.method})` } : null,
    });
    return opened;
  }

  /** The runtime URL and token the Export panel holds (the push fields), else the attribute. */
  runtimeSettings() {
    return this.runtimeFields?.() ?? { url: this.options.runtimeUrl || "", token: "" };
  }

  /**
   * The embedder phase, on the corpus's sentences (at most `limit`): with a runtime URL
   * whose /v1/embeddings answers, distil its teacher's vectors into the model on WebGPU
   * (`embedder_train`), then the token term (`embedder_vocab` → teacher → `embedder_tokens`);
   * without one, or when the teacher fails, the teacher-free fallback:
   * centring only (`embedder_centre`). Resolves with what ran and why ({method, why, ...}).
   */
  async embedder({ url, token, teacher = DEFAULT_TEACHER, limit = EMBEDDER_TEXTS, steps, lr = 0.005, batch_size = 16 } = {}) {
    if (this.state.embedderRunning) throw new Error("the embedder phase is already running");
    if (!this.state.summary?.step || this.state.training === "running") throw new Error("train a model first (step 3), then run the embedder phase");
    const settings = this.runtimeSettings();
    url = (url ?? settings.url ?? "").trim();
    token = token ?? settings.token;
    // Cancel (cancelEmbedder) stops the teacher's requests here and the distillation or the
    // centring in the worker at its next step; the vocabulary stage comes after the distilled
    // head is kept, so it has no Cancel.
    this._embedderCancelled = false;
    const checkCancel = () => {
      if (!this._embedderCancelled) return;
      const err = new Error("the embedder phase was cancelled");
      err.name = "Cancelled";
      throw err;
    };
    const progress = (stage, done, total) => {
      checkCancel();
      this.setEmbedderProgress(stage, done, total);
    };
    this.setState({ embedderRunning: true, embedderProgress: null, embedder: null });
    try {
      const { texts } = await this.call("embedder_texts", { limit });
      if (!texts.length) throw new Error("the corpus has no sentences to fit the embedder on; add text in the Data panel");
      let reason;
      if (url) {
        try {
          progress("teacher", 0, texts.length);
          const { vectors, model } = await teacherVectors(url, token, teacher, texts, { onProgress: (done, total) => progress("teacher", done, total) });
          // Every fifth sentence is held out of the training to score the token term on.
          const held = texts.length >= 10 ? texts.map((_, i) => i).filter((i) => i % 5 === 4) : [];
          const isHeld = new Set(held);
          const fit = texts.map((_, i) => i).filter((i) => !isHeld.has(i));
          const n = steps ?? Math.min(200, Math.max(30, Math.ceil((3 * fit.length) / batch_size)));
          progress("train", 0, n);
          let result = await this.call("embedder_train", { texts: fit.map((i) => texts[i]), targets: fit.map((i) => vectors[i]), steps: n, lr, batch_size, teacher: model });
          this._embedderCancelled = false; // the distilled head is kept: too late to cancel
          let why = `distilled from ${model} at ${url} on ${fit.length} corpus sentences`;
          try {
            // The token term: the teacher's vector of each vocabulary entry, scaled into the head.
            const vocab = await this.call("embedder_vocab", {});
            progress("vocab", 0, vocab.ids.length);
            const prior = await teacherVectors(url, token, model, vocab.texts, { onProgress: (done, total) => progress("vocab", done, total) });
            const scored = held.length ? held : fit;
            result = await this.call("embedder_tokens", { ids: vocab.ids, vectors: prior.vectors, texts: scored.map((i) => texts[i]), targets: scored.map((i) => vectors[i]), corpus: texts });
            why += result.tokens
              ? `, with the teacher's vectors of ${vocab.ids.length} vocabulary entries as a token term (agreement ${result.agreement_without_tokens} → ${result.agreement})`
              : " (a token term did not agree better, so none)";
          } catch (err) {
            why += `; the token term failed (${describeError(err)}), so the head has the projection only`;
          }
          return this._embedderDone({ ...result, url, why });
        } catch (err) {
          if (err?.name === "Cancelled") throw err;
          reason = `the teacher at ${url} failed: ${describeError(err)} So no teacher: centred the model's vectors on the corpus instead.`;
        }
      } else {
        reason = "no runtime URL (set it in the Export panel for a teacher), so centred the model's vectors on the corpus: teacher-free, it removes the direction every text shares.";
      }
      progress("centre", 0, texts.length);
      const result = await this.call("embedder_centre", { texts, reason });
      return this._embedderDone({ ...result, why: reason });
    } catch (err) {
      // Cancelled: nothing was kept (the distillation put the weights back), the model
      // embeds as it did before.
      if (err?.name === "Cancelled") {
        this.setState({ embedder: { cancelled: true } });
        return { cancelled: true };
      }
      this.setState({ embedder: { error: describeError(err) } });
      throw err;
    } finally {
      this.setState({ embedderRunning: false });
    }
  }

  /** Asks the running embedder phase to stop (see `embedder`); nothing of it is kept. */
  cancelEmbedder() {
    if (!this.state.embedderRunning) return;
    this._embedderCancelled = true;
    this.call("operation_cancel", { name: "embedder" }).catch(() => {});
  }

  _embedderDone(embedder) {
    this.lastExport = null; // the package now carries a new head
    this.setState({ embedder });
    this.dispatchEvent(new CustomEvent("embedder", { detail: embedder }));
    return embedder;
  }

  async generate(prompt, options = {}) {
    return this.call("generate", { prompt, ...options });
  }

  async embed(texts) {
    return this.call("embed", { texts });
  }

  async exportPackage({ name = "evermind-studio", version = "0.1.0", dtype = "float32" } = {}) {
    const result = await this.call("export_package", { name, version, dtype });
    const blob = new Blob([fromBase64(result.data_b64)], { type: "application/zip" });
    const exported = { filename: result.filename, bytes: result.bytes, digest: result.digest, ref: result.ref, blob };
    this.setState({ exported: { ...exported, blob: undefined } });
    this.lastExport = exported;
    return exported;
  }

  /** Exports (if needed) and POSTs the package to `<url>/v1/models`; resolves with {id, digest}. */
  async push(url, token, options = {}) {
    modelsEndpoint(url); // a bad URL fails before the export
    const exported = this.lastExport && !options.fresh ? this.lastExport : await this.exportPackage(options);
    const served = await pushPackage(url, token, exported.blob);
    this.setState({ pushed: served });
    return served;
  }
}
