// This device's measured training speed (tokens/s), kept per model size in localStorage, and
// what a step count or a corpus means in time at that speed. The Train panel records the
// speed from the first steps of every run; before any run it says the speed is not measured.
import { formatCount, formatDuration } from "./dom.js";

const PREFIX = "evermind-studio.speed.";
/** Steps a run must have made before its tokens/s counts (the first compiles shaders). */
export const MEASURE_AFTER_STEPS = 3;

/** The model-size key of training options ({preset} or {config: {d_model, n_layer, ...}}). */
export function speedKey(options) {
  const c = options?.config;
  if (c) return `d${c.d_model}x${c.n_layer}s${c.d_state ?? 16}e${c.expand ?? 2}`;
  return options?.preset || "nano";
}

/** Records a measured tokens/s for the model size `key`. */
export function saveSpeed(key, tokensPerSecond) {
  if (!(tokensPerSecond > 0)) return;
  try {
    localStorage.setItem(PREFIX + key, JSON.stringify({ tps: tokensPerSecond, at: Date.now() }));
  } catch {
    // storage full or disabled: the ETA just stays "not measured"
  }
}

/** The measured tokens/s for `key`, or null. */
export function measuredSpeed(key) {
  try {
    const v = JSON.parse(localStorage.getItem(PREFIX + key) ?? "null");
    return v && v.tps > 0 ? v.tps : null;
  } catch {
    return null;
  }
}

/** What `tokens` training tokens mean in time for model size `key`, in words. */
export function etaWords(tokens, key, label = key) {
  const tps = measuredSpeed(key);
  if (!tps) return `this device's speed for ${label} is not measured yet; the first steps of a run measure it`;
  return `about ${formatDuration(tokens / tps)} at the ${formatCount(Math.round(tps))} tokens/s measured on this device (${label})`;
}
