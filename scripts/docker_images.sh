#!/usr/bin/env bash
# Builds telesum's images locally, FROM the base image scripts/docker_start.sh made (nothing pulled):
#   scripts/docker_images.sh [kafka] [worker] [prometheus] [alertmanager]   (default: the first three)
#   kafka       telesum/kafka:$KAFKA_VERSION   the broker jars of scripts/kafka.sh on Debian's Java
#   worker      telesum:latest                 the worker's Dockerfile on Debian's Python
#   prometheus  telesum/prometheus:latest      Debian's Prometheus package
#   alertmanager telesum/alertmanager:v0.35.0  the Alertmanager scripts/alertmanager.sh builds (needs Go once)
# Prints each build's time. Environment: TELESUM_BASE_IMAGE (default telesum/bookworm-ca).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE="${TELESUM_BASE_IMAGE:-telesum/bookworm-ca}"
KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
CACHE="${TELESUM_CACHE:-$HOME/.cache/telesum}"
export DOCKER_BUILDKIT=0  # the legacy builder: no buildx plugin here

die() { echo "docker_images.sh: $*" >&2; exit 1; }

docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 || die "no base image $BASE_IMAGE: run scripts/docker_start.sh first"

build() {  # build TAG CONTEXT [docker build options...]
    local tag="$1" context="$2" started=$SECONDS
    shift 2
    echo "docker_images.sh: building $tag"
    docker build --pull=false --build-arg BASE_IMAGE="$BASE_IMAGE" -t "$tag" "$@" "$context" >"$CACHE/docker/build-${tag//[\/:]/-}.log" 2>&1 \
        || { tail -n 30 "$CACHE/docker/build-${tag//[\/:]/-}.log" >&2; die "building $tag failed (log above)"; }
    echo "docker_images.sh: $tag built in $((SECONDS - started)) s ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
}

kafka_image() {
    scripts/kafka.sh fetch >/dev/null
    local context
    context="$(mktemp -d)"
    cp -r deploy/kafka/. "$context/"
    cp -r "$CACHE/kafka/libs" "$context/libs"
    rm -f "$context/libs/.complete"
    build "telesum/kafka:$KAFKA_VERSION" "$context"
    rm -rf "$context"
}

alertmanager_image() {
    local binary context
    binary="$(scripts/alertmanager.sh build)"
    context="$(mktemp -d)"
    cp -r deploy/alertmanager/. "$context/"
    cp "$binary" "$context/alertmanager"
    build "telesum/alertmanager:v0.35.0" "$context"
    rm -rf "$context"
}

mkdir -p "$CACHE/docker"
for image in "${@:-kafka worker prometheus}"; do
    for name in $image; do
        case "$name" in
            kafka) kafka_image ;;
            worker) build telesum:latest . ;;
            prometheus) build telesum/prometheus:latest deploy/prometheus ;;
            alertmanager) alertmanager_image ;;
            *) die "unknown image '$name' (kafka, worker, prometheus or alertmanager)" ;;
        esac
    done
done
