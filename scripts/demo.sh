#!/usr/bin/env bash
# The main job on the embedded defaults, from nothing:
#   set up .venv (native build, embedded SmolLM2-135M, Kafka jars), start a local Kafka broker,
#   produce sample telemetry to a topic, run `telesum worker` on it, print each summary as it
#   arrives (the worker's live status page and metrics are on http://127.0.0.1:$TELESUM_METRICS_PORT/status
#   and /metrics meanwhile), then stop the worker (SIGTERM: drain and commit) and the broker.
#   Beside it, an alarm storm (`telesum produce --profile storm`: dev-1's power loss and the 12 elements
#   behind it, plus unrelated alarms far away) becomes its incidents. No one hands it the cause graph:
#   `telesum incidents learn` learns it first from the network's past (`--profile storm-history`), then a
#   second worker with
#   TELESUM_INCIDENT_TOPIC (and TELESUM_INCIDENT_ONLY: no model, no per-alarm summaries, which would take
#   the CPU minutes for 200 alarms) groups it, and the demo prints its open/update/resolve events.
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
ALARMS="$RUN_ID.alarms" INCIDENTS="$RUN_ID.incidents" STORM=200

scripts/setup.sh
PATH="$PWD/.venv/bin:$PATH"

started_broker=0
worker_pid=""
incident_pid=""
alerting_pids=""   # the Alertmanager block's receiver and Alertmanager
cleanup() {
    for pid in $worker_pid $incident_pid $alerting_pids; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    if [ "$started_broker" = 1 ]; then scripts/kafka.sh stop || true; fi
}
trap cleanup EXIT

if ! scripts/kafka.sh status >/dev/null 2>&1; then
    scripts/kafka.sh start
    started_broker=1
fi

echo "==> creating topics $RUN_ID.* (inputs with 3 partitions)"
python - "$ALARMS" "$INCIDENTS" <<'PY'
import os, sys
from kafka.admin import KafkaAdminClient, NewTopic
admin = KafkaAdminClient(bootstrap_servers=os.environ["KAFKA_BOOTSTRAP_SERVERS"])
admin.create_topics([NewTopic(os.environ["TELESUM_INPUT_TOPIC"], 3, 1),
                     NewTopic(os.environ["TELESUM_OUTPUT_TOPIC"], 1, 1),
                     NewTopic(os.environ["TELESUM_DLQ_TOPIC"], 1, 1),
                     NewTopic(sys.argv[1], 3, 1), NewTopic(sys.argv[2], 1, 1)])  # one partition: events in order
admin.close()
PY

echo "==> producing $COUNT sample records to $TELESUM_INPUT_TOPIC"
telesum produce --profile short --count "$COUNT" --seed 7 --topic "$TELESUM_INPUT_TOPIC"

echo "==> starting the worker (embedded SmolLM2-135M on $(python -c 'import torch;print("cuda" if torch.cuda.is_available() else "cpu")'); log: .cache/demo-worker.log)"
mkdir -p .cache
telesum worker >.cache/demo-worker.log 2>&1 &
worker_pid=$!
echo "==> status page: $HTTP/status   metrics: $HTTP/metrics   readiness: $HTTP/readyz"

# --- Alertmanager (issue 41): the storm's incidents also go to a real Alertmanager, whose webhook receiver
# records what it is sent (printed at the end). Only where scripts/alertmanager.sh has built one (setup.sh
# does where Go is installed).
ALERTMANAGER_BIN="$(scripts/alertmanager.sh path 2>/dev/null || true)"
if [ -n "$ALERTMANAGER_BIN" ]; then
    AM_PORT="${TELESUM_DEMO_ALERTMANAGER_PORT:-19093}" HOOK_PORT=$(( ${TELESUM_DEMO_ALERTMANAGER_PORT:-19093} + 1 ))
    rm -f .cache/demo-webhook.jsonl
    python - "$HOOK_PORT" .cache/demo-webhook.jsonl <<'PY' &
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(sys.argv[2], "ab") as out:
            out.write(body.strip() + b"\n")
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), Hook).serve_forever()
PY
    alerting_pids="$!"
    mkdir -p .cache/demo-alertmanager
    sed "s#http://telesum-webhook:9094/hook#http://127.0.0.1:$HOOK_PORT/hook#" deploy/alertmanager/alertmanager.yml \
        > .cache/demo-alertmanager/alertmanager.yml
    "$ALERTMANAGER_BIN" --config.file=.cache/demo-alertmanager/alertmanager.yml \
        --storage.path=.cache/demo-alertmanager/data --web.listen-address="127.0.0.1:$AM_PORT" \
        --cluster.listen-address= --log.level=warn >.cache/demo-alertmanager.log 2>&1 &
    alerting_pids="$alerting_pids $!"
    export TELESUM_ALERTMANAGER_URL="http://127.0.0.1:$AM_PORT"   # the incidents-only worker below posts there
    echo "==> Alertmanager on $TELESUM_ALERTMANAGER_URL (route: deploy/alertmanager/alertmanager.yml), its webhook"
    echo "    receiver writing .cache/demo-webhook.jsonl"
