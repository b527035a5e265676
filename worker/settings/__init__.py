"""One frozen settings object for every command, built once at start-up.

`sections.Settings` holds the sections (`engine`, shared by `telesum worker` and `telesum summarize`;
`kafka`; `http`; `log`); `load.load_settings` builds it from flags > environment > TOML file >
defaults and remembers where each value came from; `budgets.resolve_budgets` turns the engine's
"auto" budgets into numbers for the device (or the probe's). Nothing is imported here, so the
sections can live beside their owners (`worker.settings.kafka`) without an import cycle.
"""
