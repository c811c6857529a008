"""asct_jax.search.types: a SearchConfig takes exactly ints >= 1 for its counts, None or an
int >= 1 for max_depth and a unit of ACTOR_UNITS, refusing anything else with a one-line
ValueError naming the field, what is allowed and the value; it is a jit static argument
(equal configs share one trace); `depth` is max_depth or the environment's max_turns;
`zero_cost` and `empty_trace` have the documented shapes, dtypes and empty values, and
the search's records are pytrees whose optional fields default to None."""
import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from asct_jax.search.scoring import ACTOR_UNITS
from asct_jax.search.types import (Cost, NodeStats, SearchConfig, SearchOutput, SearchState,
                                   Trace, empty_trace, zero_cost)

U = len(ACTOR_UNITS)
NOT_AN_INT = st.one_of(st.floats(allow_nan=False), st.text(max_size=2), st.none(),
                       st.just([2]))


def _refused(**fields):
    with pytest.raises(ValueError) as e:
        SearchConfig(**fields)
    text = str(e.value)
    assert "\n" not in text
    return text


# -- SearchConfig ---------------------------------------------------------------------------

def test_the_defaults_are_a_valid_config():
    c = SearchConfig()
    assert (c.num_simulations, c.max_depth, c.num_leaf_rollouts, c.node_policy,
            c.actor_unit) == (12, None, 1, False, "words")


@pytest.mark.parametrize("field", ["num_simulations", "num_leaf_rollouts"])
@given(value=st.integers(-5, 40))
def test_a_count_is_an_int_of_at_least_one(field, value):
    if value >= 1:
        assert getattr(SearchConfig(**{field: value}), field) == value
    else:
        assert _refused(**{field: value}) == f"{field} must be an int >= 1, got {value!r}"


@pytest.mark.parametrize("field", ["num_simulations", "num_leaf_rollouts", "max_depth"])
@given(value=NOT_AN_INT)
def test_a_count_that_is_not_an_int_is_refused(field, value):
    if field == "max_depth" and value is None:
        assert SearchConfig(max_depth=None).max_depth is None          # no cap
        return
    allowed = "None or an int >= 1" if field == "max_depth" else "an int >= 1"
    assert _refused(**{field: value}) == f"{field} must be {allowed}, got {value!r}"


@given(st.integers(-3, 30))
def test_max_depth_is_none_or_an_int_of_at_least_one(depth):
    if depth >= 1:
        assert SearchConfig(max_depth=depth).max_depth == depth
    else:
        assert _refused(max_depth=depth) == (f"max_depth must be None or an int >= 1, "
                                             f"got {depth!r}")


@pytest.mark.parametrize("unit", ["tokens", "Words", "", None])
def test_an_actor_unit_outside_actor_units_is_refused_naming_them(unit):
    assert _refused(actor_unit=unit) == (f"actor_unit must be one of {ACTOR_UNITS}, "
                                         f"got {unit!r}")
    for ok in ACTOR_UNITS:
        assert SearchConfig(actor_unit=ok).actor_unit == ok


def test_a_config_is_frozen():
    c = SearchConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.num_simulations = 3


def test_depth_is_max_depth_or_the_environments_turns():
    env = types.SimpleNamespace(max_turns=np.int32(7))
    assert SearchConfig().depth(env) == 7 and type(SearchConfig().depth(env)) is int
    assert SearchConfig(max_depth=2).depth(env) == 2
    assert SearchConfig(max_depth=9).depth(env) == 9       # a cap, not a min with turns


def test_equal_configs_are_one_static_argument_and_different_ones_retrace():
    traces = []

    def step(config, x):
        traces.append(config)
        return x * config.num_simulations + config.depth(None)

    f = jax.jit(step, static_argnums=0)
    x = jnp.float32(1.0)
    assert float(f(SearchConfig(num_simulations=3, max_depth=2), x)) == 5.0
    assert float(f(SearchConfig(num_simulations=3, max_depth=2), x)) == 5.0
    assert len(traces) == 1                      # equal and hashed alike: no retrace
    assert float(f(SearchConfig(num_simulations=4, max_depth=2), x)) == 6.0
    assert float(f(SearchConfig(num_simulations=3, max_depth=2, node_policy=True), x)) == 5.0
    assert len(traces) == 3


# -- records --------------------------------------------------------------------------------

@given(st.lists(st.integers(1, 4), max_size=2).map(tuple), st.integers(1, 5))
def test_zero_cost_has_the_documented_shapes_and_dtypes(shape, parts):
    c = zero_cost(shape, parts)
    expected = {"env_tokens": (shape, jnp.float32), "env_calls": (shape, jnp.int32),
                "actor_tokens": (shape + (U,), jnp.float32),
                "env_parts": (shape + (parts,), jnp.float32),
                "actor_decisions": (shape, jnp.int32)}
    assert set(Cost._fields) == set(expected)
    for name, (s, dtype) in expected.items():
        value = getattr(c, name)
        assert (value.shape, value.dtype) == (s, dtype), name
        assert not np.asarray(value).any(), name


@given(st.integers(0, 6), st.integers(1, 4))
def test_an_empty_trace_has_n_invalid_entries_decided_by_no_actor(n, parts):
    t = empty_trace(n, parts)
    expected = {"prefix": ((n,), jnp.int32, 0), "tokens": ((n,), jnp.float32, 0),
                "valid": ((n,), jnp.bool_, False), "decided": ((n,), jnp.int32, -1),
                "actor": ((n, U), jnp.float32, 0), "parts": ((n, parts), jnp.float32, 0)}
    assert set(Trace._fields) == set(expected)
    for name, (shape, dtype, fill) in expected.items():
        value = getattr(t, name)
        assert (value.shape, value.dtype) == (shape, dtype), name
        assert (np.asarray(value) == fill).all(), name
    assert empty_trace(n).parts.shape == (n, 1)                # one category by default


def test_records_are_pytrees_with_their_optional_fields_none():
    k = jnp.zeros(3)
    stats = NodeStats(child_visits=k, child_value_sum=k, prior_logp=k, mask=k > 0, costs=k,
                      value=jnp.float32(0))
    assert stats.t_hat is None and stats.visits is None
    assert len(jax.tree.leaves(stats)) == 6                      # None fields: no leaves
    doubled = jax.tree.map(lambda x: x * 2, stats.replace(visits=jnp.int32(4)))
    assert int(doubled.visits) == 8 and doubled.t_hat is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.value = jnp.float32(1)
    assert SearchState(tree=None, cost=zero_cost((2,), 1)).cache is None
    fields = SearchOutput.__dataclass_fields__
    assert [n for n, f in fields.items() if f.default is not dataclasses.MISSING] == ["cache"]
