#!/usr/bin/env bash
# The one set-up step: Debian packages, the pinned uv, every component into .venv/ (uv.lock),
# and the pinned buf linter. Safe to run again; it only installs what is missing or stale.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.8
BUF_VERSION=v1.75.0
log() { printf '[setup] %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------------------------
mapfile -t wanted < <(grep -vE '^\s*(#|$)' scripts/apt-packages.txt)
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    log "missing Debian packages (${missing[*]}) and not root: run as root"; exit 1
  fi
  log "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- system-test servers: Kafka 4.3.1 jars, telegraf v1.37.2, influxd v1.8.10 into .tools/ ------
scripts/install-system-deps.sh

# --- Python: uv (pinned) in .tools/, the workspace in .venv/ ---------------------------------
PY=$(command -v python3.11 || command -v python3)
"$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || { log "Python 3.11 required, found $("$PY" -V)"; exit 1; }
if [ "$(.tools/bin/uv --version 2>/dev/null | awk '{print $2}')" != "$UV_VERSION" ]; then
  log "installing uv $UV_VERSION into .tools/"
  "$PY" -m venv .tools
  .tools/bin/pip install -q --disable-pip-version-check "uv==$UV_VERSION"
fi
export UV_PYTHON_DOWNLOADS=never
.tools/bin/uv sync --quiet --locked --all-packages --python "$PY"

# --- buf (proto lint) through the Go module proxy --------------------------------------------
if command -v go >/dev/null 2>&1; then
  if [ "$(.tools/bin/buf --version 2>/dev/null)" != "${BUF_VERSION#v}" ]; then
    log "go install buf $BUF_VERSION (about 2 minutes the first time)"
    GOBIN="$PWD/.tools/bin" GOFLAGS=-mod=mod go install "github.com/bufbuild/buf/cmd/buf@$BUF_VERSION"
  fi
else
  log "no Go toolchain: buf lint will not run"
fi
# --- BEGIN data plane (issue 3): build the srv6pm BPF objects into srv6pm_node/counters/bpf/ -----
# CO-RE: vmlinux.h comes from this kernel's BTF (never committed). Needs clang, bpftool, libbpf-dev.
if [ -r /sys/kernel/btf/vmlinux ]; then
  make -s -C node-manager/bpf
else
  log "no /sys/kernel/btf/vmlinux: BPF objects not built (the eBPF counter driver is unavailable)"
fi
# --- END data plane ---------------------------------------------------------------------------
log "ready: .venv/bin/srv6pm-node"
