#!/usr/bin/env bash
# The whole test suite: set-up, lint (ruff, buf), then every test level with pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh tests/unit -k sid).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "== ruff"
.venv/bin/ruff check .
echo "== buf lint"
if [ -x .tools/bin/buf ]; then
  (cd proto && ../.tools/bin/buf lint)
elif [ "${CI:-}" = "true" ]; then
  echo "buf is not installed (needs Go): failing under CI" >&2; exit 1
else
  echo "buf not installed (no Go toolchain): skipped"
fi
echo "== pytest"
# pytest exits 5 when no test was collected: that is a failure here too (set -e).
exec .venv/bin/pytest "$@"
