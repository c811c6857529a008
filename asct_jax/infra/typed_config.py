"""Typed, frozen configs built from a ConfigDict section, validated as they are built.

A method (or the update) declares what it reads as a frozen dataclass whose fields carry
their allowed values:

    @dataclasses.dataclass(frozen=True)
    class GiGPOConfig:
        gamma: float = option(Range(0.0, 1.0), "discount of the step return")
        mode: str = option(GIGPO_MODES, "F of both terms")

    cfg = from_section(GiGPOConfig, config, "gigpo")   # ConfigError names gigpo.<field>

The dataclass is the one place a field's meaning and allowed values are written;
`constraints(GiGPOConfig, "gigpo")` gives them to a config file's get_constraints().
Only the dataclass's fields are read, so several configs may share a section.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Dict, Mapping, Optional, Type, TypeVar

from asct_jax.infra.checks import ConfigError, Range, check, check_choice

T = TypeVar("T")
_RULE, _DOC = "rule", "doc"


def option(rule: Any = None, doc: str = "", default: Any = dataclasses.MISSING,
           factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with its allowed values (a collection or a checks.Range; None:
    any value) and a one-line meaning. Without `default` (or a `factory` making it) the
    section must hold it."""
    return dataclasses.field(default=default, default_factory=factory,
                             metadata={_RULE: rule, _DOC: doc})


def has_default(f: dataclasses.Field) -> bool:
    """Whether a field may be missing from its section."""
    return not (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


def _plain(value: Any) -> Any:
    """Lists become tuples (frozen, hashable); ConfigDicts become dicts."""
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return value


def from_section(cls: Type[T], config: Any, section: str, **extra: Any) -> T:
    """cls built from config[section] (a ConfigDict or mapping; "" = the config itself):
    each field of cls read and checked against its rule; `extra` fills fields the
    section does not hold (e.g. nested typed configs). Raises ConfigError (one line,
    `<section>.<field>: ...`) for a missing field or a value outside its rule."""
    node = config if not section else _get(config, section, section)
    kwargs: Dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in extra:
            kwargs[f.name] = extra[f.name]
            continue
        name = f"{section}.{f.name}" if section else f.name
        if f.name not in node:
            if has_default(f):
                continue
            raise ConfigError(name, "missing", "a value for this field")
        value = _plain(node[f.name])
        rule = f.metadata.get(_RULE)
        if rule is not None and (isinstance(rule, Range) or holds_several(f)):
            check(name, value, rule)            # a tuple field: each element allowed
        elif rule is not None:
            check_choice(name, value, rule)     # one value, never a list of allowed ones
        kwargs[f.name] = value
    return cls(**kwargs)


def constraints(cls: Type[Any], section: str) -> Dict[str, Any]:
    """{dotted field: rule} of cls's fields that have one (for get_constraints())."""
    out = {}
    for f in dataclasses.fields(cls):
        rule = f.metadata.get(_RULE)
        if rule is not None:
            out[f"{section}.{f.name}" if section else f.name] = rule
    return out


def describe(cls: Type[Any]) -> Dict[str, str]:
    """{field: its one-line meaning} (for docs and --help texts)."""
    return {f.name: f.metadata.get(_DOC, "") for f in dataclasses.fields(cls)}


def _get(config: Any, dotted: str, what: str) -> Mapping[str, Any]:
    node = config
    for part in dotted.split("."):
        if not hasattr(node, "keys") or part not in node:
            raise ConfigError(what, "missing section", "a config built from "
                              "experiments/configs/base.py")
        node = node[part]
    if not hasattr(node, "keys"):
        raise ConfigError(what, f"a value ({node!r}), not a section",
                          "a config built from experiments/configs/base.py")
    return node


def no_config(config: Any) -> Optional[Any]:
    """The typed config of a method that reads no field: None."""
    return None


def holds_several(f: dataclasses.Field) -> bool:
    """Whether a field holds several values (annotated Tuple / tuple / Sequence / List)."""
    t = f.type      # a string under `from __future__ import annotations`, else the type
    if isinstance(t, str):
        kind = t.replace("typing.", "").split("[")[0].strip()
    else:
        kind = getattr(typing.get_origin(t) or t, "__name__", "")
    return kind in ("Tuple", "tuple", "Sequence", "List", "list")


def option_rule(f: dataclasses.Field) -> Any:
    """A field's allowed values (a collection, a checks.Range or None: any value)."""
    return f.metadata.get(_RULE)
