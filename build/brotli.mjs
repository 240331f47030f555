// Brotli for build/build_web.py when Python's `brotli` module is not installed: reads
// "quality<TAB>input<TAB>output" lines on stdin and writes each output (window 2^24, so one
// stream spans a whole 9 MB wasm). Node's zlib ships brotli; `npm ci` already needs Node.
import { readFileSync, writeFileSync, renameSync } from "node:fs";
import { brotliCompressSync, constants } from "node:zlib";

const jobs = readFileSync(0, "utf8").split("\n").filter(Boolean);
for (const line of jobs) {
  const [quality, input, output] = line.split("\t");
  const data = readFileSync(input);
  const packed = brotliCompressSync(data, {
    params: {
      [constants.BROTLI_PARAM_QUALITY]: Number(quality),
      [constants.BROTLI_PARAM_LGWIN]: 24,
      [constants.BROTLI_PARAM_SIZE_HINT]: data.length,
    },
  });
  writeFileSync(`${output}.tmp`, packed);
  renameSync(`${output}.tmp`, output);
}
