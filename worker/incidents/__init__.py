"""Incidents: alarms grouped into incidents, each with its root cause, kept current in event time.

Below the Kafka layer: `alarms` (raise, clear, repeats), `graph` (topology and cause→effect rules),
`correlate` (who joins which incident), `root_cause`, `incident` (states and timers), `text` (the
grounded opening and the event), `room` (the API: add, advance, rebuild). `convert` writes a data
set's `.npy` matrices as the CSV files the settings name.
"""

from worker.incidents.alarms import Alarm, AlarmState, alarm_from_record
from worker.incidents.config import RoomConfig
from worker.incidents.graph import CauseRules, GraphFileError, Topology, load_rules, load_topology
from worker.incidents.room import IncidentRoom

__all__ = ["Alarm", "AlarmState", "CauseRules", "GraphFileError", "IncidentRoom", "RoomConfig", "Topology",
           "alarm_from_record", "load_rules", "load_topology"]
