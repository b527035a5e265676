"""`telesum worker`: load the model, start the summarizer, serve the Kafka loop until SIGTERM/SIGINT.
With --gpus, supervise one such worker process per GPU instead (`supervisor.py`).

Order of start-up: settings (fail fast, naming a bad one), logging, the HTTP port (so /readyz
answers "not ready" while the model loads), the model and its budgets, the banner, the loop.
With TELESUM_INCIDENT_TOPIC, the topology and rules are read before the model (a bad file fails fast)
and the incident loop runs in a thread beside the loop (`incident_thread.py`), asking the same
Summarizer for each new incident's text (TELESUM_INCIDENT_FOLLOW_UPS); with
TELESUM_INCIDENT_ONLY it runs alone and no model is loaded.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from worker.commands import supervisor
from worker.commands.exit_codes import (EXIT_DEADLINE, EXIT_DRAINED, EXIT_FENCED, EXIT_MISSING_CODEC,
                                        EXIT_SETTINGS, EXIT_UNDECODABLE)
from worker.commands.incident_thread import IncidentThread, build_incident_loop
from worker.commands.startup import exit_code_of, read_settings, start_summarizer
from worker.kafka.codecs import MissingCodecError, check_codecs
from worker.kafka.undecodable import UndecodableBatch
from worker.metrics import WorkerMetrics, gpu_label
from worker.ops.health import Health, tcp_reachable
from worker.settings.fields import SettingsError
from worker.settings.load import LoadedSettings
from worker.settings.load import add_arguments as add_setting_arguments

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_setting_arguments(parser)


def install_signal_handlers(stop: threading.Event) -> None:
    """SIGTERM/SIGINT set `stop`; a second signal exits at once. Only from the main thread."""

    def handler(signum, _frame) -> None:
        if stop.is_set():
            raise SystemExit(128 + signum)
        log.info("%s: draining (again to exit at once)", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


class _Ops:
    """This process's metrics, health, status page and their HTTP server."""

    def __init__(self, loaded: LoadedSettings, stop: threading.Event) -> None:
        s = loaded.settings
        self.loaded = loaded
        self.health = Health(lambda: tcp_reachable(s.kafka.bootstrap_servers),
                             stall_after_s=s.kafka.max_poll_interval_ms / 1000, draining=stop.is_set)
        self.metrics: WorkerMetrics | None = None
        self.board = None
        self.server = None

    def start_http(self, device_label: str) -> None:
        from worker.ops.server import OpsServer

        s = self.loaded.settings
        self.metrics = WorkerMetrics(device_label, s.kafka.worker_name)
        if not s.http.metrics_port:
            return
        self.server = OpsServer(self.metrics.registry, health=self.health, token=s.http.status_token)
        port = self.server.start(s.http.metrics_port, s.http.bind_address)
        log.info("http: http://%s:%d/ (/metrics /healthz /readyz%s; gpu=%s, worker=%s)", s.http.bind_address, port,
                 " /status" if s.http.status_page else "", device_label, s.kafka.worker_name)

    def start_status(self, about: dict) -> None:
        from worker.ops.status import StatusBoard
        from worker.settings.show import settings_rows

        if self.server is not None and self.loaded.settings.http.status_page:
            self.board = StatusBoard(self.metrics, about, settings_rows(self.loaded), self.health.readiness)
            self.server.status = self.board

    def observe_incidents(self, stats) -> None:
        """The incident loop's observer: its `stats()` after every step; alone (TELESUM_INCIDENT_ONLY) it
        is also the loop health watches."""
        if self.metrics is not None:
            self.metrics.observe_incidents(stats)
        if self.loaded.settings.incidents.only:
            self.health.observe(stats.assigned, stats.consumer)
        if self.board is not None:
            self.board.observe_incidents(stats)

    def observer(self, summarizer):
        """The summarizing loop's one observer: metrics, health and the status page from its and the
        Summarizer's stats()."""
        from worker.ops.observer import Observer

        return Observer(self.metrics, self.health, summarizer, self.board)


