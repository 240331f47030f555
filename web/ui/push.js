// Push to an agent runtime: POST the .evermind bytes to <runtime>/v1/models with a bearer
// token. The runtime answers 201 {"id", "digest"} or {"error": {"message"}}.

/** The runtime's model endpoint for `url`; throws words when `url` is not an http(s) URL. */
export function modelsEndpoint(url) {
  return runtimeEndpoint(url, "/v1/models");
}

/** `<url><path>` (path under the runtime URL's own path); throws words for a non-http(s) URL. */
export function runtimeEndpoint(url, path) {
  let base;
  try {
    base = new URL(url);
  } catch {
    throw new Error(`runtime URL ${JSON.stringify(url)} is not a URL; expected e.g. http://127.0.0.1:8080`);
  }
  if (!/^https?:$/.test(base.protocol)) throw new Error(`runtime URL must start with http:// or https://, got ${base.protocol}`);
  return new URL(`${base.pathname.replace(/\/+$/, "")}${path}`, base);
}

/** Resolves with {id, digest}; rejects with an Error carrying the server's own words. */
export async function pushPackage(url, token, blob) {
  const endpoint = modelsEndpoint(url);
  const headers = { "Content-Type": "application/octet-stream" };
  if (token) headers.Authorization = `Bearer ${token}`;
  let response;
  try {
    response = await fetch(endpoint, { method: "POST", headers, body: blob });
  } catch (err) {
    throw new Error(`could not reach ${endpoint.href} (${err.message}); is the runtime running, and does it allow this page's origin?`);
  }
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const words = body?.error?.message ?? `HTTP ${response.status} ${response.statusText}`;
    const err = new Error(`the runtime refused the package: ${words}`);
    err.name = "PushError";
    err.status = response.status;
    throw err;
  }
  if (!body || typeof body.id !== "string") throw new Error(`the runtime answered HTTP ${response.status} without a model id`);
  return { id: body.id, digest: body.digest ?? null, status: response.status };
}
