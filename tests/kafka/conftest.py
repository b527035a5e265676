"""The Kafka fixtures (`kafka_bootstrap`, `make_topic`) live in tests/conftest.py, shared with the
end-to-end benchmark test; tests import their helpers as `from tests.kafka.helpers import ...`."""

import pytest


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    """SmolLM2's tokenizer saved as a folder once: a worker loads it in about a second."""
    from worker.model.loader import embedded_model_path
    from worker.model.tokenizer import load_tokenizer

    folder = tmp_path_factory.mktemp("tokenizer")
    load_tokenizer(embedded_model_path()).save_pretrained(folder)
    return folder
