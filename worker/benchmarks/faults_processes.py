"""The processes `telesum bench faults` drives: `telesum worker` subprocesses it kills, restarts and
stops; the run's topics; the tokenizer the tiny model's workers load."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path


class WorkerProcess:
    """A `telesum worker` subprocess (tiny model on CPU) writing its log to `log_path`."""

    def __init__(self, bootstrap: str, topics: tuple[str, str, str], group: str, worker_id: str,
                 tokenizer: Path, log_path: Path, guarantee: str, extra: dict[str, str], *,
                 defaults: bool = False) -> None:
        """defaults: the worker as users start it (the embedded model, every other setting at its
        default) instead of the tiny random-weight model with short group timeouts."""
        inp, out, dlq = topics
        args = {"bootstrap-servers": bootstrap, "input-topic": inp, "output-topic": out, "dlq-topic": dlq,
                "group-id": group, "worker-id": worker_id, "processing-guarantee": guarantee}
        if not defaults:
            args |= {"model": "tiny", "tokenizer": str(tokenizer), "device": "cpu", "max-new-tokens": "4",
                     "token-budget": "4096", "max-context": "2048", "session-timeout-ms": "6000",
                     "heartbeat-interval-ms": "500", "commit-interval-s": "0.2", "drain-timeout-s": "30"}
        args |= extra
        self.args = args
        cmd = [sys.executable, "-m", "worker.cli", "worker"] + [x for k, v in args.items() for x in (f"--{k}", v)]
        self.log_path = log_path
        self._log = open(log_path, "ab")
        env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._log.close()

    def wait_started(self, timeout_s: float = 120, marker: bytes = b"telesum worker: model") -> None:
        """Until the worker logged `marker`: by default its start-up banner (its signal handlers are
        installed by then); b"assigned [(" once it holds partitions."""
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            if marker in self.log_path.read_bytes():
                return
            time.sleep(0.1)

    def stop(self, timeout_s: float = 120) -> int:
        self.wait_started()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            self._log.close()


def make_topics(bootstrap: str) -> tuple[str, str, str]:
    from kafka.admin import KafkaAdminClient, NewTopic

    run = uuid.uuid4().hex[:10]
    names = (f"faults-in-{run}", f"faults-out-{run}", f"faults-dlq-{run}")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(t, 3 if i == 0 else 1, 1, topic_configs={"max.message.bytes": str(64 << 20)})
                             for i, t in enumerate(names)])
    finally:
        admin.close()
    return names


def save_tokenizer(folder: Path) -> Path:
    from worker.model.loader import embedded_model_path
    from worker.model.tokenizer import load_tokenizer

    load_tokenizer(embedded_model_path()).save_pretrained(folder)
    return folder
