"""The delivery and work-cap settings: defaults, environment, round trip and errors naming them."""

from __future__ import annotations

import pytest

from worker.settings.fields import SettingsError
from worker.settings.load import load_settings, to_environment


def test_settings_delivery_and_work_cap_defaults_and_env():
    default = load_settings(env={}).settings
    assert default.kafka.processing_guarantee == "at-least-once" and not default.kafka.exactly_once
    assert (default.engine.max_record_tokens, default.engine.over_cap) == (None, "select")  # auto: by device
    s = load_settings(env={"TELESUM_PROCESSING_GUARANTEE": "exactly-once", "TELESUM_GROUP_ID": "noc",
                           "TELESUM_WORKER_ID": "gpu-host-3", "TELESUM_OVER_CAP": "dead_letter",
                           "TELESUM_MAX_RECORD_TOKENS": "0"}).settings
    assert s.kafka.exactly_once and s.kafka.transactional_id == "telesum.noc.gpu-host-3"
    assert s.engine.over_cap == "dead_letter" and s.engine.max_record_tokens == 0
    assert load_settings(env=to_environment(s)).settings == s


@pytest.mark.parametrize("env, match", [
    ({"TELESUM_PROCESSING_GUARANTEE": "at-most-once"}, "TELESUM_PROCESSING_GUARANTEE"),
    ({"TELESUM_OVER_CAP": "truncate"}, "TELESUM_OVER_CAP"),
    ({"TELESUM_MAX_RECORD_TOKENS": "100", "TELESUM_MAX_CONTEXT": "2048"}, "TELESUM_MAX_RECORD_TOKENS"),
    ({"TELESUM_TRANSACTION_MAX_RECORDS": "0"}, "TELESUM_TRANSACTION_MAX_RECORDS"),
])
def test_settings_bad_delivery_value_raises_naming_it(env, match):
    with pytest.raises(SettingsError, match=match):
        load_settings(env=env)
