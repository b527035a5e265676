"""VES 7.x `stndDefined` events: a 3GPP management notification carried in `stndDefinedFields.data`,
as SDN-R / ONAP and O-RAN SMO components forward them (namespaces `3GPP-Provisioning`,
`3GPP-FaultSupervision`, `3GPP-PerformanceAssurance`, `3GPP-Heartbeat`).

What each notification type says (3GPP TS 28.532 / TS 28.111 / TS 28.622 names):

- provisioning: `notifyMOICreation` / `notifyMOIDeletion` (which MOI, created or deleted, a few of
  its attributes), `notifyMOIAttributeValueChanges` (`attributeListValueChanges`: the new and old
  values, as `[{attributeNameValuePairSet, oldAttributeNameValuePairSet}]` or in the
  specification's form `[{new values}, {old values}]`), `notifyMOIChanges` (`moiChanges`: path,
  operation, value, oldValue);
- fault: `notifyNewAlarm` / `notifyChangedAlarm` / `notifyClearedAlarm` (specific problem, probable
  cause, alarm type, the managed object), `notifyAckStateChanged`, `notifyAlarmListRebuilt`;
- `notifyFileReady` / `notifyFilePreparationError` (which files, what data, which PM job);
- `notifyHeartbeat` (`heartbeatNtfPeriod`).

The managed object instance (MOI) is the DN in `objectInstance`, else the path of `href` (its
`Class=id` segments: `.../ProvMnS/v1/SubNetwork=1/ManagedElement=du-7/NRCellDU=3`), shown by its
last RDN (`NRCellDU=3`). A field holding filler (`additionalText: "additional text details"`,
`href: "href1"`, `systemDN: "xyz"`) is never quoted; any other notification type is named in words
(`notifyThresholdCrossing` -> `threshold crossing notification`).
"""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

from worker.facts.ves_domains import (
    PERCEIVED_SEVERITY,
    Reading,
    _CAMEL,
    _str_fields,
    alarm_phrase,
    find_alarm,
    is_placeholder,
)

MAX_ATTRIBUTES = 3  # attribute values named in one problem; the rest counted
MAX_VALUE_CHARS = 40
_RDN = re.compile(r"[A-Za-z][\w.-]{0,127}+=[^,/#=]++")  # {0,127}: linear (issue 27); no attribute name is longer


def _words(name: str) -> str:
    """`notifyThresholdCrossing` -> `threshold crossing`, `EQUIPMENT_ALARM` -> `equipment alarm`."""
    name = re.sub(r"^notify", "", str(name).strip())
    return _CAMEL.sub(" ", name).replace("_", " ").lower().strip()


def _value(value) -> str:
    """An attribute value in a few characters: scalars as they are, small structures as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        if len(text) > MAX_VALUE_CHARS:
            return f"{len(value)} {'fields' if isinstance(value, dict) else 'items'}"
        return text
    text = " ".join(str(value).split())
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."


def moi_dn(data: dict) -> str | None:
    """The DN of the notification's managed object (see the module docstring), or None."""
    instance = data.get("objectInstance")
    if isinstance(instance, str) and _RDN.search(instance) and not is_placeholder(instance, "objectInstance"):
        return instance.strip()
    href = data.get("href")
    if isinstance(href, str):
        path = unquote(href.split("?", 1)[0].split("#", 1)[0])  # `ManagedElement%3Dme-1` as some encode it
        rdns = [seg for seg in path.split("/") if _RDN.fullmatch(seg)]
        if rdns:
            return ",".join(rdns)
    return None


def last_rdn(dn: str | None) -> str | None:
    """`SubNetwork=1,ManagedElement=du-7,NRCellDU=3` -> `NRCellDU=3`."""
    if not dn:
        return None
    parts = [p.strip() for p in dn.split("," if "," in dn else "/") if "=" in p]
    return parts[-1] if parts else None


def _below_element(dn: str | None) -> str | None:
    """The MOI's last RDN when it lies below the managed element (`RadioUnit=1`), else None: the
    element itself is already the summary's subject."""
    rdn = last_rdn(dn)
    if rdn is None or rdn.split("=", 1)[0] in ("ManagedElement", "SubNetwork", "MeContext"):
        return None
    return rdn


def _attribute_pairs(attributes) -> list[tuple[str, object]]:
    """(name, value) pairs of an attribute list: an object, or `[{"name": .., "value": ..}]`; an
    example's filler pair (`attribute1: value1`) left out."""
    return [(k, v) for k, v in _all_pairs(attributes)
            if not (is_placeholder(k) and (isinstance(v, (dict, list)) or is_placeholder(v, k)))]


