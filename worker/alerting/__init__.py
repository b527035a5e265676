"""Incidents as Prometheus Alertmanager alerts (TELESUM_ALERTMANAGER_URL; docs/incidents.md).

`alerts.py` turns an incident event into the alert Alertmanager's API v2 takes (labels that identify it,
annotations that describe it); `client.py` posts to one Alertmanager (auth, TLS); `sender.py` runs the
bounded queue and the threads that post every incident's alert to every Alertmanager, fed by the
incident loop (`worker/kafka/incident_loop.py`, `use_alerts`) without ever blocking it.
"""

from worker.alerting.sender import AlertSender, AlertStats, TargetStats

__all__ = ["AlertSender", "AlertStats", "TargetStats"]
