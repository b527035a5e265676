"""The effective settings as rows (setting, value, source) with secrets masked: for `telesum config`,
the status page and the start-up log."""

from __future__ import annotations

from worker.settings.budgets import CPU_WORK_CAP_S, GPU_WORK_CAP_TOKENS, MIN_WORK_CAP_TOKENS
from worker.settings.load import LoadedSettings
from worker.settings.sections import all_fields

MASK = "***"
# Where an unset setting's value will come from once the device is known (the start-up log states it).
AUTO_SOURCES = {
    "engine.max_record_tokens": f"default: {GPU_WORK_CAP_TOKENS} on a GPU; on CPU the body tokens it prefills in "
                                f"{CPU_WORK_CAP_S:g} s, measured at start-up (at least {MIN_WORK_CAP_TOKENS})",
}


def settings_rows(loaded: LoadedSettings) -> list[dict[str, str]]:
    """One row per setting: 'path', 'value' (secrets as *** when set; 'auto' for unset budgets),
    'source' ('flag --x', 'env X', 'file PATH' or 'default'), 'env' and 'flag'."""
    rows = []
    for f in all_fields():
        value = getattr(getattr(loaded.settings, f.section), f.name)
        if value is None:
            shown = "auto" if f.section == "engine" else "unset"
        elif f.secret:
            shown = MASK
        elif isinstance(value, bool):
            shown = "true" if value else "false"
        else:
            shown = str(value)
        source = loaded.source(f.path)
        if value is None and f.path in AUTO_SOURCES:
            source = AUTO_SOURCES[f.path]
        rows.append({"path": f.path, "value": shown, "source": source, "env": f.env,
                     "flag": f.flag})
    return rows


def format_table(rows: list[dict[str, str]]) -> str:
    widths = [max(len(r[k]) for r in rows + [{"path": "setting", "value": "value", "source": "source"}])
              for k in ("path", "value")]
    lines = [f"{'setting':<{widths[0]}}  {'value':<{widths[1]}}  source"]
    lines += [f"{r['path']:<{widths[0]}}  {r['value']:<{widths[1]}}  {r['source']}" for r in rows]
    return "\n".join(lines)