def _all_pairs(attributes) -> list[tuple[str, object]]:
    if isinstance(attributes, dict):
        return [(str(k), v) for k, v in attributes.items()]
    if isinstance(attributes, list):
        out = []
        for item in attributes:
            if isinstance(item, dict) and "name" in item:
                out.append((str(item["name"]), item.get("value")))
            elif isinstance(item, dict):
                out.extend((str(k), v) for k, v in item.items())
        return out
    return []


def _counted(phrases: list[str], noun: str = "more") -> str:
    shown = "; ".join(phrases[:MAX_ATTRIBUTES])
    return shown + (f" and {len(phrases) - MAX_ATTRIBUTES} {noun}" if len(phrases) > MAX_ATTRIBUTES else "")


def _context(data: dict) -> str:
    """The notification's own text, when it is content rather than filler: ` (text)`; used only where
    the notification says nothing more specific (a simulator's greeting is not filler by its words)."""
    text = data.get("additionalText")
    if isinstance(text, str) and text.strip() and not is_placeholder(text, "additionalText"):
        return f" ({_value(text)})"
    return ""


def _creation_or_deletion(data: dict, created: bool) -> str:
    moi = last_rdn(moi_dn(data)) or (str(data["objectClass"]) if data.get("objectClass") else None)
    done = "created" if created else "deleted"
    text = f"MOI {moi} {done}" if moi else f"MOI {done} (the notification names no object)"
    pairs = [(k, v) for k, v in _attribute_pairs(data.get("attributeList")) if k != "id"]
    if pairs:
        shown = ", ".join(f"{k} {_value(v)}" for k, v in pairs[:MAX_ATTRIBUTES])
        more = len(pairs) - MAX_ATTRIBUTES
        text += f" with {shown}" + (f" and {more} more attribute{'s' if more > 1 else ''}" if more > 0 else "")
    return text + _by(data) + (_context(data) if not (moi or pairs) else "")


def _by(data: dict) -> str:
    """` by SON` when a SON function made the change (`sourceIndicator`), else nothing."""
    return " by SON" if str(data.get("sourceIndicator", "")).upper() == "SON_OPERATION" else ""


def _attribute_changes(data: dict) -> str:
    moi = last_rdn(moi_dn(data))
    changes = data.get("attributeListValueChanges", data.get("attributeValueChanges"))
    if isinstance(changes, dict):
        changes = [changes]
    wrapped = ("attributeNameValuePairSet", "oldAttributeNameValuePairSet", "newValues", "oldValues")
    if isinstance(changes, list) and changes and all(isinstance(c, dict) and not any(k in c for k in wrapped)
                                                     for c in changes):
        # TS 28.532's own form: the first item holds the new values, the second the old ones
        changes = [{"attributeNameValuePairSet": changes[0],
                    "oldAttributeNameValuePairSet": changes[1] if len(changes) > 1 else {}}]
    phrases = []
    for change in changes if isinstance(changes, list) else []:
        if not isinstance(change, dict):
            continue
        new = dict(_attribute_pairs(change.get("attributeNameValuePairSet", change.get("newValues"))))
        old = dict(_attribute_pairs(change.get("oldAttributeNameValuePairSet", change.get("oldValues"))))
        for name in list(new) + [n for n in old if n not in new]:
            if name in old and name in new:
                phrases.append(f"{name} {_value(old[name])} -> {_value(new[name])}")
            elif name in new:
                phrases.append(f"{name} set to {_value(new[name])}")
            else:
                phrases.append(f"{name} removed (was {_value(old[name])})")
    subject = f"MOI {moi}" if moi else "MOI (the notification names no object)"
    if not phrases:
        return f"{subject} attributes changed (no values given)" + _by(data) + _context(data)
    return f"{subject} changed{_by(data)}: " + _counted(phrases, "more changes")


def _path_target(path: str) -> tuple[str | None, str | None]:
    """(MOI's last RDN, attribute) of a `moiChanges` path: `/.../NRCellDU=3#/attributes/arfcnDL`."""
    head, _, fragment = path.partition("#")
    if not fragment and "/attributes" in head:
        head, _, fragment = head.partition("/attributes")
        fragment = "/attributes" + fragment
    rdns = [seg for seg in head.split("/") if _RDN.fullmatch(seg)]
    attribute = fragment.rsplit("/", 1)[-1] if fragment.strip("/") and fragment.rstrip("/").split("/")[-1] != \
        "attributes" else None
    return (rdns[-1] if rdns else None), attribute


def _attributes_of(value):
    """An MOI's attributes: the `attributes` member of a resource object, else the value itself."""
    return value["attributes"] if isinstance(value, dict) and isinstance(value.get("attributes"), dict) else value


