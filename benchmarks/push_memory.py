"""The runtime's memory around pushes: a refused huge tokenizer, then a large valid package.

Starts a real ``evermind serve`` subprocess on loopback, reads its resident memory from
``/proc/<pid>/status`` (``VmRSS`` now, ``VmHWM`` the peak, reset through ``clear_refs`` before
each push; Linux only) and prints, for each push, the peak and the settled memory above the
memory before it, also as a multiple of the package's size. It measures; it asserts nothing
(``tests/runtime/test_push_memory.py`` holds the bounds).

Run from the repository root: ``python -m benchmarks.push_memory --d-model 512 --layers 8``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx
from tests.factories import package_with_tokenizer, random_merges, tiny_package
from tests.runtime.helpers import TOKEN_A, ServerProcess, bearer, write_tokens


def memory(pid: int) -> dict[str, float]:
    """``VmRSS`` and ``VmHWM`` of ``pid`` in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d-model", type=int, default=512, help="width of the large package")
    parser.add_argument("--layers", type=int, default=8, help="layers of the large package")
    parser.add_argument("--merges", type=int, default=2_000_000, help="merges of the attack")
    args = parser.parse_args(argv)
    big = tiny_package("big", "1.0.0", steps=0, d_model=args.d_model, n_layer=args.layers)
    attack = package_with_tokenizer(random_merges(args.merges), producer="benchmarks.push_memory")
    mib = len(big) / 2**20
    print(f"large package {mib:.1f} MiB; attack package {len(attack) / 2**20:.1f} MiB")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = ServerProcess(root / "data", write_tokens(root / "tokens"), root / "log").start()
        pid = server.process.pid
        client = httpx.Client(base_url=server.url, headers=bearer(TOKEN_A), timeout=600)
        try:
            time.sleep(1)
            for name, data in (("huge tokenizer", attack), ("large package", big)):
                before = memory(pid)["VmRSS"]
                reset_peak(pid)
                start = time.perf_counter()
                answer = client.post("/v1/models", content=data)
                seconds = time.perf_counter() - start
                time.sleep(1)
                after = memory(pid)
                size = len(data) / 2**20
                peak, settled = after["VmHWM"] - before, after["VmRSS"] - before
                print(
                    f"{name}: HTTP {answer.status_code} in {seconds:.1f} s; peak +{peak:.0f} MiB "
                    f"({peak / size:.2f}x the package), settled +{settled:.0f} MiB "
                    f"({settled / size:.2f}x); {answer.text[:160]}"
                )
        finally:
            client.close()
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
