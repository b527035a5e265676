"""Build the one `Settings` object: flag > environment variable > TOML file > default.

Raw values from the three sources are gathered into one nested dict and msgspec converts it
(`strict=False`: "7" becomes 7, "false" False) and checks every constraint; its error is turned into
a SettingsError naming the setting, its flag and variable, and the source the bad value came from.
Unknown keys in the file, unknown flags and unknown `TELESUM_*` variables fail too.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from worker.settings.environment import CONFIG as CONFIG_ENV
from worker.settings.environment import VARIABLES
from worker.settings.fields import FieldSpec, SettingsError
from worker.settings.sections import SECTIONS, Settings, all_fields

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
DEFAULT = "default"


@dataclass(frozen=True)
class LoadedSettings:
    """The settings and, per setting path ('engine.token_budget'), where its value came from:
    'flag --x', 'env X', 'file PATH' or 'default'."""

    settings: Settings
    sources: dict[str, str]
    config_file: Path | None

    def source(self, path: str) -> str:
        return self.sources.get(path, DEFAULT)

    def is_set(self, path: str) -> bool:
        """True when the operator gave this setting (any source but the default)."""
        return self.source(path) != DEFAULT


def add_arguments(parser: argparse.ArgumentParser, sections: tuple[str, ...] | None = None) -> None:
    """`--config FILE` and one `--flag` per setting of `sections` (all when None); every flag
    defaults to None so the environment and the file can fill it in."""
    parser.add_argument("--config", dest="config", default=None, type=Path, metavar="FILE",
                        help=f"TOML settings file with [engine], [kafka], [http], [log] tables (env {CONFIG_ENV})")
    for f in all_fields(sections):
        text = f"{f.help} (env {f.env}; default {'auto' if f.default is None else f.default!r})"
        if f.choices:
            text += f"; one of {', '.join(map(str, f.choices))}"
        if f.is_bool:
            parser.add_argument(f.flag, dest=f.path, default=None, action=argparse.BooleanOptionalAction, help=text)
        else:
            parser.add_argument(f.flag, dest=f.path, default=None, metavar=f.name.upper(), help=text)


def load_settings(args: argparse.Namespace | None = None, env: Mapping[str, str] | None = None,
                  sections: tuple[str, ...] | None = None) -> LoadedSettings:
    """Flags (non-None attributes of `args` for the settings of `sections`) over `env` over the TOML
    file (`--config` or TELESUM_CONFIG) over defaults. Raises SettingsError naming the setting."""
    env = os.environ if env is None else env
    _check_environment(env)
    config_file = getattr(args, "config", None) or (Path(env[CONFIG_ENV]) if env.get(CONFIG_ENV) else None)
    file_values = _read_file(config_file) if config_file else {}
    data: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    sources: dict[str, str] = {}
    raw: dict[str, Any] = {}
    flag_fields = {f.path for f in all_fields(sections)}
    for f in all_fields():
        flag_value = getattr(args, f.path, None) if args is not None and f.path in flag_fields else None
        if flag_value is not None:
            value, source = flag_value, f"flag {f.flag}"
        elif f.env in env:
            value, source = _from_env(f, env[f.env]), f"env {f.env}"
            if value is None:
                continue
        elif f.name in file_values.get(f.section, {}):
            value, source = file_values[f.section][f.name], f"file {config_file}"
        else:
            continue
        data[f.section][f.name] = value
        sources[f.path] = source
        raw[f.path] = value
    try:
        settings = msgspec.convert(data, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(_explain(str(exc), sources, raw)) from None
    return LoadedSettings(settings, sources, config_file)


def from_values(values: Mapping[str, Any], source: str = "code") -> LoadedSettings:
    """Settings from {'engine.model': 'tiny', ...} over defaults, converted and checked like the
    other sources (for programs that build a worker themselves: benchmarks, tests)."""
    data: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    known = {f.path for f in all_fields()}
    for path, value in values.items():
        if path not in known:
            raise SettingsError(f"unknown setting {path!r}")
        section, name = path.split(".")
        data[section][name] = value
    try:
        settings = msgspec.convert(data, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(_explain(str(exc), dict.fromkeys(values, source), dict(values))) from None
    return LoadedSettings(settings, dict.fromkeys(values, source), None)


def to_environment(settings: Settings) -> dict[str, str]:
    """Every set field as its environment variable: what `load_settings` reads back into an equal
    object (the supervisor starts its children with it, keeping secrets off their command line)."""
    out = {}
    for f in all_fields():
        value = getattr(getattr(settings, f.section), f.name)
        if value is not None:
            out[f.env] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def environment_names() -> set[str]:
    """The environment variable of every setting."""
    return {f.env for f in all_fields()}


def accepted_environment_names() -> set[str]:
    """Every variable `load_settings` accepts: the settings' and those declared in `environment.py`."""
    return environment_names() | set(VARIABLES)


def _from_env(f: FieldSpec, text: str) -> Any:
    if text == "" and f.default is None:
        return None  # `VAR=` (e.g. compose's ${VAR:-}) leaves an optional setting unset
    if f.is_bool:
        lowered = text.strip().lower()
        if lowered in _TRUE or lowered in _FALSE:
            return lowered in _TRUE
        raise SettingsError(f"{f.describe()} must be true or false; got {text!r} from env {f.env}")
    return text


def _check_environment(env: Mapping[str, str]) -> None:
    known = accepted_environment_names()
    unknown = sorted(k for k in env if k.startswith("TELESUM_") and k not in known)
    if unknown:
        hints = [f"{k} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(k, known, 1)) else k
                 for k in unknown]
        raise SettingsError(f"unknown setting in the environment: {', '.join(hints)}; "
                            "`telesum config` lists every setting")


def _read_file(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SettingsError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from None
    for section, table in data.items():
        if section not in SECTIONS:
            raise SettingsError(f"config file {path}: unknown section [{section}]; "
                                f"the sections are {', '.join(f'[{s}]' for s in SECTIONS)}")
        if not isinstance(table, dict):
            raise SettingsError(f"config file {path}: {section} must be a table ([{section}])")
        names = [f.name for f in all_fields((section,))]
        for key in table:
            if key not in names:
                match = difflib.get_close_matches(key, names, 1)
                raise SettingsError(f"config file {path}: unknown setting {key!r} in [{section}]"
                                    + (f" (did you mean {match[0]!r}?)" if match else ""))
    return data


_AT = re.compile(r" - at `\$(?:\.(\w+))?(?:\.(\w+))?`$")


def _explain(message: str, sources: dict[str, str], raw: dict[str, Any]) -> str:
    """msgspec's 'Expected `int` >= 1 - at `$.engine.token_budget`' -> a sentence naming the setting."""
    m = _AT.search(message)
    if not m or not m.group(1):
        return message
    what = _AT.sub("", message)
    section, name = m.group(1), m.group(2)
    if name is None:  # a check across fields of one section (__post_init__)
        return f"[{section}] settings: {what}"
    spec = next(f for f in all_fields((section,)) if f.name == name)
    source = sources.get(spec.path, DEFAULT)
    shown = "***" if spec.secret else repr(raw.get(spec.path))
    return f"{spec.describe()}: {what}; got {shown} from {source}"
