"""`telesum worker`'s incident loop (worker/kafka/incident_loop.py): built at start-up when
TELESUM_INCIDENT_TOPIC is set, run in a thread beside the summarizing loop, or alone with
TELESUM_INCIDENT_ONLY. A failure of the loop stops the whole worker (`stop` is set) with its exit code:
the one the summaries loop exits with for the same failure (fenced 4, undecodable batch 6), else 1.
"""

from __future__ import annotations

import logging
import threading

from worker.commands.exit_codes import EXIT_DEADLINE, EXIT_DRAINED, EXIT_FAILED, EXIT_FENCED, EXIT_UNDECODABLE
from worker.commands.startup import StartupError
from worker.settings.sections import Settings

log = logging.getLogger(__name__)


def build_incident_loop(settings: Settings, observer=None):
    """The loop the settings ask for, or None when incidents are off. A topology or rules file that
    cannot be read is the operator's mistake (StartupError)."""
    if not settings.incidents.enabled:
        if settings.alerting.enabled:
            log.warning("alerts: TELESUM_ALERTMANAGER_URL is set but incidents are off (TELESUM_INCIDENT_TOPIC): "
                        "no alerts are sent")
        return None
    from worker.incidents import GraphFileError, RoomConfig
    from worker.kafka.incident_loop import IncidentLoop, incident_kafka_settings

    try:
        config = RoomConfig.from_settings(settings.incidents)
    except (GraphFileError, OSError) as exc:
        raise StartupError(f"incidents: {exc}") from None
    kafka = incident_kafka_settings(settings.kafka, settings.incidents)
    log.info("incidents: %s -> %s (group %s, grouping %s%s)", kafka.input_topic, settings.incidents.topic,
             kafka.group_id, config.grouping, ", per-alarm summaries off" if settings.incidents.only else "")
    loop = IncidentLoop(kafka, settings.incidents, config, observer=observer)
    if settings.alerting.enabled:  # each incident as one Alertmanager alert (worker/alerting/)
        from worker.alerting import AlertSender

        loop.use_alerts(AlertSender(settings.alerting))
        log.info("incidents: alerts to Alertmanager %s", ", ".join(loop.alerts.urls))
    return loop


def exit_code(loop, stats=None, error: BaseException | None = None) -> int:
    """The worker's exit code for how the incident loop ended: the summaries loop's for the same end."""
    from worker.kafka.publish import ProducerFenced
    from worker.kafka.undecodable import UndecodableBatch

    if isinstance(error, ProducerFenced):
        return EXIT_FENCED
    if isinstance(error, UndecodableBatch):
        return EXIT_UNDECODABLE
    if error is not None:
        return EXIT_FAILED
    return EXIT_DRAINED if stats is not None and stats.drained_cleanly else EXIT_DEADLINE


class IncidentThread:
    """The incident loop in a daemon thread: `start(stop)`, then `join()` for its exit code."""

    def __init__(self, loop) -> None:
        self.loop = loop
        self.stats = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        def serve() -> None:
            try:
                self.stats = self.loop.run(stop)
            except BaseException as exc:  # noqa: BLE001 - the worker's own failure: stop everything
                self.error = exc
                log.error("incidents: the incident loop stopped: %s: %s; stopping the worker",
                          type(exc).__name__, exc, exc_info=exc)
                stop.set()

        self._thread = threading.Thread(target=serve, name="incident-loop", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout_s: float) -> int:
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("incidents: the incident loop did not stop within %.0f s", timeout_s)
                return EXIT_DEADLINE
        return exit_code(self.loop, self.stats, self.error)
