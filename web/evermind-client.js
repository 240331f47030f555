// The page side of the Evermind worker: a tiny promise-based RPC over postMessage.
// `call(fn, kwargs)` runs evermind.studio.api.<fn>(**kwargs) in the worker's Python and
// resolves with its result, or rejects with an Error whose name is the Python error type.

// Browsers start workers only from the page's origin. When this bundle is served from
// another origin (a CDN; it must then send CORS headers), a same-origin blob: worker imports
// the real one, whose import.meta.url still points at the bundle.
export function startWorker(url, type = "module") {
  if (url.origin === location.origin) return new Worker(url, { type });
  const source = type === "module" ? `import ${JSON.stringify(url.href)};` : `importScripts(${JSON.stringify(url.href)});`;
  const trampoline = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  return new Worker(trampoline, { type });
}

export class EvermindRuntime {
  constructor({ base } = {}) {
    this.base = base ? new URL(base, location.href) : new URL("./", import.meta.url);
    this.worker = startWorker(new URL("worker.js", this.base), "module");
    this.pending = new Map();
    this.listeners = new Set();
    this.nextId = 1;
    this.worker.onmessage = (e) => this._receive(e.data);
    this.worker.onerror = (e) => this._fail(new Error(`worker failed to start: ${e.message || "see console"}`));
    this.ready = this.call("__boot__");
  }

  _receive(message) {
    if (message.event) {
      for (const listener of this.listeners) listener(message.event);
      return;
    }
    const entry = this.pending.get(message.id);
    if (!entry) return;
    this.pending.delete(message.id);
    if (message.ok) {
      entry.resolve(message.result);
    } else {
      const err = new Error(message.error?.message ?? "unknown error");
      err.name = message.error?.type ?? "Error";
      entry.reject(err);
    }
  }

  _fail(err) {
    for (const entry of this.pending.values()) entry.reject(err);
    this.pending.clear();
    for (const listener of this.listeners) listener({ event: "error", stage: "worker", message: err.message });
  }

  call(fn, kwargs = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, fn, kwargs });
    });
  }

  on(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  // Delivers a page-side event to every listener (Studios sharing this runtime use it to
  // tell each other what changed in the shared Python session).
  emitLocal(event) {
    for (const listener of this.listeners) listener(event);
  }

  // The WebGPU device facts from the `boot` call, asked for once per runtime.
  device() {
    this._device ??= this.ready.then(() => this.call("boot"));
    this._device.catch(() => { this._device = null; });
    return this._device;
  }
}

let shared = null;

// One runtime per page: several components share one Pyodide.
export function sharedRuntime() {
  shared ??= new EvermindRuntime();
  return shared;
}
