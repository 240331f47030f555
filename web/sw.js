// Evermind Studio service worker: a second visit boots from Cache Storage, network or not.
//
// build/build_web.py fills MANIFEST with the build id and every file of the bundle, so a
// rebuild changes this file, the browser installs the new worker, and its fresh cache
// replaces the old one. Within one build every file is fixed, so the strategy is cache
// first for everything in the manifest: install caches the small "shell" (index.html, the app
// modules, build-info.json); the large files (Pyodide, the wheel, DuckDB) are cached as the
// page first fetches them, so a first visit downloads them once. After boot the page posts {type: "boot-complete"} and whatever of the
// boot set is still missing is fetched then. Requests outside the manifest pass through.
const MANIFEST = null; // filled in by build/build_web.py

const PREFIX = "evermind-studio-";
const CACHE = PREFIX + (MANIFEST?.build ?? "unbuilt");
const SCOPE = new URL(self.registration.scope);
const FILES = new Set((MANIFEST?.files ?? []).map((f) => new URL(f, SCOPE).href));
const SHELL = (MANIFEST?.shell ?? []).map((f) => new URL(f, SCOPE).href);
// What the worker fetches to boot, relative to build-info.json's pyodide_dir.
const PYODIDE_BOOT = ["pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"];

self.addEventListener("install", (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    await cache.addAll(SHELL);
    await self.skipWaiting();
  })());
});

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) {
      if (name.startsWith(PREFIX) && name !== CACHE) await caches.delete(name);
    }
    await self.clients.claim();
  })());
});

/** The manifest URL a request stands for (a folder, the scope's root or the package index's
 * `simple/<name>/`, is its index.html), or null. */
function manifestUrl(request) {
  if (request.method !== "GET") return null;
  const url = new URL(request.url);
  if (url.origin !== SCOPE.origin) return null;
  url.hash = "";
  if (request.mode === "navigate") url.search = "";
  if (url.pathname.endsWith("/")) url.pathname += "index.html";
  return FILES.has(url.href) ? url.href : null;
}

/** From the cache, else from the network into the cache. The put runs beside the page's
 * read (not before it), so the page streams the body and shows byte progress. */
async function cacheFirst(url, event) {
  const cache = await caches.open(CACHE);
  const hit = await cache.match(url, { ignoreVary: true });
  if (hit) return hit;
  const response = await fetch(url);
  if (response.ok) {
    const put = cache.put(url, response.clone());
    if (event) event.waitUntil(put);
    else await put;
  }
  return response;
}

self.addEventListener("fetch", (event) => {
  const url = manifestUrl(event.request);
  if (url) event.respondWith(cacheFirst(url, event));
});

async function completeBootSet() {
  const info = await (await cacheFirst(new URL("build-info.json", SCOPE).href)).json();
  const boot = [...PYODIDE_BOOT.map((name) => info.pyodide_dir + name), info.wheel];
  const cache = await caches.open(CACHE);
  for (const path of boot) {
    const url = new URL(path, SCOPE).href;
    if (!(await cache.match(url, { ignoreVary: true }))) await cacheFirst(url);
  }
}

self.addEventListener("message", (event) => {
  if (event.data?.type === "boot-complete") {
    event.waitUntil(completeBootSet().then(
      () => event.source?.postMessage({ type: "boot-cached" }),
      (err) => event.source?.postMessage({ type: "boot-cache-failed", message: String(err) }),
    ));
  }
});
