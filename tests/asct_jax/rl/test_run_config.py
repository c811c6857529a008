"""The run's typed config (asct_jax.rl.run_config): every field of the base config is read
on some path and every typed field is in it, defaults match, ADDED_DEFAULTS comes from
the typed defaults, bad values are one-line errors naming the field."""
import dataclasses

import ml_collections
import pytest

from asct_jax.infra.checks import ConfigError
from asct_jax.infra.config_cli import config_to_dict
from asct_jax.rl.run_config import SECTIONS, RunConfig, default_of, run_config
from experiments.configs import base
from experiments.harness import registry, stored_fields


class _Recorder:
    """A ConfigDict seen through item and attribute access, recording each dotted path
    read (a section read whole, e.g. env.options, counts for every leaf under it)."""

    def __init__(self, node, path, seen):
        self._node, self._path, self._seen = node, path, seen

    def _child(self, key):
        path = f"{self._path}.{key}" if self._path else key
        self._seen.add(path)
        value = self._node[key]
        return _Recorder(value, path, self._seen) if isinstance(
            value, ml_collections.ConfigDict) and key not in ("options", "eval_options",
                                                               "sft_steps") else value

    def __getitem__(self, key):
        return self._child(key)

    def __getattr__(self, key):
        if key.startswith("_") or key not in self._node:
            return getattr(self._node, key)
        return self._child(key)

    def __contains__(self, key):
        return key in self._node

    def keys(self):
        return self._node.keys()

    def get(self, key, default=None):
        return self._child(key) if key in self._node else default


def _leaves(node, prefix=""):
    """Dotted leaves of a config dict; an empty section counts as a leaf."""
    out = set()
    for k, v in node.items():
        if isinstance(v, dict) and v:
            out |= _leaves(v, f"{prefix}{k}.")
        else:
            out.add(prefix + k)
    return out


def test_every_field_of_the_base_config_is_read_by_some_typed_config():
    config = base.get_config()
    seen = set()
    run_config(_Recorder(config, "", seen))
    for name in registry.names():                 # the methods' own sections
        registry.get(name).make_config(_Recorder(config, "", seen))
    unread = sorted(k for k in _leaves(config_to_dict(config))
                    if not any(k == s or k.startswith(s + ".") for s in seen))
    assert unread == []


def test_every_typed_field_is_in_the_base_config_with_the_same_default():
    config = base.get_config()
    for cls, section in SECTIONS:
        node = config
        for part in section.split("."):
            node = node[part]
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(f.type) or f.name == "distributed":
                continue
            assert f.name in node, f"{section}.{f.name}"
            if f.default is not dataclasses.MISSING:
                value = node[f.name]
                value = tuple(value) if isinstance(value, list) else value
                assert value == f.default, f"{section}.{f.name}"


def test_added_defaults_come_from_the_typed_defaults():
    assert stored_fields.ADDED_DEFAULTS == {
        "train.init_from": "", "actor.chooser": "candidates", "actor.response_len": 24,
        "actor.history": 2, "actor.temperature": 1.0, "actor.top_p": 1.0,
        "actor.invalid_penalty": 0.1, "actor.continuations": "chooser",
        "actor.think": "required", "actor.logits_chunk": 2 ** 24,
        "model.attention_block": 0, "model.value_detached": False,
        "policy.prompt_widths": 3, "warm_start.label_smoothing": 0.0,
        "warm_start.phase": "none", "warm_start.phase_steps": 100,
        "warm_start.reasoning": "empty",
        "train.eval_split": "test", "train.validation_seed": 20270611,
        # FACTOR's (experiments/harness/stored_fields.py ADDED_FACTOR_FIELDS): the authors' warm-up
        "factor.critic_start": "warmup", "factor.prefit_batches": 4,
        "factor.prefit_critic_steps": 100}
    assert all(stored_fields.ADDED_DEFAULTS[k] == default_of(k) for k in stored_fields.ADDED_FIELDS)
    # asct.actor_token_unit changes the summaries' T_aux: a run stored without it is not
    # reused as if it had it
    assert "asct.actor_token_unit" not in stored_fields.ADDED_DEFAULTS
    with pytest.raises(KeyError):
        default_of("train.steps")                  # required: no default


def test_the_run_config_is_built_once_and_passes_through():
    config = base.get_config()
    method, run = registry.check(config)
    assert isinstance(run, RunConfig) and run.method_config == method.make_config(config)
    assert run_config(run, method) is run
    given = config_to_dict(config)
    assert {k: v for k, v in run.record.items() if k != "ppo"} == {
        k: v for k, v in given.items() if k != "ppo"}
    # config.json records the resolved protocol beside the ppo fields as given.
    assert run.record["ppo"] == dict(given["ppo"], **dataclasses.asdict(run.ppo))
    assert run.model.shape_overrides()["hidden_size"] == 64
    assert run.train.distributed.barrier_timeout == 900
    assert run.warm_start.sft_steps["shop"] == 100
    with pytest.raises(ValueError, match="typed for None"):
        run_config(run_config(config), method)
    with pytest.raises(ValueError, match="typed for 'grpo'"):
        run_config(run, registry.get("ppo_gae"))


@pytest.mark.parametrize("field,value", [
    ("actor.top_p", 0.0), ("actor.chooser", "beam"), ("model.lora_rank", -1),
    ("rollout.group_size", 0), ("train.fsdp", 0), ("warm_start.sft_steps.shop", -1),
    ("train.distributed.process_id", -2), ("policy.label_score", "max"),
    ("warm_start.label_smoothing", 1.0),
])
def test_a_bad_value_is_a_one_line_error_naming_the_field(field, value):
    config = base.get_config()
    *parents, name = field.split(".")
    node = config
    for p in parents:
        node = node[p]
    node[name] = value
    with pytest.raises(ConfigError, match=rf"^{field}: ") as e:
        registry.check(config)
    assert "\n" not in str(e.value) and "allowed: " in str(e.value)
