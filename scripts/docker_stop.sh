#!/usr/bin/env bash
# Stops the dockerd that scripts/docker_start.sh started, by the PID it recorded; an engine this
# script did not start is left alone. Containers still running are stopped by dockerd itself.
set -euo pipefail

STATE="${TELESUM_CACHE:-$HOME/.cache/telesum}/docker"
PIDFILE="$STATE/dockerd.pid"

if [ ! -f "$PIDFILE" ]; then
    echo "docker_stop.sh: no dockerd started by docker_start.sh ($PIDFILE absent)"
    exit 0
fi
pid="$(cat "$PIDFILE")"
if ! kill -0 "$pid" 2>/dev/null || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dockerd ]; then
    echo "docker_stop.sh: dockerd (pid $pid) is not running"
    rm -f "$PIDFILE"
    exit 0
fi
kill -TERM "$pid"
for _ in $(seq 1 60); do  # dockerd gives its containers 10 s each to stop
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
done
if kill -0 "$pid" 2>/dev/null; then
    echo "docker_stop.sh: dockerd (pid $pid) still running after 30 s: killing it" >&2
    kill -KILL "$pid"
fi
rm -f "$PIDFILE"
echo "docker_stop.sh: dockerd (pid $pid) stopped"
