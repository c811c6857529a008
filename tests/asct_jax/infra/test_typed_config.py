"""asct_jax.infra.typed_config: `from_section` builds a frozen dataclass from a config
section (a ConfigDict or a mapping, dotted or "" for the config itself), reads only the
dataclass's fields, fills defaults and `extra`, turns lists into tuples and ConfigDicts
into dicts, and refuses a missing field, a missing section or a value outside a field's
rule with a one-line ConfigError `<section>.<field>: <problem>; allowed: <allowed>`;
`constraints`, `describe`, `has_default`, `option_rule` read the fields' declarations."""
import dataclasses

import pytest
from hypothesis import given, strategies as st
from ml_collections import ConfigDict

from asct_jax.infra.checks import ConfigError, Range, check
from asct_jax.infra.typed_config import (constraints, describe, from_section, has_default,
                                         no_config, option, option_rule)

MODES = ("mean", "std", "none")


@dataclasses.dataclass(frozen=True)
class Demo:
    gamma: float = option(Range(0.0, 1.0), "discount")
    mode: str = option(MODES, "how to normalise", "mean")
    steps: int = option(Range(1, None, integer=True), "number of steps", 4)
    tags: tuple = option(("a", "b", "c"), "labels", factory=tuple)
    anything: object = option(None, "no rule", None)
    plain: int = 7                        # an ordinary field: no rule, no meaning


def _error(cls, config, section, **extra):
    with pytest.raises(ConfigError) as e:
        from_section(cls, config, section, **extra)
    text = str(e.value)
    assert "\n" not in text
    return e.value, text


# -- building -------------------------------------------------------------------------

@pytest.mark.parametrize("wrap", [dict, ConfigDict], ids=["dict", "ConfigDict"])
def test_fields_are_read_defaults_filled_and_other_keys_ignored(wrap):
    config = wrap({"demo": {"gamma": 0.5, "steps": 9, "other_method_field": "x"}})
    assert from_section(Demo, config, "demo") == Demo(gamma=0.5, mode="mean", steps=9,
                                                      tags=(), anything=None, plain=7)
    config = wrap({"demo": {"gamma": 1.0, "mode": "none", "tags": ["c", "a"],
                            "anything": {"k": 1}, "plain": -3}})
    got = from_section(Demo, config, "demo")
    assert got == Demo(1.0, "none", 4, ("c", "a"), {"k": 1}, -3)
    assert type(got.anything) is dict


def test_lists_become_tuples_all_the_way_down_and_the_config_is_hashable():
    got = from_section(Demo, {"s": {"gamma": 0.0, "anything": [1, [2, [3]], []]}}, "s")
    assert got.anything == (1, (2, (3,)), ())
    got = from_section(Demo, ConfigDict({"s": {"gamma": 0.0, "tags": ["a", "b"]}}), "s")
    assert got.tags == ("a", "b") and isinstance(got.tags, tuple)
    assert hash(got) == hash(Demo(gamma=0.0, tags=("a", "b")))


def test_a_configdict_value_becomes_a_dict():
    config = ConfigDict({"s": {"gamma": 0.1, "anything": {"inner": {"x": 1}},
                               "plain": [ConfigDict({"y": 2})]}})
    got = from_section(Demo, config, "s")
    assert got.anything == {"inner": {"x": 1}} and type(got.anything) is dict
    assert got.plain == ({"y": 2},) and type(got.plain[0]) is dict


def test_a_dotted_section_walks_nested_sections_and_empty_means_the_config_itself():
    config = ConfigDict({"train": {"method": {"gamma": 0.25}}, "gamma": 0.75})
    assert from_section(Demo, config, "train.method").gamma == 0.25
    assert from_section(Demo, config, "").gamma == 0.75
    assert from_section(Demo, {"gamma": 0.75}, "").gamma == 0.75


def test_extra_fills_fields_and_takes_precedence_over_the_section():
    assert from_section(Demo, {"s": {}}, "s", gamma=0.3).gamma == 0.3   # required, supplied
    got = from_section(Demo, {"s": {"gamma": 0.9, "steps": 2}}, "s", steps=100)
    assert (got.gamma, got.steps) == (0.9, 100)


def test_several_configs_share_one_section():
    @dataclasses.dataclass(frozen=True)
    class Other:
        steps: int = option(Range(1, 10, integer=True), "fewer steps")

    config = {"s": {"gamma": 0.2, "steps": 5}}
    assert from_section(Demo, config, "s").steps == from_section(Other, config, "s").steps == 5
    config["s"]["steps"] = 50
    assert from_section(Demo, config, "s").steps == 50
    e, _ = _error(Other, config, "s")
    assert e.field == "s.steps"


# -- refusals ---------------------------------------------------------------------------

def test_a_missing_required_field_names_section_and_field():
    e, text = _error(Demo, {"gigpo": {"mode": "std"}}, "gigpo")
    assert text == "gigpo.gamma: missing; allowed: a value for this field"
    assert (e.field, e.problem) == ("gigpo.gamma", "missing")
    e, text = _error(Demo, {"mode": "std"}, "")
    assert text.startswith("gamma: missing;")


