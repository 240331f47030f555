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
