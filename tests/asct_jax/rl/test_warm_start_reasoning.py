"""warm_start.reasoning (issue 49, item 5): the generating actor's SFT target with the
scripted expert's sub-goal inside the think tags ("subgoal") or empty ("empty", every warm
start before), the environments' expert_rationale hook, and the think / action token
counts per turn (gen/think_tokens, gen/action_tokens)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asct_jax import envs
from asct_jax.envs.base import EOS_ID, PAD_ID
from asct_jax.envs.play import play
from asct_jax.envs.projection import Tags
from asct_jax.envs.tokenizer import decode
from asct_jax.infra.checks import ConfigError
from asct_jax.rl import warm_start as ws
from asct_jax.rl.generation import (GenerationChooser, GenerationSpec, scripted_writer,
                                    think_mask)
from asct_jax.rl.rollout import episode_metrics, episodes_to_rollout
from tests.helpers.tiers import examples

EPISODES = jax.jit(ws.expert_episodes, static_argnums=(0, 3, 5, 6, 7, 8))


def _env(name):
    env, params = envs.make(name, "small")
    tags = Tags(*((len(env.tokenizer) + i,) for i in range(4)))   # after the words
    return env, params, GenerationSpec(tags=tags)


def _flat(tree):
    """[B, T, ...] leaves -> [B T, ...] (shop's size arrays have a 0-sized axis)."""
    return jax.tree.map(lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:]), tree)


def _inside_think(row, tags):
    """The tokens strictly between a response row's think tags."""
    row = [int(t) for t in row]
    return row[row.index(tags.think_open[0]) + 1:row.index(tags.think_close[0])]


def test_the_sft_target_holds_the_shop_experts_subgoal_inside_the_think_tags():
    env, params, spec = _env("shop")
    empty = EPISODES(env, params, jax.random.key(0), 8, 0.0, PAD_ID, "expert", spec, "empty")
    sub = EPISODES(env, params, jax.random.key(0), 8, 0.0, PAD_ID, "expert", spec, "subgoal")
    d, e = sub.rollout, empty.rollout
    # The same episodes (the same actions, projected the same way), every turn valid.
    np.testing.assert_array_equal(d.action_index, e.action_index)
    np.testing.assert_array_equal(d.action_mask.sum(-1), e.action_mask.sum(-1))
    assert float(jnp.sum(jnp.where(d.turn_mask, d.turn_info["gen/invalid"], 0))) == 0
    # First turn (the search page): "find {feature} {category} under {cap} dollars", the
    # instruction's words, inside the think tags; the action after them.
    s0 = jax.tree.map(lambda x: x[0, 0], d.states)
    words = decode(_inside_think(d.responses[0, 0], spec.tags)).split()
    instr = decode(env.observe(s0, params)).split()        # "find a {f} {c} in {col} ..."
    cap = instr[instr.index("under") + 1]
    assert words == ["find", instr[2], instr[3], "under", cap, "dollars"]
    assert decode([t for t in d.responses[0, 0] if t < spec.tags.think_open[0]]).startswith(
        " ".join(words) + " search for")
    # Every expert turn's think part is env.expert_rationale of its state (its real words).
    states = _flat(d.states)
    why = np.asarray(jax.vmap(env.expert_rationale, in_axes=(0, None))(states, params))
    resp = np.asarray(d.responses).reshape(-1, d.responses.shape[-1])
    for i in np.flatnonzero(np.asarray(sub.expert).reshape(-1)):
        assert _inside_think(resp[i], spec.tags) == [int(t) for t in why[i] if t != PAD_ID]
    # Per turn: 3 to 6 reasoning tokens; "empty" had none.
    think = np.asarray(d.turn_info["gen/think_tokens"])[np.asarray(d.turn_mask)]
    assert think.min() >= 3 and think.max() <= 6
    assert float(jnp.sum(e.turn_info["gen/think_tokens"])) == 0


