// The embedder phase's teacher: any OpenAI-compatible POST <runtime>/v1/embeddings. The
// runtime's `evermind serve --teacher minilm` serves the local all-MiniLM-L6-v2 there as
// model "teacher/all-minilm-l6-v2"; a hosted embeddings API works the same way.
import { runtimeEndpoint } from "./push.js";

/** The model id the runtime's local teacher answers to. */
export const DEFAULT_TEACHER = "teacher/all-minilm-l6-v2";
/** Texts per request (the runtime takes up to 2048; smaller requests show progress). */
export const TEACHER_BATCH = 64;

/**
 * The teacher's vector of each text: resolves with {vectors, model}; rejects with an Error
 * in words (unreachable runtime, HTTP error with the server's message, a malformed reply).
 * `onProgress(done, total)` after each batch.
 */
export async function teacherVectors(url, token, model, texts, { batch = TEACHER_BATCH, onProgress } = {}) {
  const endpoint = runtimeEndpoint(url, "/v1/embeddings");
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const vectors = [];
  let served = model;
  for (let start = 0; start < texts.length; start += batch) {
    const input = texts.slice(start, start + batch);
    let response;
    try {
      response = await fetch(endpoint, { method: "POST", headers, body: JSON.stringify({ model, input }) });
    } catch (err) {
      throw new Error(`could not reach ${endpoint.href} (${err.message}); is the runtime running (evermind serve --teacher minilm), and does it allow this page's origin?`);
    }
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    if (!response.ok) {
      const words = body?.error?.message ?? `HTTP ${response.status} ${response.statusText}`;
      const err = new Error(`the teacher ${model} at ${endpoint.href} answered: ${words}`);
      err.name = "TeacherError";
      err.status = response.status;
      throw err;
    }
    const data = Array.isArray(body?.data) ? [...body.data].sort((a, b) => a.index - b.index) : null;
    if (!data || data.length !== input.length || !data.every((d) => Array.isArray(d.embedding) && d.embedding.length > 0)) {
      throw new Error(`the teacher at ${endpoint.href} did not answer one embedding per text (expected ${input.length})`);
    }
    for (const d of data) vectors.push(d.embedding);
    served = body.model ?? served;
    onProgress?.(vectors.length, texts.length);
  }
  return { vectors, model: served };
}
