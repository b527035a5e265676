"""How a setting is declared: a msgspec `Meta` carrying its help, environment variable and flag.

Every section is a frozen msgspec Struct whose fields are annotated
`Annotated[type, opt("ENV_NAME", "help", constraints...)] = default`; `spec()` reads those back, so
the flag, the variable, the TOML key and the help of a setting are written once, next to its type.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import Meta


class SettingsError(ValueError):
    """A setting is unknown, ill-typed or out of range; the message names it and where it came from."""


def opt(env: str, help: str, *, flag: str | None = None, secret: bool = False, **constraints: Any) -> Meta:
    """The Meta of one setting: `env` is its environment variable, `flag` its long option without
    dashes (default: the field name with '-'), `secret` masks it in repr, logs, `telesum config`
    and the status page. `constraints` are msgspec's (gt, ge, le, min_length, pattern, ...)."""
    return Meta(description=help, extra={"env": env, "flag": flag, "secret": secret}, **constraints)


@dataclass(frozen=True)
class FieldSpec:
    section: str          # TOML table: "engine", "kafka", "http", "log"
    name: str             # field and TOML key
    env: str
    flag: str             # "--token-budget"
    help: str
    secret: bool
    default: Any
    type: Any             # the annotation without the outer Meta

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def is_bool(self) -> bool:
        return _strip(self.type) is bool

    @property
    def choices(self) -> tuple[str, ...] | None:
        inner = _strip(self.type)
        if typing.get_origin(inner) is typing.Literal:
            return tuple(typing.get_args(inner))
        return None

    def describe(self) -> str:
        """'engine.token_budget (--token-budget, TELESUM_TOKEN_BUDGET)'."""
        return f"{self.path} ({self.flag}, {self.env})"


def section_fields(section: str, cls: type[msgspec.Struct]) -> list[FieldSpec]:
    """The FieldSpecs of one section Struct, in declaration order."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in msgspec.structs.fields(cls):
        hint = hints[f.name]
        meta = next((m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Meta) and m.extra), None)
        if meta is None:
            raise TypeError(f"{cls.__name__}.{f.name} has no opt(...) metadata")
        default = f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
        flag = meta.extra["flag"] or f.name.replace("_", "-")
        out.append(FieldSpec(section, f.name, meta.extra["env"], "--" + flag, meta.description or "",
                             meta.extra["secret"], default, typing.get_args(hint)[0]))
    return out


def _strip(tp: Any) -> Any:
    """`Annotated[int, ...] | None` -> int: the value type a flag or variable is converted to."""
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp = typing.get_args(tp)[0]
            continue
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
            tp = args[0]
            continue
        return tp


class MaskedRepr:
    """Mixin for setting Structs: repr() shows secrets as '***'."""

    def __repr__(self) -> str:
        secret = _secret_names(type(self))
        parts = []
        for name in self.__struct_fields__:  # type: ignore[attr-defined]
            value = getattr(self, name)
            parts.append(f"{name}={'***' if name in secret and value is not None else repr(value)}")
        return f"{type(self).__name__}({', '.join(parts)})"


_SECRETS: dict[type, frozenset[str]] = {}


def _secret_names(cls: type) -> frozenset[str]:
    cached = _SECRETS.get(cls)
    if cached is None:
        hints = typing.get_type_hints(cls, include_extras=True)
        cached = frozenset(
            name for name in cls.__struct_fields__  # type: ignore[attr-defined]
            if any(isinstance(m, Meta) and m.extra and m.extra.get("secret")
                   for m in getattr(hints[name], "__metadata__", ())))
        _SECRETS[cls] = cached
    return cached