def test_the_shop_subgoal_on_an_item_page_names_the_attribute_to_set():
    env, params, _ = _env("shop")
    s, _ = env.reset(jax.random.key(4), params)
    pid = f"p{int(s.target) + 1}"
    color = ("red", "blue")[int(s.goal[2])]
    item = s.replace(page=jnp.asarray(2, jnp.int32), cur=s.target)
    assert decode(env.expert_rationale(item, params)) == f"item {pid} color {color}"
    chosen = item.replace(color=s.goal[2])
    assert decode(env.expert_rationale(chosen, params)).split()[:2] == ["buy", pid]
    wrong = item.replace(cur=(s.target + 1) % env.n_items)
    assert decode(env.expert_rationale(wrong, params)) == f"back to results for {pid}"


@pytest.mark.parametrize("name", ["shop", "household", "science"])
def test_every_rationale_is_a_few_of_the_environments_words_and_fits_a_response(name):
    env, params, spec = _env(name)
    ws.check_reasoning("subgoal", env, spec)                # the default response_len fits
    d = EPISODES(env, params, jax.random.key(1), 16, 0.3, PAD_ID, "expert", spec,
                 "subgoal").rollout
    states = _flat(d.states)
    why = np.asarray(jax.vmap(env.expert_rationale, in_axes=(0, None))(states, params))
    live = np.asarray(d.turn_mask).reshape(-1)
    n = (why != PAD_ID).sum(-1)[live]
    assert why.shape[-1] == env.rationale_len and n.min() >= 3 and n.max() <= 8
    assert not np.any(np.isin(why, (EOS_ID, 2)))            # no EOS, no UNK
    assert np.all(why < len(env.tokenizer))                 # words, never a tag
    # PAD only after the words (right-padded).
    assert np.all(np.diff((why == PAD_ID).astype(int), axis=-1) >= 0)


def test_empty_reasoning_is_bit_identical_to_the_canonical_writer():
    """"empty": the episodes of the writer every stored warm start used (scripted_writer
    alone), array by array."""
    env, params, spec = _env("shop")
    pick = ws.noisy_expert_index(env, params, 0.3)
    before = episodes_to_rollout(jax.jit(lambda k: play(
        env, params, GenerationChooser(spec, scripted_writer(spec, pick, PAD_ID), PAD_ID),
        k, 8, 1, PAD_ID))(jax.random.key(0)))
    now = EPISODES(env, params, jax.random.key(0), 8, 0.3, PAD_ID, "expert", spec,
                   "empty").rollout
    for field in ("obs", "responses", "token_mask", "action_index", "rewards", "turn_mask",
                  "prompts", "action_mask"):
        np.testing.assert_array_equal(getattr(now, field), getattr(before, field))


def test_empty_keeps_the_warm_starts_names_and_stored_runs():
    from experiments.configs import base
    from experiments.harness import warm_start as shared_ws
    from experiments.harness.stored_fields import ADDED_DEFAULTS
    assert ADDED_DEFAULTS["warm_start.reasoning"] == "empty"
    c = base.get_config()
    c.env.name, c.actor.chooser = "shop", "generate"
    name = shared_ws.key(c)
    del c.warm_start["reasoning"]                   # a config of before the field
    assert shared_ws.key(c) == name
    c.warm_start.reasoning = "subgoal"
    assert shared_ws.key(c) != name


def test_subgoal_refuses_what_cannot_write_it():
    shop, _, spec = _env("shop")
    rag, _, rag_spec = _env("ragspace")
    cases = [(shop, None, "expert", "candidate-scoring"),
             (shop, GenerationSpec(tags=spec.tags, think="none"), "expert", "actor.think"),
             (shop, spec, "base", "imitated"),
             (rag, rag_spec, "expert", "ragspace")]
    for env, s, imitated, words in cases:
        with pytest.raises(ConfigError, match=r"^warm_start\.reasoning: .*" + words) as e:
            ws.check_reasoning("subgoal", env, s, imitated)
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"^actor\.response_len: 12 < 19"):
        ws.check_reasoning("subgoal", shop, GenerationSpec(tags=spec.tags, response_len=12))
    for env, s, teacher, _ in cases:                        # "empty" is always fine
        ws.check_reasoning("empty", env, s, teacher)
    from experiments.configs import base
    from experiments.harness import registry
    c = base.get_config()
    c.warm_start.reasoning = "long"
    with pytest.raises(ConfigError, match=r"^warm_start\.reasoning: "):
        registry.check(c)


