"""`telesum tail`: reads the worker's [kafka] settings (flags over them) and prints what arrives."""

from __future__ import annotations

import argparse

import msgspec
import pytest

from worker.cli import main
from worker.commands.tail import add_arguments, consumer_config
from worker.messages import DeadLetter
from worker.settings.fields import SettingsError


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_topics_and_broker_come_from_the_worker_settings(tmp_path):
    cfg = tmp_path / "telesum.toml"
    cfg.write_text('[kafka]\ndlq_topic = "dlq-from-file"\n')
    env = {"TELESUM_CONFIG": str(cfg), "TELESUM_OUTPUT_TOPIC": "out-from-env", "KAFKA_BOOTSTRAP_SERVERS": "a:1,b:2",
           "KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_USERNAME": "u",
           "KAFKA_SASL_PASSWORD": "p"}
    topic, dlq, config = consumer_config(_args(), env)
    assert (topic, dlq, config["bootstrap_servers"]) == ("out-from-env", "dlq-from-file", ["a:1", "b:2"])
    assert config["security_protocol"] == "SASL_SSL" and config["sasl_plain_password"] == "p"
    topic, dlq, config = consumer_config(_args("--topic", "t", "--dlq-topic", "d", "--bootstrap-servers", "c:3"), env)
    assert (topic, dlq, config["bootstrap_servers"]) == ("t", "d", ["c:3"])


def test_a_bad_setting_is_refused_naming_it():
    with pytest.raises(SettingsError, match="TELESUM_OUTPUT_TOPC"):
        consumer_config(_args(), {"TELESUM_OUTPUT_TOPC": "x"})


@pytest.mark.kafka
def test_tail_prints_dead_letters_and_undecodable_answers(kafka_bootstrap, make_topic, monkeypatch, capsys):
    from kafka import KafkaProducer

    out, dlq = make_topic("out"), make_topic("dlq")
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    dead = DeadLetter(reason="invalid_json", message="line 1: not JSON", original=b"{oops", topic="in",
                      partition=0, offset=7)
    producer.send(dlq, msgspec.json.encode(dead))
    garbage = b"\x00not a summary"
    producer.send(out, garbage)
    producer.flush()
    producer.close()
    monkeypatch.setenv("TELESUM_OUTPUT_TOPIC", out)
    monkeypatch.setenv("TELESUM_DLQ_TOPIC", dlq)
    assert main(["tail", "--bootstrap-servers", kafka_bootstrap, "--count", "2", "--timeout", "60"]) == 0
    printed = capsys.readouterr().out
    assert "[dead letter] invalid_json: line 1: not JSON (from in/0@7)" in printed
    assert f"[{out}] undecodable message of {len(garbage)} bytes" in printed
