"""The shape of a tool's options config (experiments/configs/<folder>/<module>.py): fields
with defaults and no arg.

    def get_config(arg: str = ""):
        return tool_options("curves", arg, dir="", metric="eval/env/success")

Not for experiments/configs/bench/compile.py: an `against` child loads that file beside
another revision's package, which may lack this module.
"""
import ml_collections


def tool_options(tool: str, arg: str, **fields) -> ml_collections.ConfigDict:
    """A ConfigDict of `fields`, in order; ValueError (one line, naming `tool`) if an arg
    was given (`--config <file>.py:<arg>`)."""
    if arg:
        raise ValueError(f"{tool} config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    for name, value in fields.items():
        c[name] = value
    return c
