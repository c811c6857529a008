"""Python config files, `--config.field=value` overrides, and validation before any work.

A config file (experiments/configs/*.py) defines

    def get_config() -> ml_collections.ConfigDict      # required (may take one str arg:
                                                      #   --config path.py:arg)
    def get_constraints() -> dict                     # optional

and a script runs

    from asct_jax.infra import config_cli

    def main(config):
        ...

    if __name__ == "__main__":
        config_cli.run_main(main)

    $ python script.py --config experiments/configs/rag.py --config.optim.lr=3e-4 \
          --config.method grpo --config.use_critic --config.nouse_kl

Parsing is ml_collections.config_flags on absl flags: the library loads the file, types
each override by the field's current type (int, float, bool, str, tuple, ...), and sets
it; nested fields (`--config.a.b=3`), `--config.a.b 3`, `--config.flag` / `--config.noflag`
and tuples (`--config.dims='(1, 2)'`) are the library's syntax. A field whose default is
None cannot be overridden unless declared typed: `config_dict.placeholder(int)`.

Constraints (validation beyond types) live *beside* the config, not inside it, so that
they cannot be overridden from the command line and do not pollute config.json:

    def get_constraints():
        return {
            "method": ("ppo_gae", "grpo", "vineppo"),   # a tuple / list / set: allowed values
            "env.name": ("rag_workflow", "household"),
            "optim.lr": Range(0.0, 1.0, lo_open=True),  # a numeric interval
            "train.num_steps": Range(1, None, integer=True),
        }

A tuple-valued field passes a value-set constraint when every element is allowed.
Scripts can add constraints of their own (e.g. the method registry's names):
`run_main(main, constraints={"method": tuple(REGISTRY)})`.

Any problem (unknown field, wrong type, value outside the allowed set or range, missing or
broken config file, stray arguments) ends the program with exit status 2 before main runs,
printing exactly one line to stderr and no traceback:

    config error: <field>: <what is wrong>; allowed: <...>

A ConfigError raised by main itself (cross-field checks) is reported the same way.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import json
import math
import os
import re
import sys
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from absl import app, flags
import ml_collections
from ml_collections import config_flags
from ml_collections.config_flags import config_path

CONFIG_FLAG = "config"
CONSTRAINTS_FN = "get_constraints"
EXIT_CONFIG_ERROR = 2


class ConfigError(ValueError):
    """A configuration problem, rendered as `<field>: <problem>; allowed: <allowed>`."""

    def __init__(self, field: str, problem: str, allowed: str = ""):
        self.field, self.problem, self.allowed = field, problem, allowed
        text = f"{field}: {problem}" + (f"; allowed: {allowed}" if allowed else "")
        super().__init__(" ".join(text.split()))  # one line, whatever the parts hold


@dataclasses.dataclass(frozen=True)
class Range:
    """A numeric interval constraint: lo <= x <= hi (open ends with lo_open / hi_open).

    None means unbounded on that side; integer=True also demands an int value.
    """

    lo: Optional[float] = None
    hi: Optional[float] = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False

    def describe(self) -> str:
        lo = "-inf" if self.lo is None else repr(self.lo)
        hi = "inf" if self.hi is None else repr(self.hi)
        kind = "int in " if self.integer else ""
        return (f"{kind}{'(' if self.lo_open or self.lo is None else '['}{lo}, "
                f"{hi}{')' if self.hi_open or self.hi is None else ']'}")

    def problem(self, value: Any) -> Optional[str]:
        """None if `value` is inside, else what is wrong."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"expected a number, got {value!r}"
        if self.integer and not isinstance(value, int):
            return f"expected an int, got {value!r}"
        if math.isnan(value):
            return "nan is out of range"
        below = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
        above = self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi)
        return f"{value!r} is out of range" if below or above else None


Constraints = Mapping[str, Any]  # field path -> tuple/list/set of values, or Range


# ----------------------------------------------------------------------------- validation

def _fmt_allowed(values: Any) -> str:
    return ", ".join(str(v) for v in values)


def _field_names(node: Any, prefix: str = "") -> list:
    """Every leaf field path of a ConfigDict ('a.b.c')."""
    out = []
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, ml_collections.ConfigDict):
            out += _field_names(value, path + ".")
        else:
            out.append(path)
    return out


