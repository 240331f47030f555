// <evermind-studio>: the whole Studio as one custom element. Drop this module script and
// the tag into any page; everything else (worker, Pyodide, wheel, CSS, icons) is resolved
// relative to this file, never to the host page. Several elements share one Pyodide runtime.
//
// Attributes: preset (nano|small|base), corpus-url (text to train on instead of the default
// corpus), runtime-url (pre-fills Push), otlp-endpoint (a collector's OTLP/HTTP base URL: the
// tab's spans go there as OTLP JSON; unset, nothing is sent). JS API and events: see
// docs/studio.md.
import { sharedRuntime } from "./evermind-client.js";
import { StudioApp } from "./ui/app.js";
import { describeError } from "./ui/errors.js";

// The JS API's methods: each failure rejects and also fires `evermind-error` (docs/studio.md).
const API_METHODS = ["train", "pause", "resume", "stop", "generate", "embed", "embedder", "exportPackage", "openPackage", "push"];

const STYLESHEET = new URL("studio.css", import.meta.url).href;
const BUNDLE_ORIGIN = new URL(import.meta.url).origin;
// A boot failure that reads like a blocked download (CORS, offline, a 404).
const NETWORK_FAILURE = /fetch|network|load|import|worker failed|cors/i;

class EvermindStudioElement extends HTMLElement {
  static observedAttributes = ["preset", "corpus-url", "runtime-url", "otlp-endpoint"];

  constructor() {
    super();
    this.attachShadow({ mode: "open" });
    this._app = null;
    let settle;
    /** Resolves with the boot facts once Python and the GPU are up; rejects with the reason. */
    this.ready = new Promise((resolve, reject) => { settle = { resolve, reject }; });
    this.ready.catch(() => {}); // a page that never awaits ready gets no unhandled rejection
    this._settle = settle;
    this._localTraining = false;
    this.memory = {
      remember: (key, content, { tags = [], importance = 0.5 } = {}) => this._call("memory_remember", { key, content, tags, importance }),
      recall: async (query, { top_k = 5 } = {}) => (await this._call("memory_recall", { query, top_k })).hits,
      forget: async (key) => (await this._call("memory_forget", { key })).forgotten,
      list: async ({ limit = 50 } = {}) => (await this._call("memory_list", { limit })).items,
    };
    this.cache = {
      lookup: (query, { threshold = null, maxError = null } = {}) => this._call("cache_lookup", { query, ...(threshold === null ? {} : { threshold }), ...(maxError === null ? {} : { max_error: maxError }) }),
      store: async (query, response) => (await this._call("cache_store", { query, response })).stored,
    };
    // Telemetry (docs/telemetry.md): off unless a collector is named.
    this.telemetry = {
      configure: (url, { serviceName = "evermind-studio", headers = null } = {}) => this._call("telemetry_configure", { collector_url: url || "", service_name: serviceName, headers }),
      flush: () => this._call("telemetry_flush", {}),
      status: () => this._call("telemetry_status", {}),
    };
    // Every API method reports its failure as `evermind-error` as well as rejecting.
    for (const name of API_METHODS) {
      const method = this[name];
      this[name] = (...args) => this._reported(() => method.apply(this, args));
    }
  }

  connectedCallback() {
    if (this._app) return;
    const link = document.createElement("link");
    link.rel = "stylesheet";
    link.href = STYLESHEET;
    this.shadowRoot.append(link);
    const app = new StudioApp(this.shadowRoot, {
      runtime: sharedRuntime(),
      preset: this.getAttribute("preset") || "nano",
      corpusUrl: this.getAttribute("corpus-url"),
      runtimeUrl: this.getAttribute("runtime-url") || "",
      // Read when a run starts, so a page may change it at any time.
      checkpointEvery: () => Number(this.getAttribute("checkpoint-every")) || undefined,
    });
    this._app = app;
    app.addEventListener("runtime-event", (e) => {
      const ev = e.detail;
      if (ev.event === "train-progress" && this._localTraining) {
        const { step, steps, loss, eval_loss, tokens, tokens_per_second, eta_s } = ev;
        this._emit("evermind-progress", { step, steps, loss, eval_loss, tokens, tokens_per_second, eta_s });
      }
    });
    app.addEventListener("trained", (e) => { if (this._localTraining) this._emit("evermind-trained", e.detail); });
    app.addEventListener("error", (e) => this._emit("evermind-error", e.detail));
    app.ready.then((result) => {
      if (!result.ok) this._explainCrossOrigin(result.error);
      const collector = this.getAttribute("otlp-endpoint");
      if (result.ok && collector) this.telemetry.configure(collector).catch(() => {});
      return result.ok ? this._settle.resolve(result) : this._settle.reject(Object.assign(new Error(result.error), { name: result.name || "Error" }));
    });
  }

  // Loaded from another origin and the worker's downloads failed: most likely that server
  // sends no CORS headers for this page (the module script itself got through, so its
  // server allows that one file, or a cache served it). Say so on the page.
  _explainCrossOrigin(message) {
    if (BUNDLE_ORIGIN === location.origin || !NETWORK_FAILURE.test(String(message))) return;
    const help = document.createElement("p");
    help.id = "cross-origin-help";
    help.className = "warning";
    help.setAttribute("role", "alert");
    help.textContent = `The Studio's files come from ${BUNDLE_ORIGIN}, another origin than this page (${location.origin}), `
      + `and loading them failed (${message}). That server must send Access-Control-Allow-Origin for this page on every file `
      + `of the bundle: with \`evermind studio\`, start it with --allow-origin ${location.origin} (or '*').`;
    this.shadowRoot.append(help);
  }