@pytest.mark.parametrize("section", ["nope", "train.nope", "train.steps.x"])
def test_a_missing_section_is_a_config_error_naming_it(section):
    e, text = _error(Demo, ConfigDict({"train": {"steps": 3}}), section)
    assert e.field == section and e.problem == "missing section"
    assert text.startswith(f"{section}: missing section; allowed: ")


def test_a_section_that_is_a_value_is_a_config_error_naming_it():
    e, _ = _error(Demo, ConfigDict({"train": {"steps": 3}}), "train.steps")
    assert e.field == "train.steps" and e.problem == "a value (3), not a section"


def test_a_single_valued_field_refuses_a_list_of_allowed_values():
    e, _ = _error(Demo, {"m": {"gamma": 0.5, "mode": ["mean", "std"]}}, "m")
    assert e.field == "m.mode" and e.problem.startswith("expected one value")


@pytest.mark.parametrize("field,value,allowed", [
    ("gamma", 1.5, "[0.0, 1.0]"),
    ("gamma", "high", "[0.0, 1.0]"),
    ("gamma", True, "[0.0, 1.0]"),
    ("steps", 0, "int in [1, inf)"),
    ("steps", 2.0, "int in [1, inf)"),
    ("mode", "median", "mean, std, none"),
    ("tags", ["a", "z"], "a, b, c"),
])
def test_a_value_outside_its_rule_is_one_line_naming_field_and_allowed(field, value, allowed):
    e, text = _error(Demo, ConfigDict({"m": {"gamma": 0.5, field: value}}), "m")
    assert e.field == f"m.{field}" and e.allowed == allowed
    assert text.startswith(f"m.{field}: ") and text.endswith(f"; allowed: {allowed}")
    assert repr("z" if field == "tags" else value) in text


@given(st.floats(-2, 3, allow_nan=False), st.one_of(st.none(), st.floats(-1, 1)),
       st.booleans())
def test_a_range_field_passes_exactly_what_check_passes(x, lo, lo_open):
    rule = Range(lo, 1.0, lo_open=lo_open)

    @dataclasses.dataclass(frozen=True)
    class R:
        x: float = option(rule, "x")

    problem = rule.problem(x)
    if problem is None:
        assert from_section(R, {"r": {"x": x}}, "r").x == x
    else:
        _, text = _error(R, {"r": {"x": x}}, "r")
        assert text == f"r.x: {problem}; allowed: {rule.describe()}"


@given(st.sets(st.sampled_from("abcde"), min_size=1),
       st.lists(st.sampled_from("abcdef"), max_size=4))
def test_a_list_field_passes_when_every_element_is_allowed(allowed, value):
    rule = tuple(sorted(allowed))

    @dataclasses.dataclass(frozen=True)
    class L:
        items: tuple = option(rule, "items")

    bad = [v for v in value if v not in allowed]
    if not bad:
        assert from_section(L, {"l": {"items": value}}, "l").items == tuple(value)
    else:
        e, text = _error(L, {"l": {"items": value}}, "l")
        assert text == f"l.items: {bad[0]!r} is not allowed; allowed: {', '.join(rule)}"


# -- declarations ------------------------------------------------------------------------

def test_constraints_are_the_ruled_fields_under_their_dotted_names():
    rules = constraints(Demo, "train.demo")
    assert rules == {"train.demo.gamma": Range(0.0, 1.0), "train.demo.mode": MODES,
                     "train.demo.steps": Range(1, None, integer=True),
                     "train.demo.tags": ("a", "b", "c")}
    assert list(constraints(Demo, "")) == ["gamma", "mode", "steps", "tags"]
    for f in dataclasses.fields(Demo):     # every default satisfies its own rule
        if f.name in rules and has_default(f):
            value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            check(f.name, value, rules[f.name])


def test_describe_has_each_fields_meaning_in_order():
    assert describe(Demo) == {"gamma": "discount", "mode": "how to normalise",
                              "steps": "number of steps", "tags": "labels",
                              "anything": "no rule", "plain": ""}


def test_has_default_and_option_rule_read_a_field():
    fields = {f.name: f for f in dataclasses.fields(Demo)}
    assert [n for n, f in fields.items() if not has_default(f)] == ["gamma"]
    assert has_default(fields["tags"])                      # a factory counts
    assert option_rule(fields["mode"]) == MODES
    assert option_rule(fields["anything"]) is None and option_rule(fields["plain"]) is None
    assert Demo(gamma=0.0).tags == () and no_config({"any": "config"}) is None


def test_option_without_default_or_factory_makes_a_required_field():
    @dataclasses.dataclass(frozen=True)
    class Req:
        a: int = option(Range(0, 1))

    with pytest.raises(TypeError):
        Req()
    assert not has_default(dataclasses.fields(Req)[0]) and describe(Req) == {"a": ""}
