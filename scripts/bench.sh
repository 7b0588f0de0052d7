#!/usr/bin/env bash
# The benchmark (Benchmarks/README.md): sets up the Yjs peer in .venv-bench when
# Python can, builds release, and runs shoal-bench with the given arguments
# (`scripts/bench.sh --quick`, `scripts/bench.sh --json`). Without Python or PyPI
# the peer is reported as not run and everything else is measured.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
python=python3
export PIP_DISABLE_PIP_VERSION_CHECK=1
if command -v python3 >/dev/null; then
  if [ ! -x .venv-bench/bin/python ]; then
    python3 -m venv .venv-bench >/dev/null 2>&1 || rm -rf .venv-bench
  fi
  if [ -x .venv-bench/bin/python ]; then
    if ! .venv-bench/bin/python -c "import pycrdt, pycrdt.websocket, websockets" 2>/dev/null; then
      .venv-bench/bin/python -m pip install -q -r Benchmarks/peers/requirements.txt >&2 \
        || echo "bench: could not install the Yjs peer's packages; it will be reported as not run" >&2
    fi
    python="$PWD/.venv-bench/bin/python"
  fi
fi
swift build -c release --product shoal
swift build -c release --product shoal-bench
SHOAL_BENCH_PYTHON="$python" .build/release/shoal-bench "$@"
