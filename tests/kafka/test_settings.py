"""WorkerSettings: flags over environment over defaults; bad values raise SettingsError naming them."""

from __future__ import annotations

import argparse

import pytest

from worker.kafka.settings import SettingsError, WorkerSettings, add_arguments


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_settings_flag_beats_env_beats_default():
    env = {"TELESUM_INPUT_TOPIC": "from-env", "KAFKA_BOOTSTRAP_SERVERS": "a:1,b:2", "TELESUM_MAX_IN_FLIGHT": "7"}
    s = WorkerSettings.from_sources(_args("--input-topic", "from-flag"), env)
    assert s.input_topic == "from-flag"
    assert s.max_in_flight == 7
    assert s.output_topic == "summaries"
    assert s.security_config["bootstrap_servers"] == ["a:1", "b:2"]


def test_settings_sasl_ssl_pass_through():
    env = {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
           "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "p", "KAFKA_SSL_CAFILE": "/ca.pem",
           "KAFKA_SSL_CHECK_HOSTNAME": "false"}
    cfg = WorkerSettings.from_sources(None, env).security_config
    assert cfg["security_protocol"] == "SASL_SSL" and cfg["sasl_mechanism"] == "SCRAM-SHA-512"
    assert cfg["sasl_plain_username"] == "u" and cfg["sasl_plain_password"] == "p"
    assert cfg["ssl_cafile"] == "/ca.pem" and cfg["ssl_check_hostname"] is False


@pytest.mark.parametrize("env, match", [
    ({"TELESUM_MAX_IN_FLIGHT": "many"}, "TELESUM_MAX_IN_FLIGHT must be a int"),
    ({"TELESUM_MAX_IN_FLIGHT": "0"}, "--max-in-flight"),
    ({"TELESUM_OUTPUT_TOPIC": "telemetry"}, "three different topics"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "needs --sasl-mechanism"),
    ({"KAFKA_SECURITY_PROTOCOL": "TLS"}, "must be one of"),
    ({"KAFKA_SASL_MECHANISM": "PLAIN"}, "username and a password"),
    ({"KAFKA_SSL_CHECK_HOSTNAME": "maybe"}, "true or false"),
    ({"TELESUM_DRAIN_TIMEOUT_S": "-1"}, "--drain-timeout-s"),
])
def test_settings_bad_value_raises_naming_it(env, match):
    with pytest.raises(SettingsError, match=match):
        WorkerSettings.from_sources(None, env)


def test_settings_frozen_after_construction():
    s = WorkerSettings()
    with pytest.raises(AttributeError):
        s.input_topic = "other"  # type: ignore[misc]


def test_settings_repr_hides_sasl_password():
    s = WorkerSettings(sasl_mechanism="PLAIN", sasl_plain_username="u", sasl_plain_password="hunter2")
    assert "hunter2" not in repr(s)