def _moi_changes(data: dict) -> str:
    default_moi = last_rdn(moi_dn(data))
    phrases = []
    for change in data.get("moiChanges") or []:
        if not isinstance(change, dict):
            continue
        moi, attribute = _path_target(str(change.get("path", "")))
        moi = moi or default_moi or "an object"
        operation = str(change.get("operation", "")).upper()
        value, old = change.get("value"), change.get("oldValue")
        if operation in ("CREATE", "ADD") and attribute is None:
            phrases.append(f"{moi} created")
        elif operation in ("DELETE", "REMOVE") and attribute is None:
            phrases.append(f"{moi} deleted")
        elif attribute is not None and operation in ("DELETE", "REMOVE"):
            phrases.append(f"{moi} {attribute} removed" + (f" (was {_value(old)})" if old is not None else ""))
        elif attribute is not None:
            phrases.append(f"{moi} {attribute} " + (f"{_value(old)} -> {_value(value)}" if old is not None
                                                     else f"set to {_value(value)}"))
        else:  # the whole object's attributes replaced or merged (`{"id": .., "attributes": {..}}` or bare)
            pairs = _attribute_pairs(_attributes_of(value))
            olds = dict(_attribute_pairs(_attributes_of(old)))
            inner = [f"{k} {_value(olds[k])} -> {_value(v)}" if k in olds else f"{k} set to {_value(v)}"
                     for k, v in pairs]
            phrases.append(f"{moi} " + (", ".join(inner[:MAX_ATTRIBUTES]) if inner else "changed"))
    if not phrases:
        return "MOI changes (none listed)" + _by(data) + _context(data)
    return f"MOI changes{_by(data)}: " + _counted(phrases, "more changes")


def _alarm(data: dict, kind: str, details: dict[str, str]) -> tuple[str | None, str]:
    """(severity, problem) of a 28.532 / 28.111 alarm notification."""
    raw = str(data.get("perceivedSeverity", "")).upper()
    severity = PERCEIVED_SEVERITY.get(raw)
    alarm = find_alarm(data)
    problem = alarm[1] if alarm else None
    cause = alarm_phrase(data.get("probableCause"))
    kind_words = alarm_phrase(data.get("alarmType")) if data.get("alarmType") else None
    extra = [w for w in (cause if alarm is None or alarm[0] != "probablecause" else None, kind_words)
             if w and w != problem]
    if problem is None:
        problem = (extra.pop(0) if extra else None) or "alarm"
    if extra:
        problem += f" ({', '.join(extra)})"
    where = _below_element(moi_dn(data))
    if where:
        problem += f" on {where}"
    if kind == "notifyClearedAlarm" or raw == "CLEARED":
        return "info", f"{problem} cleared"
    if kind == "notifyChangedAlarm" or kind == "notifyChangedAlarmGeneral":
        return severity or "warning", f"{problem}, alarm changed" + (f" to {raw.lower()}" if severity else "")
    if kind == "notifyAckStateChanged":
        state = str(data.get("ackState", "")).lower() or "changed"
        who = data.get("ackUserId")
        return "info", f"{problem}, alarm {state}" + (f" by {who}" if who else "")
    if severity is None:  # X.733: a new alarm without a severity is indeterminate
        details["perceivedSeverity"] = "missing (read as INDETERMINATE)"
        severity = "warning"
    return severity, problem


def _file_ready(data: dict, kind: str) -> tuple[str, str]:
    files = [f for f in data.get("fileInfoList") or [] if isinstance(f, dict)]
    names = [str(f.get("fileLocation") or f.get("fileName") or "").rstrip("/").rsplit("/", 1)[-1] for f in files]
    names = [n for n in names if n and not is_placeholder(n, "fileLocation")]
    types = sorted({str(f["fileDataType"]) for f in files if f.get("fileDataType")})
    job = None
    for candidate in [data.get("objectInstance"), data.get("href"), data.get("systemDN"),
                      *[f.get("fileLocation") for f in files]]:
        m = re.search(r"PerfMetricJob=([^,/#\s]+)", str(candidate or ""))
        if m:
            job = m.group(1)
            break
    job = job or next((str(data[k]) for k in ("jobId", "pmJobId", "jobName") if data.get(k)), None)
    what = ", ".join(names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "") if names else \
        (f"{len(files)} files" if len(files) > 1 else "a file")
    about = ", ".join(filter(None, [f"{' and '.join(types)} data" if types else None,
                                    f"PM job {job}" if job else None]))
    if kind == "notifyFilePreparationError":
        reason = data.get("reason")
        text = f"file preparation error for {what}" + (f": {_value(reason)}" if reason and not is_placeholder(
            reason, "reason") else "")
        return "warning", text + (f" ({about})" if about else "") + _context(data)
    return "info", f"file ready: {what}" + (f" ({about})" if about else "") + ("" if names else _context(data))


