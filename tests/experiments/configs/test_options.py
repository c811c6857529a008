"""experiments.configs.options.tool_options: a tool's options in order, no arg."""
import os

import ml_collections
import pytest

from asct_jax.infra.config_cli import ConfigError, config_to_dict, parse_config
from experiments.configs.options import tool_options
from tests.helpers import REPO_ROOT


def test_the_fields_in_order_with_their_types():
    c = tool_options("bench demo", "", out="results/x.json", jobs=2, min_time=0.5,
                     only=(), force=False)
    assert isinstance(c, ml_collections.ConfigDict)
    # keys() is sorted; the order given is what config.json (config_to_dict) writes
    assert list(config_to_dict(c)) == ["out", "jobs", "min_time", "only", "force"]
    assert c.to_dict() == {"out": "results/x.json", "jobs": 2, "min_time": 0.5, "only": (),
                           "force": False}
    assert {k: c.get_type(k) for k in c.keys()} == {
        "out": str, "jobs": int, "min_time": float, "only": tuple, "force": bool}


def test_an_arg_is_a_one_line_error_naming_the_tool():
    with pytest.raises(ValueError) as e:
        tool_options("bench demo", "quick", out="")
    assert str(e.value) == "bench demo config takes no arg, got 'quick'"


def test_a_tool_config_given_an_arg_fails_in_one_line():
    path = os.path.join(REPO_ROOT, "experiments", "configs", "harness", "curves.py")
    assert parse_config([f"--config={path}"]).metric == "eval/env/success"
    with pytest.raises(ConfigError) as e:
        parse_config([f"--config={path}:quick"])
    assert "ValueError: curves config takes no arg, got 'quick'" in str(e.value)
    assert "\n" not in str(e.value)
