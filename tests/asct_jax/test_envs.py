"""Tests of the JAX-native text environments (small configs): the protocol every one
keeps, the registry and the settings (the base class: tests/asct_jax/envs/test_base.py).

Compiles are kept few: per environment one module fixture jits reset, an agent step
(policy + step) single and vmapped, and a raw step on given tokens.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from asct_jax.envs import EOS_ID, PAD_ID, list_envs, make, module_of
from asct_jax.envs import _common as C
from asct_jax.envs.tokenizer import get_tokenizer

ENVS = ("rag_workflow", "household", "shop", "science")


def tree_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


class Harness:
    def __init__(self, name):
        self.name = name
        self.env, self.params = make(name, size="small")
        self.mod = module_of(name)
        env, params, mod = self.env, self.params, self.mod

        def agent_step(state, key, use_expert):
            cands, legal = env.legal_actions(state, params)
            a = jnp.where(use_expert, mod.expert_policy(state, params, key),
                          mod.random_policy(state, params, key))
            s2, ts = env.step(state, cands[a], params)
            return a, cands[a], legal[a], s2, ts

        self.reset = jax.jit(lambda k: env.reset(k, params))
        self.vreset = jax.jit(jax.vmap(lambda k: env.reset(k, params)))
        self.agent_step = jax.jit(agent_step)
        self.vagent_step = jax.jit(jax.vmap(agent_step, in_axes=(0, 0, None)))
        self.raw_step = jax.jit(lambda s, a: env.step(s, a, params))
        self.legal = jax.jit(lambda s: env.legal_actions(s, params))

    def run(self, state, keys, use_expert=False):
        out = []
        for k in keys:
            a, tok, _, state, ts = self.agent_step(state, k, use_expert)
            out.append((a, state, ts))
        return out


@pytest.fixture(scope="module", params=ENVS)
def h(request):
    return Harness(request.param)


# ---------------------------------------------------------------------------- registry
def test_registry_errors_and_overrides():
    assert set(ENVS) | {"toy_tree"} <= set(list_envs())
    with pytest.raises(ValueError, match="allowed names"):
        make("nope")
    with pytest.raises(ValueError, match="allowed fields"):
        make("shop", colour="red")
    with pytest.raises(ValueError, match="size"):
        make("household", size="huge")
    with pytest.raises(ValueError, match="component_set"):
        make("rag_workflow", component_set="other")
    env, _ = make("science", size="hard")
    assert env.num_actions == 16 and env.max_turns == 14
    env, _ = make("household", max_turns=7)
    assert env.max_turns == 7


def test_toy_tree_registered():
    assert "toy_tree" in list_envs() and module_of("toy_tree").ToyTree is not None
    env, _ = make("toy_tree", size="small")
    assert env.num_actions >= 2
    with pytest.raises(ValueError, match="allowed fields"):
        make("toy_tree", colour=1)


# ---------------------------------------------------------------------------- protocol
def test_sizes_and_types(h):
    env = h.env
    assert env.num_actions <= 16 and env.action_len <= 8 and env.obs_len <= 64
    assert env.feedback_len <= 12 and env.max_turns <= 10
    s, ts = h.reset(jax.random.PRNGKey(0))
    assert ts.observation.shape == (env.obs_len,) and ts.observation.dtype == jnp.int32
    assert ts.feedback.shape == (env.feedback_len,) and np.all(ts.feedback == PAD_ID)
    assert ts.reward.dtype == jnp.float32 and ts.done.dtype == jnp.bool_
    cands, legal = h.legal(s)
    assert cands.shape == (env.num_actions, env.action_len) and cands.dtype == jnp.int32
    assert legal.shape == (env.num_actions,) and bool(jnp.any(legal))
    legal_rows = np.asarray(cands)[np.asarray(legal)]
    assert np.all(np.sum(legal_rows == EOS_ID, axis=1) == 1)   # tokens, EOS, PAD
    assert env.action_costs(s, h.params).shape == (env.num_actions,)
    assert "success" in ts.info and "score" in ts.info
    _, _, _, _, ts2 = h.agent_step(s, jax.random.PRNGKey(1), False)
    assert set(ts2.info) == set(ts.info)
    assert env.tokenizer is get_tokenizer()


def test_determinism(h):
    keys = jax.random.split(jax.random.PRNGKey(3), h.env.max_turns)
    s0, _ = h.reset(jax.random.PRNGKey(7))
    s0b, _ = h.reset(jax.random.PRNGKey(7))
    assert tree_equal(s0, s0b)
    a = h.run(s0, keys)
    b = h.run(s0b, keys)
    assert all(tree_equal(x, y) for x, y in zip(a, b))


def test_recoverability(h):
    """Keep the state at turn k, continue with the same keys: the same rest of the episode."""
    T = h.env.max_turns
    keys = jax.random.split(jax.random.PRNGKey(11), T)
    s0, _ = h.reset(jax.random.PRNGKey(5))
    full = h.run(s0, keys)
    k = 2
    kept = jax.tree.map(jnp.copy, full[k - 1][1])  # state after k steps
    rest = h.run(kept, keys[k:])
    assert all(tree_equal(x, y) for x, y in zip(full[k:], rest))


BATCH = 24   # one batch size for the vmapped tests: one compile of the vmapped step


def test_vmap_equals_loop(h):
    B = BATCH
    rkeys = jax.random.split(jax.random.PRNGKey(21), B)
    skeys = jax.random.split(jax.random.PRNGKey(22), (4, B))
    bs, bts = h.vreset(rkeys)
    singles = [h.reset(k) for k in rkeys]
    assert tree_equal(bts, jax.tree.map(lambda *x: jnp.stack(x), *[t for _, t in singles]))
    states = [s for s, _ in singles]
    for t in range(4):
        out = h.vagent_step(bs, skeys[t], t % 2 == 0)
        bs = out[3]
        loop = [h.agent_step(states[i], skeys[t, i], t % 2 == 0) for i in range(B)]
        states = [o[3] for o in loop]
        stacked = jax.tree.map(lambda *x: jnp.stack(x), *loop)
        assert tree_equal(out, stacked)


def _nothing_happened(h, s, s2, ts):
    fb = np.asarray(C.encode(C.NOTHING_TEXT, h.env.feedback_len))
    assert np.array_equal(np.asarray(ts.feedback), fb)
    assert float(ts.reward) == 0.0
    assert int(s2.turn) == int(s.turn) + 1
    same = s2.replace(key=s.key, turn=s.turn, done=s.done)
    assert tree_equal(same, s)


@given(tokens=st.lists(st.integers(0, 400), min_size=1, max_size=8))
def test_garbage_actions_are_nothing_steps(h, tokens):
    env = h.env
    s, _ = h.reset(jax.random.PRNGKey(1))
    cands, legal = h.legal(s)
    action = np.full((env.action_len,), PAD_ID, np.int32)
    action[: min(len(tokens), env.action_len)] = tokens[: env.action_len]
    idx = C.parse_action(cands, legal, jnp.asarray(action), env._fillers)
    s2, ts = h.raw_step(s, jnp.asarray(action))
    if int(idx) < 0:
        _nothing_happened(h, s, s2, ts)
    else:  # garbage that happens to spell a legal action acts like it
        s3, ts3 = h.raw_step(s, cands[int(idx)])
        assert tree_equal((s2, ts), (s3, ts3))


def test_illegal_candidate_is_nothing_step(h):
    """An illegal candidate (or, where every candidate is legal, a candidate's content
    word swapped for another environment word) is an ordinary nothing-happens step."""
    s, _ = h.reset(jax.random.PRNGKey(2))
    cands, legal = h.legal(s)
    legal = np.asarray(legal)
    if not legal.all():
        action = cands[int(np.argmin(legal))]
    else:
        action = np.asarray(cands[0]).copy()
        action[: np.argmax(action == EOS_ID)] = get_tokenizer().get_vocab()["dollars"]
    s2, ts = h.raw_step(s, jnp.asarray(action))
    _nothing_happened(h, s, s2, ts)


def test_filler_tokens_do_not_matter(h):
    """Dropping the filler words of a candidate, or adding some, gives the same step;
    dropping a content word does not."""
    s, _ = h.reset(jax.random.PRNGKey(4))
    cands, legal = h.legal(s)
    i = int(np.argmax(np.asarray(legal)))
    cand = np.asarray(cands[i])
    fill = set(np.asarray(h.env._fillers).tolist())
    content = [t for t in cand if t not in fill and t not in (PAD_ID, EOS_ID)]
    vocab = get_tokenizer().get_vocab()
    variant = np.full_like(cand, PAD_ID)
    v = [vocab["please"]] + content[:1] + [vocab["now"]] + content[1:] + [EOS_ID]
    v = v[: len(cand)]
    variant[: len(v)] = v
    ref = h.raw_step(s, cands[i])
    assert tree_equal(h.raw_step(s, jnp.asarray(variant)), ref)
    stripped = np.full_like(cand, PAD_ID)
    stripped[: len(content)] = content
    assert tree_equal(h.raw_step(s, jnp.asarray(stripped)), ref)
    if len(content) > 1:
        broken = np.full_like(cand, PAD_ID)
        broken[: len(content) - 1] = content[1:]
        s2, ts = h.raw_step(s, jnp.asarray(broken))
        assert not tree_equal((s2, ts), ref) or int(
            C.parse_action(cands, legal, jnp.asarray(broken), h.env._fillers)) >= 0


def test_episode_limit_and_absorbing(h):
    env = h.env
    s, _ = h.reset(jax.random.PRNGKey(9))
    garbage = jnp.full((env.action_len,), 3, jnp.int32)   # BOS tokens: never an action
    for t in range(env.max_turns):
        assert not bool(s.done)
        s, ts = h.raw_step(s, garbage)
    assert bool(ts.done) and int(s.turn) == env.max_turns
    # absorbing: any action, even the expert's, changes nothing
    a, _, _, s2, ts2 = h.agent_step(s, jax.random.PRNGKey(0), True)
    assert tree_equal(s2, s) and float(ts2.reward) == 0.0 and bool(ts2.done)
    assert np.all(np.asarray(ts2.feedback) == PAD_ID)


@pytest.mark.parametrize("name", ENVS + ("toy_tree",))
def test_observe_matches_timestep_observation(name):
    """observe(state) is exactly the observation of the timestep the state belongs to:
    after reset and after every step of an episode that mixes legal, illegal and
    garbage actions (and runs past done)."""
    env, params = make(name, size="small")
    observe = jax.jit(lambda s: env.observe(s, params))
    step = jax.jit(lambda s, a: env.step(s, a, params))
    legal_fn = jax.jit(lambda s: env.legal_actions(s, params))
    for seed in range(2):
        s, ts = env.reset(jax.random.PRNGKey(seed), params)
        obs = observe(s)
        assert obs.shape == (env.obs_len,) and obs.dtype == jnp.int32
        assert np.array_equal(np.asarray(obs), np.asarray(ts.observation))
        rng = np.random.default_rng(seed)
        for t in range(env.max_turns + 2):
            cands, legal = legal_fn(s)
            legal = np.asarray(legal)
            if t % 3 == 1 and not legal.all():        # an illegal candidate
                action = cands[int(rng.choice(np.flatnonzero(~legal)))]
            elif t % 3 == 2:                          # garbage tokens
                action = jnp.full((env.action_len,), 3, jnp.int32)
            else:                                     # a legal candidate
                action = cands[int(rng.choice(np.flatnonzero(legal)))] if legal.any() \
                    else cands[0]
            s, ts = step(s, action)
            assert np.array_equal(np.asarray(observe(s)), np.asarray(ts.observation)), t


def test_expert_beats_random(h):
    B = BATCH
    results = {}
    for use_expert in (True, False):
        s, _ = h.vreset(jax.random.split(jax.random.PRNGKey(100), B))
        ret = np.zeros(B)
        for t, k in enumerate(jax.random.split(jax.random.PRNGKey(200), h.env.max_turns)):
            a, _, leg, s, ts = h.vagent_step(s, jax.random.split(k, B), use_expert)
            assert np.all(np.asarray(leg) | np.asarray(s.done))
            ret += np.asarray(ts.reward)
        assert np.all(np.asarray(ts.done))
        results[use_expert] = (ret.mean(), np.asarray(ts.info["success"]).mean(),
                               np.asarray(ts.info["score"]).mean())
    (e_ret, e_succ, e_score), (r_ret, r_succ, r_score) = results[True], results[False]
    assert e_succ >= 0.85 and r_succ <= 0.3
    assert e_ret > r_ret + 0.3 and e_score > r_score


# ---------------------------------------------------------------------------- settings
def test_allowed_names_exposed_once():
    from asct_jax.envs import ENVS as ALL, SIZES

    assert sorted(ALL) == list_envs() and set(ENVS) < set(ALL) and SIZES == ("small", "hard")
    with pytest.raises(ValueError) as e:
        make("nope")
    assert "\n" not in str(e.value) and all(n in str(e.value) for n in ALL)
    with pytest.raises(ValueError) as e:
        make("shop", size="huge")
    assert "\n" not in str(e.value) and "small, hard" in str(e.value)


@pytest.mark.parametrize("name", ENVS + ("toy_tree",))
def test_unknown_override_is_one_line_error_naming_the_fields(name):
    with pytest.raises(ValueError) as e:
        make(name, colour="red")
    msg = str(e.value)
    assert "\n" not in msg and "'colour'" in msg and name in msg and "allowed fields" in msg
    assert "'max_turns'" in msg or name == "toy_tree"


@pytest.mark.parametrize("name", ENVS)
def test_one_settings_object_with_presets(name):
    import dataclasses

    env, params = make(name, size="hard")
    cls = env.params_cls
    assert type(params) is cls and params is env.params
    # presets are values of the one settings class; sizes come from it
    small, hard = cls.small(), cls.hard()
    assert jax.tree.structure(make(name)[1]) == jax.tree.structure(small)
    assert env.max_turns == hard.max_turns and env.obs_len == hard.obs_len
    assert env.action_len == hard.action_len and env.feedback_len == hard.feedback_len
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.max_turns = 3
    env7, p7 = make(name, size="hard", max_turns=7)
    assert env7.max_turns == p7.max_turns == 7 and env.max_turns != 7
    with pytest.raises(ValueError, match="max_turns"):
        make(name, max_turns=0)


def test_array_override_keeps_dtype():
    env, p = make("rag_workflow", size="hard", lam=1)
    assert p.lam.dtype == jnp.float32 and float(p.lam) == 1.0
    assert float(make("rag_workflow", size="hard")[1].lam) == pytest.approx(0.3)
    _, p = make("shop", can_research=False)
    assert p.can_research.dtype == jnp.bool_
    with pytest.raises(ValueError, match="shape"):
        make("household", task_probs=[1.0, 0.0])
