"""The Kafka fixture's choice of broker (tests/conftest.py): a container when it can start one, else a
one-line reason to fall back on, which CI turns into a failure."""

from __future__ import annotations

import pytest

from tests import conftest


@pytest.fixture
def no_engine(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")


def test_broker_fixture_without_an_engine_falls_back_with_a_one_line_reason(no_engine, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    container, reason = conftest._container_or_reason()
    assert container is None
    assert reason.startswith("no Docker engine answers") and "\n" not in reason


def test_broker_fixture_without_an_engine_fails_in_ci(no_engine, monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI runs the Kafka tests in a container, but no Docker engine"):
        conftest._container_or_reason()


def test_broker_fixture_with_the_image_not_built_says_how_to_build_it(monkeypatch):
    if conftest.docker_engine_problem() is not None:
        pytest.skip(conftest.docker_engine_problem())
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(conftest, "TEST_KAFKA_IMAGE", "telesum/kafka:never-built")
    container, reason = conftest._container_or_reason()
    assert container is None
    assert reason == "image telesum/kafka:never-built is not built (scripts/docker_images.sh kafka)"
