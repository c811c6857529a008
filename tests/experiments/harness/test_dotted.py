"""experiments.harness.dotted: `flatten` (nested dict -> dotted field names, undone by
its inverse experiments.configs.base._nest), `apply_overrides` (a copy with dotted fields
set: the other fields, the leaves' types and the original untouched; an unknown field or
a value of the wrong type for a ConfigDict field is a one-line ConfigError naming the
field and what is allowed) and `under` (a key is one of the prefixes or a field below
one, on "." bounds)."""
import copy

import ml_collections
import pytest
from hypothesis import given, strategies as st

from asct_jax.infra.checks import ConfigError
from experiments.configs.base import _nest as unflatten     # "flatten's inverse"
from experiments.harness.dotted import apply_overrides, flatten, under

NAME = st.text(alphabet="abcxyz_", min_size=1, max_size=4)   # a field name: no "."
LEAF = st.one_of(st.integers(-5, 5), st.floats(-2, 2, allow_nan=False), st.text(max_size=3),
                 st.booleans(), st.none(), st.tuples(st.integers(0, 3), st.text(max_size=2)))
# Nested dicts with non-empty sections (an empty section has no dotted field).
NODE = st.recursive(LEAF, lambda inner: st.dictionaries(NAME, inner, min_size=1, max_size=3),
                    max_leaves=6)
TREE = st.dictionaries(NAME, NODE, min_size=1, max_size=3)


def _leaves(tree, path=()):
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from _leaves(v, path + (k,))
        else:
            yield path + (k,), v


@given(TREE)
def test_flatten_names_every_leaf_by_its_path_and_unflattens_back(tree):
    flat = flatten(tree)
    leaves = dict(_leaves(tree))
    assert set(flat) == {".".join(p) for p in leaves}
    for path, value in leaves.items():
        assert flat[".".join(path)] is value          # the leaf itself: type and all
    assert unflatten(flat) == tree
    assert flatten(tree, "run.") == {"run." + k: v for k, v in flat.items()}


@given(TREE, st.data())
def test_overrides_set_their_fields_on_a_copy_and_keep_the_rest(tree, data):
    before = copy.deepcopy(tree)
    flat = flatten(tree)
    chosen = data.draw(st.lists(st.sampled_from(sorted(flat)), unique=True))
    overrides = {k: data.draw(LEAF) for k in chosen}
    out = apply_overrides(tree, overrides)
    assert tree == before                                      # the original untouched
    new = flatten(out)
    assert new == {**flat, **overrides}
    assert all(type(new[k]) is type(v) for k, v in {**flat, **overrides}.items())
    # a deep copy: changing the result's sections leaves the original's alone
    for section in out.values():
        if isinstance(section, dict):
            section.clear()
    assert tree == before


@given(TREE, NAME)
def test_an_unknown_field_is_a_one_line_error_naming_the_fields_there(tree, name):
    section = next((k for k, v in tree.items() if isinstance(v, dict)), None)
    node, prefix = (tree[section], section + ".") if section else (tree, "")
    if name in node:
        name += "_new"
    with pytest.raises(ConfigError) as e:
        apply_overrides(tree, {prefix + name: 1})
    assert str(e.value) == (f"{prefix}{name}: unknown field (override); allowed: "
                            + ", ".join(sorted(node)))


def test_a_configdict_field_keeps_its_type():
    c = ml_collections.ConfigDict({"train": {"steps": 3, "lr": 0.5, "name": "a",
                                             "seeds": (1, 2)}})
    out = apply_overrides(c, {"train.lr": 1, "train.seeds": (4,), "train.steps": 7})
    assert type(out.train.lr) is float and out.train.lr == 1.0
    assert out.train.seeds == (4,) and out.train.steps == 7
    assert c.train.lr == 0.5 and c.train.steps == 3 and c.train.seeds == (1, 2)
    for field, value, kind in [("train.steps", "many", "int"), ("train.steps", 2.5, "int"),
                               ("train.name", 3, "str")]:
        with pytest.raises(ConfigError, match=rf"^{field}: {value!r} has the wrong type") as e:
            apply_overrides(c, {field: value})
        assert "\n" not in str(e.value) and str(e.value).endswith(f"; allowed: {kind}")
    with pytest.raises(ConfigError, match=r"^train\.epochs: unknown field \(override\); "
                                          r"allowed: lr, name, seeds, steps$"):
        apply_overrides(c, {"train.epochs": 2})


@pytest.mark.parametrize("dotted", ["nope.lr", "train.steps.x"])
def test_an_unknown_section_is_a_config_error_too(dotted):
    with pytest.raises(ConfigError, match=rf"^{dotted}: "):
        apply_overrides({"train": {"steps": 3}}, {dotted: 1})


PATH = st.lists(NAME, min_size=1, max_size=3)


@given(PATH, st.lists(PATH, max_size=3))
def test_under_is_a_prefix_on_field_bounds(key, prefixes):
    expect = any(key[:len(p)] == p for p in prefixes)
    assert under(".".join(key), [".".join(p) for p in prefixes]) == expect
    assert under(".".join(key), (".".join(p) for p in prefixes)) == expect   # any iterable


def test_under_examples():
    assert under("ppo", ["ppo"]) and under("ppo.lr", ["ppo"]) and under("a.b.c", ["x", "a.b"])
    assert not under("ppo_gae.lr", ["ppo"]) and not under("ppox", ["ppo"])
    assert not under("ppo", ["ppo.lr"]) and not under("ppo.lr", [])
