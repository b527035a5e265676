#!/usr/bin/env bash
# A real Prometheus Alertmanager for the alerting tests, the benchmark and the Compose image, built once
# from the Go module proxy into the cache (like the Kafka jars).
#
#   scripts/alertmanager.sh build     build it unless cached; print the binary's path
#   scripts/alertmanager.sh path      print the binary's path (exit 1 when not built)
#
# Needs Go >= 1.24 and the Go module proxy (or a module cache holding the sources). The module's zip
# lacks the web UI's built assets (ui/app/dist, made by npm in Alertmanager's own release), which the
# ui package embeds: the build copies the module and puts a one-page placeholder there. The API, the
# routing, silences and receivers are the release's own code. About 4 minutes of `nice` on a busy
# 2-core machine (2026-12-04: 247 s wall, 125 s CPU), then cached.
#
# Environment: TELESUM_CACHE (default ~/.cache/telesum), ALERTMANAGER_VERSION (default v0.35.0).
set -euo pipefail

VERSION="${ALERTMANAGER_VERSION:-v0.35.0}"
DIR="${TELESUM_CACHE:-$HOME/.cache/telesum}/alertmanager-$VERSION"
BIN="$DIR/alertmanager"
MODULE="github.com/prometheus/alertmanager"

die() { echo "alertmanager.sh: $*" >&2; exit 1; }

build() {
    if [ -x "$BIN" ]; then
        echo "$BIN"
        return
    fi
    command -v go >/dev/null || die "go not found (Go 1.24+ builds Alertmanager $VERSION: https://go.dev/dl/)"
    local started=$SECONDS src work
    src="$(go mod download -json "$MODULE@$VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
    [ -d "$src" ] || die "go mod download $MODULE@$VERSION gave no source folder"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' RETURN
    cp -r "$src" "$work/src"
    chmod -R u+w "$work/src"
    for ui in elm mantine; do
        mkdir -p "$work/src/ui/app/dist/$ui"
        echo "<!doctype html><title>Alertmanager</title><p>Web UI not built (telesum's build); the API is at /api/v2/." \
            > "$work/src/ui/app/dist/$ui/index.html"
    done
    mkdir -p "$DIR"
    echo "alertmanager.sh: building Alertmanager $VERSION (a few minutes, once)" >&2
    # Static (no cgo), as Alertmanager's own releases: the binary also runs in the Compose image.
    (cd "$work/src" && CGO_ENABLED=0 nice -n 10 go build -trimpath \
        -ldflags "-X github.com/prometheus/common/version.Version=${VERSION#v}" \
        -o "$BIN.part" ./cmd/alertmanager)
    mv "$BIN.part" "$BIN"
    echo "alertmanager.sh: built in $((SECONDS - started)) s: $BIN" >&2
    echo "$BIN"
}

case "${1:-}" in
    build) build ;;
    path) [ -x "$BIN" ] || die "not built: scripts/alertmanager.sh build"; echo "$BIN" ;;
    *) die "usage: scripts/alertmanager.sh build|path" ;;
esac
