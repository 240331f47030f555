// Turns errors from the worker (Error.name = the Python exception type) into words a person
// can act on. The Python messages already say what went wrong; this adds what to do next.

const NEXT_STEP = {
  DeviceLostError: "The GPU device was lost (driver reset, sleep, or out of memory). Press Resume to continue from the last checkpoint.",
  NoAdapterError: "This browser gave no WebGPU adapter. Use Chrome or Edge 113+ (on Linux start Chromium with --enable-unsafe-webgpu), Safari 26+, or Firefox 141+ on Windows.",
  GPUError: "The GPU refused the work. A smaller preset, batch or sequence length needs less memory.",
  TokenizerError: "Check the corpus and the vocabulary size, then train the tokenizer again.",
  PackageError: "The package could not be written or read; train the model again and retry.",
};

/** One line for people: what failed, and what to do about it. */
export function describeError(err) {
  const name = err?.name && err.name !== "Error" ? err.name : "";
  const message = String(err?.message ?? err ?? "unknown error");
  const oom = /out of memory|OutOfMemory|allocation failed/i.test(message);
  const hint = oom ? "The GPU ran out of memory: choose a smaller preset, batch or sequence length." : NEXT_STEP[name];
  return hint ? `${message} — ${hint}` : message;
}

/** True for errors after which training can continue from its checkpoint. */
export function isRecoverable(err) {
  return err?.name === "DeviceLostError" || /out of memory|device (was )?lost/i.test(String(err?.message));
}

/** The browser's name and major version from a user-agent string ("Firefox 128", "Chromium 156"). */
export function browserName(ua = globalThis.navigator?.userAgent ?? "") {
  const rules = [
    [/Edg\/(\d+)/, "Edge"],
    [/OPR\/(\d+)/, "Opera"],
    [/Firefox\/(\d+)/, "Firefox"],
    [/HeadlessChrome\/(\d+)/, "Headless Chrome"],
    [/Chromium\/(\d+)/, "Chromium"],
    [/Chrome\/(\d+)/, "Chrome"],
    [/Version\/(\d+)[.\d]* .*Safari\//, "Safari"],
  ];
  for (const [rx, name] of rules) {
    const m = rx.exec(ua);
    if (m) return `${name} ${m[1]}`;
  }
  return "This browser";
}

/** The banner without WebGPU: which browser, what still works, and what to enable. */
export function noGpuMessage(ua) {
  return `${browserName(ua)} gives this page no WebGPU, so training is off. Data, tokenizer, memory and cache (lexical recall), opening a package, generating on the CPU and export still work. To train: ${NEXT_STEP.NoAdapterError.replace(/^This browser gave no WebGPU adapter\. /, "")}`;
}