def _unknown_field_error(field: str, config: ml_collections.ConfigDict) -> ConfigError:
    """ConfigError for a field path the config does not have, listing the siblings."""
    parts = field.split(".")
    node, known = config, []
    for part in parts[:-1]:
        child = node.get(part) if isinstance(node, ml_collections.ConfigDict) else None
        if not isinstance(child, ml_collections.ConfigDict):
            break
        node, known = child, known + [part]
    prefix = ".".join(known) + "." if known else ""
    siblings = [prefix + k for k in sorted(node.keys())] if isinstance(
        node, ml_collections.ConfigDict) else []
    close = difflib.get_close_matches(field, _field_names(config), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return ConfigError(field, f"unknown field{hint}", _fmt_allowed(siblings))


def _has_field(config: Any, field: str) -> bool:
    try:
        config_path.get_value(field, config)
        return True
    except (AttributeError, KeyError, IndexError, TypeError, ValueError):
        return False


def validate(config: ml_collections.ConfigDict, constraints: Constraints) -> None:
    """Checks every constrained field; raises ConfigError on the first violation.

    Args:
      config: the parsed config.
      constraints: {field path: allowed values (tuple/list/set/frozenset) or Range}.
    """
    for field, rule in constraints.items():
        if not _has_field(config, field):
            raise _unknown_field_error(field, config)
        value = config_path.get_value(field, config)
        if isinstance(rule, Range):
            problem = rule.problem(value)
            if problem:
                raise ConfigError(field, problem, rule.describe())
        elif isinstance(rule, (tuple, list, set, frozenset)):
            allowed = list(rule)
            items = value if isinstance(value, (tuple, list)) and value not in allowed else [value]
            for item in items:
                if item not in allowed:
                    raise ConfigError(field, f"{item!r} is not allowed", _fmt_allowed(allowed))
        else:
            raise TypeError(f"constraint for {field!r} must be a tuple/list/set of values "
                            f"or a Range, got {type(rule).__name__}")


# ----------------------------------------------------------------------------- parsing

def _normalise_argv(argv: Optional[Sequence[str]]) -> list:
    """absl-style argv: argv[0] is the program. A list starting with a flag gets one."""
    argv = list(sys.argv if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        argv = [os.path.basename(sys.argv[0]) if sys.argv else "prog"] + argv
    return argv


def _config_arg(argv: Sequence[str], name: str = CONFIG_FLAG) -> Optional[str]:
    """The value given to --config (for error diagnostics and constraints), if any."""
    value = None
    for i, arg in enumerate(argv):
        m = re.match(rf"^--?{name}(=(.*))?$", arg)
        if m:
            value = m.group(2) if m.group(1) else (argv[i + 1] if i + 1 < len(argv) else None)
    return value


def _load_module(path_arg: str):
    """Imports the config file (the part of `path.py:arg` before the colon)."""
    path = path_arg.split(":", 1)[0]
    spec = importlib.util.spec_from_file_location("_asct_config_constraints", path)
    if spec is None or spec.loader is None:
        raise ConfigError(CONFIG_FLAG, f"cannot load {path!r}", "a Python file with get_config()")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_base_config(path_arg: str) -> Optional[ml_collections.ConfigDict]:
    """The config file's get_config() without overrides, or None if it cannot load."""
    try:
        return _load_module(path_arg).get_config(*path_arg.split(":", 1)[1:])
    except Exception:  # pylint: disable=broad-except  (diagnostics only)
        return None


def _type_name(field: str, config: Any) -> str:
    try:
        kind = config_path.get_type(field, config)
    except Exception:  # pylint: disable=broad-except
        return ""
    return getattr(kind, "__name__", str(kind))


def _overrides(argv: Sequence[str]) -> list:
    """Field paths named by --config.<path>[=value] / --noconfig.<path> arguments."""
    pattern = re.compile(rf"^--?(?:no)?{CONFIG_FLAG}\.([^=]+)")
    return [m.group(1) for m in map(pattern.match, argv) if m]


def _diagnose(error: Exception, argv: Sequence[str]) -> ConfigError:
    """Turns what absl / ml_collections raised into one ConfigError naming the field."""
    message = str(error)
    path_arg = _config_arg(argv)
    base = _load_base_config(path_arg) if path_arg else None

    m = re.match(rf"^flag --{CONFIG_FLAG}\.([^=\s]+)=(.*?): (.*)$", message, re.S)
    if m:  # the library could not parse the override as the field's type
        field, value, reason = m.groups()
        kind = _type_name(field, base) if base is not None else ""
        if kind == "bool":
            return ConfigError(field, f"expected bool, got {value!r}", "true, false")
        if kind:
            return ConfigError(field, f"expected {kind}, got {value!r}", kind)
        return ConfigError(field, reason.splitlines()[0])
    m = re.match(r"^Missing value for flag --(\S+)", message)
    if m:
        return ConfigError(m.group(1).removeprefix(CONFIG_FLAG + "."), "missing value")
    m = re.match(r"^Unknown command line flag '([^']+)'", message)
    if m:
        return ConfigError(f"--{m.group(1)}", "unknown flag",
                           f"--{CONFIG_FLAG}=path.py and --{CONFIG_FLAG}.<field>=<value>")
    if base is None and path_arg is not None:
        return ConfigError(CONFIG_FLAG, f"cannot load {path_arg!r}: "
                           f"{message.strip().splitlines()[-1].strip()}",
                           "a Python file with get_config()")
    if base is not None:
        for field in _overrides(argv):
            if not _has_field(base, field):
                return _unknown_field_error(field, base)
        if "is not supported for overriding" in message:
            field = next((f for f in _overrides(argv)
                          if config_path.get_value(f, base) is None), "?")
            return ConfigError(field, "the default is None, so the type is unknown",
                               "declare it with ml_collections.config_dict.placeholder(type)")
    lines = [l.strip() for l in message.strip().splitlines() if l.strip()]
    return ConfigError("argv", lines[-1] if lines else type(error).__name__)


def _config_flag(flag_values: flags.FlagValues, argv: Sequence[str]) -> Any:
    if CONFIG_FLAG not in flag_values:
        config_flags.DEFINE_config_file(CONFIG_FLAG, None, "path to the config file",
                                        flag_values=flag_values, sys_argv=list(argv))
    return flag_values[CONFIG_FLAG]


def parse_config(argv: Optional[Sequence[str]] = None, *,
                 constraints: Optional[Constraints] = None,
                 default: Optional[str] = None,
                 flag_values: Optional[flags.FlagValues] = None) -> ml_collections.ConfigDict:
    """Loads `--config path.py[:arg]`, applies `--config.<field>=<value>` overrides, validates.

    Args:
      argv: command line (absl style, argv[0] the program; a list that starts with a
        flag is accepted as sys.argv[1:]). Defaults to sys.argv.
      constraints: extra {field: allowed values | Range}, merged over the config file's
        get_constraints().
      default: config path used when --config is absent.
      flag_values: absl FlagValues to parse into (default: a fresh one, so it can be
        called any number of times; run_main passes absl.flags.FLAGS).
    Returns:
      The config (a locked ConfigDict: fields can change, none can be added).
    Raises:
      ConfigError: for any problem, before any work is done.
    """
    argv = _normalise_argv(argv)
    if default is not None and _config_arg(argv) is None:
        argv = argv[:1] + [f"--{CONFIG_FLAG}={default}"] + argv[1:]
    fv = flags.FlagValues() if flag_values is None else flag_values
    _config_flag(fv, argv)
    try:
        rest = fv(argv)
        config = getattr(fv, CONFIG_FLAG)
        if config is not None and not isinstance(config, ml_collections.ConfigDict):
            _ = config.keys  # a file that failed to load raises its OSError on access
    except ConfigError:
        raise
    except (flags.Error, AttributeError, KeyError, OSError, ImportError, TypeError,
            ValueError, SyntaxError) as e:
        raise _diagnose(e, argv) from None
    if config is None:
        raise ConfigError(CONFIG_FLAG, "missing", f"--{CONFIG_FLAG}=path/to/config.py")
    if not isinstance(config, ml_collections.ConfigDict):
        raise ConfigError(CONFIG_FLAG, f"get_config() returned {type(config).__name__}",
                          "an ml_collections.ConfigDict")
    if len(rest) > 1:
        raise ConfigError("argv", f"unexpected positional argument(s) {rest[1:]}",
                          f"--{CONFIG_FLAG}=path.py and --{CONFIG_FLAG}.<field>=<value>")
    merged: Dict[str, Any] = dict(_file_constraints(_config_arg(argv)))
    merged.update(constraints or {})
    validate(config, merged)
    return config


def _file_constraints(path_arg: Optional[str]) -> Constraints:
    """The config file's get_constraints(), or {} when it defines none."""
    if not path_arg:
        return {}
    fn = getattr(_load_module(path_arg), CONSTRAINTS_FN, None)
    return dict(fn()) if fn is not None else {}


# ----------------------------------------------------------------------------- scripts

def exit_config_error(error: ConfigError) -> None:
    """Prints `config error: ...` as one line to stderr and exits with status 2."""
    sys.stderr.write(f"config error: {error}\n")
    sys.stderr.flush()
    sys.exit(EXIT_CONFIG_ERROR)


def run_main(main_fn: Callable[[ml_collections.ConfigDict], Any],
             argv: Optional[Sequence[str]] = None, *,
             constraints: Optional[Constraints] = None,
             default: Optional[str] = None) -> None:
    """absl.app.run for config scripts: parse + validate, then `main_fn(config)`.

    absl's own flags (--verbosity, --helpfull, --pdb_post_mortem ...) keep working: the
    config flag is parsed into absl.flags.FLAGS. A ConfigError from parsing or from
    main_fn exits with status 2 and one line on stderr; other exceptions propagate.
    """
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


cli = run_main


# ----------------------------------------------------------------------------- saving

def config_to_dict(config: Any) -> Dict[str, Any]:
    """A JSON-compatible dict of a ConfigDict (or a plain mapping); tuples become lists."""
    if isinstance(config, ml_collections.ConfigDict):
        return json.loads(config.to_json_best_effort())
    return json.loads(json.dumps(dict(config), default=repr))


def config_to_json(config: Any, indent: int = 2) -> str:
    """Stable JSON text of a config (sorted keys), for config.json."""
    return json.dumps(config_to_dict(config), indent=indent, sort_keys=True) + "\n"
