#!/usr/bin/env bash
# A local Apache Kafka 4.x broker (KRaft combined mode, one node) for development and CI.
#
#   scripts/kafka.sh fetch            download the broker jars from Maven Central once into the cache
#   scripts/kafka.sh start [--port N] start a broker on 127.0.0.1 (idempotent), wait until it answers
#   scripts/kafka.sh stop             stop the broker this script started
#   scripts/kafka.sh status           exit 0 and print the bootstrap address when it is running
#   scripts/kafka.sh ready [--port N] exit 0 when a broker on 127.0.0.1:N serves metadata, else say why
#   scripts/kafka.sh cluster-id [N]   print N new KRaft cluster ids (default 1)
#
# Needs Java 17+, Maven (first fetch only) and python3 (standard library only: no virtual
# environment; the readiness check is scripts/kafka_ready.py).
#
# Environment: TELESUM_CACHE (default ~/.cache/telesum), KAFKA_PORT (default 9092),
# KAFKA_VERSION, LOG4J_VERSION, KAFKA_STATE_DIR (default $TELESUM_CACHE/kafka/run-$PORT),
# KAFKA_CLUSTER_ID (default: a new one, formatted once per state directory).
set -euo pipefail

KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
LOG4J_VERSION="${LOG4J_VERSION:-2.25.3}"
# kafka_2.13 pulls slf4j-api 1.7, which cannot see the log4j-slf4j2 binding: pin 2.x.
SLF4J_VERSION="${SLF4J_VERSION:-2.0.17}"
CACHE="${TELESUM_CACHE:-$HOME/.cache/telesum}/kafka"
LIBS="$CACHE/libs"
PORT="${KAFKA_PORT:-9092}"
READY_TIMEOUT_S="${KAFKA_READY_TIMEOUT_S:-90}"   # first JVM start on a busy 2-core machine is slow

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() { echo "kafka.sh: $*" >&2; exit 1; }

need_python() {
    command -v python3 >/dev/null || die "python3 not found (the readiness check needs it; apt-get install python3)"
}

need_java() {
    command -v java >/dev/null || die "java not found (Java 17+ needed: apt-get install openjdk-17-jre-headless)"
    local version major
    version="$(java -version 2>&1 | head -n 1)"
    major="$(sed -E 's/.*version "([0-9]+)(\.[0-9]+)*.*/\1/' <<<"$version")"
    [[ "$major" =~ ^[0-9]+$ ]] || die "cannot read the Java version from: $version"
    (( major >= 17 )) || die "Java $major found ($version); Kafka $KAFKA_VERSION needs Java 17 or newer"
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

parse_port() {
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --port) PORT="$2"; shift 2 ;;
            --port=*) PORT="${1#--port=}"; shift ;;
            *) die "unknown option: $1" ;;
        esac
    done
    [[ "$PORT" =~ ^[0-9]+$ ]] || die "port must be a number, got '$PORT'"
    CONTROLLER_PORT=$((PORT + 1))
    STATE="${KAFKA_STATE_DIR:-$CACHE/run-$PORT}"
    PIDFILE="$STATE/kafka.pid"
    LOGFILE="$STATE/kafka.log"
}