else
    echo "==> no Alertmanager built (scripts/alertmanager.sh build, needs Go): the incidents go to Kafka only"
fi
# --- end of the Alertmanager block

echo "==> learning the storm network's cause graph from two weeks of its past alarms (no rules file given)"
telesum produce --profile storm-history --count 3000 -o .cache/demo-history.jsonl 2>/dev/null
telesum incidents learn .cache/demo-history.jsonl --topology docs/examples/storm-topology.csv \
    -o .cache/demo-learned-rules.csv --report .cache/demo-learned-report.json
python - .cache/demo-learned-report.json <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for e in report["edges"]:
    print(f"    {e['cause']} -> {e['effect']}: {e['cause']} near {e['cause_with_effect']:.0%} of {e['effect']}'s alarms, "
          f"{e['effect']} near {e['effect_with_cause']:.0%} of {e['cause']}'s; {e['cooccurrences']} co-occurrences, "
          f"{e['lift']:.0f}x chance")
PY
echo "==> an alarm storm: $STORM VES faults to $ALARMS, keyed by site; an incidents-only worker groups them"
echo "    (topology: docs/examples/storm-topology.csv, causes: the graph just learned; log: .cache/demo-incidents.log)"
telesum produce --profile storm --count "$STORM" --topic "$ALARMS"
# An hour without an alarm resolves an incident by default; 20 s here so the demo sees its incidents end
# (longer than the storm's gaps: 15 s between the unrelated alarms).
TELESUM_INPUT_TOPIC="$ALARMS" TELESUM_DLQ_TOPIC="$ALARMS.dlq" TELESUM_GROUP_ID="$RUN_ID-storm" \
TELESUM_METRICS_PORT=0 TELESUM_INCIDENT_TOPIC="$INCIDENTS" TELESUM_INCIDENT_ONLY=true \
TELESUM_INCIDENT_TOPOLOGY=docs/examples/storm-topology.csv TELESUM_INCIDENT_LEARNED_RULES=.cache/demo-learned-rules.csv \
TELESUM_INCIDENT_IDLE_S=20 telesum worker >.cache/demo-incidents.log 2>&1 &
incident_pid=$!

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
echo "==> the storm's incident events ($INCIDENTS; each resolves 20 s after its last alarm):"
if ! python - "$INCIDENTS" <<'PY'; then
import os, sys, time
import msgspec
from kafka import KafkaConsumer, TopicPartition
from worker.incidents.text import console_lines
from worker.messages import IncidentEvent
consumer = KafkaConsumer(bootstrap_servers=os.environ["KAFKA_BOOTSTRAP_SERVERS"], group_id=None,
                         auto_offset_reset="earliest", isolation_level="read_committed")
consumer.assign([TopicPartition(sys.argv[1], 0)])
opened, resolved, deadline = set(), set(), time.monotonic() + 120
while not (opened and opened <= resolved) and time.monotonic() < deadline:
    for batch in consumer.poll(timeout_ms=500).values():
        for msg in batch:
            event = msgspec.json.decode(msg.value, type=IncidentEvent)
            (resolved if event.event == "resolve" else opened).add(event.incident_id)
            print("\n".join("    " + line for line in console_lines(event)), flush=True)
sys.exit(0 if opened and opened <= resolved else 1)
PY
    echo "demo: the storm's incidents did not all resolve in time; the incident worker's log follows" >&2
    tail -n 40 .cache/demo-incidents.log >&2
    exit 1
fi
# --- Alertmanager (issue 41): what its webhook receiver got for the storm: one page per incident, then its
# resolution (the route's group_wait and group_interval: a few seconds).
if [ -n "$ALERTMANAGER_BIN" ]; then
    sleep 3
    echo "==> what Alertmanager sent its webhook receiver for the storm:"
    python - .cache/demo-webhook.jsonl <<'PY' || true
import json, sys
for line in open(sys.argv[1]):
    note = json.loads(line)
    for a in note["alerts"]:
        labels, text = a["labels"], a["annotations"]
        print(f"    {a['status']:8} {labels['incident_id']}  root cause {labels['root_alarm_type']} on "
              f"{labels['root_element']}  ({text['alarms']} alarms; {text['root_cause_reason']})")
        print(f"             {text['summary']}")
PY
fi
# --- end of the Alertmanager block

echo "==> stopping the workers (drain and commit)"
kill -TERM "$worker_pid" "$incident_pid"
wait "$worker_pid"
worker_pid=""
wait "$incident_pid"
incident_pid=""
echo "==> done"
