// DuckDB-wasm for the Data panel's SQL box, loaded lazily: nothing is fetched until the
// first query. The bundle (vendor/duckdb/<hash>/, named in build-info.json: esbuild's
// one-file build of @duckdb/duckdb-wasm, its EH worker and wasm) sits beside this file, so
// the page never reaches a CDN.
// Extension autoloading is switched off: json/parquet would be fetched from the internet.

import { startWorker } from "./evermind-client.js";

const BUNDLE = new URL("./", import.meta.url);
let opening = null;

/** The DuckDB folder and the wasm's decoded size (DuckDB's own bytesTotal is the
 * Content-Length, which is the compressed size when the server sends Content-Encoding). */
async function vendor() {
  const response = await fetch(new URL("build-info.json", BUNDLE));
  const info = response.ok ? await response.json() : {};
  return { base: new URL(info.duckdb_dir ?? "vendor/duckdb/", BUNDLE), wasmBytes: info.duckdb_wasm_bytes ?? 0 };
}

function plain(value) {
  if (typeof value === "bigint") return Number.isSafeInteger(Number(value)) ? Number(value) : String(value);
  if (value instanceof Date) return value.toISOString();
  if (value && typeof value === "object" && !Array.isArray(value) && typeof value.toJSON === "function") return value.toJSON();
  return value;
}

async function open(onProgress) {
  const { base, wasmBytes } = await vendor();
  const duckdb = await import(new URL("duckdb.mjs", base).href);
  const worker = startWorker(new URL("duckdb-browser-eh.worker.js", base), "classic");
  const db = new duckdb.AsyncDuckDB(new duckdb.VoidLogger(), worker);
  let last = null;
  const progress = (p) => {
    last = { loaded: p.bytesLoaded, total: wasmBytes || p.bytesTotal };
    onProgress?.(last);
  };
  await db.instantiate(new URL("duckdb-eh.wasm", base).href, null, progress);
  // DuckDB reports a chunk only when 20 ms have passed since the one before, and never the
  // last one: on a fast (or a busy) machine it may report nothing at all. The download is
  // complete here, so say so once.
  const total = wasmBytes || last?.total || 0;
  if (total && (!last || last.loaded < total)) onProgress?.({ loaded: total, total });
  const conn = await db.connect();
  await conn.query("SET autoload_known_extensions = false");
  await conn.query("SET autoinstall_known_extensions = false");
  const registered = new Map(); // table -> the text it was made from

  return {
    db,
    conn,
    /** Makes (or replaces) table `name` from CSV text; a no-op when the text is unchanged. */
    async registerCSV(name, text) {
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new Error(`table name ${JSON.stringify(name)} must be letters, digits and _`);
      if (registered.get(name) === text) return;
      await db.registerFileText(`${name}.csv`, text);
      await conn.query(`CREATE OR REPLACE TABLE ${name} AS SELECT * FROM read_csv_auto('${name}.csv')`);
      registered.set(name, text);
    },
    /** Runs one query; resolves with {columns, rows} (rows as plain objects). */
    async query(sql) {
      const table = await conn.query(sql);
      const columns = table.schema.fields.map((f) => f.name);
      const rows = [];
      for (let i = 0; i < table.numRows; i += 1) {
        const row = table.get(i);
        const out = {};
        for (const c of columns) out[c] = plain(row?.[c]);
        rows.push(out);
      }
      return { columns, rows };
    },
  };
}

/**
 * The page's one DuckDB (opened on first use; a failed open is retried next time).
 * `onProgress({loaded, total})` reports the wasm download in decoded bytes (first open only).
 */
export function openDuckDB({ onProgress } = {}) {
  opening ??= open(onProgress);
  opening.catch(() => { opening = null; });
  return opening;
}
