"""Kafka I/O in two layers: `clients` owns the kafka-python clients; `loop`, `records` and
`offsets` are the domain (decode, dead letters, at-least-once commits); `service` is `telesum worker`."""
