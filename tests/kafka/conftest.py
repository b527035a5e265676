"""The Kafka fixtures (`kafka_bootstrap`, `make_topic`) live in tests/conftest.py, shared with the
end-to-end benchmark test; tests here import their helpers from `helpers.py`."""
