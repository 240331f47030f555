// Evermind Studio worker: boots Pyodide, installs the evermind wheel, and forwards calls
// from the page to evermind.studio.api. Runs as a module worker so the page stays
// responsive while Python trains. Everything is fetched from this bundle's own origin.
// Pyodide lives in a content-hash folder named by build-info.json (served immutable).

const base = new URL("./", import.meta.url);

function post(message) {
  self.postMessage(message);
}

/**
 * Counts the bytes of the boot downloads (Pyodide's wasm, stdlib, lock; our wheel) as they
 * stream in, and posts `boot` events with a `fraction` for the boot bar. Totals are the
 * decoded sizes from build-info.json: with Content-Encoding, Content-Length is the
 * compressed size while a stream reader counts decoded bytes.
 */
function trackDownloads(info) {
  const sizes = new Map(Object.entries(info.boot_bytes ?? {}).map(([path, n]) => [new URL(path, base).href, n]));
  const total = [...sizes.values()].reduce((a, b) => a + b, 0);
  let loaded = 0;
  const fraction = () => 0.05 + 0.5 * (total ? Math.min(1, loaded / total) : 1);
  if (!total || !self.ReadableStream) return { fraction, stop: () => {} };
  let last = 0;
  const report = (force) => {
    const now = performance.now();
    if (!force && now - last < 100) return;
    last = now;
    const mb = (n) => (n / 1e6).toFixed(1);
    post({ event: { event: "boot", stage: "download", loaded, total, fraction: fraction(), message: `Downloading Python and evermind… ${mb(loaded)} of ${mb(total)} MB` } });
  };
  const realFetch = self.fetch;
  // Count a clone's bytes and hand Pyodide the original response: a constructed Response
  // would lose the URL, and with it the browser's compiled-wasm cache on the next visit.
  const count = async (copy) => {
    const reader = copy.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      loaded += value.byteLength;
      report(false);
    }
    report(true);
  };
  self.fetch = async (input, init) => {
    const response = await realFetch.call(self, input, init);
    const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url, base);
    url.search = "";
    if (sizes.has(url.href) && response.ok && response.body) count(response.clone()).catch(() => {});
    return response;
  };
  return { fraction, stop: () => { self.fetch = realFetch; } };
}

async function boot() {
  const t0 = performance.now();
  post({ event: { event: "boot", stage: "python", message: "Starting Python (Pyodide)…" } });
  const infoResponse = await fetch(new URL("build-info.json", base));
  if (!infoResponse.ok) throw new Error(`build-info.json: HTTP ${infoResponse.status}; rebuild the bundle`);
  const info = await infoResponse.json();
  const pyodideDir = new URL(info.pyodide_dir ?? "pyodide/", base).href;
  const downloads = trackDownloads(info);
  const { loadPyodide } = await import(new URL("pyodide.mjs", pyodideDir).href);
  const pyodide = await loadPyodide({ indexURL: pyodideDir });
  const tPython = performance.now();
  post({ event: { event: "boot", stage: "wheel", message: "Installing evermind…", fraction: downloads.fraction() } });
  const errors = [];
  // loadPackage resolves to [] on failure and reports only through errorCallback.
  const loaded = await pyodide.loadPackage(new URL(info.wheel, base).href, {
    messageCallback: () => {},
    errorCallback: (m) => errors.push(m),
  });
  downloads.stop();
  if (!loaded.length) throw new Error(`could not install ${info.wheel}: ${errors.join("; ") || "unknown error"}`);
  const api = pyodide.pyimport("evermind.studio.api");
  api.set_emitter((json) => post({ event: JSON.parse(json) }));
  const tWheel = performance.now();
  return {
    api,
    result: {
      pyodide: pyodide.version,
      evermind: info.version,
      python_ms: Math.round(tPython - t0),
      wheel_ms: Math.round(tWheel - tPython),
    },
  };
}

const ready = boot();
ready.catch((err) => post({ event: { event: "error", stage: "boot", message: String(err && err.message || err) } }));

self.onmessage = async (e) => {
  const { id, fn, kwargs } = e.data;
  try {
    const { api, result } = await ready;
    if (fn === "__boot__") {
      post({ id, ok: true, result });
      return;
    }
    const envelope = JSON.parse(await api.call(fn, JSON.stringify(kwargs ?? {})));
    post({ id, ...envelope });
  } catch (err) {
    post({ id, ok: false, error: { type: (err && err.name) || "Error", message: String((err && err.message) || err) } });
  }
};
