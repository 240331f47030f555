// One progress line for every long operation: a bar, done / total, the time so far, the time
// left at the rate measured since the start, and Cancel when the operation can stop.
import { h, formatDuration } from "./dom.js";

/** Seconds left at the rate measured so far (`done` of `total` in `elapsedS`), or null
 * before anything is done. */
export function etaSeconds(done, total, elapsedS) {
  if (total > 0 && done >= total) return 0;
  if (!(done > 0) || !(total > 0) || !(elapsedS > 0)) return null;
  return (elapsedS * (total - done)) / done;
}

/** " · 3 s so far · about 2 s left" for `done` of `total` since `t0` (performance.now()). */
export function timeWords(done, total, t0) {
  const elapsed = (performance.now() - t0) / 1000;
  const eta = etaSeconds(done, total, elapsed);
  const left = eta === null || eta === 0 ? "" : eta < 1 ? " · almost done" : ` · about ${formatDuration(eta)} left`;
  return ` · ${formatDuration(elapsed)} so far${left}`;
}

export class ProgressLine {
  /**
   * @param {object} o
   * @param {string} o.id the element's id
   * @param {string} o.label what runs, e.g. "Measuring unrelated sentences"
   * @param {string} [o.unit] what `done` counts, e.g. "sentences"
   * @param {(n: number) => string} [o.format] writes a count (e.g. formatBytes)
   * @param {() => Promise<unknown>} [o.onCancel] asks the work to stop; none: no Cancel
   */
  constructor({ id, label, unit = "", format = String, onCancel = null }) {
    this.label = label;
    this.unit = unit;
    this.format = format;
    this.t0 = 0;
    this.bar = h("progress", { max: 1, "aria-label": `${label}: progress` });
    this.text = h("span", { class: "progress-text" });
    this.cancelButton = onCancel ? h("button", { type: "button", class: "quiet small progress-cancel", text: "Cancel" }) : null;
    this.cancelButton?.addEventListener("click", () => {
      this.cancelButton.disabled = true;
      this.text.textContent = `${this.label}: cancelling…`;
      this.element.dataset.state = "cancelling";
      onCancel();
    });
    this.element = h("div", { class: "progress-line", id, role: "status", hidden: true }, this.bar, this.text, this.cancelButton);
  }

  /** Shows the line from now on, with an indeterminate bar until the first count. */
  start(words = "starting…") {
    this.t0 = performance.now();
    this.bar.removeAttribute("value");
    this.text.textContent = `${this.label}: ${words}`;
    this.element.dataset.state = "running";
    delete this.element.dataset.done;
    delete this.element.dataset.total;
    if (this.cancelButton) this.cancelButton.disabled = false;
    this.element.hidden = false;
  }

  /** `done` of `total`: the bar, the counts, the time so far and the time left. */
  update(done, total) {
    if (this.element.dataset.state === "cancelling") return;
    this.bar.max = Math.max(1, total);
    this.bar.value = Math.min(done, total);
    const unit = this.unit ? ` ${this.unit}` : "";
    this.text.textContent = `${this.label}: ${this.format(done)} / ${this.format(total)}${unit}${timeWords(done, total, this.t0)}`;
    this.element.dataset.done = String(done);
    this.element.dataset.total = String(total);
  }

  /** Hides the line (the operation ended, finished or not). */
  finish() {
    this.element.hidden = true;
    this.element.dataset.state = "idle";
  }

  /** Runs `work`, whose progress this line shows; if the worker says it was cancelled,
   * calls `onCancelled` and resolves with null. The line is hidden at the end either way. */
  async run(work, onCancelled) {
    try {
      return await work();
    } catch (err) {
      if (err?.name !== "Cancelled") throw err;
      onCancelled();
      return null;
    } finally {
      this.finish();
    }
  }
}