fetch() {
    if [[ "$(cat "$LIBS/.complete" 2>/dev/null)" == "$KAFKA_VERSION $LOG4J_VERSION $SLF4J_VERSION" ]]; then
        echo "kafka.sh: jars already in $LIBS"
        return 0
    fi
    rm -rf "$LIBS"
    command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
    need_java
    local work
    work="$(mktemp -d)"
    cat >"$work/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>telesum</groupId><artifactId>kafka-broker-jars</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>$SLF4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId><version>$LOG4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$LOG4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>$LOG4J_VERSION</version></dependency>
  </dependencies>
</project>
EOF
    mkdir -p "$LIBS"
    echo "kafka.sh: fetching kafka_2.13 $KAFKA_VERSION and log4j $LOG4J_VERSION into $LIBS"
    (cd "$work" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$LIBS") \
        || die "mvn could not fetch the broker jars from Maven Central (offline? a proxy? see the output above)"
    rm -rf "$work"
    ls "$LIBS"/kafka_2.13-*.jar >/dev/null 2>&1 || die "fetch finished but no kafka_2.13 jar in $LIBS"
    echo "$KAFKA_VERSION $LOG4J_VERSION $SLF4J_VERSION" >"$LIBS/.complete"
}

is_running() {
    [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

wait_ready() {
    # Metadata, not just an open port: the broker accepts connections before it can serve clients.
    python3 "$HERE/kafka_ready.py" 127.0.0.1 "$PORT" --timeout "$READY_TIMEOUT_S" --pid "$(cat "$PIDFILE")"
}

start() {
    if is_running; then
        echo "kafka.sh: already running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"
        return 0
    fi
    need_python
    fetch >/dev/null
    need_java
    local p
    for p in "$PORT" "$CONTROLLER_PORT"; do
        if port_in_use "$p"; then
            die "port $p is already in use by another process (not a broker this script started in $STATE);" \
                "stop it or pick another port with --port N or KAFKA_PORT (the controller uses port + 1)"
        fi
    done
    mkdir -p "$STATE"
    local props="$STATE/server.properties" log4j="$STATE/log4j2.properties"
    cat >"$props" <<EOF
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
log.dirs=$STATE/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# Worker tests send 5 MB records: allow 16 MB per message and per fetch.
message.max.bytes=16777216
replica.fetch.max.bytes=16777216
socket.request.max.bytes=104857600
auto.create.topics.enable=true
EOF
    cat >"$log4j" <<EOF
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $STATE/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
EOF
    if [[ ! -f "$STATE/data/meta.properties" ]]; then
        # --cluster-id=ID, not "-t ID": an id may begin with "-", which the tool would read as an option.
        java -cp "$LIBS/*" kafka.tools.StorageTool format --cluster-id="${KAFKA_CLUSTER_ID:-$(new_cluster_ids 1)}" \
            -c "$props" >"$STATE/format.log" 2>&1 \
            || { cat "$STATE/format.log" >&2; die "storage format failed"; }
    fi
    # Small heap: this broker serves tests, not production traffic.
    nohup java -Xms256m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$log4j" -cp "$LIBS/*" kafka.Kafka "$props" >"$LOGFILE" 2>&1 &
    echo $! >"$PIDFILE"
    if ! wait_ready; then
        echo "--- last lines of $LOGFILE and $STATE/server.log ---" >&2
        tail -n 30 "$LOGFILE" "$STATE/server.log" >&2 2>/dev/null || true
        stop_quiet
        die "broker did not become ready on 127.0.0.1:$PORT within ${READY_TIMEOUT_S}s (the reason is above;" \
            "KAFKA_READY_TIMEOUT_S waits longer)"
    fi
    echo "kafka.sh: running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"), log $LOGFILE)"
}

new_cluster_ids() {
    # KRaft wants a base64url-encoded 16-byte UUID. Like Kafka's own Uuid.randomUuid(), never one that
    # begins with "-" (1 in 64 would): command-line tools read such an id as an option.
    python3 - "$1" <<'EOF'
import base64, sys, uuid
count = int(sys.argv[1])
while count:
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not cluster_id.startswith("-"):
        print(cluster_id)
        count -= 1
EOF
}

stop_quiet() {
    is_running || { rm -f "$PIDFILE"; return 0; }
    local pid
    pid="$(cat "$PIDFILE")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do  # controlled shutdown normally takes a few seconds
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
}

stop() {
    if ! is_running; then
        echo "kafka.sh: not running on port $PORT"
        rm -f "$PIDFILE"
        return 0
    fi
    stop_quiet
    echo "kafka.sh: stopped (port $PORT)"
}

status() {
    if is_running; then
        echo "127.0.0.1:$PORT"
        return 0
    fi
    echo "kafka.sh: not running on port $PORT" >&2
    return 1
}

cmd="${1:-}"
shift || true
case "$cmd" in
    fetch) fetch ;;
    start) parse_port "$@"; start ;;
    stop) parse_port "$@"; stop ;;
    status) parse_port "$@"; status ;;
    ready) parse_port "$@"; need_python; python3 "$HERE/kafka_ready.py" 127.0.0.1 "$PORT" ;;
    cluster-id) need_python; count="${1:-1}"
        [[ "$count" =~ ^[0-9]+$ ]] || die "count must be a number, got '$count'"
        new_cluster_ids "$count" ;;
    wipe) parse_port "$@"; stop_quiet; rm -rf "$STATE"; echo "kafka.sh: wiped $STATE" ;;
    *) die "usage: $0 {fetch|start|stop|status|ready|wipe|cluster-id} [--port N]" ;;
esac
