// The live loss chart: a hand-drawn SVG with the training loss as a line and the held-out
// loss as dots joined by a dashed line. No chart library; redraws from its own point lists.
import { h } from "./dom.js";

const W = 640;
const H = 240;
const PAD = { left: 48, right: 16, top: 14, bottom: 30 };

/** "Nice" tick values covering [lo, hi] (about `count` of them). */
function ticks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

export class LossChart {
  constructor() {
    this.train = [];
    this.held = [];
    this.totalSteps = 0;
    this.svg = h("svg:svg", {
      class: "chart",
      viewBox: `0 0 ${W} ${H}`,
      role: "img",
      "aria-label": "Loss chart: no points yet",
    });
    this.element = h(
      "figure",
      { class: "chart-wrap" },
      this.svg,
      h(
        "figcaption",
        { class: "legend" },
        h("span", { class: "key key-train" }, "train loss"),
        h("span", { class: "key key-held" }, "held-out loss"),
      ),
    );
    this.draw();
  }

  reset(totalSteps = 0) {
    this.train = [];
    this.held = [];
    this.totalSteps = totalSteps;
    this.draw();
  }

  /** Adds one progress event's numbers; `evalLoss` may be null. */
  add(step, loss, evalLoss, totalSteps) {
    if (totalSteps) this.totalSteps = totalSteps;
    if (Number.isFinite(loss)) this.train.push([step, loss]);
    if (evalLoss !== null && evalLoss !== undefined && Number.isFinite(evalLoss)) this.held.push([step, evalLoss]);
    this.draw();
  }

  /** Replaces the series with a training summary's `losses`/`eval_losses` lists. */
  load(losses = [], evalLosses = [], totalSteps = 0) {
    const pairs = (list) => list.map((p, i) => (Array.isArray(p) ? p : [i + 1, p])).filter(([, v]) => Number.isFinite(v));
    this.train = pairs(losses);
    this.held = pairs(evalLosses);
    this.totalSteps = totalSteps || this.totalSteps;
    this.draw();
  }

  draw() {
    const all = [...this.train, ...this.held];
    const maxStep = Math.max(this.totalSteps, ...all.map(([s]) => s), 1);
    const values = all.map(([, v]) => v);
    let lo = values.length ? Math.min(...values) : 0;
    let hi = values.length ? Math.max(...values) : 1;
    if (hi - lo < 1e-6) { lo -= 0.5; hi += 0.5; }
    const margin = (hi - lo) * 0.08;
    lo = Math.max(0, lo - margin);
    hi += margin;
    const x = (s) => PAD.left + ((W - PAD.left - PAD.right) * s) / maxStep;
    const y = (v) => PAD.top + ((H - PAD.top - PAD.bottom) * (hi - v)) / (hi - lo);

    const nodes = [];
    for (const v of ticks(lo, hi, 4)) {
      nodes.push(h("svg:line", { class: "grid", x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v) }));
      nodes.push(h("svg:text", { class: "tick", x: PAD.left - 6, y: y(v) + 4, "text-anchor": "end", text: String(v) }));
    }
    for (const s of ticks(0, maxStep, 5).filter((s) => Number.isInteger(s))) {
      nodes.push(h("svg:text", { class: "tick", x: x(s), y: H - PAD.bottom + 16, "text-anchor": "middle", text: String(s) }));
    }
    nodes.push(h("svg:line", { class: "axis", x1: PAD.left, x2: W - PAD.right, y1: H - PAD.bottom, y2: H - PAD.bottom }));
    nodes.push(h("svg:text", { class: "axis-label", x: W - PAD.right, y: H - 4, "text-anchor": "end", text: "step" }));
    const path = (pts) => pts.map(([s, v], i) => `${i ? "L" : "M"}${x(s).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    if (this.train.length) {
      nodes.push(h("svg:path", { class: "line-train", d: path(this.train) }));
      const [s, v] = this.train[this.train.length - 1];
      nodes.push(h("svg:circle", { class: "dot-train", cx: x(s), cy: y(v), r: 3 }));
    }
    if (this.held.length) {
      nodes.push(h("svg:path", { class: "line-held", d: path(this.held) }));
      for (const [s, v] of this.held) nodes.push(h("svg:circle", { class: "dot-held", cx: x(s), cy: y(v), r: 3.5 }));
    }
    if (!all.length) {
      nodes.push(h("svg:text", { class: "empty", x: W / 2, y: H / 2, "text-anchor": "middle", text: "Loss appears here once training starts" }));
    }
    this.svg.replaceChildren(...nodes);
    this.svg.dataset.trainPoints = String(this.train.length);
    this.svg.dataset.heldPoints = String(this.held.length);
    const last = this.train[this.train.length - 1];
    this.svg.setAttribute(
      "aria-label",
      last ? `Loss chart: ${this.train.length} training points, latest loss ${last[1].toFixed(3)} at step ${last[0]}` : "Loss chart: no points yet",
    );
  }
}
