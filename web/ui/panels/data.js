// Data panel: the default corpus, dropped/picked files, pasted text, and SQL over a dropped
// CSV through DuckDB-wasm (loaded only when the SQL box is first used). Shows the sources,
// size, token estimate, held-out split and a sample of what the model will read. Dropped
// files can go to memory too ("Send to memory"): parsed and chunked in this tab by
// evermind.ingest and diff-synced into the Memory panel's store (memory_ingest).
import { h, field, formatBytes, formatCount, formatNumber, toBase64 } from "../dom.js";
import { ProgressLine } from "../progress.js";
import { etaWords, speedKey } from "../speed.js";

/** A corpus this big gets a word about how long reading it takes (bytes). */
export const LARGE_CORPUS_BYTES = 2_000_000;
/** Bytes per token before a tokenizer exists (evermind.studio.session.BYTES_PER_TOKEN_ESTIMATE). */
const BYTES_PER_TOKEN = 3.5;

const ACCEPT = ".txt,.md,.markdown,.rst,.json,.jsonl,.ndjson,.csv,text/plain,text/markdown,text/csv,application/json";

/** A table name DuckDB accepts without quoting trouble: letters, digits, underscores. */
function tableName(fileName, taken) {
  let base = fileName.replace(/\.[^.]+$/, "").replace(/[^A-Za-z0-9_]+/g, "_").replace(/^(\d)/, "_$1") || "data";
  let name = base;
  for (let i = 2; taken.has(name); i += 1) name = `${base}_${i}`;
  return name;
}

