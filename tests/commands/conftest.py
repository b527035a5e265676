"""The worker-process fixtures the supervisor's tests share with tests/kafka."""

from tests.kafka.conftest import tokenizer_dir  # noqa: F401
