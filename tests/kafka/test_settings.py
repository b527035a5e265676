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


def test_settings_delivery_and_work_cap_defaults_and_env():
    default = WorkerSettings.from_sources(env={})
    assert default.processing_guarantee == "at-least-once" and not default.exactly_once
    assert (default.max_record_tokens, default.over_cap) == (131072, "select")
    s = WorkerSettings.from_sources(env={"TELESUM_PROCESSING_GUARANTEE": "exactly-once", "TELESUM_GROUP_ID": "noc",
                                         "TELESUM_WORKER_ID": "gpu-host-3", "TELESUM_OVER_CAP": "dead_letter",
                                         "TELESUM_MAX_RECORD_TOKENS": "0"})
    assert s.exactly_once and s.transactional_id == "telesum.noc.gpu-host-3"
    assert s.over_cap == "dead_letter" and s.max_record_tokens == 0
    assert WorkerSettings.from_sources(env=s.to_environment()) == s


@pytest.mark.parametrize("env, match", [
    ({"TELESUM_PROCESSING_GUARANTEE": "at-most-once"}, "TELESUM_PROCESSING_GUARANTEE"),
    ({"TELESUM_OVER_CAP": "truncate"}, "TELESUM_OVER_CAP"),
    ({"TELESUM_MAX_RECORD_TOKENS": "100", "TELESUM_MAX_CONTEXT": "2048"}, "TELESUM_MAX_RECORD_TOKENS"),
    ({"TELESUM_TRANSACTION_MAX_RECORDS": "0"}, "TELESUM_TRANSACTION_MAX_RECORDS"),
])
def test_settings_bad_delivery_value_raises_naming_it(env, match):
    with pytest.raises(SettingsError, match=match):
        WorkerSettings.from_sources(env=env)
