// Evermind Studio worker: boots Pyodide, installs the evermind wheel, and forwards calls
// from the page to evermind.studio.api. Runs as a module worker so the page stays
// responsive while Python trains. Everything is fetched from this bundle's own origin.
// Pyodide lives in a content-hash folder named by build-info.json (served immutable).

const base = new URL("./", import.meta.url);

function post(message) {
  self.postMessage(message);
}

/**
 * Counts the bytes of the boot files (Pyodide's wasm, stdlib, lock; our wheel) as they
 * stream in, and posts `boot` events with a `fraction` for the boot bar. Totals are the
 * decoded sizes from build-info.json: with Content-Encoding, Content-Length is the
 * compressed size while a stream reader counts decoded bytes.
 *
 * A file already in Cache Storage (where sw.js keeps the boot set; the service worker then
 * answers from it) is not a download: while every file so far was, the bar says "Starting"
 * (stage `start`), not "Downloading", as on a visit from the cache or offline. (A probe with
 * `cache: "only-if-cached"` would also see the HTTP cache, but it crashed Chromium's
 * renderer under request interception, so it is not used.)
 */
function trackDownloads(info) {
  const sizes = new Map(Object.entries(info.boot_bytes ?? {}).map(([path, n]) => [new URL(path, base).href, n]));
  const total = [...sizes.values()].reduce((a, b) => a + b, 0);
  let loaded = 0;
  const from = { cache: [], network: [] };
  const fraction = () => 0.05 + 0.5 * (total ? Math.min(1, loaded / total) : 1);
  if (!total || !self.ReadableStream) return { fraction, from, stop: () => {} };
  let last = 0;
  const report = (force) => {
    const now = performance.now();
    if (!force && now - last < 100) return;
    last = now;
    const mb = (n) => (n / 1e6).toFixed(1);
    const event = from.network.length
      ? { stage: "download", message: `Downloading Python and evermind… ${mb(loaded)} of ${mb(total)} MB` }
      : { stage: "start", message: "Starting Python and evermind from this browser's cache…" };
    post({ event: { event: "boot", ...event, loaded, total, fraction: fraction() } });
  };
  const realFetch = self.fetch;
  const inCacheStorage = async (href) => {
    try {
      return Boolean(self.caches && (await caches.match(href, { ignoreVary: true })));
    } catch {
      return false; // no Cache Storage here (e.g. an opaque origin)
    }
  };
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
    const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url, base);
    url.search = "";
    if (!sizes.has(url.href)) return realFetch.call(self, input, init);
    const cached = await inCacheStorage(url.href);
    const response = await realFetch.call(self, input, init);
    (cached ? from.cache : from.network).push(url.pathname.split("/").pop());
    if (response.ok && response.body) count(response.clone()).catch(() => {});
    return response;
  };
  return { fraction, from, stop: () => { self.fetch = realFetch; } };
}

/** Cache Storage of the Python memory snapshot (not the service worker's: it outlives builds, keyed by them). */
const SNAPSHOT_CACHE = "evermind-python-snapshot";

/** The snapshot's key: Pyodide and the wheel are content-hashed, so the pair names one build. */
function snapshotKey(info) {
  return new URL(`__snapshot__/${info.pyodide_dir}${info.wheel}`, base).href;
}

/** The stored snapshot for this build, or null (none yet, no Cache Storage, a read error). */
async function readSnapshot(key) {
  try {
    if (!self.caches) return null;
    const response = await (await caches.open(SNAPSHOT_CACHE)).match(key);
    return response ? new Uint8Array(await response.arrayBuffer()) : null;
  } catch {
    return null;
  }
}

