"""One frozen settings object for every command, built once at start-up; every section lives here.

`sections.Settings` holds the sections (`engine`, shared by `telesum worker` and `telesum summarize`;
`kafka`, in `kafka.py`; `http`; `log`); `load.load_settings` builds it from flags > environment >
TOML file > defaults and remembers where each value came from; `budgets` holds the packing defaults
and turns the engine's "auto" budgets into numbers for the device (or the probe's); `environment`
declares the `TELESUM_*` variables that are not settings; `reference` renders docs/settings.md.
Nothing is imported here, so `python -m worker.settings.reference` and the light readers stay light.
"""
