"""`telesum worker`: load the model, start the summarizer, serve the Kafka loop until SIGTERM/SIGINT.
With --gpus, supervise one such worker process per GPU instead (`supervisor.py`)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from worker.kafka import settings as settings_mod
from worker.kafka import supervisor
from worker.kafka.settings import SettingsError, WorkerSettings
from worker.metrics import WorkerMetrics, gpu_label

log = logging.getLogger(__name__)

# Exit codes of `telesum worker` (also in the README).
EXIT_DRAINED = 0          # every in-flight record answered and committed
EXIT_SETTINGS = 2         # a setting is invalid
EXIT_DEADLINE = 3         # the drain deadline hit with work in flight: its new owner replays it
EXIT_FENCED = 4           # exactly-once: another worker with this transactional id took over


def add_arguments(parser: argparse.ArgumentParser) -> None:
    settings_mod.add_arguments(parser)


def resolve_device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load(settings: WorkerSettings):
    """The LoadedModel that `settings.model` names: 'embedded', 'tiny' (random weights) or a path."""
    from worker.model.config import ModelConfig
    from worker.model.loader import embedded_model_path, load_model, random_model
    from worker.model.tokenizer import load_tokenizer

    device = resolve_device(settings.device)
    if settings.model == "tiny":
        # Random weights for tests and speed runs; the tokenizer decides the vocabulary.
        tok = load_tokenizer(settings.tokenizer or embedded_model_path())
        cfg = ModelConfig.tiny(vocab_size=len(tok), max_position_embeddings=settings.max_context or 2048,
                               bos_token_id=tok.bos_token_id, eos_token_ids=(tok.eos_token_id,))
        loaded = random_model(cfg, device=device, name="tiny-random")
        loaded.tokenizer = tok
        return loaded
    source = embedded_model_path() if settings.model == "embedded" else settings.model
    return load_model(source, device=device, tokenizer=settings.tokenizer or True)


def build_summarizer(settings: WorkerSettings, loaded):
    from worker.summarizer import Summarizer

    return Summarizer(loaded, token_budget=settings.token_budget, max_new_tokens=settings.max_new_tokens,
                      max_context=settings.max_context, max_record_tokens=settings.max_record_tokens or None,
                      over_cap=settings.over_cap)


def install_signal_handlers(stop: threading.Event) -> None:
    """SIGTERM/SIGINT set `stop`; a second signal exits at once. Only from the main thread."""

    def handler(signum, _frame) -> None:
        if stop.is_set():
            raise SystemExit(128 + signum)
        log.info("%s: draining (again to exit at once)", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def start_metrics(settings: WorkerSettings, device) -> WorkerMetrics:
    """This process's metrics, labelled by GPU and worker id; served when settings.metrics_port > 0."""
    metrics = WorkerMetrics(gpu_label(device), settings.worker_name)
    if settings.metrics_port:
        metrics.serve(settings.metrics_port)
        log.info("metrics: http://0.0.0.0:%d/metrics (gpu=%s, worker=%s)", settings.metrics_port,
                 metrics.labels["gpu"], metrics.labels["worker"])
    return metrics


def run(args: argparse.Namespace) -> int:
    from worker.kafka.loop import KafkaWorker, ProducerFenced

    try:
        settings = WorkerSettings.from_sources(args)
        if settings.gpus and settings.gpus.strip():
            return supervisor.run_supervised(settings, verbose=getattr(args, "verbose", False))
    except SettingsError as exc:  # an operator's mistake: the message, not a traceback
        log.error("%s", exc)
        return EXIT_SETTINGS
    if not getattr(args, "verbose", False):  # kafka-python logs every connection at INFO
        logging.getLogger("kafka").setLevel(logging.WARNING)
    supervisor.follow_supervisor()
    stop = threading.Event()
    install_signal_handlers(stop)
    loaded = load(settings)
    metrics = start_metrics(settings, next(loaded.model.parameters()).device)
    summarizer = build_summarizer(settings, loaded)
    summarizer.start()
    log.info("worker %s: %s -> %s (dead letters: %s), group %s, model %s", settings.worker_name,
             settings.input_topic, settings.output_topic, settings.dlq_topic, settings.group_id, loaded.name)
    worker = KafkaWorker(settings, metrics.watch_summarizer(summarizer), model_name=loaded.name,
                         observer=metrics.observe_loop)
    try:
        stats = worker.run(stop)
        code = EXIT_DRAINED if stats.drained_cleanly else EXIT_DEADLINE
        log.info("worker stopped: %s", stats)
    except ProducerFenced as exc:
        log.error("%s; stopping (the other worker owns this transactional id's work now)", exc)
        code = EXIT_FENCED
    finally:
        summarizer.close(drain=False, timeout=5.0)
    if summarizer.threads_alive():
        # The GPU loop is still inside one model step, or a long record is still being planned
        # (native code, GIL released): ending the interpreter now would kill that thread in a
        # frame that cannot unwind and abort the process. Its records are uncommitted and replayed
        # by their next owner; leave without finalizing.
        log.warning("the GPU loop or a planning thread is still busy at exit; leaving it (exit code %d)", code)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