def _serve_incidents_only(incidents, ops, stop: threading.Event) -> int:
    """TELESUM_INCIDENT_ONLY: the incident loop alone, in this thread; no model is loaded."""
    from worker.commands.incident_thread import exit_code
    from worker.kafka.publish import ProducerFenced

    s = ops.loaded.settings
    ops.start_status({"worker": s.kafka.worker_name, "model": "none (incidents only)", "group": s.kafka.group_id,
                      "topics": f"{s.kafka.input_topic} -> {s.incidents.topic} (incidents only)"})
    ops.health.set_model_loaded()
    log.info("worker serving incidents only: %s -> %s", s.kafka.input_topic, s.incidents.topic)
    try:
        stats = incidents.run(stop)
        log.info("worker stopped: %s", stats)
        return exit_code(incidents, stats)
    except ProducerFenced as exc:
        log.error("%s; stopping (the other worker owns this transactional id's work now)", exc)
        return exit_code(incidents, error=exc)
    except UndecodableBatch as exc:
        log.error("%s; stopping (on_undecodable_batch=exit), the other partitions' work drained", exc)
        return exit_code(incidents, error=exc)
    finally:
        if ops.server is not None:
            ops.server.close()


def _device_label(engine) -> str:
    """The `gpu` label before the model is loaded (CUDA_VISIBLE_DEVICES decides it for a GPU)."""
    from worker.commands.runtime import resolve_device

    return gpu_label(resolve_device(engine.device))


def run(args: argparse.Namespace) -> int:
    return exit_code_of(_serve, args)


def _serve(args: argparse.Namespace) -> int:
    from worker.kafka.loop import KafkaWorker, ProducerFenced, in_flight_records

    loaded_settings = read_settings(args)
    settings = loaded_settings.settings
    try:
        check_codecs(settings.kafka.allow_missing_codecs)
    except MissingCodecError as exc:
        log.error("%s", exc)
        return EXIT_MISSING_CODEC
    try:
        if settings.kafka.gpus and settings.kafka.gpus.strip():
            return supervisor.run_supervised(settings, verbose=settings.log.level == "debug")
    except SettingsError as exc:
        log.error("%s", exc)
        return EXIT_SETTINGS
    supervisor.follow_supervisor()
    stop = threading.Event()
    install_signal_handlers(stop)
    ops = _Ops(loaded_settings, stop)
    ops.start_http(_device_label(settings.engine))
    incidents = build_incident_loop(settings, observer=ops.observe_incidents)
    if incidents is not None and settings.incidents.only:
        return _serve_incidents_only(incidents, ops, stop)
    k = settings.kafka
    started = start_summarizer(loaded_settings, "worker", worker=k.worker_name, input_topic=k.input_topic,
                               output_topic=k.output_topic, dlq_topic=k.dlq_topic, group_id=k.group_id)
    loaded, budgets, summarizer = started.model, started.budgets, started.summarizer
    summarizer.start()
    ops.start_status({"worker": k.worker_name, "model": loaded.name, "device": str(loaded.device),
                      "attention_backend": loaded.model.backend.name,
                      "budgets": budgets.describe(), "group": k.group_id,
                      "topics": f"{k.input_topic} -> {k.output_topic} (dead letters {k.dlq_topic})"})
    ops.health.set_model_loaded()
    worker = KafkaWorker(k, summarizer, model_name=loaded.name,
                         max_in_flight=in_flight_records(k, budgets.max_seqs_per_bin),
                         observer=ops.observer(summarizer))
    if incidents is not None:  # each new incident's text from the model, on a results channel of its own
        from worker.prompts import answer_opening

        incidents.use_summarizer(summarizer, answer_opening)
    incident_thread = IncidentThread(incidents) if incidents is not None else None
    if incident_thread is not None:
        incident_thread.start(stop)
    try:
        stats = worker.run(stop)
        code = EXIT_DRAINED if stats.drained_cleanly else EXIT_DEADLINE
        log.info("worker stopped: %s", stats)
        if incident_thread is not None:
            code = max(code, incident_thread.join(k.drain_timeout_s + 10))
    except ProducerFenced as exc:
        log.error("%s; stopping (the other worker owns this transactional id's work now)", exc)
        code = EXIT_FENCED
    except UndecodableBatch as exc:
        log.error("%s; stopping (on_undecodable_batch=exit), the other partitions' work drained", exc)
        code = EXIT_UNDECODABLE
    finally:
        if incident_thread is not None and incident_thread.running:  # the summaries stopped first: drain it too
            stop.set()
            incident_thread.join(k.drain_timeout_s + 10)
        summarizer.close(drain=False, timeout=5.0)
        if ops.server is not None:
            ops.server.close()
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
