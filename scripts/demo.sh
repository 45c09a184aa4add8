#!/usr/bin/env bash
# The main job: build an emulated SRv6 network in namespaces and run srv6-pm over it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/srv6pm-demo "$@"
