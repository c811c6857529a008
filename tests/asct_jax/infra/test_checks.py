"""asct_jax.infra.checks: `check_range` / `Range` accept exactly the numbers inside the
interval (closed or open ends, unbounded sides, integer ranges; bools, non-numbers and nan
never), `check_choice` / `check` exactly the allowed values (`check`: every element of a
tuple or list value; `check_choice`, a single-valued field: a tuple or list only when it is
itself allowed; a callable where allowed; a rule that is not a collection is a TypeError);
every refusal is a ConfigError whose text is one line, `<field>: <problem>; allowed:
<allowed>`, naming the field and the allowed values or interval. Static NumPy scalars are
checked, tracers pass."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, strategies as st

from asct_jax.infra.checks import ConfigError, Range, check, check_choice, check_range

FIELD = st.text(alphabet="abz._", min_size=1, max_size=6)
NUMBER = st.floats(-10, 10, allow_nan=False, width=32)
BOUND = st.one_of(st.none(), NUMBER)


def _inside(x, lo, hi, lo_open, hi_open):
    above_lo = lo is None or (x > lo if lo_open else x >= lo)
    below_hi = hi is None or (x < hi if hi_open else x <= hi)
    return above_lo and below_hi


def _refusal(field, value, **rule):
    with pytest.raises(ConfigError) as e:
        if isinstance(value, (int, float)):     # check_range checks static numbers only
            check_range(field, value, **rule)
        else:
            check(field, value, Range(**rule))
    text = str(e.value)
    assert "\n" not in text and e.value.field == field
    assert e.value.allowed == Range(**rule).describe()
    return text


@given(FIELD, NUMBER, BOUND, BOUND, st.booleans(), st.booleans())
def test_a_number_passes_exactly_when_inside_the_interval(field, x, lo, hi, lo_open, hi_open):
    rule = dict(lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open)
    if _inside(x, lo, hi, lo_open, hi_open):
        check_range(field, x, **rule)
        assert Range(**rule).problem(x) is None
    else:
        assert _refusal(field, x, **rule) == (
            f"{field}: {x!r} is out of range; allowed: {Range(**rule).describe()}")


@given(FIELD, NUMBER, st.booleans(), st.booleans())
def test_the_bounds_themselves_follow_the_open_and_closed_ends(field, b, lo_open, hi_open):
    check_range(field, b, lo=b, hi=b + 1, hi_open=True)
    check_range(field, b, lo=b - 1, hi=b, lo_open=True)
    for x, rule in [(b, dict(lo=b, lo_open=True)), (b, dict(hi=b, hi_open=True))]:
        assert "is out of range" in _refusal(field, x, **rule)
    if lo_open or hi_open:
        _refusal(field, b, lo=b, hi=b, lo_open=lo_open, hi_open=hi_open)
    else:
        check_range(field, b, lo=b, hi=b)          # the one-point interval [b, b]


@given(FIELD, st.integers(-20, 20), st.integers(-5, 5), st.integers(0, 5))
def test_an_integer_range_takes_ints_inside_and_no_float(field, x, lo, width):
    hi = lo + width
    if lo <= x <= hi:
        check_range(field, x, lo=lo, hi=hi, integer=True)
        check_range(field, np.int64(x), lo=lo, hi=hi, integer=True)
    else:
        assert _refusal(field, x, lo=lo, hi=hi, integer=True) == (
            f"{field}: {x} is out of range; allowed: int in [{lo}, {hi}]")
    text = _refusal(field, float(x), lo=lo, hi=hi, integer=True)   # 3.0 is not an int
    assert text.startswith(f"{field}: expected an int, got {float(x)!r}; allowed: int in [")


@given(FIELD, st.one_of(st.booleans(), st.text(max_size=3), st.none(),
                        st.lists(st.integers(), max_size=2), st.just(float("nan")),
                        st.just(1 + 2j)))
def test_bools_non_numbers_and_nan_are_refused_by_every_range(field, value):
    text = _refusal(field, value, lo=None, hi=None)
    if isinstance(value, float):
        assert text == f"{field}: nan is out of range; allowed: (-inf, inf)"
    else:
        assert text == f"{field}: expected a number, got {value!r}; allowed: (-inf, inf)"


def test_the_interval_is_described_with_its_ends():
    assert Range(0, 1).describe() == "[0, 1]"
    assert Range(0.0, lo_open=True).describe() == "(0.0, inf)"
    assert Range(hi=1.0, hi_open=True).describe() == "(-inf, 1.0)"
    assert Range(1, 8, hi_open=True, integer=True).describe() == "int in [1, 8)"
    assert Range().describe() == "(-inf, inf)"


def test_static_numpy_scalars_are_checked_and_tracers_pass():
    low = np.float32(-1.0)
    with pytest.raises(ConfigError) as e:
        check_range("tau", low, lo=0)
    assert str(e.value) == f"tau: {low!r} is out of range; allowed: [0, inf)"
    out = jax.jit(lambda t: (check_range("tau", t, lo=0), t)[1])(jnp.float32(-1.0))
    assert float(out) == -1.0                          # a traced value is not checked


@pytest.mark.parametrize("value", ["10", None, b"1"])
def test_check_range_refuses_strings_and_none(value):
    with pytest.raises(ConfigError, match=r"^steps: .*; allowed: \[1, inf\)$"):
        check_range("steps", value, lo=1)


ALLOWED = st.lists(st.text(alphabet="abcd\n ", min_size=1, max_size=3), min_size=1,
                   max_size=4, unique=True)


@given(FIELD, ALLOWED, st.text(alphabet="abcde\n", max_size=3))
def test_a_value_passes_a_choice_exactly_when_allowed(field, allowed, value):
    if value in allowed:
        check_choice(field, value, allowed)
        return
    with pytest.raises(ConfigError) as e:
        check_choice(field, value, allowed)
    text = str(e.value)
    assert "\n" not in text and e.value.field == field
    assert e.value.problem == f"{value!r} is not allowed"
    assert e.value.allowed == ", ".join(allowed)
    assert text == " ".join(f"{field}: {value!r} is not allowed; allowed: "
                            f"{', '.join(allowed)}".split())


@given(ALLOWED, st.data())
def test_a_tuple_or_list_passes_when_each_element_is_allowed(allowed, data):
    good = data.draw(st.lists(st.sampled_from(allowed), min_size=1, max_size=3))
    for kind in (tuple, list):
        check("methods", kind(good), allowed)
    bad = data.draw(st.text(alphabet="xyz", min_size=1, max_size=2))
    at = data.draw(st.integers(0, len(good)))
    value = tuple(good[:at]) + (bad,) + tuple(good[at:])
    with pytest.raises(ConfigError) as e:
        check("methods", value, allowed)
    assert (e.value.field, e.value.problem) == ("methods", f"{bad!r} is not allowed")


@given(FIELD, ALLOWED, st.data())
def test_check_choice_takes_one_value_never_a_sequence_of_allowed_ones(field, allowed, data):
    good = data.draw(st.lists(st.sampled_from(allowed), min_size=1, max_size=3))
    for kind in (tuple, list):
        with pytest.raises(ConfigError) as e:
            check_choice(field, kind(good), allowed)
        assert e.value.field == field and "\n" not in str(e.value)
        assert e.value.problem == f"expected one value, got {kind(good)!r}"
        assert e.value.allowed == ", ".join(allowed)
    check_choice("shape", (1, 2), [(1, 2), (3,)])        # an allowed tuple is one value


@pytest.mark.parametrize("value", [1, 0, 1.0, "True", None])
def test_a_flag_takes_a_bool_not_a_number_equal_to_one(value):
    with pytest.raises(ConfigError, match=r"^describe: .* is not allowed; allowed: True, False$"):
        check_choice("describe", value, (True, False))
    for ok in (True, False, np.bool_(True)):
        check_choice("describe", ok, (True, False))
    check_choice("num_actions", 8, (8, 10))             # numbers keep numeric equality


def test_an_allowed_tuple_passes_whole_and_dict_and_set_rules_list_their_values():
    check("shape", (1, 2), [(1, 2), (3,)])               # the tuple is one allowed value
    with pytest.raises(ConfigError, match=r"^shape: 1 is not allowed; allowed: \(1, 2\), \(3,\)$"):
        check("shape", (1, 3), [(1, 2), (3,)])          # not allowed whole: element-wise
    check("env", "shop", {"shop": 1, "alfworld": 2})
    with pytest.raises(ConfigError, match=r"^env: 'web' is not allowed; allowed: shop, alfworld$"):
        check("env", "web", {"shop": 1, "alfworld": 2})
    check("k", 2, {1, 2})
    with pytest.raises(ConfigError, match=r"^k: 3 is not allowed; allowed: "):
        check("k", 3, frozenset({1, 2}))


def test_callables_pass_only_where_allowed_and_the_error_says_so():
    check_choice("transform", abs, ("identity",), allow_callable=True)
    check_choice("transform", "identity", ("identity",), allow_callable=True)
    with pytest.raises(ConfigError) as e:
        check_choice("transform", abs, ("identity",))
    assert str(e.value) == f"transform: {abs!r} is not allowed; allowed: identity"
    with pytest.raises(ConfigError, match=r"^transform: 'log' is not allowed; "
                                          r"allowed: identity or a callable$"):
        check_choice("transform", "log", ("identity",), allow_callable=True)


@pytest.mark.parametrize("rule", ["ab", b"ab", 3, None])
def test_a_rule_that_is_no_collection_is_a_type_error(rule):
    with pytest.raises(TypeError, match=r"rule for 'mode' must be a collection"):
        check("mode", "a", rule)


@given(st.text(max_size=8), st.text(max_size=12), st.text(max_size=8))
def test_a_config_error_is_one_line_whatever_its_parts_hold(field, problem, allowed):
    e = ConfigError(field, problem, allowed)
    assert isinstance(e, ValueError)
    assert (e.field, e.problem, e.allowed) == (field, problem, allowed)
    text = f"{field}: {problem}" + (f"; allowed: {allowed}" if allowed else "")
    assert str(e) == " ".join(text.split())
    assert len(str(e).splitlines()) <= 1
