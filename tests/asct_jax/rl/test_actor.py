"""How the actor acts (asct_jax.rl.actor): the one predicate `generates`, what it says for
each actor, and that the rollout, the host games and the restored-state actors (search,
VinePPO, FACTOR's continuations) get their choice from it and ask nowhere else."""
import pathlib
import re

import jax
import pytest

from asct_jax.envs import make
from asct_jax.envs.play import StateActor, uniform_chooser
from asct_jax.rl import actor, credit
from asct_jax.rl.build import build_policy
from asct_jax.rl.generation import GenerationChooser, GenerationPolicy
from asct_jax.rl.policy import Policy
from asct_jax.rl.rollout import rollout
from asct_jax.rl.sources import JaxEnvSource, TextShape
from experiments.configs import base

ROOT = pathlib.Path(__file__).resolve().parents[3]
SHAPE = TextShape(obs_len=8, action_len=4, feedback_len=4, num_actions=3, base_vocab_size=100)


def _policy(chooser="candidates", continuations="chooser"):
    c = base.use_test_model(base.get_config())
    c.actor.chooser, c.actor.continuations = chooser, continuations
    policy, params = build_policy(c, 100, SHAPE)
    return policy, params


def test_the_candidate_scorer_does_not_generate():
    policy, params = _policy()
    assert type(policy) is Policy
    assert not actor.generates(policy)
    assert actor.generation_spec(policy) is None
    assert not actor.writes_at_restored_states(policy)
    assert not isinstance(actor.chooser(policy, params), GenerationChooser)


@pytest.mark.parametrize("continuations", ["chooser", "score"])
def test_the_generating_actor_generates(continuations):
    policy, params = _policy("generate", continuations)
    assert isinstance(policy, GenerationPolicy)
    assert actor.generates(policy)
    assert actor.generation_spec(policy) is policy.spec
    assert actor.writes_at_restored_states(policy) == (continuations == "chooser")
    chooser = actor.chooser(policy, params)
    assert isinstance(chooser, GenerationChooser) and chooser.spec is policy.spec


def test_anything_else_is_no_generating_actor():
    """The predicate is the type, not a duck-typed attribute."""
    class Spec:
        spec, chooser = object(), "generate"
    assert not actor.generates(Spec()) and actor.generation_spec(Spec()) is None


def test_the_rollout_plays_the_chooser_the_actor_gives(monkeypatch):
    policy, params = _policy()
    asked = []

    def spy(p, prm, greedy=False):
        asked.append((p, greedy))
        return uniform_chooser
    monkeypatch.setattr(actor, "chooser", spy)
    env, ep = make("household")
    batch = rollout(policy, params, env, ep, jax.random.key(0), 1, 2, greedy=True)
    assert asked == [(policy, True)]
    assert batch.turn_mask.shape == (2, env.max_turns)


def test_restored_states_are_played_by_the_actor(monkeypatch):
    """credit.state_actor / state_policy_fn (what VinePPO, the search's and FACTOR's
    continuations play) are actor.state_actor / state_scorer on the context."""
    c = base.use_test_model(base.get_config())
    source = JaxEnvSource(c)
    env, ep = source.env, source.env_params
    policy, params = build_policy(c, source.vocab_size, source.shape)
    ctx = credit.CreditContext(policy=policy, env=env, env_params=ep, group_size=1)
    sentinel = StateActor(init=lambda s: (), act=None)
    seen = []
    monkeypatch.setattr(actor, "state_actor",
                        lambda *a: seen.append(a) or sentinel)
    assert credit.state_actor(ctx, params) is sentinel
    assert seen == [(env, ep, policy, params)]
    monkeypatch.undo()
    state, _ = env.reset(jax.random.key(1), ep)
    logp, value = credit.state_policy_fn(ctx, params)(state)
    ref_logp, ref_value = actor.state_scorer(env, ep, policy, params)(state)
    assert (logp == ref_logp).all() and value == ref_value


def _sources(*folders):
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text()


# What only asct_jax/rl/actor.py may say: which actor a policy is.
WHICH_ACTOR = [r"isinstance\([^)]*GenerationPolicy", r"==\s*[\"']generate[\"']",
               r"getattr\([^)]*[\"'](spec|chooser)[\"']", r"(?<!class )GenerationPolicy\("]


def test_only_the_actor_module_asks_which_actor():
    """Asking whether a policy generates, and building one or the other, happen in
    asct_jax/rl/actor.py only (build.py reads the run's actor section, then calls it)."""
    found = [(path, pat) for path, text in _sources("asct_jax", "factor_jax")
             for pat in WHICH_ACTOR if re.search(pat, text)]
    assert found == [("asct_jax/rl/actor.py", WHICH_ACTOR[0]),
                     ("asct_jax/rl/actor.py", WHICH_ACTOR[3])]


def test_the_turn_choosers_come_from_the_actor_module():
    """select_candidate / candidate_chooser / policy_chooser live in actor.py only; the
    rollout, the host games and the credit's restored-state actors call it."""
    for path, text in _sources("asct_jax", "factor_jax"):
        if path == "asct_jax/rl/actor.py":
            continue
        assert not re.search(r"def (select_candidate|candidate_chooser|policy_chooser|"
                             r"generates_continuations)\b", text), path
    text = dict(_sources("asct_jax"))
    assert "actor.chooser(" in text["asct_jax/rl/rollout.py"]
    assert "actor.state_actor(" in text["asct_jax/rl/credit.py"]
    assert "actor.chooser(policy, params, greedy, forced)" in text["asct_jax/rl/host_rollout.py"]


def test_forced_turns_play_the_given_candidate_with_log_prob_zero():
    """actor.chooser's forced [N] (the host warm start's expert turns): where >= 0 that
    candidate is played with log-probs 0; elsewhere the actor's own choice."""
    from types import SimpleNamespace

    import jax.numpy as jnp
    import numpy as np
    policy, params = _policy()
    key = jax.random.key(3)
    cands = jax.random.randint(key, (3, 3, SHAPE.action_len), 2, 100)
    legal = jnp.ones((3, 3), bool)
    ts = SimpleNamespace(observation=jax.random.randint(jax.random.key(4), (3, 8), 2, 100))
    own = actor.chooser(policy, params)(key, None, ts, cands, legal, None)
    forced = jnp.array([-1, 2, 0])
    got = actor.chooser(policy, params, forced=forced)(key, None, ts, cands, legal, None)
    np.testing.assert_array_equal(got.index, [own.index[0], 2, 0])
    np.testing.assert_array_equal(got.response, cands[jnp.arange(3), got.index])
    np.testing.assert_allclose(got.logp[0], own.logp[0], rtol=1e-6)
    assert (np.asarray(got.logp[1:]) == 0).all()
    np.testing.assert_allclose(got.value, own.value, rtol=1e-6)
