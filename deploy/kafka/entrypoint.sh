#!/bin/bash
# Writes server.properties from the environment the way the official apache/kafka image does
# (KAFKA_FOO_BAR=v -> foo.bar=v; "__" -> "_", "___" -> "-"), formats the log directory once with
# CLUSTER_ID, and runs the broker in the foreground with its log on stdout.
set -euo pipefail

CONFIG=/opt/kafka/config/server.properties
LOG4J=/opt/kafka/config/log4j2.properties

if [[ -z "${KAFKA_PROCESS_ROLES:-}" ]]; then
    # No settings given: the official image's single-node defaults.
    : "${KAFKA_NODE_ID:=1}"
    export KAFKA_NODE_ID KAFKA_PROCESS_ROLES=broker,controller
    : "${KAFKA_LISTENERS:=PLAINTEXT://:9092,CONTROLLER://:9093}"
    : "${KAFKA_ADVERTISED_LISTENERS:=PLAINTEXT://localhost:9092}"
    : "${KAFKA_CONTROLLER_LISTENER_NAMES:=CONTROLLER}"
    : "${KAFKA_LISTENER_SECURITY_PROTOCOL_MAP:=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT}"
    : "${KAFKA_CONTROLLER_QUORUM_VOTERS:=1@localhost:9093}"
    : "${KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR:=1}"
    : "${KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR:=1}"
    : "${KAFKA_TRANSACTION_STATE_LOG_MIN_ISR:=1}"
    : "${KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR:=1}"
    : "${KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR:=1}"
    export KAFKA_LISTENERS KAFKA_ADVERTISED_LISTENERS KAFKA_CONTROLLER_LISTENER_NAMES \
        KAFKA_LISTENER_SECURITY_PROTOCOL_MAP KAFKA_CONTROLLER_QUORUM_VOTERS \
        KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR \
        KAFKA_TRANSACTION_STATE_LOG_MIN_ISR KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR \
        KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR
fi
: "${KAFKA_LOG_DIRS:=/var/lib/kafka/data}"
export KAFKA_LOG_DIRS
# The official image's default cluster id; set CLUSTER_ID for another.
CLUSTER_ID="${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}"

# Settings for the JVM and the image, not broker properties (the official image skips the same).
not_a_property='^KAFKA_(HEAP_OPTS|OPTS|JVM_PERFORMANCE_OPTS|LOG4J_OPTS|JMX_OPTS|GC_LOG_OPTS|VERSION|LOG4J_ROOT_LOGLEVEL|TOOLS_LOG4J_LOGLEVEL|JMX_PORT|JMX_HOSTNAME)$'
: >"$CONFIG"
while IFS= read -r name; do
    [[ "$name" =~ $not_a_property ]] && continue
    key="$(sed -e 's/^KAFKA_//' -e 's/___/-/g' -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g' <<<"$name" | tr '[:upper:]' '[:lower:]')"
    printf '%s=%s\n' "$key" "${!name}" >>"$CONFIG"
done < <(compgen -e | grep '^KAFKA_' | sort)

cat >"$LOG4J" <<LOG4J_EOF
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = ${KAFKA_LOG4J_ROOT_LOGLEVEL:-WARN}
rootLogger.appenderRef.console.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
LOG4J_EOF

if [[ ! -f "$KAFKA_LOG_DIRS/meta.properties" ]]; then
    # --cluster-id=ID: an id may begin with "-", which "-t ID" would read as an option.
    java -Xmx256m -cp '/opt/kafka/libs/*' -Dlog4j2.configurationFile="$LOG4J" kafka.tools.StorageTool format \
        --ignore-formatted --cluster-id="$CLUSTER_ID" -c "$CONFIG"
fi
# shellcheck disable=SC2086 # the *_OPTS variables hold several JVM flags
exec java ${KAFKA_HEAP_OPTS:--Xms256m -Xmx1g} ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC} ${KAFKA_OPTS:-} \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$LOG4J" -cp '/opt/kafka/libs/*' kafka.Kafka "$CONFIG"
