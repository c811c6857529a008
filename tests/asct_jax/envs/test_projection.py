"""asct_jax.envs.projection: verl-agent's action projection, on host strings and in jit."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asct_jax.envs.projection import Tags, find_first, project, project_tokens
from tests.helpers.tiers import examples

ADM = ["go to table 1", "open fridge 1", "look"]
PAD, EOS = 0, 1
# Word-level vocabulary: 2..5 are the tags, then words (distinct after lower()).
WORDS = ["<pad>", "<eos>", "<think>", "</think>", "<action>", "</action>",
         "go", "To", "TABLE", "open", "fridge", "look", "1"]
TAGS = Tags((2,), (3,), (4,), (5,))
W0 = 6


@pytest.mark.parametrize("response,action,valid", [
    ("<think>ok</think><action>go to table 1</action>", "go to table 1", True),
    ("<think>ok</think> go to table 1</action>", "/think> go to table 1</action>", False),
    ("<think>ok</think><action>go to table 1", "k</think><action>go to table 1", False),
    ("<action>look</action>", "look", False),                      # no think at all
    ("<think>ok <action>look</action>", "look", False),            # only </think> missing
    ("<think>x</think><action>jump</action>", "jump", False),      # inadmissible
    ("<think>x</think><action>  Go To Table 1 </action>", "go to table 1", True),
    ("<think>x</think></action> look <action>", "", False),        # close before open
    ("<think>x</think><action>look</action><action>open fridge 1</action>", "look", True),
    ("<think>x</think><ACTION>look</Action>", "look", True),       # action tags: any case
    ("<THINK>x</THINK><action>look</action>", "look", False),      # think tags: as written
    ("</think><action>look</action> <think>", "look", True),       # anywhere, any order
])
def test_host_rule(response, action, valid):
    assert project(response, ADM) == (action, valid)


@pytest.mark.parametrize("response,valid", [
    ("<action>look</action>", True),                               # no think needed
    ("<think>x</think><action>look</action>", True),               # a think still allowed
    ("<action>jump</action>", False), ("look", False),             # inadmissible / no tags
])
def test_host_rule_without_the_think_requirement(response, valid):
    assert project(response, ADM, require_think=False)[1] == valid


def test_host_fallback_is_last_30_lowercased():
    r = "<think>I will GO TO the Table now, then open the fridge</think>"
    a, v = project(r, ADM)
    assert (a, v) == (r.lower()[-30:], False) and len(a) == 30
    assert project("Look", ADM) == ("look", False)                 # shorter than 30


def test_host_admissible_normalised():
    assert project("<think></think><action>look</action>", ["  LOOK "]) == ("look", True)


def _tok(*ids, r=12):
    return jnp.asarray(list(ids) + [PAD] * (r - len(ids)), jnp.int32)


def test_find_first_multi_token_and_mask():
    t = jnp.asarray([7, 8, 7, 9, 7, 8, 9, 0], jnp.int32)
    m = jnp.ones(8, bool)
    assert int(find_first(t, (7, 8), m)) == 0
    assert int(find_first(t, (7, 8, 9), m)) == 4
    assert int(find_first(t, (9, 9), m)) == 8                     # absent -> R
    assert int(find_first(t, (7, 8, 9), m.at[6].set(False))) == 8  # straddles the mask
    assert int(find_first(t, (0, 5, 5, 5, 5, 5, 5, 5, 5, 5), m)) == 8  # pattern longer than R


def _cands():
    # [K=3, A=5]: "go To TABLE", "look", "go To TABLE" (duplicate), eos then pad.
    c = [[6, 7, 8, EOS, PAD], [11, EOS, PAD, PAD, PAD], [6, 7, 8, EOS, PAD]]
    return jnp.asarray(c, jnp.int32)


def _pt(resp, mask=None, legal=(True, True, True), tags=TAGS):
    mask = resp != PAD if mask is None else mask
    return project_tokens(resp, mask, _cands(), jnp.asarray(legal), tags, PAD, EOS)


def test_tokens_hand_cases():
    ok = _pt(_tok(2, 9, 3, 4, 6, 7, 8, 5))
    assert bool(ok.valid) and int(ok.index) == 0
    np.testing.assert_array_equal(ok.action, _cands()[0])
    np.testing.assert_array_equal(ok.action_mask, np.isin(np.arange(12), [4, 5, 6]))
    assert int(_pt(_tok(2, 3, 4, 6, 7, 8, 5), legal=(False, True, True)).index) == 2
    assert int(_pt(_tok(2, 3, 4, 11, 5, 4, 6, 7, 8, 5)).index) == 1  # second block ignored
    for resp in [_tok(4, 11, 5), _tok(2, 4, 11, 5), _tok(3, 4, 11, 5),  # think missing
                 _tok(2, 3, 11, 5), _tok(2, 3, 4, 11),                  # action tag missing
                 _tok(2, 3, 4, 6, 7, 5), _tok(2, 3, 4, 6, 7, 8, 9, 5),  # prefix / longer
                 _tok(2, 3, 5, 11, 4), _tok(2, 3, 4, 5)]:               # close first / empty
        out = _pt(resp)
        assert not bool(out.valid) and int(out.index) == -1, resp
        np.testing.assert_array_equal(out.action, jnp.full(5, PAD))
    assert not bool(_pt(_tok(2, 3, 4, 11, 5), legal=(True, False, True)).valid)  # illegal
    assert not _pt(_tok(2, 3, 5, 11, 4)).action_mask.any()
    # the mask ends the response: a close tag past it does not count
    resp = _tok(2, 3, 4, 11, 5)
    assert not bool(_pt(resp, mask=jnp.arange(12) < 4).valid)


def test_tokens_multi_token_tags():
    # "<", "think", ">" style: 20 opens a tag, 21/22/23/24 name it, 25 closes it.
    tags = Tags((20, 21, 25), (20, 22, 25), (20, 23, 25), (20, 24, 25))
    resp = _tok(20, 21, 25, 9, 20, 22, 25, 20, 23, 25, 11, 20, 24, 25, r=16)
    out = _pt(resp, tags=tags)
    assert bool(out.valid) and int(out.index) == 1
    np.testing.assert_array_equal(np.flatnonzero(out.action_mask), [10])
    broken = resp.at[1].set(9)                                    # "<" "x" ">" is no tag
    assert not bool(_pt(broken, tags=tags).valid) and bool(_pt(broken, tags=tags).has_action)


def _decode(ids):
    return " ".join(WORDS[i] for i in ids)


@st.composite
def _episode(draw):
    k, a = draw(st.integers(1, 4)), 5
    cand_words = [draw(st.lists(st.integers(W0, len(WORDS) - 1), min_size=1, max_size=a - 1))
                  for _ in range(k)]
    legal = draw(st.lists(st.sampled_from([True, True, False]), min_size=k, max_size=k))
    piece = st.one_of(st.integers(2, len(WORDS) - 1).map(lambda t: [t]),
                      st.sampled_from(cand_words))                 # a whole candidate
    noise = st.lists(piece, max_size=3).map(lambda ps: sum(ps, []))
    if draw(st.sampled_from([True, False, False])):                # free form
        resp = sum(draw(st.lists(piece, max_size=12)), [])
    else:                  # "<think> .. </think> <action> .. </action>", a tag maybe dropped
        think = [2] + draw(noise) + [3]
        content = draw(st.sampled_from(cand_words)) if draw(st.booleans()) else draw(noise)
        resp = draw(noise) + think + draw(noise) + [4] + content + [5] + draw(noise)
        drop = draw(st.sampled_from([None, 2, 3, 4, 5]) if draw(st.booleans()) else st.none())
        resp = resp if drop is None else [t for t in resp if t != drop]
    r = len(resp) + draw(st.integers(0, 3))
    tail = draw(st.lists(st.integers(0, len(WORDS) - 1), min_size=r - len(resp),
                         max_size=r - len(resp)))                  # junk past the mask
    return cand_words, legal, resp, tail, a


@settings(max_examples=examples(100))
@given(_episode(), st.booleans())
def test_tokens_equal_host_rule(ep, require_think):
    cand_words, legal, resp, tail, a = ep
    cands = np.full((len(cand_words), a), PAD, np.int32)
    for i, w in enumerate(cand_words):
        cands[i, :len(w) + 1] = w + [EOS]
    tokens = np.asarray(resp + tail + [PAD], np.int32)             # R >= 1
    mask = np.arange(len(tokens)) < len(resp)
    out = project_tokens(jnp.asarray(tokens), jnp.asarray(mask), jnp.asarray(cands),
                         jnp.asarray(legal), TAGS, PAD, EOS, require_think)
    text = _decode(resp)
    admissible = [_decode(w) for w, ok in zip(cand_words, legal) if ok]
    action, valid = project(text, admissible, require_think)
    assert bool(out.valid) == valid
    assert bool(out.has_action) == (("<action>" in text) and ("</action>" in text))
    assert bool(out.has_think) == (("<think>" in text) and ("</think>" in text))
    if bool(out.has_action):                       # the span is the host's action text
        assert _decode(tokens[np.asarray(out.action_mask)]).lower() == action
    if valid:
        assert legal[int(out.index)] and _decode(cand_words[int(out.index)]).lower() == action
        assert int(out.index) == min(i for i, w in enumerate(cand_words)
                                     if legal[i] and _decode(w).lower() == action)


def test_jit_vmap_batch():
    b, t, r, k, a = 2, 3, 10, 3, 5
    rng = np.random.default_rng(0)
    resp = rng.choice([2, 3, 4, 5, 6, 7, 8, 11], size=(b, t, r)).astype(np.int32)
    resp[0, 0, :7] = [2, 3, 4, 6, 7, 8, 5]                         # one sure valid row
    mask = np.arange(r) < rng.integers(0, r + 1, size=(b, t, 1))
    mask[0, 0] = True
    cands = np.broadcast_to(np.asarray(_cands()), (b, t, k, a))
    legal = rng.random((b, t, k)) < 0.8
    legal[0, 0, 0] = True
    fn = functools.partial(project_tokens, tags=TAGS, pad_id=PAD, eos_id=EOS)
    batched = jax.jit(jax.vmap(jax.vmap(fn)))(resp, mask, cands, legal)
    direct = jax.jit(fn)(resp, mask, cands, legal)                 # leading dims directly
    assert bool(batched.valid[0, 0])
    for i in range(b):
        for j in range(t):
            one = fn(resp[i, j], mask[i, j], cands[i, j], legal[i, j])
            for x, y, z in zip(batched, direct, one):
                np.testing.assert_array_equal(x[i, j], z)
                np.testing.assert_array_equal(y[i, j], z)
    # action tokens: strictly between the first <action> and the first </action> (numpy)
    am = np.asarray(batched.action_mask)
    for i in range(b):
        for j in range(t):
            seen = list(resp[i, j][mask[i, j]])
            lo = seen.index(4) + 1 if 4 in seen else r
            hi = seen.index(5) if 5 in seen else -1
            np.testing.assert_array_equal(am[i, j], (np.arange(r) >= lo) & (np.arange(r) < hi))
    assert am.sum() > 0 and not am[~mask].any()
    np.testing.assert_array_equal(np.flatnonzero(am[0, 0]), [3, 4, 5])  # tags at 2 and 6
