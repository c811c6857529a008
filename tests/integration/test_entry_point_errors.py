"""A bad value stops every entry point with one line naming the field (exit 2 from a
script): the CLI, the table scripts' variants (run_grid, from_warm_start), reproduce and
the library edge (build_learner via the typed configs).

Integration test across packages (asct_jax.infra.config_cli, experiments' scripts and
harness, asct_jax.rl.build): no one entry point, hence tests/integration."""
import glob
import importlib
import os
import subprocess
import sys

import pytest

from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError
from experiments.configs import base
from experiments.harness import registry, runner
from tests.helpers import REPO_ROOT

REPO = REPO_ROOT
# The run configs (reproduce.py holds the main job's options, the folders the tools',
# options.py their shape).
CONFIGS = sorted(os.path.basename(p)[:-3] for p in glob.glob(
    os.path.join(REPO, "experiments", "configs", "*.py"))
    if not p.endswith(("__init__.py", "reproduce.py", "options.py")))


@pytest.mark.parametrize("name", CONFIGS)
def test_every_shipped_config_passes_its_constraints_and_the_typed_configs(name):
    module = importlib.import_module(f"experiments.configs.{name}")
    config = module.get_config()
    config_cli.validate(config, getattr(module, "get_constraints", dict)())
    methods = config.get("table", {}).get("methods", None) or [config.method]
    for m in methods:
        c = config.copy_and_resolve_references()
        c.method = m
        registry.check(c)


@pytest.mark.parametrize("field,value", [
    ("factor.tau", -1.0), ("factor.outcome", "most"), ("asct.trials", 0),
    ("asct.continuation", "twice"), ("gigpo.mode", "minmax"), ("serl.lam0", 2.0),
    ("vineppo.k", 0), ("ppo.aggregation", "sum"), ("ppo.return_baseline", "mean"),
    ("asct.actor_token_unit", "bytes"),
])
def test_typed_configs_name_the_field(field, value):
    c = base.get_config()
    section, _, name = field.rpartition(".")
    node = c
    for part in section.split("."):
        node = node[part]
    node[name] = value
    owners = {"factor": "factor", "asct": "asct_uct", "gigpo": "gigpo", "serl": "serl",
              "vineppo": "vineppo", "ppo": "ppo_return"}
    c.method = owners[field.split(".")[0]]
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        registry.check(c)


@pytest.mark.parametrize("overrides,field", [
    ({"method": "factor", "factor.tau": 0.0}, "factor.tau"),
    ({"method": "nope"}, "method"),
    ({"rollout.num_groups": 0}, "rollout.num_groups"),
    ({"rollout.num_groups": "two"}, "rollout.num_groups"),
    ({"factor.no_such_field": 1}, "factor.no_such_field"),
    ({"actor.chooser": "sample"}, "actor.chooser"),
    ({"actor.top_p": 1.5}, "actor.top_p"),
])
def test_run_grid_checks_every_variant_before_training(tmp_path, overrides, field):
    c = base.get_config()
    c.train.results_dir = str(tmp_path)
    trained = []
    variants = [("good", {"method": "grpo"}), ("bad", overrides)]
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        runner.run_grid(c, variants, (42,), "grid", train=lambda *a, **k: trained.append(a))
    assert trained == []   # nothing trained: the bad variant is found first
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        runner.from_warm_start(c, overrides)


def test_a_table_script_exits_2_with_one_line(tmp_path):
    p = subprocess.run([sys.executable, "-m", "experiments.tables.factor_table",
                        "--config", os.path.join(REPO, "experiments/configs/factor_table.py"),
                        "--config.factor.tau=-1", f"--config.train.results_dir={tmp_path}"],
                       capture_output=True, text=True, cwd=REPO, timeout=300,
                       env=dict(os.environ, JAX_PLATFORMS="cpu"))
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "factor.tau" in lines[0], p.stderr


def test_the_factor_table_refuses_grpo_extended_without_its_references_before_training(
        tmp_path):
    """grpo_extended's batch is FACTOR's environment calls over GRPO's: without both in
    the table it is a one-line config error before any run (it was a traceback after the
    other methods' runs)."""
    from experiments.configs import factor_table as factor_table_config
    from experiments.tables import factor_table
    c = factor_table_config.get_config("smoke")
    c.train.results_dir = str(tmp_path)
    c.table.methods = ("factor_no_apm", "grpo_extended")
    with pytest.raises(ConfigError, match=r"^table.methods: .*allowed: grpo_extended with"):
        factor_table.main(c)
    assert not os.listdir(tmp_path)


def test_reproduce_rejects_a_bad_argument_with_exit_2():
    p = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--config.only=nothing"],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("config error: only: "), p.stderr


def test_reproduce_sets_the_xla_opt_level_once_and_refuses_a_second_one(monkeypatch):
    from experiments import reproduce
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_thunk_runtime=true")
    reproduce.use_xla_opt_level("default")
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_use_thunk_runtime=true"
    reproduce.use_xla_opt_level("1")
    assert os.environ["XLA_FLAGS"].split() == ["--xla_cpu_use_thunk_runtime=true",
                                               "--xla_backend_optimization_level=1"]
    with pytest.raises(ConfigError, match=r"^xla_opt_level: "):
        reproduce.use_xla_opt_level("1")

