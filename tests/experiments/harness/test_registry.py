"""experiments.harness.registry: the registry is the packages' METHODS tuples in
dependency order (asct_jax.rl, asct_jax.search, factor_jax), each name once (a name
defined twice stops the import); `get` resolves every registered name to its package's
own Method and refuses any other name with a one-line ConfigError naming every allowed
value; `check` resolves config.method for every method and types its config, and refuses
a bad value of the method's own config (one line naming the field and the allowed
values) while a field the run does not read does not stop it.

(That names are unique, that get(n).name == n and the error's start are in
tests/asct_jax/rl/test_credit_methods.py; substrate sections through `check` in
tests/asct_jax/rl/test_run_config.py.)"""
import importlib.util

import pytest
from hypothesis import given, strategies as st

from asct_jax.infra.checks import ConfigError
from asct_jax.rl import methods as rl_methods
from asct_jax.search import methods as search_methods
from experiments.configs import base
from experiments.harness import registry
from factor_jax import asct_factor, baselines
from factor_jax import methods as factor_methods

PACKAGES = (rl_methods, search_methods, factor_methods, baselines, asct_factor)


def test_the_registry_is_the_packages_methods_in_dependency_order():
    records = [m for package in PACKAGES for m in package.METHODS]
    assert registry.names() == tuple(m.name for m in records)
    for m in records:
        assert registry.get(m.name) is m


def test_a_method_defined_twice_stops_the_import(monkeypatch):
    """A fresh copy of the module (the imported one is left alone) over a package that
    defines grpo again."""
    grpo = registry.get("grpo")
    monkeypatch.setattr(baselines, "METHODS", (*baselines.METHODS, grpo))
    spec = importlib.util.spec_from_file_location("registry_copy", registry.__file__)
    with pytest.raises(ValueError, match=r"^credit method 'grpo' is defined twice$"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


@given(st.text(max_size=12).filter(lambda s: s not in registry.METHODS))
def test_an_unknown_name_is_one_line_naming_every_allowed_method(name):
    for call in (lambda: registry.get(name), lambda: registry.check(_config(name))):
        with pytest.raises(ConfigError) as e:
            call()
        assert (e.value.field, e.value.allowed) == ("method", ", ".join(registry.names()))
        assert e.value.problem == f"unknown credit method {name!r}"
        assert len(str(e.value).splitlines()) == 1 and str(e.value).startswith("method: ")


def test_a_name_resolves_only_as_registered():
    for near in ("GRPO", " grpo", "grpo.", "factor_no"):
        with pytest.raises(ConfigError):
            registry.get(near)


def _config(method):
    c = base.get_config()
    c.method = method
    return c


@pytest.mark.parametrize("name", registry.names())
def test_check_types_the_config_of_every_method(name):
    config = _config(name)
    method, run = registry.check(config)
    assert method is registry.get(name)
    assert run.method == name and run.typed_for == name
    assert run.method_config == method.make_config(config)


@pytest.mark.parametrize("name, field, value, allowed", [
    ("factor", "factor.critic_polyak", 1.0, "[0.0, 1.0)"),
    ("asct_factor", "factor.tau", 0.0, "(0.0, inf)"),
    ("asct_uct", "asct.trials", 0, "int in [1, inf)"),
    ("vineppo", "vineppo.k", 0, "int in [1, inf)"),
    ("ppo_gae", "ppo.gae_lambda", 1.5, "[0.0, 1.0]"),
    ("gigpo", "gigpo.omega", -1.0, "[0.0, inf)"),
    ("serl", "serl.lam0", 2.0, "[0.0, 1.0]"),
    ("grpo", "grpo.stats", "turns", "steps, episodes"),
])
def test_check_refuses_a_bad_value_of_the_methods_own_config(name, field, value, allowed):
    config = _config(name)
    section, key = field.split(".")
    config[section][key] = value
    with pytest.raises(ConfigError) as e:
        registry.check(config)
    assert e.value.field == field and e.value.allowed == allowed
    assert len(str(e.value).splitlines()) == 1 and str(e.value).startswith(f"{field}: ")
    config.method = "ppo_gae" if name == "grpo" else "grpo"     # a run that does not read it
    registry.check(config)
