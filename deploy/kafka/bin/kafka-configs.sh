#!/bin/bash
# The official image's kafka-configs.sh: compose.yaml's health check describes the broker with it.
exec java -Xmx128m -cp '/opt/kafka/libs/*' -Dlog4j2.level=ERROR kafka.admin.ConfigCommand "$@"
