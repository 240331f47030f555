#!/usr/bin/env bash
# Fills .whl/ and .gl/ (both git-ignored through .git/info/exclude) with what benchmarks/gpu.sh
# needs on a lent GPU machine that has no network: Python 3.12 x86-64 wheels of the packages
# its image lacks (pinned to the versions of this checkout's .venv) and the Vulkan loader
# .debs. Run once here, from the checkout's root, then name .whl and .gl in the run's carry.
set -eu
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)
for d in /.whl/ /.gl/; do grep -qxF "$d" "$exclude" 2>/dev/null || echo "$d" >>"$exclude"; done
# The image has numpy, torch, transformers, httpx, anyio, h11, click, typing-extensions.
names="wgpu cffi pycparser rendercanvas fastapi starlette uvicorn pydantic pydantic_core \
annotated-types typing-inspection annotated-doc opentelemetry-api swagger-ui-bundle tomlkit"
pins=$(.venv/bin/python - $names <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
out = []
for name in sys.argv[1:]:
    try:
        out.append(f"{name}=={version(name)}")
    except PackageNotFoundError:
        pass
print(" ".join(out))
PY
)
mkdir -p .whl
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform any -d .whl $pins
mkdir -p .gl /tmp/amd64/partial
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
# shellcheck disable=SC2086
apt-get $o update -qq && (cd .gl && apt-get $o download libvulkan1)
du -sh .whl .gl
