"""Tests for asct_jax.infra.config_cli: overrides, validation, one-line exit-2 errors."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from asct_jax.infra import config_cli
from asct_jax.infra.config_cli import ConfigError, Range, parse_config
from tests.helpers import REPO_ROOT
from tests.helpers.config import config_to_json

REPO = REPO_ROOT

CONFIG_FILE = textwrap.dedent('''
    import ml_collections
    from ml_collections import config_dict
    from asct_jax.infra.config_cli import Range

    def get_config():
        c = ml_collections.ConfigDict()
        c.method = "ppo_gae"
        c.seed = 42
        c.use_kl = True
        c.env = ml_collections.ConfigDict({"name": "rag_workflow", "max_turns": 6})
        c.optim = ml_collections.ConfigDict({"lr": 1e-3, "num_steps": 10})
        c.eval_envs = ("rag_workflow",)
        c.budget = config_dict.placeholder(int)
        return c

    def get_constraints():
        return {
            "method": ("ppo_gae", "grpo", "vineppo"),
            "env.name": ("rag_workflow", "household"),
            "optim.lr": Range(0.0, 1.0, lo_open=True),
            "optim.num_steps": Range(1, None, integer=True),
            "eval_envs": ("rag_workflow", "household", "shop"),
        }
''')

SCRIPT = textwrap.dedent('''
    import sys
    from asct_jax.infra import config_cli

    def main(config):
        if config.optim.num_steps == 7:
            raise config_cli.ConfigError("optim.num_steps", "7 is unlucky", "anything else")
        print("RAN", config.method, config.optim.lr, config.env.max_turns)

    if __name__ == "__main__":
        config_cli.run_main(main)
''')


@pytest.fixture()
def cfg(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text(CONFIG_FILE)
    return str(path)


def test_overrides_nested_space_form_and_bools(cfg):
    c = parse_config(["prog", "--config", cfg, "--config.optim.lr=0.5",
                      "--config.env.max_turns", "9", "--noconfig.use_kl",
                      "--config.method", "grpo", "--config.eval_envs=('shop', 'household')",
                      "--config.budget=100"])
    assert c.optim.lr == 0.5 and c.env.max_turns == 9 and c.use_kl is False
    assert c.method == "grpo" and c.eval_envs == ("shop", "household") and c.budget == 100
    # argv without a program name (sys.argv[1:]) works too; ints widen to float fields.
    c = parse_config([f"--config={cfg}", "--config.optim.lr=1"])
    assert c.optim.lr == 1.0 and isinstance(c.optim.lr, float)
    # The config is locked: no new fields at run time.
    with pytest.raises(AttributeError):
        c.new_field = 1


def test_default_config_and_extra_constraints(cfg):
    assert parse_config(["prog"], default=cfg).seed == 42
    with pytest.raises(ConfigError, match="seed: 42 is out of range"):
        parse_config(["prog"], default=cfg, constraints={"seed": Range(0, 10)})


@pytest.mark.parametrize("override,field,problem", [
    ("--config.optim.lrr=0.1", "optim.lrr", "unknown field (did you mean optim.lr?)"),
    ("--config.nothing=1", "nothing", "unknown field"),
    ("--config.optim.num_steps=1.5", "optim.num_steps", "expected int, got '1.5'"),
    ("--config.optim.lr=fast", "optim.lr", "expected float, got 'fast'"),
    ("--config.use_kl=maybe", "use_kl", "expected bool, got 'maybe'"),
    ("--config.method=dqn", "method", "'dqn' is not allowed"),
    ("--config.env.name=chess", "env.name", "'chess' is not allowed"),
    ("--config.optim.lr=0", "optim.lr", "0.0 is out of range"),
    ("--config.optim.num_steps=0", "optim.num_steps", "0 is out of range"),
    ("--config.eval_envs=('shop', 'chess')", "eval_envs", "'chess' is not allowed"),
    ("--config.optim.num_steps", "optim.num_steps", "missing value"),
])
def test_errors_name_the_field(cfg, override, field, problem):
    with pytest.raises(ConfigError) as info:
        parse_config(["prog", f"--config={cfg}", override])
    assert info.value.field == field
    assert info.value.problem == problem
    assert "\n" not in str(info.value)


def test_allowed_lists(cfg):
    with pytest.raises(ConfigError) as info:
        parse_config(["prog", f"--config={cfg}", "--config.method=dqn"])
    assert str(info.value) == "method: 'dqn' is not allowed; allowed: ppo_gae, grpo, vineppo"
    with pytest.raises(ConfigError) as info:
        parse_config(["prog", f"--config={cfg}", "--config.optim.lr=2"])
    assert str(info.value).endswith("allowed: (0.0, 1.0]")
    with pytest.raises(ConfigError) as info:
        parse_config(["prog", f"--config={cfg}", "--config.optim.x=2"])
    assert info.value.allowed == "optim.lr, optim.num_steps"


def test_missing_broken_and_stray(cfg, tmp_path):
    with pytest.raises(ConfigError, match="^config: missing"):
        parse_config(["prog"])
    with pytest.raises(ConfigError, match="^config: cannot load"):
        parse_config(["prog", f"--config={tmp_path}/nope.py"])
    with pytest.raises(ConfigError, match="unexpected positional"):
        parse_config(["prog", f"--config={cfg}", "stray"])
    with pytest.raises(ConfigError, match="^--bogus: unknown flag"):
        parse_config(["prog", f"--config={cfg}", "--bogus=1"])


def test_config_to_json(cfg):
    c = parse_config(["prog", f"--config={cfg}"])
    data = json.loads(config_to_json(c))
    assert data["optim"] == {"lr": 1e-3, "num_steps": 10}
    assert data["eval_envs"] == ["rag_workflow"] and data["budget"] is None


def _run_script(tmp_path, cfg, *args):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, str(script), f"--config={cfg}", *args],
                          capture_output=True, text=True, env=env, timeout=60, check=False)


@pytest.mark.parametrize("args,line", [
    (("--config.optim.lrr=0.1",),
     "config error: optim.lrr: unknown field (did you mean optim.lr?); "
     "allowed: optim.lr, optim.num_steps"),
    (("--config.optim.num_steps=ten",),
     "config error: optim.num_steps: expected int, got 'ten'; allowed: int"),
    (("--config.method=dqn",),
     "config error: method: 'dqn' is not allowed; allowed: ppo_gae, grpo, vineppo"),
    (("--config.optim.num_steps=7",),
     "config error: optim.num_steps: 7 is unlucky; allowed: anything else"),
])
def test_script_exits_2_with_one_line(tmp_path, cfg, args, line):
    proc = _run_script(tmp_path, cfg, *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [line]
    assert "Traceback" not in proc.stderr and "RAN" not in proc.stdout


def test_script_runs(tmp_path, cfg):
    proc = _run_script(tmp_path, cfg, "--config.method", "grpo", "--config.env.max_turns=3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "RAN grpo 0.001 3"


def test_shared_validator():
    from asct_jax.infra import checks
    checks.check_choice("mode", "a", ("a", "b"))
    checks.check_choice("fn", len, ("a",), allow_callable=True)
    with pytest.raises(ValueError) as info:  # ConfigError is a ValueError
        checks.check_choice("mode", "c", ("a", "b"))
    assert str(info.value) == "mode: 'c' is not allowed; allowed: a, b"
    checks.check_range("tau", object(), lo=0.0, lo_open=True)  # non-static values pass
    with pytest.raises(ConfigError, match=r"^tau: 0.0 is out of range; allowed: \(0.0, inf\)$"):
        checks.check_range("tau", 0.0, lo=0.0, lo_open=True)
    import factor_jax._checks as fc
    assert fc.check_choice is checks.check_choice and fc.check_range is checks.check_range


def test_base_constraints_come_from_the_modules():
    from experiments.configs import base
    from factor_jax.methods import OUTCOMES
    from asct_jax.rl.protocol import PROTOCOLS
    cons = base.get_constraints()
    # ppo's protocol fields are None (the method's) until resolved: checked there.
    assert cons["factor.outcome"] == OUTCOMES and cons["ppo.protocol"] == PROTOCOLS
    assert "factor.train_steps" not in cons   # passed in from train.steps, not a field
    config_cli.validate(base.get_config(), cons)
