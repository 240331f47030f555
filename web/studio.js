// Studio shell: boots the worker, opens the WebGPU device from Python, shows what it got.
import { sharedRuntime } from "./evermind-client.js";

const $ = (id) => document.getElementById(id);
const t0 = performance.now();

function setStage(message, fraction, state = "booting") {
  $("boot-message").textContent = message;
  $("boot-bar").style.width = `${Math.round(fraction * 100)}%`;
  $("status-pill").textContent = state;
  $("status-pill").dataset.state = state;
}

function finish(result) {
  window.__evermind = result;
  window.__done = true;
}

const WEBGPU_HELP =
  "This browser has no WebGPU. Use Chrome or Edge 113+ (on Linux start Chromium with " +
  "--enable-unsafe-webgpu), Safari 26+, or Firefox 141+ on Windows.";

async function main() {
  if (!("gpu" in navigator)) {
    $("webgpu-help").textContent = WEBGPU_HELP;
    $("webgpu-help").hidden = false;
  }
  const runtime = sharedRuntime();
  window.evermind = runtime;
  runtime.on((e) => {
    if (e.event === "boot") setStage(e.message, e.stage === "python" ? 0.2 : 0.6);
  });
  setStage("Starting the worker…", 0.05);
  const boot = await runtime.ready;
  const pythonReady = performance.now() - t0;
  setStage("Opening the WebGPU device…", 0.85);
  let device;
  try {
    device = await runtime.call("boot");
  } catch (err) {
    setStage(`No WebGPU device: ${err.message}`, 1, "no-gpu");
    $("webgpu-help").textContent = err.message;
    $("webgpu-help").hidden = false;
    finish({ ok: false, error: err.message, boot, python_ready_ms: Math.round(pythonReady) });
    return;
  }
  const deviceReady = performance.now() - t0;
  const a = device.adapter;
  $("fact-adapter").textContent = [a.vendor, a.architecture, a.device, a.description].filter(Boolean).join(" · ") || "unnamed adapter";
  $("fact-transport").textContent = device.transport;
  $("fact-python").textContent = device.python;
  $("fact-pyodide").textContent = boot.pyodide;
  $("fact-evermind").textContent = device.evermind;
  $("fact-python-ready").textContent = `${(pythonReady / 1000).toFixed(2)} s`;
  $("fact-device-ready").textContent = `${(deviceReady / 1000).toFixed(2)} s`;
  $("boot-facts").hidden = false;
  setStage("Ready.", 1, "ready");
  finish({ ok: true, boot, device, python_ready_ms: Math.round(pythonReady), device_ready_ms: Math.round(deviceReady) });
}

main().catch((err) => {
  setStage(`Failed to start: ${err.message}`, 1, "error");
  finish({ ok: false, error: err.message });
});
