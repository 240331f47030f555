// The Studio page: the <evermind-studio> element filling the window. Tests and headless
// training wait for window.__done and read the boot facts from window.__evermind;
// window.evermind is the shared runtime (call/on), window.studio the element.
import "./evermind-studio.js";
import { sharedRuntime } from "./evermind-client.js";

const studio = document.getElementById("studio");
window.studio = studio;
window.evermind = sharedRuntime();

studio.ready.then(
  (result) => result,
  (err) => ({ ok: false, error: err.message, name: err.name }),
).then((result) => {
  window.__evermind = result;
  window.__done = true;
  // Now that the page is ready, the worker snapshots Python for the next visit's boot
  // (docs/studio.md); __snapshotMade is set once it is stored (benchmarks wait for it).
  // Only the Studio page asks: an embedding element boots as before.
  if (result.ok) window.evermind.call("__snapshot__").catch(() => {}).then(() => { window.__snapshotMade = true; });
});
