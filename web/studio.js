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
  // Set once the worker has stored its Python snapshot for the next visit (benchmarks wait).
  Promise.resolve(window.evermind.snapshot).then(() => { window.__snapshotMade = true; });
});
