#!/usr/bin/env bash
# The prepared GPU benchmark run (see benchmarks/gpu.py and docs/benchmarks.md).
#
#   benchmarks/gpu.sh [--quick] [--allow-cpu-adapter] [--budget S] [--stages a,b] [--out DIR]
#
# From the checkout's root on a machine with a GPU and no network. Python: $EVERMIND_PYTHON,
# else .venv/bin/python when it runs here, else python3. Packages the machine lacks travel
# as wheels in .whl/ (benchmarks/gpu_prepare.sh downloads them): installed with
# --no-index into a private folder; Vulkan loader .debs in .gl/ are unpacked the same way.
# Prints one markdown table; also $OUT/gpu_bench.md (and .json) when $OUT is set.
# Exit 3: wgpu-py finds no GPU; 1: a stage failed or timed out; 0: all ran.
set -u
cd "$(dirname "$0")/.." || exit 2

if [ -d .gl ] && ! ldconfig -p 2>/dev/null | grep -q libvulkan.so.1; then
    for f in .gl/*.deb; do dpkg -x "$f" / || echo "gpu.sh: cannot unpack $f" >&2; done
    ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd; fi

py=${EVERMIND_PYTHON:-}
if [ -z "$py" ]; then
    if [ -x .venv/bin/python ] && .venv/bin/python -c 'import sys' 2>/dev/null; then
        py=.venv/bin/python
    else
        py=python3
    fi
fi
if ls .whl/*.whl >/dev/null 2>&1; then
    site=${TMPDIR:-/tmp}/evermind-gpu-site
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" .whl/*.whl || { echo "gpu.sh: installing .whl/ failed" >&2; exit 2; }
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
missing=$("$py" - <<'PY'
import importlib.util
need = ["numpy", "wgpu", "httpx", "fastapi", "uvicorn", "pydantic", "swagger_ui_bundle"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
PY
)
if [ -n "$missing" ]; then
    echo "gpu.sh: $py lacks: $missing (carry them as wheels in .whl/: benchmarks/gpu_prepare.sh)" >&2
    case " $missing " in *" numpy "*|*" wgpu "*) exit 2 ;; esac
    echo "gpu.sh: the serve stage will fail; the others run" >&2
fi
exec "$py" -m benchmarks.gpu "$@"