# ------------------------------------------------ the think / action token counts per turn
TAGS = Tags((90,), (91,), (92,), (93,))     # <think> </think> <action> </action>


def _row(think, action, close_think=True, r=24):
    toks = [90, *think] + ([91] if close_think else []) + [92, *action, 93, EOS_ID]
    return toks + [PAD_ID] * (r - len(toks))


def test_think_and_action_tokens_of_hand_made_responses():
    cands = jnp.asarray([[[40, 41, EOS_ID], [42, EOS_ID, PAD_ID]]] * 4)   # [4, K=2, A=3]
    legal = jnp.ones((4, 2), bool)
    rows = jnp.asarray([_row([30, 31, 32], [40, 41]),        # 3 think, 2 action
                        _row([], [42]),                      # 0 think, 1 action
                        _row([30], [42], close_think=False),  # no </think>: 0 (invalid)
                        [91, 30, 90, 92, 40, 41, 93, EOS_ID] + [PAD_ID] * 16])  # close first

    def writer(key, prompt, c, lg, states):
        return rows, jnp.zeros(rows.shape), rows != PAD_ID, jnp.zeros(4), {}

    spec = GenerationSpec(tags=TAGS, history=0)
    chooser = GenerationChooser(spec, writer, PAD_ID)
    obs = jnp.full((4, 3), 7, jnp.int32)
    choice, _ = chooser.turn(jax.random.key(0), None, obs, cands, legal,
                             chooser.init(4, 3, 3))
    x = choice.extra
    np.testing.assert_array_equal(x["gen/think_tokens"], [3, 0, 0, 0])
    np.testing.assert_array_equal(x["gen/action_tokens"], [2, 1, 1, 2])
    np.testing.assert_array_equal(x["gen/invalid"], [0, 0, 1, 0])
    # The mean over real turns (episode_metrics), a padded turn left out.
    info = {k: v.reshape(2, 2) for k, v in x.items() if k.startswith("gen/")}
    m = _turn_means(info, jnp.asarray([[True, True], [True, False]]))
    assert m["gen/think_tokens"] == pytest.approx(3 / 3)           # turns 3, 0, 0
    assert m["gen/action_tokens"] == pytest.approx(4 / 3)          # turns 2, 1, 1


def _turn_means(turn_info, turn_mask):
    """episode_metrics' gen/ entries for a batch of these per-turn statistics."""
    class Batch:
        final_info = {}
        rewards = jnp.zeros(turn_mask.shape)
    b = Batch()
    b.turn_mask, b.turn_info = turn_mask, turn_info
    return {k: float(v) for k, v in episode_metrics(b).items() if k.startswith("gen/")}


@settings(max_examples=examples(50), deadline=None)
@given(st.integers(0, 10), st.integers(1, 5))
def test_think_mask_counts_the_words_between_the_think_tags(n_think, n_act):
    r = 2 + n_think + n_act + 3 + 4
    row = _row(list(range(30, 30 + n_think)), list(range(50, 50 + n_act)), r=r)
    mask = jnp.asarray(row) != PAD_ID
    m = think_mask(jnp.asarray([row]), mask[None], TAGS)[0]
    assert int(jnp.sum(m)) == n_think
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(m)), np.arange(1, 1 + n_think))
    # A think tag outside the generated mask is not found: nothing counts.
    cut = mask.at[1 + n_think].set(False)
    assert int(jnp.sum(think_mask(jnp.asarray([row]), cut[None], TAGS))) == 0
