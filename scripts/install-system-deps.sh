#!/usr/bin/env bash
# Servers of the system tests (tests/system/), installed into .tools/ from the package registries:
#   - Kafka broker 4.3.1 (KRaft) as Maven Central jars  -> .tools/kafka/libs/*.jar
#   - Telegraf v1.37.2, only the plugins we use          -> .tools/bin/telegraf
#   - InfluxDB OSS v1.8.10                                -> .tools/bin/influxd
# Idempotent: each part is skipped when the pinned version is already there. Needs Java 17 + Maven
# (Kafka) and Go (Telegraf, InfluxDB); a part whose toolchain is missing is reported and skipped,
# and the system tests then skip (or fail under CI=true) with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

KAFKA_VERSION=4.3.1
TELEGRAF_VERSION=v1.37.2
INFLUXDB_VERSION=v1.8.10
# Only the plugins the pipeline uses: a full Telegraf takes many minutes and gigabytes to build.
TELEGRAF_TAGS=custom,inputs.kafka_consumer,outputs.influxdb,parsers.influx

TOOLS=$ROOT/.tools
log() { printf '[system-deps] %s\n' "$*" >&2; }
mkdir -p "$TOOLS/bin"

# --- Kafka: copy the broker's runtime jars resolved by tests/system/kafka/pom.xml ----------------
KAFKA_DIR=$TOOLS/kafka
KAFKA_STAMP=$KAFKA_DIR/VERSION
POM=tests/system/kafka/pom.xml
# The stamp records the version and a hash of the pom, so editing the pom re-resolves.
kafka_want="$KAFKA_VERSION $(sha256sum "$POM" | cut -c1-16)"
if [ "$(cat "$KAFKA_STAMP" 2>/dev/null)" = "$kafka_want" ]; then
  :
elif command -v mvn >/dev/null 2>&1 && command -v java >/dev/null 2>&1; then
  log "resolving Kafka $KAFKA_VERSION jars from Maven Central (about 20 s the first time)"
  rm -rf "$KAFKA_DIR.tmp"
  mvn -q -B -f "$POM" dependency:copy-dependencies \
      -Dkafka.version="$KAFKA_VERSION" -DincludeScope=runtime -DoutputDirectory="$KAFKA_DIR.tmp/libs"
  rm -rf "$KAFKA_DIR"
  mv "$KAFKA_DIR.tmp" "$KAFKA_DIR"
  echo "$kafka_want" >"$KAFKA_STAMP"
else
  log "no java/mvn: Kafka not installed (system tests that need it will not run)"
fi

# --- Go binaries ----------------------------------------------------------------------------------
go_install() {  # name, package@version, extra flags...
  local name=$1 pkg=$2; shift 2
  log "go install $pkg (about a minute the first time; later runs use the module cache)"
  GOBIN="$TOOLS/bin.tmp" GOFLAGS=-mod=mod go install "$@" "$pkg"
  mv -f "$TOOLS/bin.tmp/$name" "$TOOLS/bin/$name"
  rmdir "$TOOLS/bin.tmp" 2>/dev/null || true
}

if ! command -v go >/dev/null 2>&1; then
  log "no Go toolchain: Telegraf and InfluxDB not installed (system tests that need them will not run)"
  exit 0
fi

# A stamp beside each binary says which version and build tags it was built with.
telegraf_want="$TELEGRAF_VERSION $TELEGRAF_TAGS"
if [ -x "$TOOLS/bin/telegraf" ] && [ "$(cat "$TOOLS/bin/telegraf.version" 2>/dev/null)" = "$telegraf_want" ]; then
  :
else
  go_install telegraf "github.com/influxdata/telegraf/cmd/telegraf@$TELEGRAF_VERSION" -tags "$TELEGRAF_TAGS"
  echo "$telegraf_want" >"$TOOLS/bin/telegraf.version"
fi

if [ -x "$TOOLS/bin/influxd" ] && [ "$(cat "$TOOLS/bin/influxd.version" 2>/dev/null)" = "$INFLUXDB_VERSION" ]; then
  :
else
  go_install influxd "github.com/influxdata/influxdb/cmd/influxd@$INFLUXDB_VERSION"
  echo "$INFLUXDB_VERSION" >"$TOOLS/bin/influxd.version"
fi
log "ready: Kafka jars in .tools/kafka/libs, .tools/bin/telegraf, .tools/bin/influxd"