/** Keeps `bytes` as this build's snapshot, dropping other builds' (best effort). */
async function writeSnapshot(key, bytes) {
  try {
    const cache = await caches.open(SNAPSHOT_CACHE);
    for (const request of await cache.keys()) if (request.url !== key) await cache.delete(request);
    await cache.put(key, new Response(bytes, { headers: { "Content-Type": "application/octet-stream" } }));
  } catch (err) {
    console.warn(`evermind: Python snapshot not stored: ${err && err.message}`);
  }
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
  const tModule = performance.now();
  // A repeat visit starts Python from the memory snapshot the first one made after
  // importing evermind (Python's start-up and the imports are most of a warm boot).
  const key = snapshotKey(info);
  const snapshot = await readSnapshot(key);
  let pyodide;
  let snapshotState = snapshot ? "loaded" : "none";
  try {
    pyodide = await loadPyodide(snapshot ? { indexURL: pyodideDir, _loadSnapshot: snapshot } : { indexURL: pyodideDir });
  } catch (err) {
    if (!snapshot) throw err;
    snapshotState = `refused: ${err && err.message}`;
    console.warn(`evermind: Python snapshot refused (${err && err.message}); starting afresh`);
    pyodide = await loadPyodide({ indexURL: pyodideDir });
  }
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
  const tInstalled = performance.now();
  const api = pyodide.pyimport("evermind.studio.api");
  api.set_emitter((json) => post({ event: JSON.parse(json) }));
  const tWheel = performance.now();
  return {
    api,
    // Without a snapshot, one is made after the boot (see makeSnapshot).
    snapshot: snapshot ? null : { loadPyodide, indexURL: pyodideDir, wheel: new URL(info.wheel, base).href, key },
    result: {
      pyodide: pyodide.version,
      evermind: info.version,
      python_ms: Math.round(tPython - t0),
      // Of python_ms: build-info.json and pyodide.mjs, then loadPyodide (wasm, stdlib, init).
      module_ms: Math.round(tModule - t0),
      wheel_ms: Math.round(tWheel - tPython),
      // Of wheel_ms: installing the wheel, then importing evermind.studio.api.
      install_ms: Math.round(tInstalled - tPython),
      import_ms: Math.round(tWheel - tInstalled),
      snapshot: snapshotState,
      // Which boot files came from a cache and which from the network.
      files: downloads.from,
    },
  };
}

/**
 * Makes this build's Python memory snapshot in a second, throwaway Pyodide (one made with
 * `_makeSnapshot` cannot reach JS objects, so it cannot be the session's): Python started,
 * the wheel installed, evermind.studio.api imported (or less: see below), nothing else. Runs once, when the page
 * asks (`__snapshot__`, after its boot and restore).
 */
async function makeSnapshot({ loadPyodide, indexURL, wheel, key }) {
  const bytes = new Uint8Array(await (await fetch(wheel)).arrayBuffer());
  // Pyodide restores a snapshot into a fresh module's initial heap and cannot grow it first
  // ("offset is out of bounds" on load), so a snapshot whose heap grew past that size is
  // useless. The most that fits is imported: the whole Studio API, else its session, else
  // only the installed wheel; the boot imports the rest.
  for (const module of SNAPSHOT_IMPORTS) {
    try {
      const maker = await loadPyodide({ indexURL, _makeSnapshot: true });
      const initialHeap = maker._module.HEAP8.length;
      // Unpacked by hand: loadPackage leaves JS objects in Python, which a snapshot refuses.
      maker.FS.writeFile("/tmp/evermind.whl", bytes);
      maker.runPython("import site, zipfile; zipfile.ZipFile('/tmp/evermind.whl').extractall(site.getsitepackages()[0])");
      if (module) maker.runPython(`import ${module}`);
      if (maker._module.HEAP8.length > initialHeap) continue; // would not restore: import less
      await writeSnapshot(key, maker.makeMemorySnapshot());
      return;
    } catch (err) {
      console.warn(`evermind: no Python snapshot made: ${err && err.message}`);
      return;
    }
  }
}

/** What a snapshot imports, most first (see makeSnapshot); "" is the wheel alone. */
const SNAPSHOT_IMPORTS = ["evermind.studio.api", "evermind.studio.session", ""];

const ready = boot();
let snapshotMade = null;
ready.catch((err) => post({ event: { event: "error", stage: "boot", message: String(err && err.message || err) } }));

self.onmessage = async (e) => {
  const { id, fn, kwargs } = e.data;
  try {
    const { api, result } = await ready;
    if (fn === "__snapshot__") {
      // The page asks once it is ready, so the snapshot never delays the boot itself.
      snapshotMade ??= ready.then(({ snapshot }) => snapshot && makeSnapshot(snapshot));
      await snapshotMade;
      post({ id, ok: true, result: null });
      return;
    }
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