def stnd_defined(event: dict) -> Reading:
    """stndDefined: the 3GPP notification in `data` by its `notificationType` (module docstring)."""
    fields = event.get("stndDefinedFields")
    if not isinstance(fields, dict):
        return None, None, {}, ["stndDefined event has no stndDefinedFields object"]
    data = fields.get("data")
    if isinstance(data, str):  # a collector that encoded the payload twice
        try:
            data = json.loads(data)
        except ValueError:
            data = None
    data = data if isinstance(data, dict) else {}
    details = _str_fields(fields, ("schemaReference",))
    details.update({k: v for k, v in _str_fields(data, (
        "notificationType", "alarmType", "probableCause", "systemDN", "alarmId", "href", "eventTime",
        "objectClass", "objectInstance", "sourceIndicator")).items() if not is_placeholder(v, k)})
    moi = moi_dn(data)
    if moi:
        details["managedObject"] = moi
    kind = str(data.get("notificationType", ""))
    raw = str(data.get("perceivedSeverity", "")).upper()
    errors = [f"unknown perceivedSeverity {data['perceivedSeverity']!r}"] if raw and raw not in \
        PERCEIVED_SEVERITY else []
    if raw:
        details["perceivedSeverity"] = raw
    norm = kind.lower()
    if norm == "notifymoicreation":
        return "info", _creation_or_deletion(data, True), details, errors
    if norm == "notifymoideletion":
        return "info", _creation_or_deletion(data, False), details, errors
    if norm == "notifymoiattributevaluechanges":
        return "info", _attribute_changes(data), details, errors
    if norm == "notifymoichanges":
        return "info", _moi_changes(data), details, errors
    if norm in ("notifyfileready", "notifyfilepreparationerror"):
        severity, problem = _file_ready(data, kind)
        return severity, problem, details, errors
    if norm == "notifyheartbeat":
        period = data.get("heartbeatNtfPeriod")
        return "info", "heartbeat, element alive" + (f" (period {period} s)" if period not in (None, "") else ""), \
            details, errors
    if norm == "notifyalarmlistrebuilt":
        reason = data.get("reason")
        return "info", "alarm list rebuilt" + (f" ({_value(reason)})" if reason else ""), details, errors
    if norm.endswith("alarm") or norm in ("notifyackstatechanged", "notifychangedalarmgeneral") or raw \
            or find_alarm(data) or data.get("probableCause"):
        severity, problem = _alarm(data, kind, details)
        return severity, problem, details, errors
    if kind:
        return "info", f"{_words(kind)} notification" + _context(data), details, errors
    if isinstance(data.get("measurements"), list):
        return "info", _measurements(data), details, errors
    errors.append("stndDefined data has no notificationType")
    schema = str(fields.get("schemaReference", "")).rstrip("/").rsplit("/", 1)[-1]
    if schema and not is_placeholder(schema, "schemaReference") and "." not in schema:
        return "info", f"{_words(schema)} notification", details, errors
    return None, None, details, errors


def _measurement_name(item: dict) -> str | None:
    """A measurement's type: its own field, else the `measurement-type='…'` key of its reference."""
    for key in ("measurement-type", "measurementType", "name"):
        if item.get(key):
            return str(item[key])
    m = re.search(r"measurement-type='([^']+)'", str(item.get("measurement-type-instance-reference", "")))
    return m.group(1) if m else None


def _measurements(data: dict) -> str:
    """A PM streaming payload (`measurements`: type, value, unit), as an O-RAN O1 component sends it."""
    items = [m for m in data["measurements"] if isinstance(m, dict)]
    shown = []
    for item in items[:MAX_ATTRIBUTES]:
        name = _measurement_name(item) or "a measurement"
        value = item.get("value")
        shown.append(f"{name} {_value(value)}" + (f" {item['unit']}" if item.get("unit") and value is not None else ""))
    more = len(items) - len(shown)
    job = next((str(data[k]) for k in ("job-tag", "jobTag", "jobId", "job-id") if data.get(k)), None)
    count = f"{len(items)} measurement{'s' if len(items) != 1 else ''}"
    return ("PM measurements" + (f" of job {job}" if job else "") + f", {count}, no known KPI computed"
            + (": " + ", ".join(shown) if shown else "") + (f" and {more} more" if more > 0 else ""))
