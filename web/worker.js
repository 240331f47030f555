// Evermind Studio worker: boots Pyodide, installs the evermind wheel, and forwards calls
// from the page to evermind.studio.api. Runs as a module worker so the page stays
// responsive while Python trains. Everything is fetched from this bundle's own origin.
import { loadPyodide } from "./pyodide/pyodide.mjs";

const base = new URL("./", import.meta.url);

function post(message) {
  self.postMessage(message);
}

async function boot() {
  const t0 = performance.now();
  post({ event: { event: "boot", stage: "python", message: "Starting Python (Pyodide)…" } });
  const infoResponse = await fetch(new URL("build-info.json", base));
  if (!infoResponse.ok) throw new Error(`build-info.json: HTTP ${infoResponse.status}; rebuild the bundle`);
  const info = await infoResponse.json();
  const pyodide = await loadPyodide({ indexURL: new URL("pyodide/", base).href });
  const tPython = performance.now();
  post({ event: { event: "boot", stage: "wheel", message: "Installing evermind…" } });
  const errors = [];
  // loadPackage resolves to [] on failure and reports only through errorCallback.
  const loaded = await pyodide.loadPackage(new URL(info.wheel, base).href, {
    messageCallback: () => {},
    errorCallback: (m) => errors.push(m),
  });
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