  attributeChangedCallback(name, _old, value) {
    const app = this._app;
    if (!app) return;
    if (name === "runtime-url") {
      app.options.runtimeUrl = value || "";
      app.panels.find((p) => p.id === "export")?.setRuntimeUrl(value);
    } else if (name === "corpus-url") {
      app.options.corpusUrl = value;
    } else if (name === "otlp-endpoint") {
      app.ready.then((result) => result.ok && this.telemetry.configure(value || "").catch(() => {}));
    } else if (name === "preset") {
      app.options.preset = value || "nano";
      const select = this.shadowRoot.querySelector("select[name=preset]");
      if (select && value) select.value = value;
    }
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail, bubbles: true, composed: true }));
  }

  async _call(fn, kwargs) {
    return this._reported(async () => {
      await this.ready;
      return this._app.call(fn, kwargs);
    });
  }

  /** Runs an API call; a failure fires `evermind-error` ({name, message, text}) and rejects. */
  async _reported(task) {
    try {
      return await task();
    } catch (err) {
      if (this._app) this._app.fail(err);
      else this._emit("evermind-error", { name: err?.name ?? "Error", message: String(err?.message ?? err), text: describeError(err) });
      throw err;
    }
  }

  _need() {
    if (!this._app) throw new Error("<evermind-studio> is not in the document yet; append it before calling its API");
    return this._app;
  }

  /** The shared EvermindRuntime (call/on) for anything the API below does not cover. */
  get runtime() {
    return this._app?.runtime ?? sharedRuntime();
  }

  /** The Studio's current state (corpus, tokenizer, training, summary, ...). Read-only. */
  get state() {
    return this._need().state;
  }

  /**
   * Trains and resolves with the summary. Makes the corpus (default or corpus-url) and a
   * tokenizer (`vocab_size`, default 2048) first when they are missing. Options: preset or
   * config, steps, lr, batch_size, seq_len, warmup_steps, checkpoint_every, seed, vocab_size.
   */
  async train(options = {}) {
    const app = this._need();
    await this.ready;
    this._localTraining = true;
    try {
      return await app.train(options, { prepare: true });
    } finally {
      this._localTraining = false;
    }
  }

  /** Pauses a running training (it checkpoints); resolves with {state}. */
  pause() {
    return this._need().pause();
  }

  /** Resumes from the paused state or the saved checkpoint; resolves with the summary. */
  async resume() {
    const app = this._need();
    await this.ready;
    this._localTraining = true;
    try {
      return await app.resume();
    } finally {
      this._localTraining = false;
    }
  }

  /** Stops training; resolves with {state}. */
  stop() {
    return this._need().stop();
  }

  /**
   * Generates a continuation of `prompt`; resolves with {text, tokens, tokens_per_second}.
   * Options: max_new_tokens, temperature, top_k, top_p, seed, onToken(text) for streaming.
   */
  async generate(prompt, options = {}) {
    const app = this._need();
    await this.ready;
    const { onToken, ...kwargs } = options;
    const off = onToken ? app.runtime.on((e) => { if (e.event === "generate-token") onToken(e.text); }) : null;
    try {
      return await app.generate(prompt, kwargs);
    } finally {
      off?.();
    }
  }

  /** Embeds a string or a list of strings; resolves with one unit vector (number[]) each. */
  async embed(texts) {
    const app = this._need();
    await this.ready;
    const list = typeof texts === "string" ? [texts] : [...texts];
    return (await app.embed(list)).vectors;
  }

  /**
   * Runs the embedder phase (training runs it too when it finishes): distils the teacher at
   * the runtime URL (POST <url>/v1/embeddings) or, without one, centres. Resolves with
   * {method: "distill"|"centre", why, dim, ...}. Options: url, token, teacher, limit, steps, lr.
   */
  async embedder(options = {}) {
    const app = this._need();
    await this.ready;
    return app.embedder(options);
  }

  /** Opens a `.evermind` package (a File or Blob) to try, embed with and export; resolves with {device, ref, digest, n_params, vocab_size, training}. */
  async openPackage(file) {
    const app = this._need();
    await this.ready;
    return app.openPackage(file);
  }

  /** Exports the trained model; resolves with a File (a Blob) named like the package. */
  async exportPackage(options = {}) {
    const app = this._need();
    await this.ready;
    const exported = await app.exportPackage(options);
    return new File([exported.blob], exported.filename, { type: "application/zip" });
  }

  /** Exports and POSTs to `<url>/v1/models`; resolves with {id, digest}; rejects with the server's words. */
  async push(url = this.getAttribute("runtime-url"), token = "", options = {}) {
    const app = this._need();
    await this.ready;
    return app.push(url, token, { ...options, fresh: true });
  }

  /** Shows a panel: data, tokenizer, train, try, export, memory or cache. */
  show(panel) {
    this._need().show(panel);
  }
}

if (!customElements.get("evermind-studio")) customElements.define("evermind-studio", EvermindStudioElement);

export { EvermindStudioElement };
