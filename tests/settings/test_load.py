"""Settings: flag > env > TOML file > default, converted by msgspec; unknown or ill-typed settings
fail naming them and their source; secrets never shown."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from worker.settings.fields import SettingsError
from worker.settings.load import add_arguments, from_values, load_settings, to_environment
from worker.settings.sections import Settings, all_fields


def _args(*argv: str, sections=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser, sections)
    return parser.parse_args(list(argv))


def _toml(tmp_path, text: str):
    path = tmp_path / "telesum.toml"
    path.write_text(text)
    return path


def test_settings_flag_beats_env_beats_file_beats_default(tmp_path):
    cfg = _toml(tmp_path, '[kafka]\ninput_topic = "from-file"\noutput_topic = "out-file"\ngroup_id = "g-file"\n'
                          '[engine]\ntoken_budget = 1024\n')
    env = {"TELESUM_INPUT_TOPIC": "from-env", "TELESUM_OUTPUT_TOPIC": "out-env", "TELESUM_CONFIG": str(cfg),
           "KAFKA_BOOTSTRAP_SERVERS": "a:1,b:2", "TELESUM_MAX_IN_FLIGHT": "7"}
    loaded = load_settings(_args("--input-topic", "from-flag"), env)
    s = loaded.settings
    assert (s.kafka.input_topic, s.kafka.output_topic, s.kafka.group_id) == ("from-flag", "out-env", "g-file")
    assert s.kafka.max_in_flight == 7 and s.engine.token_budget == 1024 and s.kafka.dlq_topic == "telemetry.dlq"
    assert loaded.source("kafka.input_topic") == "flag --input-topic"
    assert loaded.source("kafka.output_topic") == "env TELESUM_OUTPUT_TOPIC"
    assert loaded.source("kafka.group_id") == f"file {cfg}"
    assert loaded.source("kafka.dlq_topic") == "default" and not loaded.is_set("engine.max_seqs_per_bin")
    assert s.kafka.security_config["bootstrap_servers"] == ["a:1", "b:2"]


def test_settings_config_flag_beats_config_env(tmp_path):
    a = _toml(tmp_path, '[engine]\nmax_new_tokens = 11\n')
    b = tmp_path / "b.toml"
    b.write_text('[engine]\nmax_new_tokens = 22\n')
    assert load_settings(_args("--config", str(b)), {"TELESUM_CONFIG": str(a)}).settings.engine.max_new_tokens == 22


def test_settings_values_are_converted_by_type():
    s = load_settings(None, {"TELESUM_COMMIT_INTERVAL_S": "0.25", "KAFKA_SSL_CHECK_HOSTNAME": "no",
                             "TELESUM_TOKEN_BUDGET": "4096", "TELESUM_TOKENIZER": ""}).settings
    assert s.kafka.commit_interval_s == 0.25 and s.kafka.ssl_check_hostname is False
    assert s.engine.token_budget == 4096 and s.engine.tokenizer is None


def test_settings_sasl_ssl_pass_through():
    env = {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
           "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "p", "KAFKA_SSL_CAFILE": "/ca.pem",
           "KAFKA_SSL_CHECK_HOSTNAME": "false"}
    cfg = load_settings(None, env).settings.kafka.security_config
    assert cfg["security_protocol"] == "SASL_SSL" and cfg["sasl_mechanism"] == "SCRAM-SHA-512"
    assert cfg["sasl_plain_username"] == "u" and cfg["sasl_plain_password"] == "p"
    assert cfg["ssl_cafile"] == "/ca.pem" and cfg["ssl_check_hostname"] is False


@pytest.mark.parametrize("env, match", [
    ({"TELESUM_MAX_IN_FLIGHT": "many"}, r"kafka.max_in_flight \(--max-in-flight, TELESUM_MAX_IN_FLIGHT\): "
                                        r"Expected `int \| null`.*'many' from env TELESUM_MAX_IN_FLIGHT"),
    ({"TELESUM_MAX_IN_FLIGHT": "0"}, r"--max-in-flight.*>= 1"),
    ({"TELESUM_TOKEN_BUDGET": "-5"}, r"engine.token_budget .*>= 1.*from env TELESUM_TOKEN_BUDGET"),
    ({"TELESUM_TOP_P": "1.5"}, r"engine.top_p"),
    ({"TELESUM_DEVICE": "gpu"}, r"engine.device .*'gpu'"),
    ({"TELESUM_OUTPUT_TOPIC": "telemetry"}, "three different topics"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "needs --sasl-mechanism"),
    ({"KAFKA_SECURITY_PROTOCOL": "TLS"}, "Invalid enum value 'TLS'"),
    ({"KAFKA_SASL_MECHANISM": "PLAIN"}, "username and a password"),
    ({"KAFKA_SSL_CHECK_HOSTNAME": "maybe"}, "true or false"),
    ({"TELESUM_DRAIN_TIMEOUT_S": "-1"}, "--drain-timeout-s"),
    ({"TELESUM_LOG_FORMAT": "xml"}, r"log.format \(--log-format"),
    ({"TELESUM_TOKEN_BUDGT": "5"}, r"unknown setting in the environment: TELESUM_TOKEN_BUDGT "
                                   r"\(did you mean TELESUM_TOKEN_BUDGET\?\)"),
])
def test_settings_bad_env_value_raises_naming_it(env, match):
    with pytest.raises(SettingsError, match=match):
        load_settings(None, env)


@pytest.mark.parametrize("text, match", [
    ('[engine]\ntokn_budget = 5\n', r"unknown setting 'tokn_budget' in \[engine\] \(did you mean 'token_budget'\?\)"),
    ('[engin]\nmodel = "tiny"\n', r"unknown section \[engin\]"),
    ('[engine]\nmax_new_tokens = "lots"\n', r"engine.max_new_tokens .*'lots' from file"),
    ('[kafka\n', "not valid TOML"),
])
def test_settings_bad_file_raises_naming_it(tmp_path, text, match):
    with pytest.raises(SettingsError, match=match):
        load_settings(_args("--config", str(_toml(tmp_path, text))), {})


def test_settings_missing_file_raises(tmp_path):
    with pytest.raises(SettingsError, match="does not exist"):
        load_settings(None, {"TELESUM_CONFIG": str(tmp_path / "nope.toml")})


def test_settings_bad_flag_raises_naming_flag_source():
    with pytest.raises(SettingsError, match=r"from flag --max-new-tokens"):
        load_settings(_args("--max-new-tokens", "zero"), {})


def test_settings_only_the_commands_sections_have_flags():
    args = _args("--model", "tiny", sections=("engine", "log"))
    assert load_settings(args, {}, sections=("engine", "log")).settings.engine.model == "tiny"
    with pytest.raises(SystemExit):
        _args("--input-topic", "x", sections=("engine", "log"))


def test_settings_frozen_after_construction():
    s = load_settings(None, {}).settings
    with pytest.raises(AttributeError):
        s.kafka.input_topic = "other"  # type: ignore[misc]


def test_settings_repr_hides_secrets():
    s = from_values({"kafka.sasl_mechanism": "PLAIN", "kafka.sasl_plain_username": "u",
                     "kafka.sasl_plain_password": "hunter2", "http.status_token": "tok-s3cret"}).settings
    assert "hunter2" not in repr(s) and "tok-s3cret" not in repr(s) and "***" in repr(s.kafka)


def test_settings_environment_round_trip_equal():
    s = from_values({"engine.model": "tiny", "engine.token_budget": 512, "kafka.ssl_check_hostname": False,
                     "http.metrics_port": 9999, "log.format": "json", "kafka.commit_interval_s": 0.2}).settings
    assert load_settings(None, to_environment(s)).settings == s


def test_settings_every_field_has_unique_env_and_flag():
    fields = all_fields()
    assert len({f.env for f in fields}) == len(fields) and len({f.flag for f in fields}) == len(fields)
    assert isinstance(from_values({}).settings, Settings)


def test_config_command_shows_values_sources_and_masks_secrets(tmp_path):
    cfg = _toml(tmp_path, '[kafka]\nsasl_mechanism = "PLAIN"\nsasl_plain_username = "u"\n[engine]\nseed = 3\n')
    env = {"PATH": "/usr/bin:/bin", "TELESUM_CONFIG": str(cfg), "KAFKA_SASL_PASSWORD": "hunter2",
           "TELESUM_STATUS_TOKEN": "tok-s3cret"}
    out = subprocess.run([sys.executable, "-m", "worker.cli", "config", "--json", "--token-budget", "2048"],
                         env=env, capture_output=True, text=True, check=True)
    assert "hunter2" not in out.stdout + out.stderr and "tok-s3cret" not in out.stdout + out.stderr
    rows = {r["path"]: r for r in json.loads(out.stdout)}
    assert rows["kafka.sasl_plain_password"]["value"] == "***"
    assert rows["kafka.sasl_plain_password"]["source"] == "env KAFKA_SASL_PASSWORD"
    assert rows["engine.seed"] == {**rows["engine.seed"], "value": "3", "source": f"file {cfg}"}
    assert rows["engine.token_budget"]["source"] == "flag --token-budget"
    assert rows["engine.max_seqs_per_bin"]["value"] == "auto"
    bad = subprocess.run([sys.executable, "-m", "worker.cli", "config", "--token-budget", "big"], env=env,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "engine.token_budget (--token-budget, TELESUM_TOKEN_BUDGET)" in bad.stderr
