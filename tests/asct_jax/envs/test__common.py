"""asct_jax.envs._common: the text helpers against plain-Python references (`words_of`
vs the tokenizers Whitespace pre-tokenizer, `encode_table`, `compact`, `render`,
`canonical`, `parse_action`), `uniform_policy` (legal indices only, about uniform), and
on a tiny TextEnvironment defined here: `step_env` (a matched candidate, up to filler
words, runs `transition`; anything else is "nothing happens": state kept, reward 0),
`scripted_policy`, the tables frozen to jnp, and the settings helpers (`preset`,
`with_overrides`: one-line errors naming the field and what is allowed, dtypes kept)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from hypothesis import given, strategies as st
from tokenizers import pre_tokenizers

import asct_jax.envs  # noqa: F401  (installs the environments' words in the tokenizer)
from asct_jax.envs import _common as C
from asct_jax.envs.base import EOS_ID, PAD_ID
from asct_jax.envs.tokenizer import encode_fixed, get_tokenizer
from asct_jax.infra.checks import ConfigError, check_range

FILLERS = C.filler_ids()
L = 6
# tokens: PAD, EOS, two fillers, three ordinary words
TOKEN = st.sampled_from([PAD_ID, EOS_ID, int(FILLERS[0]), int(FILLERS[3]), 8, 20, 31])
ROW = st.lists(TOKEN, min_size=L, max_size=L)


def ref_compact(row):
    kept = [t for t in row if t != PAD_ID]
    return kept + [PAD_ID] * (len(row) - len(kept))


def ref_canonical(row):
    cut = row[:row.index(EOS_ID)] if EOS_ID in row else row
    return ref_compact([PAD_ID if t in FILLERS.tolist() else t for t in cut] + [PAD_ID]
                       * (len(row) - len(cut)))


compact = jax.jit(C.compact)
canonical = jax.jit(lambda x: C.canonical(x, jnp.asarray(FILLERS)))
parse = jax.jit(lambda c, l, a: C.parse_action(c, l, a, jnp.asarray(FILLERS)))


# ---------------------------------------------------------------------------- text
def test_words_of_drops_placeholders_and_splits_like_the_tokenizer():
    assert C.words_of("go to {obj}.", "take {a_b}, now") == {"go", "to", ".", "take", ",",
                                                            "now"}
    assert C.words_of("{x}") == set() and C.words_of() == set()
    text = "open the door: north-east, h1 a_b!? 42"
    split = pre_tokenizers.Whitespace().pre_tokenize_str(text)
    assert C.words_of(text) == {w for w, _ in split}


def test_vocabulary_has_fillers_numbers_nothing_and_punctuation_all_in_the_tokenizer():
    v = C.vocabulary()
    assert set(C.FILLER_WORDS) | {"nothing", "happens", ":", ".", ","} <= v
    assert {str(i) for i in range(101)} <= v and "101" not in v
    vocab = get_tokenizer().get_vocab()
    assert all(w in vocab for w in v)
    assert [vocab[w] for w in C.FILLER_WORDS] == FILLERS.tolist()
    # the parser drops exactly these words: never a number or a word of the fixed texts
    assert C.FILLER_WORDS == ("the", "a", "now", "carefully", "please", "then", "quickly",
                              "slowly")
    assert not set(C.FILLER_WORDS) & (set(C.NUMBER_WORDS) | C.words_of(C.NOTHING_TEXT))


def test_encode_table_rows_with_and_without_eos():
    rows = C.encode_table(["1", "2 3", ""], 4, eos=True)
    w1, w2, w3 = (int(encode_fixed(w, 1)[0]) for w in ("1", "2", "3"))
    assert rows.dtype == np.int32 and rows.tolist() == [[w1, EOS_ID, 0, 0],
                                                        [w2, w3, EOS_ID, 0],
                                                        [EOS_ID, 0, 0, 0]]
    assert C.encode_table(["2 3"], 2).tolist() == [[w2, w3]]          # no EOS: full width
    C.encode_table(["1 2 3"], 4, eos=True)                             # 3 words + EOS fit
    with pytest.raises(ValueError, match="tokens > length 3"):
        C.encode_table(["1 2 3 4"], 4, eos=True)                       # no room for EOS
    with pytest.raises(ValueError, match="outside the environment vocabulary"):
        C.encode_table(["zzzqqq"], 4)


@given(rows=st.lists(ROW, min_size=3, max_size=3))
def test_compact_moves_real_tokens_forward_in_order(rows):
    assert np.asarray(compact(jnp.asarray(rows, jnp.int32))).tolist() == [
        ref_compact(r) for r in rows]


@given(a=st.lists(TOKEN, min_size=3, max_size=3), b=st.lists(TOKEN, min_size=2, max_size=2))
def test_render_concatenates_squeezes_pads_and_pads_to_length(a, b):
    out = C.render([jnp.asarray(a), np.asarray(b)[None, :], 5], 8)
    assert out.dtype == jnp.int32 and out.shape == (8,)
    assert np.asarray(out).tolist() == ref_compact(a + b + [5, PAD_ID, PAD_ID])


def test_render_refuses_a_static_length_over_the_limit():
    with pytest.raises(ValueError, match="static length 5 > 4"):
        C.render([jnp.zeros(3, jnp.int32), jnp.zeros(2, jnp.int32)], 4)   # even if all PAD


@given(rows=st.lists(ROW, min_size=2, max_size=2))
def test_canonical_cuts_at_eos_drops_fillers_and_compacts(rows):
    assert np.asarray(canonical(jnp.asarray(rows, jnp.int32))).tolist() == [
        ref_canonical(r) for r in rows]


@given(cands=st.lists(ROW, min_size=3, max_size=3), legal=st.lists(st.booleans(), min_size=3,
                                                                   max_size=3),
       action=st.lists(TOKEN, min_size=L + 2, max_size=L + 2), copy=st.integers(-1, 2))
def test_parse_action_is_the_first_legal_canonical_match(cands, legal, action, copy):
    if copy >= 0:                              # often an action that is a candidate
        action = cands[copy] + action[L:]
    want = next((k for k in range(3) if legal[k]
                 and ref_canonical(cands[k]) == ref_canonical(action[:L])), -1)
    got = parse(jnp.asarray(cands, jnp.int32), jnp.asarray(legal), jnp.asarray(action))
    assert int(got) == want


def test_parse_action_ignores_fillers_and_what_follows_eos():
    w = lambda t: [int(x) for x in encode_fixed(t, 1)]
    cands = jnp.asarray([w("2") + w("3") + [EOS_ID] + [0] * 5, w("4") + [EOS_ID] + [0] * 6])
    legal = jnp.asarray([True, True])
    for text, want in (("the 2 now 3", 0), ("2 3", 0), ("please 4", 1), ("3 2", -1),
                       ("2", -1), ("", -1)):
        action = encode_fixed(text, 5).tolist() + [EOS_ID] + w("4") * 2  # junk after EOS
        assert int(parse(cands, legal, jnp.asarray(action))) == want, text
    assert int(parse(cands, jnp.asarray([True, False]), jnp.asarray(w("4") + [0] * 7))) == -1
    # an action longer than the candidates is cut to their width first
    assert int(parse(cands, legal, jnp.asarray(w("4") + [0] * 7 + w("2")))) == 1


def test_uniform_policy_samples_legal_indices_about_uniformly():
    legal = jnp.asarray([False, True, False, True, True])
    keys = jax.random.split(jax.random.PRNGKey(0), 3000)
    idx = np.asarray(jax.jit(jax.vmap(lambda k: C.uniform_policy(legal, k)))(keys))
    assert idx.dtype == np.int32 and set(idx.tolist()) == {1, 3, 4}
    assert np.all(np.abs(np.bincount(idx, minlength=5)[[1, 3, 4]] / 3000 - 1 / 3) < 0.04)


def test_f32_and_info_dict_are_float32_scalars():
    info = C.info_dict(success=True, score=3, n=jnp.int32(2))
    assert {k: (v.dtype, float(v)) for k, v in info.items()} == {
        "success": (jnp.float32, 1.0), "score": (jnp.float32, 3.0), "n": (jnp.float32, 2.0)}
    assert C.f32(np.float64(0.5)).dtype == jnp.float32


# ---------------------------------------------------------------------------- a tiny env
@struct.dataclass
class TinyParams:
    n: int = C.static_field()
    lam: jax.Array
    bias: jax.Array

    @classmethod
    def small(cls):
        return cls(n=3, lam=jnp.asarray(0.5, jnp.float32), bias=jnp.zeros((2,), jnp.int32))

    @classmethod
    def hard(cls):
        return cls(n=5, lam=jnp.asarray(0.5, jnp.float32), bias=jnp.zeros((2,), jnp.int32))

    def validate(self):
        check_range("n", self.n, lo=1, integer=True)


@struct.dataclass
class TinyState:
    key: jax.Array
    turn: jax.Array
    done: jax.Array
    count: jax.Array


class Tiny(C.TextEnvironment):
    """Candidates "1", "2 3" (legal) and "4" (illegal); slot k adds k + 1 to the count."""

    name = "tiny"
    params_cls = TinyParams

    def __init__(self, params=None):
        self.params = TinyParams.small() if params is None else params
        self.num_actions, self.action_len, self.obs_len = 3, 4, 4
        self.feedback_len, self.max_turns = 4, 5
        self._init_text()
        self.t_cand = C.encode_table(["1", "2 3", "4"], 4, eos=True)
        self.t_fb = C.encode_table(["1", "2", "3"], 4)
        self._freeze_tables()

    def legal_actions(self, state, params):
        return self.t_cand, jnp.asarray([True, True, False])

    def transition(self, state, idx, key, params):
        return state.replace(count=state.count + idx + 1), self.t_fb[idx], C.f32(idx + 1)


def tiny_policy(state, params, key=None):        # found by Tiny.scripted_policy("tiny")
    return jnp.int32(1)


def test_step_env_runs_the_matched_candidate_and_nothing_happens_otherwise():
    env = Tiny()
    s0 = TinyState(key=jax.random.PRNGKey(0), turn=jnp.int32(0), done=jnp.asarray(False),
                   count=jnp.int32(10))
    step = jax.jit(lambda s, a: env.step_env(s, a, jax.random.PRNGKey(1), env.params))
    nothing = encode_fixed("nothing happens", 4).tolist()
    for text, count, fb, reward in (("1", 11, "1", 1.0), ("2 3", 12, "2", 2.0),
                                    ("the 2 now 3", 12, "2", 2.0), ("3 2", 10, None, 0.0),
                                    ("4", 10, None, 0.0), ("", 10, None, 0.0)):
        s, f, r = step(s0, jnp.asarray(encode_fixed(text, 6)))
        assert int(s.count) == count and float(r) == reward and r.dtype == jnp.float32, text
        assert np.asarray(f).tolist() == (nothing if fb is None
                                          else encode_fixed(fb, 4).tolist()), text


def test_tables_are_frozen_to_jnp_and_policies_come_from_the_module():
    env = Tiny()
    for name in ("t_cand", "t_fb", "_fillers", "f_nothing"):
        assert isinstance(getattr(env, name), jax.Array), name
    assert env.default_params() is env.params and env.tokenizer is get_tokenizer()
    assert env.scripted_policy("tiny") is tiny_policy
    with pytest.raises(ValueError) as e:
        env.scripted_policy("expert")
    assert str(e.value) == ("warm_start.imitated: tiny has no 'expert' policy; "
                            "allowed: ['tiny']")
    legal = jnp.asarray([True, True, False])
    picks = {int(env.uniform_random_policy(None, env.params, jax.random.PRNGKey(i)))
             for i in range(12)}
    assert picks == {0, 1} and jnp.array_equal(env.legal_actions(None, None)[1], legal)


# ---------------------------------------------------------------------------- settings
def test_preset_and_from_size():
    assert C.preset(TinyParams, "hard").n == 5 and Tiny.from_size().params.n == 3
    with pytest.raises(ConfigError, match=r"^size: 'big' is not allowed; allowed: small, hard$"):
        C.preset(TinyParams, "big")
    env = Tiny.from_size("hard", lam=2)
    assert env.params.n == 5 and float(env.params.lam) == 2.0
    assert C.settings_fields(TinyParams) == ("n", "lam", "bias")


def test_with_overrides_keeps_dtype_and_shape_and_validates():
    p = C.with_overrides("tiny", TinyParams.small(), {"n": 7, "lam": 1, "bias": [3.7, -1]})
    assert p.n == 7 and p.lam.dtype == jnp.float32 and float(p.lam) == 1.0
    assert p.bias.dtype == jnp.int32 and p.bias.tolist() == [3, -1]
    assert C.with_overrides("tiny", p, {}) is not None
    with pytest.raises(ValueError) as e:
        C.with_overrides("tiny", p, {"lam": 1, "mu": 2})
    assert str(e.value) == ("unknown field 'mu' for environment 'tiny'; "
                            "allowed fields: ['n', 'lam', 'bias']")
    with pytest.raises(ValueError, match=r"^bias must have shape \(2,\), got \(3,\)$"):
        C.with_overrides("tiny", p, {"bias": [1, 2, 3]})
    with pytest.raises(ConfigError, match=r"^n: 0 is out of range; allowed: int in \[1, inf\)$"):
        C.with_overrides("tiny", p, {"n": 0})
    assert TinyParams.small().n == 3                        # the preset untouched
