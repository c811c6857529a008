"""What stored configs' fields read as today (experiments/harness/stored_fields.py): old
names renamed, retired fields dropped where they changed nothing, added fields at the value
they had; and the warm starts' names survive the renames."""
import json
import os

from hypothesis import given, strategies as st

from experiments.configs.base import _nest, get_config
from experiments.harness import stored_fields, warm_start
from experiments.harness.dotted import flatten
from experiments.harness.stored_fields import RENAMED_FIELDS, as_current, renamed


def _old_named(flat):
    old = {new: old for old, new in RENAMED_FIELDS.items()}
    return {old.get(k, k): v for k, v in flat.items()}


def test_a_config_stored_under_the_old_names_reads_as_today():
    from asct_jax.infra.config_cli import config_to_dict

    today = flatten(config_to_dict(get_config()))
    stored = _old_named(today)
    assert set(RENAMED_FIELDS) <= set(stored) and not set(RENAMED_FIELDS.values()) & set(stored)
    current = as_current(_nest(stored))
    assert {k: current[k] for k in today} == today


@given(st.dictionaries(st.sampled_from(sorted(RENAMED_FIELDS) + ["ppo.lr", "warm_start.lr"]),
                       st.integers()))
def test_renamed_is_idempotent_and_leaves_other_fields(flat):
    once = renamed(flat)
    assert renamed(once) == once and len(once) == len(flat)
    assert all(once[k] == v for k, v in flat.items() if k not in RENAMED_FIELDS)


def test_every_shipped_warm_start_keeps_its_name_across_the_renames():
    """A shipped warm start's config.json holds the old names; its name still hashes
    them, read under the new ones."""
    for name in os.listdir(warm_start.ARTIFACTS):
        with open(os.path.join(warm_start.ARTIFACTS, name, "config.json")) as f:
            flat = flatten(json.load(f))
        assert "warm_start.teacher" in flat     # stored before the renames
        fields = warm_start.depends_on(flat)
        assert "warm_start.imitated" in fields and "warm_start.teacher" not in fields
        assert warm_start.name_of(flat["env.name"], fields) == name


def test_the_renamed_fields_are_fields_of_today():
    today = flatten(get_config().to_dict())
    assert all(new in today and old not in today for old, new in RENAMED_FIELDS.items())
    assert set(RENAMED_FIELDS.values()) <= set(stored_fields.ADDED_DEFAULTS) | set(today)
