"""Config files via ml_collections.config_flags, validated before any work.

A config file defines `get_config([arg])` and optionally `get_constraints()` -> {field:
allowed values | Range}, the allowed sets imported from the modules that use them. A script
calls `config_cli.run_main(main)`; `--config path.py[:arg] --config.a.b=v` is parsed by
config_flags.DEFINE_config_file. Any problem (unknown field, wrong type, value outside the
allowed set or range, missing or broken file, stray argument, or a ConfigError raised by
main) exits with status 2 and one stderr line, no traceback:
`config error: <field>: <what is wrong>; allowed: <...>`.
"""
from __future__ import annotations

import difflib
import importlib.util
import json
import os
import sys
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from absl import app, flags
import ml_collections
from ml_collections import config_flags
from ml_collections.config_flags import config_path

from asct_jax.infra.checks import ConfigError, Range, check  # noqa: F401  (re-exported)

CONFIG_FLAG = "config"
EXIT_CONFIG_ERROR = 2
_SYNTAX = f"--{CONFIG_FLAG}=path.py and --{CONFIG_FLAG}.<field>=<value>"
_LOOKUP_ERRORS = (AttributeError, KeyError, IndexError, TypeError, ValueError)


def _unknown_field(field: str, config: ml_collections.ConfigDict) -> ConfigError:
    """ConfigError for a field path the config lacks, listing the nearest level's fields."""
    node, prefix = config, ""
    for part in field.split(".")[:-1]:
        child = node.get(part)
        if not isinstance(child, ml_collections.ConfigDict):
            break
        node, prefix = child, f"{prefix}{part}."
    close = difflib.get_close_matches(field, list(_flat_keys(config)), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return ConfigError(field, f"unknown field{hint}",
                       ", ".join(prefix + k for k in sorted(node.keys())))


def _flat_keys(node: Any, prefix: str = ""):
    for key, value in node.items():
        is_dict = isinstance(value, ml_collections.ConfigDict)
        yield from _flat_keys(value, f"{prefix}{key}.") if is_dict else [prefix + key]


def validate(config: ml_collections.ConfigDict, constraints: Mapping[str, Any]) -> None:
    """Checks each {field path: allowed values | Range}; raises ConfigError on the first."""
    for field, rule in constraints.items():
        try:
            value = config_path.get_value(field, config)
        except _LOOKUP_ERRORS:
            raise _unknown_field(field, config) from None
        check(field, value, rule)


def _normalise_argv(argv: Optional[Sequence[str]]) -> list:
    """absl-style argv: argv[0] is the program. A list starting with a flag gets one."""
    argv = list(sys.argv if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        argv = [os.path.basename(sys.argv[0]) if sys.argv else "prog"] + argv
    return argv


def _config_arg(argv: Sequence[str]) -> Optional[str]:
    """The value of --config, read by absl itself (everything else left alone)."""
    fv = flags.FlagValues()
    fv.set_gnu_getopt(True)
    flags.DEFINE_string(CONFIG_FLAG, None, "", flag_values=fv)
    try:
        fv(list(argv), known_only=True)
    except flags.Error:
        raise ConfigError(CONFIG_FLAG, "missing value", "path/to/config.py") from None
    return fv[CONFIG_FLAG].value


def _override_args(argv: Sequence[str]) -> list:
    """[(field, raw value or None)] of each --config.<field>[=v] / --noconfig.<field>."""
    out = []
    for i, arg in enumerate(argv[1:], 1):
        name, eq, value = arg.lstrip("-").partition("=")
        if not arg.startswith("-"):
            continue
        if name.startswith(CONFIG_FLAG + "."):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out.append((name[len(CONFIG_FLAG) + 1:], value if eq else nxt))
        elif name.startswith(f"no{CONFIG_FLAG}."):
            out.append((name[len(CONFIG_FLAG) + 3:], None))
    return out


def _load(path_arg: str):
    """(module, get_config(...)) of `path.py[:arg]`; ConfigError if it does not load."""
    path, *arg = path_arg.split(":", 1)
    try:
        spec = importlib.util.spec_from_file_location("_config_file", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        config = module.get_config(*arg)
    except Exception as e:  # pylint: disable=broad-except  (any failure: one line)
        lines = str(e).strip().splitlines() or [""]
        raise ConfigError(CONFIG_FLAG, f"cannot load {path_arg!r}: {type(e).__name__}: "
                          f"{lines[-1]}", "a Python file with get_config()") from None
    if not isinstance(config, ml_collections.ConfigDict):
        raise ConfigError(CONFIG_FLAG, f"get_config() returned {type(config).__name__}",
                          "a ConfigDict")
    return module, config


def _check_overridable(field: str, config: ml_collections.ConfigDict) -> None:
    try:
        kind = config_path.get_type(field, config)
    except _LOOKUP_ERRORS:
        raise _unknown_field(field, config) from None
    if kind is type(None):
        raise ConfigError(field, "the default is None, so the type is unknown",
                          "declare it with ml_collections.config_dict.placeholder(type)")


def _bad_override(fv: flags.FlagValues, overrides: list, config) -> Optional[ConfigError]:
    """The first override whose value the field's own absl parser rejects, if any."""
    for field, raw in overrides:
        name = f"{CONFIG_FLAG}.{field}"
        flag = fv[name] if name in fv else None
        if flag is None or flag.present:
            continue
        if raw is None:
            if flag.boolean:
                continue
            return ConfigError(field, "missing value")
        try:
            flag.parser.parse(raw)
        except (TypeError, ValueError, OverflowError):
            kind = config_path.get_type(field, config)
            kind_name = getattr(kind, "__name__", str(kind))
            return ConfigError(field, f"expected {kind_name}, got {raw!r}",
                               "true, false" if kind is bool else kind_name)
    return None


def parse_config(argv: Optional[Sequence[str]] = None, *,
                 constraints: Optional[Mapping[str, Any]] = None,
                 default: Optional[str] = None,
                 flag_values: Optional[flags.FlagValues] = None) -> ml_collections.ConfigDict:
    """The locked config of `--config path.py[:arg]` (or `default`) with its overrides,
    checked against the file's get_constraints() and `constraints`; ConfigError if not.
    argv defaults to sys.argv (one that starts with a flag is taken as sys.argv[1:])."""
    argv = _normalise_argv(argv)
    path_arg = _config_arg(argv)
    if path_arg is None and default is not None:
        path_arg, argv = default, argv[:1] + [f"--{CONFIG_FLAG}={default}"] + argv[1:]
    if path_arg is None:
        raise ConfigError(CONFIG_FLAG, "missing", f"--{CONFIG_FLAG}=path/to/config.py")
    module, loaded = _load(path_arg)
    overrides = _override_args(argv)
    for field, _ in overrides:
        _check_overridable(field, loaded)
    fv = flags.FlagValues() if flag_values is None else flag_values
    config_flags.DEFINE_config_file(CONFIG_FLAG, None, "path to the config file",
                                    flag_values=fv, sys_argv=argv)
    try:
        rest = fv(argv)
    except flags.UnrecognizedFlagError as e:
        raise ConfigError(f"--{e.flagname}", "unknown flag", _SYNTAX) from None
    except (flags.Error, ValueError) as e:
        lines = str(e).strip().splitlines() or [type(e).__name__]
        raise _bad_override(fv, overrides, loaded) or ConfigError("argv", lines[0]) from None
    if len(rest) > 1:
        raise ConfigError("argv", f"unexpected positional argument(s) {rest[1:]}", _SYNTAX)
    config = fv[CONFIG_FLAG].value
    validate(config, {**getattr(module, "get_constraints", dict)(), **(constraints or {})})
    return config


def exit_config_error(error: ConfigError) -> None:
    """Prints `config error: ...` as one line to stderr and exits with status 2."""
    sys.stderr.write(f"config error: {error}\n")
    sys.stderr.flush()
    sys.exit(EXIT_CONFIG_ERROR)


def run_main(main_fn: Callable[[ml_collections.ConfigDict], Any],
             argv: Optional[Sequence[str]] = None, *,
             constraints: Optional[Mapping[str, Any]] = None,
             default: Optional[str] = None) -> None:
    """absl.app.run: parse_config into absl.flags.FLAGS (absl's own flags keep working),
    then main_fn(config); a ConfigError from either exits 2 with one line."""
    holder: Dict[str, ml_collections.ConfigDict] = {}

    def parser(args):
        try:
            holder["config"] = parse_config(args, constraints=constraints, default=default,
                                            flag_values=flags.FLAGS)
        except ConfigError as e:
            exit_config_error(e)
        return list(args[:1])

    def main(_):
        try:
            return main_fn(holder["config"])
        except ConfigError as e:
            exit_config_error(e)

    app.run(main, argv=_normalise_argv(argv), flags_parser=parser)


def config_to_dict(config: Any) -> Dict[str, Any]:
    """A JSON-compatible dict of a ConfigDict (or a plain mapping); tuples become lists."""
    if isinstance(config, ml_collections.ConfigDict):
        return json.loads(config.to_json_best_effort())
    return json.loads(json.dumps(dict(config), default=repr))
