"""The `[incidents]` section: correlated alarms as incidents on their own topic (docs/incidents.md).

Off while `topic` is unset, so a worker without it behaves as before. The windows are in the alarms'
own event time; why each default is what it is: worker/incidents/config.py.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from worker.settings.fields import MaskedRepr, SettingsError, opt

# TELESUM_INCIDENT_STATE_TOPIC's value for "no state topic": open incidents are recomputed after a restart.
STATE_TOPIC_OFF = "none"


class IncidentSettings(MaskedRepr, msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Alarms grouped into incidents (open, update, resolve events), each with its root cause."""

    topic: Annotated[str | None, opt("TELESUM_INCIDENT_TOPIC", "topic incident events are written to "
                                                               "(unset: incidents off)", flag="incident-topic")] = None
    topology: Annotated[str | None, opt("TELESUM_INCIDENT_TOPOLOGY",
                                        "element links: a CSV edge list element_a,element_b, JSON or GraphML "
                                        "(unset: same element only)", flag="incident-topology")] = None
    rules: Annotated[str | None, opt("TELESUM_INCIDENT_RULES", "cause->effect rules: CSV cause_type,effect_type "
                                                               "(unset: causes learned from the stream)",
                                     flag="incident-rules")] = None
    only: Annotated[bool, opt("TELESUM_INCIDENT_ONLY", "answer alarms with incident events only (no per-alarm "
                                                       "summaries)", flag="incident-only")] = False
    state_topic: Annotated[str | None, opt("TELESUM_INCIDENT_STATE_TOPIC",
                                           "exactly-once: keep each input partition's incidents on this compacted "
                                           "topic and commit every alarm at once (unset: the incident loop's consumer "
                                           "group followed by -state, created if allowed; none: recompute open "
                                           "incidents from the uncommitted range)", flag="incident-state-topic")] = None
    late_s: Annotated[float, opt("TELESUM_INCIDENT_LATE_S", "wait this long (event time) for alarms arriving out "
                                                            "of order; an incident opens this long after its "
                                                            "first alarm", flag="incident-late-s", ge=0, le=60)] = 1.0
    window_s: Annotated[float, opt("TELESUM_INCIDENT_WINDOW_S", "an alarm joins an incident whose last alarm is at "
                                                                "most this old", flag="incident-window-s", gt=0)] = 300.0
    link_hops: Annotated[int, opt("TELESUM_INCIDENT_LINK_HOPS", "a new element joins when this many hops from an "
                                                                "element of the incident", flag="incident-link-hops",
                                  ge=1)] = 1
    max_hops: Annotated[int, opt("TELESUM_INCIDENT_MAX_HOPS", "spread bound: hops from the incident's root element",
                                 flag="incident-max-hops", ge=1)] = 2
    idle_s: Annotated[float, opt("TELESUM_INCIDENT_IDLE_S", "resolve an incident after this long without an alarm "
                                                            "(all alarms cleared resolves at once)",
                                 flag="incident-idle-s", gt=0)] = 3600.0
    update_interval_s: Annotated[float, opt("TELESUM_INCIDENT_UPDATE_INTERVAL_S",
                                            "send an incident's changes as one update at most this often",
                                            flag="incident-update-interval-s", ge=0)] = 10.0
    follow_ups: Annotated[int, opt("TELESUM_INCIDENT_FOLLOW_UPS",
                                   "beside per-alarm summaries, exactly-once with a state topic: ask the model for "
                                   "each new incident's text, at most this many at once (more are dropped, counted), "
                                   "and send it as an update with model_summary when the model writes beyond the "
                                   "grounded opening (0: off)", flag="incident-follow-ups", ge=0, le=1024)] = 4
    learn_causes: Annotated[bool, opt("TELESUM_INCIDENT_LEARN_CAUSES", "without rules, learn the cause->effect "
                                                                       "graph from the alarms seen and group and "
                                                                       "name root causes by it (off: the earliest "
                                                                       "alarm)", flag="incident-learn-causes")] = True
    learned_rules: Annotated[str | None, opt("TELESUM_INCIDENT_LEARNED_RULES",
                                             "a cause graph learned before (telesum incidents learn -o FILE) to "
                                             "start from; live learning adds to it", flag="incident-learned-rules")] = None
    extend_rules: Annotated[bool, opt("TELESUM_INCIDENT_EXTEND_RULES", "with a rules file, also learn from the "
                                                                       "alarms and add learned edges to the rules "
                                                                       "(never overriding one)",
                                      flag="incident-extend-rules")] = False

    def __post_init__(self) -> None:
        if self.topic is not None and not self.topic.strip():
            raise SettingsError("incidents.topic (--incident-topic, TELESUM_INCIDENT_TOPIC) must name a topic")
        if self.max_hops < self.link_hops:
            raise SettingsError("incidents.max_hops (--incident-max-hops, TELESUM_INCIDENT_MAX_HOPS) must be at "
                                f"least incidents.link_hops ({self.link_hops}); got {self.max_hops}")

    @property
    def enabled(self) -> bool:
        return self.topic is not None
