"""Kafka I/O in two layers: `clients` owns the kafka-python clients; `loop`, `records`, `publish` and
`offsets` are the domain (decode, dead letters, at-least-once commits). `telesum worker` itself is
`worker.commands.worker`; this section's settings are `worker.settings.kafka`."""
