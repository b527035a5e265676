#!/usr/bin/env bash
# The main job on the embedded defaults, from nothing:
#   set up .venv (native build, embedded SmolLM2-135M, Kafka jars), start a local Kafka broker,
#   produce sample telemetry to a topic, run `telesum worker` on it, print each summary as it
#   arrives (the worker's live status page and metrics are on http://127.0.0.1:$TELESUM_METRICS_PORT/status
#   and /metrics meanwhile), then stop the worker (SIGTERM: drain and commit) and the broker.
# Usage: scripts/demo.sh [COUNT]     (COUNT sample records, default 8)
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT="${1:-8}"
RUN_ID="demo-$(date +%s)"   # fresh topics and group each run
export KAFKA_BOOTSTRAP_SERVERS="${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}"
export TELESUM_INPUT_TOPIC="$RUN_ID.telemetry" TELESUM_OUTPUT_TOPIC="$RUN_ID.summaries"
export TELESUM_DLQ_TOPIC="$RUN_ID.dlq" TELESUM_GROUP_ID="$RUN_ID"
export TELESUM_MAX_NEW_TOKENS="${TELESUM_MAX_NEW_TOKENS:-64}"
export TELESUM_METRICS_PORT="${TELESUM_METRICS_PORT:-9400}" TELESUM_BIND_ADDRESS="${TELESUM_BIND_ADDRESS:-127.0.0.1}"
HTTP="http://127.0.0.1:$TELESUM_METRICS_PORT"

scripts/setup.sh
PATH="$PWD/.venv/bin:$PATH"

started_broker=0
worker_pid=""
cleanup() {
    if [ -n "$worker_pid" ] && kill -0 "$worker_pid" 2>/dev/null; then
        kill -TERM "$worker_pid" 2>/dev/null || true
        wait "$worker_pid" 2>/dev/null || true
    fi
    if [ "$started_broker" = 1 ]; then scripts/kafka.sh stop || true; fi
}
trap cleanup EXIT

if ! scripts/kafka.sh status >/dev/null 2>&1; then
    scripts/kafka.sh start
    started_broker=1
fi

echo "==> creating topics $RUN_ID.* (input with 3 partitions)"
python - <<'PY'
import os
from kafka.admin import KafkaAdminClient, NewTopic
admin = KafkaAdminClient(bootstrap_servers=os.environ["KAFKA_BOOTSTRAP_SERVERS"])
admin.create_topics([NewTopic(os.environ["TELESUM_INPUT_TOPIC"], 3, 1),
                     NewTopic(os.environ["TELESUM_OUTPUT_TOPIC"], 1, 1),
                     NewTopic(os.environ["TELESUM_DLQ_TOPIC"], 1, 1)])
admin.close()
PY

echo "==> producing $COUNT sample records to $TELESUM_INPUT_TOPIC"
telesum produce --profile short --count "$COUNT" --seed 7 --topic "$TELESUM_INPUT_TOPIC"

echo "==> starting the worker (embedded SmolLM2-135M on $(python -c 'import torch;print("cuda" if torch.cuda.is_available() else "cpu")'); log: .cache/demo-worker.log)"
mkdir -p .cache
telesum worker >.cache/demo-worker.log 2>&1 &
worker_pid=$!
echo "==> status page: $HTTP/status   metrics: $HTTP/metrics   readiness: $HTTP/readyz"

echo "==> summaries as they arrive:"
if ! telesum tail --count "$COUNT" --timeout 900; then
    echo "demo: not every record was answered in time; the worker's log follows" >&2
    tail -n 40 .cache/demo-worker.log >&2
    exit 1
fi
echo "==> the worker's metrics after the run:"
python - "$HTTP/metrics" <<'PY' || true
import sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
for line in text.splitlines():
    if line.startswith(("telesum_records_consumed_total", "telesum_summaries_published_total",
                        "telesum_dead_letters_total", "telesum_bins_total", "telesum_bin_fill_ratio")):
        print("   ", line)
PY
echo "==> stopping the worker (drain and commit)"
kill -TERM "$worker_pid"
wait "$worker_pid"
worker_pid=""
echo "==> done"