export function dataPanel(app) {
  const message = h("p", { class: "message", role: "status", "aria-live": "polite", hidden: true });
  const csvTables = new Map(); // table name -> {file, text}

  // Default corpus.
  const defaultHint = h("small", { class: "hint" });
  const defaultButton = app.gate(
    h("button", { type: "button", class: "primary", text: app.options.corpusUrl ? "Use the linked corpus" : "Use the default corpus", dataset: app.options.corpusUrl ? undefined : { ownProgress: "true" } }),
    () => null,
  );
  // The harvest imports the standard library module by module (tens of seconds in a tab):
  // bytes so far of at most the corpus size, the time left, and Cancel (nothing is added).
  const defaultProgress = new ProgressLine({
    id: "data-default-progress",
    label: "Reading the standard library's docstrings",
    format: formatBytes,
    onCancel: () => app.call("operation_cancel", { name: "corpus" }).catch(() => {}),
  });
  defaultButton.addEventListener("click", () => app.run(defaultButton, async () => {
    if (!app.options.corpusUrl) defaultProgress.start();
    try {
      const corpus = await app.useDefaultCorpus();
      app.say(message, `Loaded ${formatBytes(corpus.bytes)} of text.`, "ok");
    } catch (err) {
      if (err?.name !== "Cancelled") throw err;
      app.say(message, "Cancelled: the default corpus was not added; the corpus is as it was.");
    } finally {
      defaultProgress.finish();
    }
  }, message));
  defaultHint.textContent = app.options.corpusUrl
    ? `Fetches ${app.options.corpusUrl}.`
    : "Docstrings of the Python standard library, harvested in this tab. No download.";

  // Files.
  const fileInput = h("input", { type: "file", multiple: true, accept: ACCEPT, class: "file-input", "aria-describedby": "drop-hint" });
  fileInput.id = "data-files";
  const dropzone = h(
    "div",
    { class: "dropzone" },
    h("label", { for: fileInput.id }, h("strong", { text: "Drop files here" }), " or ", h("span", { class: "linkish", text: "choose files" })),
    h("small", { id: "drop-hint", class: "hint", text: ".txt .md .json .jsonl .csv — read in this tab, never uploaded" }),
    fileInput,
  );
  const addFiles = (files) => app.run(null, async () => {
    const added = [];
    for (const file of files) {
      // The bytes go to Python, which refuses binary content and malformed CSV in words.
      const data = toBase64(await file.arrayBuffer());
      if (/\.csv$/i.test(file.name)) {
        const checked = await app.call("corpus_check", { name: file.name, data_b64: data });
        const name = tableName(file.name, new Set(csvTables.keys()));
        csvTables.set(name, { file: file.name, text: checked.text });
        added.push(`${file.name} (as SQL table ${name}: ${checked.columns.length} columns, ${formatCount(checked.rows)} rows)`);
      } else {
        await app.addFile(file.name, data);
        added.push(file.name);
      }
      memoryFiles.set(file.name, data); // checked text: the newest bytes of each name go to memory
      renderMemory();
    }
    renderCsv();
    app.say(message, `Added ${added.join(", ")}.`, "ok");
  }, message).finally(() => { renderCsv(); renderMemory(); });
  fileInput.addEventListener("change", () => {
    if (fileInput.files.length) addFiles([...fileInput.files]).finally(() => { fileInput.value = ""; });
  });
  for (const type of ["dragenter", "dragover"]) {
    dropzone.addEventListener(type, (e) => { e.preventDefault(); dropzone.classList.add("over"); });
  }
  dropzone.addEventListener("dragleave", () => dropzone.classList.remove("over"));
  dropzone.addEventListener("drop", (e) => {
    e.preventDefault();
    dropzone.classList.remove("over");
    if (app.state.phase === "ready" && e.dataTransfer?.files?.length) addFiles([...e.dataTransfer.files]);
  });

  // Paste.
  const pasteName = field("Name", h("input", { type: "text", name: "paste-name", value: "pasted.txt", autocomplete: "off" }));
  const pasteText = field("Text", h("textarea", { name: "paste-text", rows: 5, placeholder: "Paste notes, docs, chat logs…" }));
  const pasteHint = h("small", { class: "hint gate-hint", hidden: true });
  const pasteButton = app.gate(h("button", { type: "button", text: "Add pasted text" }), () => (pasteText.input.value.trim() ? null : "Paste some text first."), pasteHint);
  pasteText.input.addEventListener("input", () => app.refresh());
  pasteButton.addEventListener("click", () => app.run(pasteButton, async () => {
    const name = pasteName.input.value.trim() || "pasted.txt";
    await app.addText(name, pasteText.input.value);
    pasteText.input.value = "";
    app.say(message, `Added ${name}.`, "ok");
  }, message));

  // SQL over a dropped CSV.
  const sqlText = field("SQL", h("textarea", { name: "sql", rows: 3, spellcheck: "false", class: "mono" }), "DuckDB SQL; each dropped CSV is a table.");
  const sqlTables = h("p", { class: "tables" });
  const sqlResult = h("div", { class: "sql-result" });
  const columnSelect = field("Column to add", h("select", { name: "sql-column" }));
  const sqlMessage = h("p", { class: "message", role: "status", "aria-live": "polite", hidden: true });
  let sqlRows = null;
  const sqlRun = app.gate(h("button", { type: "button", text: "Run query" }), () => (sqlText.input.value.trim() ? null : "Write a query first."));
  const sqlAdd = app.gate(h("button", { type: "button", text: "Add column to corpus" }), () => (sqlRows?.length ? null : "Run a query that returns rows first."));
  const csvWholeButtons = h("div", { class: "row" });
  const sqlBox = h(
    "section",
    { class: "sub-card sql", "aria-label": "SQL over CSV", hidden: true },
    h("h3", { text: "SQL over your CSV" }),
    sqlTables,
    sqlText.field,
    h("div", { class: "row" }, sqlRun),
    sqlResult,
    h("div", { class: "row align-end" }, columnSelect.field, sqlAdd),
    sqlMessage,
    csvWholeButtons,
  );
  sqlText.input.addEventListener("input", () => app.refresh());

  function renderCsv() {
    sqlBox.hidden = csvTables.size === 0;
    const names = [...csvTables.keys()];
    sqlTables.replaceChildren("Tables: ", ...names.flatMap((n, i) => [i ? ", " : "", h("code", { text: n })]));
    if (!sqlText.input.value && names.length) sqlText.input.value = `SELECT * FROM ${names[0]} LIMIT 20`;
    csvWholeButtons.replaceChildren(
      ...names.map((name) => {
        const b = app.gate(h("button", { type: "button", class: "quiet", text: `Add all text columns of ${csvTables.get(name).file}` }), () => null);
        b.addEventListener("click", () => app.run(b, async () => {
          await app.addText(csvTables.get(name).file, csvTables.get(name).text);
          app.say(sqlMessage, `Added the text columns of ${csvTables.get(name).file}.`, "ok");
        }, sqlMessage));
        return b;
      }),
    );
    app.refresh();
  }

  /** Empties the result area: a failed query must not leave the previous table above its error. */
  function clearSqlResult() {
    sqlRows = null;
    sqlResult.replaceChildren();
    columnSelect.input.replaceChildren();
  }

  sqlRun.addEventListener("click", () => app.run(sqlRun, async () => {
    clearSqlResult();
    app.say(sqlMessage, "Loading DuckDB (first use only)…");
    const { openDuckDB } = await import("../../duckdb.js");
    const db = await openDuckDB({ onProgress: ({ loaded, total }) => app.say(sqlMessage, `Loading DuckDB (first use only)… ${(loaded / 1e6).toFixed(1)} of ${(total / 1e6).toFixed(1)} MB`) });
    for (const [name, { text }] of csvTables) await db.registerCSV(name, text);
    app.say(sqlMessage, "Running…");
    const { columns, rows } = await db.query(sqlText.input.value);
    sqlRows = rows;
    columnSelect.input.replaceChildren(...columns.map((c) => h("option", { value: c, text: c })));
    const preview = rows.slice(0, 8);
    sqlResult.replaceChildren(
      h("div", { class: "table-scroll" }, h(
        "table",
        {},
        h("thead", {}, h("tr", {}, ...columns.map((c) => h("th", { scope: "col", text: c })))),
        h("tbody", {}, ...preview.map((r) => h("tr", {}, ...columns.map((c) => h("td", { text: String(r[c] ?? "").slice(0, 80) }))))),
      )),
      h("small", { class: "hint", text: `${rows.length} row${rows.length === 1 ? "" : "s"}${rows.length > preview.length ? `, first ${preview.length} shown` : ""}` }),
    );
    app.say(sqlMessage, "");
  }, sqlMessage));

  sqlAdd.addEventListener("click", () => app.run(sqlAdd, async () => {
    const column = columnSelect.input.value;
    const texts = sqlRows.map((r) => r[column]).filter((v) => v !== null && v !== undefined && String(v).trim());
    const name = `sql-${column}.txt`;
    await app.addText(name, texts.map(String).join("\n\n"));
    app.say(sqlMessage, `Added ${texts.length} values of ${column} as ${name}.`, "ok");
  }, sqlMessage));

  // Files to memory: parsed and chunked in this tab, written to the Memory panel's store.
  const memoryFiles = new Map(); // file name -> base64 bytes, of the files dropped on this page
  let memorySources = new Map(); // source id -> {chunks, kind} that the namespace holds
  let memoryListed = false;
  let memoryBusy = false; // one send or forget at a time: both diff against the same manifests
  const idle = () => (memoryBusy ? "Sending to memory…" : null);
  const memoryNamespace = field("Namespace", h("input", { type: "text", name: "data-memory-namespace", id: "data-memory-namespace", autocomplete: "off", placeholder: "studio", spellcheck: "false" }), "Empty: the Memory panel's default (studio).");
  memoryNamespace.field.classList.add("narrow");
  const memoryList = h("ul", { class: "memory-files", id: "data-memory-files", "aria-label": "Files and memory" });
  const memoryBar = h("progress", { id: "data-memory-progress", max: 1, value: 0, "aria-label": "Send to memory progress" });
  const memoryBarText = h("span", { class: "progress-text", id: "data-memory-progress-text", text: "" });
  // With a model the chunks are embedded before anything is written: Cancel stops that (the
  // send then writes nothing); the write that follows is not cancellable.
  const memoryCancel = h("button", { type: "button", class: "quiet small", id: "data-memory-cancel", text: "Cancel", hidden: true });
  memoryCancel.addEventListener("click", () => {
    memoryCancel.disabled = true;
    memoryBarText.textContent = "Cancelling…";
    app.call("operation_cancel", { name: "ingest" }).catch(() => {});
  });
  const memoryMessage = h("p", { class: "message", id: "data-memory-result", role: "status", "aria-live": "polite", hidden: true });
  const sendAll = app.gate(h("button", { type: "button", id: "data-memory-send-all", text: "Send all to memory" }), () => (memoryFiles.size ? idle() : "Drop or choose files first."));
  const memoryBox = h(
    "section",
    { class: "sub-card", id: "data-memory", "aria-label": "Send to memory" },
    h("h3", { text: "Send to memory" }),
    h("small", { class: "hint", text: "Each file is parsed and cut into chunks in this tab, then stored for recall (Memory panel). Sending a changed file again rewrites only the chunks that changed." }),
    h("div", { class: "row align-end" }, memoryNamespace.field, sendAll),
    memoryList,
    h("div", { class: "progress-row" }, memoryBar, memoryBarText, memoryCancel),
    memoryMessage,
  );
  const namespace = () => memoryNamespace.input.value.trim() || null;
  const plural = (n, word) => `${formatCount(n)} ${word}${n === 1 ? "" : "s"}`;

  /** The result line of one memory_ingest: what changed, chunk by chunk. */
  function ingestWords(r) {
    const what = `${plural(r.added, "chunk")} added, ${formatCount(r.updated)} updated, ${formatCount(r.deleted)} removed, ${formatCount(r.unchanged)} unchanged`;
    return `${r.files.join(", ")} → memory${r.namespace === "studio" ? "" : ` (${r.namespace})`}: ${what} (${formatNumber(r.seconds, 2)} s).`;
  }

  async function listMemorySources() {
    const r = await app.call("memory_sources", { namespace: namespace() });
    memorySources = new Map(r.sources.map((s) => [s.source, s]));
    renderMemory();
  }

  /** Runs `task` with every memory button held off until it ends. */
  const exclusive = (button, task) => {
    memoryBusy = true;
    return app.run(button, async () => {
      try {
        return await task();
      } finally {
        memoryBusy = false;
      }
    }, memoryMessage);
  };

  const sendToMemory = (button, names) => {
    if (button) button.dataset.ownProgress = "true"; // the chunk bar is its progress
    return sendFiles(button, names);
  };
  const sendFiles = (button, names) => exclusive(button, async () => {
    memoryBar.max = 1;
    memoryBar.removeAttribute("value"); // indeterminate until the first progress event
    memoryBarText.textContent = "Parsing…";
    memoryCancel.disabled = false;
    let r;
    try {
      r = await app.call("memory_ingest", { files: names.map((name) => ({ name, data_b64: memoryFiles.get(name) })), namespace: namespace() });
    } catch (err) {
      if (err?.name !== "Cancelled") throw err;
      memoryBar.value = 0;
      memoryBarText.textContent = "";
      app.say(memoryMessage, "Cancelled: nothing was sent to memory (no chunk was written).");
      return;
    } finally {
      memoryCancel.hidden = true;
      memoryCancel.disabled = false;
    }
    memoryBar.max = Math.max(1, r.chunks);
    memoryBar.value = r.chunks;
    memoryBarText.textContent = `${formatCount(r.chunks)} / ${formatCount(r.chunks)} chunks`;
    app.say(memoryMessage, ingestWords(r), "ok");
    await listMemorySources();
  });

  const forgetFromMemory = (button, name) => exclusive(button, async () => {
    const r = await app.call("memory_forget_source", { source: name, namespace: namespace() });
    app.say(memoryMessage, r.forgotten ? `Forgot ${name}: ${plural(r.deleted, "chunk")} removed from memory.` : `${name} was not in memory.`, r.forgotten ? "ok" : "");
    await listMemorySources();
  });

  function renderMemory({ refresh = true } = {}) {
    const names = [...new Set([...memoryFiles.keys(), ...memorySources.keys()])].sort();
    const key = JSON.stringify(names.map((n) => [n, memoryFiles.has(n), memorySources.get(n)?.chunks ?? null]));
    if (key === memoryList.dataset.key) return;
    memoryList.dataset.key = key;
    memoryList.replaceChildren(
      ...(names.length
        ? names.map((name) => {
          const held = memorySources.get(name);
          const send = app.gate(h("button", { type: "button", class: "quiet small", "aria-label": `Send ${name} to memory`, text: held ? "Send again" : "Send to memory" }), idle);
          send.addEventListener("click", () => sendToMemory(send, [name]));
          const forget = app.gate(h("button", { type: "button", class: "quiet small", "aria-label": `Forget ${name} from memory`, text: "Forget" }), () => (held ? idle() : "Not in memory."));
          forget.addEventListener("click", () => forgetFromMemory(forget, name));
          return h(
            "li",
            { dataset: { source: name } },
            h("span", { class: "source-name", text: name }),
            h("span", { class: "source-meta", text: held ? `${plural(held.chunks, "chunk")} in memory` : "not in memory" }),
            memoryFiles.has(name) ? send : null,
            forget,
          );
        })
        : [h("li", { class: "hint", text: "Drop files above; each can go to memory as well as to training." })]),
    );
    if (refresh) app.refresh();
  }
  sendAll.addEventListener("click", () => sendToMemory(sendAll, [...memoryFiles.keys()]));
  memoryNamespace.input.addEventListener("change", () => app.run(null, listMemorySources, memoryMessage));

  // What the corpus holds.
  const sources = h("ul", { class: "sources", "aria-label": "Corpus sources" });
  const stats = {};
  const stat = (key, label) => h("div", { class: "stat" }, h("span", { class: "stat-label", text: label }), (stats[key] = h("span", { class: "stat-value", id: `data-${key}`, text: "–" })));
  const sample = h("pre", { class: "sample", id: "data-sample", tabindex: "0", "aria-label": "Corpus sample" });
  // A large corpus: how long one pass over it takes at this device's measured speed.
  const sizeWarning = h("p", { class: "warning", id: "data-size-warning", hidden: true });
  const overview = h(
    "section",
    { class: "sub-card", "aria-label": "Corpus" },
    h("h3", { text: "Corpus" }),
    h("div", { class: "stats" }, stat("size", "Size"), stat("tokens", "Token estimate"), stat("held-out", "Held-out split"), stat("sources", "Sources")),
    sizeWarning,
    sources,
    h("h4", { text: "Sample" }),
    sample,
  );

  const element = h(
    "section",
    {},
    h("header", { class: "panel-head" }, h("h2", { id: "heading-data", text: "Data" }), h("p", { class: "lead", text: "What should your model read? Start with the built-in corpus or bring your own text." })),
    message,
    h(
      "div",
      { class: "grid-2" },
      h(
        "section",
        { class: "sub-card", "aria-label": "Add text" },
        h("h3", { text: "Add text" }),
        h("div", { class: "row" }, defaultButton),
        defaultHint,
        defaultProgress.element,
        dropzone,
        pasteName.field,
        pasteText.field,
        h("div", { class: "row" }, pasteButton, pasteHint),
      ),
      overview,
    ),
    memoryBox,
    sqlBox,
  );

  function update() {
    if (!memoryListed && app.state.phase === "ready") {
      // What the store holds from earlier visits: those sources can be forgotten here too.
      memoryListed = true;
      listMemorySources().catch((err) => { memoryListed = false; app.say(memoryMessage, String(err.message), "error"); });
    }
    const c = app.state.corpus;
    stats.size.textContent = c ? formatBytes(c.bytes) : "–";
    stats.tokens.textContent = c ? `≈ ${formatCount(c.token_estimate)}` : "–";
    stats["held-out"].textContent = c ? `${Math.round((c.held_out_fraction ?? 0) * 100)} %` : "–";
    stats.sources.textContent = c ? String(c.sources.length) : "0";
    sample.textContent = c?.sample || "Nothing yet. Add text on the left.";
    const large = c && c.bytes >= LARGE_CORPUS_BYTES;
    sizeWarning.hidden = !large;
    if (large) {
      const settings = app.state.settings ?? { preset: app.options.preset };
      const key = speedKey(settings);
      const tokens = c.token_estimate || c.bytes / BYTES_PER_TOKEN;
      const perRun = (settings.steps ?? 300) * (settings.batch_size ?? 4) * (settings.seq_len ?? 128);
      sizeWarning.textContent = `Large corpus: ${formatBytes(c.bytes)}, ≈ ${formatCount(tokens)} tokens. One pass over it: ${etaWords(tokens, key, settings.config ? "custom" : settings.preset ?? "nano")}. A run reads steps × batch × sequence tokens (${formatCount(perRun)} with the Train panel's settings), so it sees ${perRun >= tokens ? "all of it" : `${formatNumber((100 * perRun) / tokens, 2)} % of it`}; the tokenizer reads it all.`;
    }
    const list = c?.sources ?? [];
    const key = JSON.stringify(list.map((s) => [s.name, s.bytes]));
    if (key === sources.dataset.key) return;
    sources.dataset.key = key;
    sources.replaceChildren(
      ...list.map((s) => {
        const remove = app.gate(h("button", { type: "button", class: "quiet small", "aria-label": `Remove ${s.name}`, text: "Remove" }), () => (app.state.training === "running" ? "Training is running." : null));
        remove.addEventListener("click", () => app.run(remove, () => app.removeSource(s.name), message));
        return h("li", {}, h("span", { class: "source-name", text: s.name }), h("span", { class: "source-meta", text: [formatBytes(s.bytes), s.description].filter(Boolean).join(" · ") }), remove);
      }),
    );
  }

  renderMemory({ refresh: false }); // the app is still building its panels
  return {
    id: "data",
    title: "Data",
    element,
    update,
    onEvent(e) {
      if (e.event === "corpus-progress" && e.total > 0) defaultProgress.update(e.done, e.total);
      if (e.event === "memory-ingest-progress" && e.total > 0 && !memoryCancel.disabled) {
        memoryBar.max = e.total;
        memoryBar.value = e.done;
        memoryCancel.hidden = e.stage !== "embed" || e.done >= e.total;
        memoryBarText.textContent = `${e.stage === "embed" ? "Embedding: " : ""}${formatCount(e.done)} / ${formatCount(e.total)} chunks`;
      } else if (e.event === "studio-data" && /^memory_(forget|import)$/.test(e.fn) && memoryListed) {
        listMemorySources().catch((err) => app.say(memoryMessage, String(err.message), "error"));
      }
    },
    status: () => (app.state.corpus?.bytes > 0 ? "done" : csvTables.size ? "active" : "todo"),
    summary: () => (app.state.corpus?.bytes > 0 ? `${formatBytes(app.state.corpus.bytes)} · ≈${formatCount(app.state.corpus.token_estimate)} tok` : "add text"),
  };
}
