// Small DOM helpers shared by every Studio panel: an element builder and number formatting.
// No framework: panels build their markup once with h() and update text/attributes in place.

/**
 * Creates an element. `attrs` keys: `class`, `text`, `on<Event>` (listener), `dataset`
 * (object), booleans (set when true), anything else as an attribute.
 */
export function h(tag, attrs = {}, ...children) {
  const el = tag.startsWith("svg:")
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
    : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.setAttribute("class", value);
    else if (key === "text") el.textContent = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

let uid = 0;
/** A page-unique id prefix, so labels point at their inputs even with several studios. */
export function uniqueId(name) {
  uid += 1;
  return `em${uid}-${name}`;
}

/** A labelled form field: returns {field, input}. `control` is an input/select/textarea. */
export function field(label, control, hint) {
  control.id ||= uniqueId(control.name || "field");
  const hintEl = hint ? h("small", { class: "hint", id: `${control.id}-hint`, text: hint }) : null;
  if (hintEl) control.setAttribute("aria-describedby", hintEl.id);
  return { field: h("div", { class: "field" }, h("label", { for: control.id, text: label }), control, hintEl), input: control };
}

/** Bytes as a short human string: 1.2 MB. */
export function formatBytes(n) {
  if (!Number.isFinite(n)) return "–";
  const units = ["B", "kB", "MB", "GB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i += 1; }
  return `${n.toFixed(i && n < 10 ? 1 : 0)} ${units[i]}`;
}

/** A count with thin grouping: 12,345 or 1.2M. */
export function formatCount(n) {
  if (!Number.isFinite(n)) return "–";
  if (n >= 1e6) return `${(n / 1e6).toFixed(n >= 1e7 ? 0 : 1)}M`;
  return Math.round(n).toLocaleString("en-US");
}

/** Seconds as 1 h 02 min, 3 min 05 s or 12 s. */
export function formatDuration(s) {
  if (!Number.isFinite(s) || s < 0) return "–";
  s = Math.round(s);
  if (s >= 3600) return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
  if (s >= 60) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
  return `${s} s`;
}

/** A number with `digits` significant figures, or "–". */
export function formatNumber(x, digits = 4) {
  if (x === null || x === undefined || !Number.isFinite(Number(x))) return "–";
  return Number(x).toPrecision(digits).replace(/\.?0+$/, (m) => (m.includes(".") ? "" : m));
}

/** Bytes as base64, in chunks (a 30 MB file does not fit one String.fromCharCode). */
export function toBase64(buffer) {
  const bytes = new Uint8Array(buffer);
  let out = "";
  for (let i = 0; i < bytes.length; i += 0x8000) out += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(out);
}

/** base64 → Uint8Array. */
export function fromBase64(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i += 1) out[i] = bin.charCodeAt(i);
  return out;
}
