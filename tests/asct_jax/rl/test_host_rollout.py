"""Host-side rollouts of real TextWorld games (asct_jax.rl.host_rollout).

Uses the tw-cooking games of tests/asct_jax/envs/test_external.py (generated once into
~/.cache/asct_jax/textworld or $ASCT_JAX_TEXTWORLD_GAMES) and the tiny decoder.
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from asct_jax.envs import make as make_env
from asct_jax.envs.prompt import PromptTokens
from asct_jax.envs.tokenizer import word_feedback_frame
from asct_jax.envs.base import EOS_ID, PAD_ID
from asct_jax.envs.external import BatchedHostEnv, TextWorldEnv
from asct_jax.models import Decoder, get_preset
from asct_jax.rl.host_rollout import HostShape, host_rollout, host_rollout_from
from asct_jax.rl.host_text import CommandEncoder
from asct_jax.rl.host_tokenizer import build_tokenizer, game_texts
from asct_jax.rl.policy import Policy
from asct_jax.rl.rollout import rollout
from asct_jax.rl.types import Rollout
from experiments.harness import registry
from experiments.harness.make_textworld_games import DEFAULT_OUT, make_games
from factor_jax.host_continuations import host_continuations

# Every test here plays real TextWorld games (generated on first use): the slow tier.
pytestmark = pytest.mark.slow

NUM_GAMES, G, T, O, F, A, K = 2, 2, 6, 64, 16, 10, 24
SHAPE = HostShape(max_turns=T, obs_len=O, feedback_len=F, action_len=A, max_candidates=K)
HOST_MAX_TURNS = 4  # < T: every episode ends (done) before the rollout's last turn


@pytest.fixture(scope="module")
def setup():
    games = make_games(3, out=os.environ.get("ASCT_JAX_TEXTWORLD_GAMES", DEFAULT_OUT),
                       go=6)[:NUM_GAMES]
    tok = build_tokenizer(game_texts(TextWorldEnv(games, max_turns=10), range(NUM_GAMES),
                                     random_episodes=1, max_steps=10))
    cfg = get_preset("tiny", vocab_size=len(tok), max_seq_len=O + F + A + 2, hidden_size=32,
                     num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16,
                     intermediate_size=64)
    graphdef, params = nnx.split(Decoder(cfg, rngs=nnx.Rngs(0)))
    # The teacher's prompt in the games' word vocabulary (as HostGames gives it).
    policy = Policy(graphdef, cfg.vocab_size, O, A, F,
                    PromptTokens(feedback_frame=word_feedback_frame(tok)))
    env = BatchedHostEnv([TextWorldEnv(games, max_turns=HOST_MAX_TURNS)
                          for _ in range(NUM_GAMES * G)])
    encoder = CommandEncoder(tok, A)
    batch, host_states = host_rollout(
        policy, params, env, tok, list(range(NUM_GAMES)), SHAPE, group_size=G,
        key=jax.random.key(0), encoder=encoder)
    return dict(games=games, tok=tok, policy=policy, params=params,
                batch=batch, host_states=host_states, encoder=encoder, env=env)


def _play_from(setup, states, key):
    env = BatchedHostEnv(setup["env"].envs[:len(states)])
    return host_rollout_from(setup["policy"], setup["params"], env, setup["tok"], states,
                             SHAPE, key=key, encoder=setup["encoder"])[0]


def test_shapes_match_jax_rollout_conventions(setup):
    batch = setup["batch"]
    b = NUM_GAMES * G
    # The JAX rollout's structure, traced only (no compile), on a JAX-native env.
    env, env_params = make_env("toy_tree")
    ref = jax.eval_shape(lambda p, k: rollout(setup["policy"], p, env, env_params, k, 2, 2),
                         setup["params"], jax.random.key(0))
    expected = {"obs": (b, T, O), "feedback": (b, T, F), "responses": (b, T, A),
                "action_index": (b, T), "token_mask": (b, T, A), "turn_mask": (b, T),
                "logp_old": (b, T, A), "values": (b, T), "rewards": (b, T),
                "penalties": (b, T), "dones": (b, T),
                "cand_tokens": (b, T, K, A), "cand_mask": (b, T, K),
                "cand_costs": (b, T, K), "group": (b,), "env_calls": ()}
    # (prompts / action_mask / turn_info: a generating actor's, None here)
    optional = {"states", "final_info", "extras", "prompts", "action_mask", "turn_info"}
    assert set(expected) | optional == set(Rollout.__dataclass_fields__)
    for name, shape in expected.items():
        got, want = getattr(batch, name), getattr(ref, name)
        assert got.shape == shape, name
        assert got.dtype == want.dtype, name
        assert got.ndim == want.ndim, name
    assert batch.states is None
    assert {"success", "score"} <= set(batch.final_info)
    for v in batch.final_info.values():
        assert v.shape == (b,) and v.dtype == jnp.float32
    np.testing.assert_array_equal(batch.group, np.arange(b) // G)


def test_masks_and_groups_consistent(setup):
    batch, host_states = setup["batch"], setup["host_states"]
    bt = jax.tree.map(np.asarray, {k: getattr(batch, k) for k in (
        "responses", "action_index", "token_mask", "turn_mask", "dones", "cand_tokens",
        "cand_mask", "cand_costs", "logp_old", "rewards")})
    turn, tokm = bt["turn_mask"], bt["token_mask"]
    # turns happen as a prefix; every episode ended (host max_turns < T), exactly once
    assert np.all(turn[:, :-1] >= turn[:, 1:])
    assert np.all(bt["dones"].sum(1) == 1) and not np.any(bt["dones"] & ~turn)
    last = turn.sum(1) - 1
    assert np.all(bt["dones"][np.arange(len(last)), last])
    assert np.all(turn.sum(1) <= HOST_MAX_TURNS)
    # token_mask: real action tokens (EOS included, PAD excluded) of real turns only
    np.testing.assert_array_equal(tokm, (bt["responses"] != PAD_ID) & turn[..., None])
    assert not tokm[~turn].any() and not bt["cand_mask"][~turn].any()
    assert np.all(bt["action_index"][~turn] == -1) and np.all(bt["action_index"][turn] >= 0)
    assert not bt["logp_old"][~tokm].any() and not bt["rewards"][~turn].any()
    for i, t in zip(*np.nonzero(turn)):
        k = bt["action_index"][i, t]
        assert bt["cand_mask"][i, t, k]
        np.testing.assert_array_equal(bt["responses"][i, t], bt["cand_tokens"][i, t, k])
        n = tokm[i, t].sum()
        assert bt["responses"][i, t, n - 1] == EOS_ID and EOS_ID not in bt["responses"][i, t, :n - 1]
    np.testing.assert_array_equal(bt["cand_costs"], (bt["cand_tokens"] != PAD_ID).sum(-1))
    # legal candidates are PAD-padded token sequences ending with EOS, all distinct
    assert bt["cand_mask"].sum(-1).max() <= K
    assert batch.env_calls.dtype == jnp.int32 and int(batch.env_calls) == turn.sum()
    # groups: the G episodes of a group play the same game; groups play different games
    games = [s[0].game for s in host_states]
    assert games == [setup["games"][i // G] for i in range(NUM_GAMES * G)]
    assert all(len(s) == T + 1 for s in host_states)
    assert all(s[-1].done for s in host_states)


def test_logp_old_matches_recomputed_and_rewards_sum_to_score(setup):
    batch, policy, params = setup["batch"], setup["policy"], setup["params"]
    b = NUM_GAMES * G
    flat = lambda x: x.reshape((b * T,) + x.shape[2:])  # noqa: E731
    logp, _, value = jax.jit(policy.action_log_probs)(
        params, flat(batch.obs), flat(batch.responses), flat(batch.cand_tokens),
        flat(batch.cand_mask))
    logp = np.where(batch.token_mask, np.asarray(logp).reshape(b, T, A), 0.0)
    np.testing.assert_allclose(logp, batch.logp_old, atol=2e-4)
    turn = np.asarray(batch.turn_mask)
    np.testing.assert_allclose(np.asarray(value).reshape(b, T)[turn],
                               np.asarray(batch.values)[turn], atol=2e-4)
    # log-probs of sampled candidates are proper: <= 0, some strictly negative
    assert np.all(batch.logp_old <= 1e-6) and np.any(batch.logp_old < -1e-3)
    # rewards add up to the game's score change (score 0 after reset)
    np.testing.assert_allclose(np.asarray(batch.rewards).sum(1), batch.final_info["score"])
    scores = [s[-1].score - s[0].score for s in setup["host_states"]]
    np.testing.assert_allclose(np.asarray(batch.rewards).sum(1), scores)
    assert set(np.asarray(batch.final_info["success"]).tolist()) <= {0.0, 1.0}
    np.testing.assert_array_equal(batch.penalties, 0.0)   # candidates: nothing is invalid


def test_a_generating_actor_records_its_invalid_penalties(setup):
    """Generate mode: an untrained tiny actor's invalid turns carry p_t = 0.1 in
    `penalties` and rewards = the game's reward - 0.1, so rewards + penalties add up to the
    game's score; valid turns and turns after done carry no penalty."""
    from asct_jax.envs.projection import Tags
    from asct_jax.envs.tokenizer import TAG_TOKENS, tag_ids
    from asct_jax.rl.generation import GenerationPolicy, GenerationSpec

    tok = setup["tok"]
    spec = GenerationSpec(tags=Tags(*((i,) for i in tag_ids(len(tok)))), response_len=6)
    cfg = get_preset("tiny", vocab_size=len(tok) + len(TAG_TOKENS),
                     max_seq_len=spec.prompt_len(O, K, A) + F + spec.response_len + 2,
                     hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                     head_dim=16, intermediate_size=64)
    graphdef, params = nnx.split(Decoder(cfg, rngs=nnx.Rngs(1)))
    policy = GenerationPolicy(graphdef, cfg.vocab_size, spec, O, A, K, F)
    batch, host_states = host_rollout(policy, params, setup["env"], tok,
                                      list(range(NUM_GAMES)), SHAPE, group_size=G,
                                      key=jax.random.key(2))
    live = np.asarray(batch.turn_mask)
    invalid = live & (np.asarray(batch.turn_info["gen/invalid"]) == 1.0)
    assert invalid.any()
    np.testing.assert_allclose(batch.penalties, np.where(invalid, 0.1, 0.0), rtol=1e-6)
    scores = [s[-1].score - s[0].score for s in host_states]
    np.testing.assert_allclose(np.asarray(batch.rewards + batch.penalties).sum(1), scores,
                               atol=1e-5)


def test_one_grpo_learn_step_changes_params(setup):
    from asct_jax.rl.train_step import make_learn_step
    from asct_jax.rl.build import learner_for_policy
    from experiments.configs import base

    c = base.get_config()
    c.method = "grpo"
    c.rollout.num_groups, c.rollout.group_size = NUM_GAMES, G
    # Two updates: make_optimizer's warm-up schedule gives lr 0 to the very first one.
    c.ppo.minibatches, c.ppo.epochs = 1, 2
    c.ppo.warmup_steps = 1
    c.train.num_devices = 1
    policy, params = setup["policy"], setup["params"]
    learner = learner_for_policy(c, registry.get("grpo"), policy, params)
    learn, state = make_learn_step(learner), learner.init_state
    new, metrics = learn(state, setup["batch"], jax.random.key(1))
    assert int(new.step) == 1
    bad = {k: float(v) for k, v in metrics.items() if not np.isfinite(float(v))}
    assert not bad, bad
    assert float(metrics["rollout/env_calls"]) == float(setup["batch"].env_calls)
    diff = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), new.params, params)
    assert max(jax.tree.leaves(diff)) > 0.0


def test_rollout_from_stored_states_continues_the_episodes(setup):
    batch, host_states = setup["batch"], setup["host_states"]
    starts = [host_states[i][1] for i in range(NUM_GAMES * G)]
    cont = _play_from(setup, starts, jax.random.key(3))
    live = np.asarray(batch.turn_mask[:, 1])
    # x_1 restored: the policy reads the same observation as in the original episode
    np.testing.assert_array_equal(np.asarray(cont.obs[:, 0])[live],
                                  np.asarray(batch.obs[:, 1])[live])
    # rewards from x_1 on add up to the final score minus the score at x_1
    np.testing.assert_allclose(np.asarray(cont.rewards).sum(1),
                               np.asarray(cont.final_info["score"])
                               - np.array([s.score for s in starts]))
    # at most max_turns - 1 turns remain after x_1
    assert int(np.asarray(cont.turn_mask).sum(1).max()) <= HOST_MAX_TURNS - 1
    assert int(cont.env_calls) == int(np.asarray(cont.turn_mask).sum())


def test_host_continuations_land_on_the_checkpoints(setup):
    """Bookkeeping with a stand-in player whose continuation ends at once with reward =
    the start state's turn: the outcome is the return before the checkpoint plus it."""
    batch, host_states = setup["batch"], setup["host_states"]
    calls = []

    def play(states, key):
        real = np.array([not s.done for s in states])
        calls.append(int(real.sum()))
        n = len(states)
        rewards = np.zeros((n, T), np.float32)
        rewards[:, 0] = [s.turn if not s.done else 99 for s in states]
        dones = np.zeros((n, T), bool)
        dones[:, 0] = True
        live = np.zeros((n, T), bool)
        live[:, 0] = real
        return batch.replace(rewards=jnp.asarray(rewards), dones=jnp.asarray(dones),
                             turn_mask=jnp.asarray(live),
                             token_mask=jnp.asarray(np.repeat(live[:, :, None], A, 2)))

    cont = host_continuations(play, batch, host_states, jax.random.key(0), num=3,
                              horizon=15, chunk=5)
    idx, valid = np.asarray(cont.idx), np.asarray(cont.valid)
    n = np.asarray(batch.turn_mask).sum(1)
    assert np.all(valid[:, 0] == (n > 1)) and np.all(valid[:, 1] == (n >= 4))
    assert np.all(np.asarray(cont.scored) == valid)
    r = np.asarray(jnp.where(batch.turn_mask, batch.rewards, 0.0))
    for i, s in zip(*np.nonzero(valid)):
        t = int(idx[i, s])
        np.testing.assert_allclose(float(cont.outcome[i, s]), r[i, :t].sum() + t, rtol=1e-6)
    # every start state is played once (the filler of the last chunk is done, unplayed)
    assert sum(calls) == 3 * valid.sum() and max(calls) <= 5
    assert float(cont.env_calls) == sum(calls)
    assert float(cont.aux_tokens) == A * sum(calls)


def test_factor_learn_step_uses_host_continuations(setup):
    from asct_jax.rl.train_step import make_learn_step
    from asct_jax.rl.build import learner_for_policy
    from experiments.configs import base

    c = base.get_config()
    c.method = "factor"
    c.rollout.num_groups, c.rollout.group_size = NUM_GAMES, G
    c.ppo.minibatches, c.ppo.epochs = 1, 1
    policy, params = setup["policy"], setup["params"]
    cont = host_continuations(lambda st, k: _play_from(setup, st, k), setup["batch"],
                              setup["host_states"], jax.random.key(0), 2, 15,
                              chunk=NUM_GAMES * G)
    assert float(cont.env_calls) > 0
    c.train.num_devices = 1
    learner = learner_for_policy(c, registry.get("factor"), policy, params)
    learn, state = make_learn_step(learner), learner.init_state
    state, metrics = learn(state, setup["batch"].replace(extras=cont), jax.random.key(1))
    assert float(metrics["credit/env_calls"]) == float(cont.env_calls)
    assert float(metrics["credit/aux_tokens"]) == float(cont.aux_tokens)
    assert float(metrics["credit/factor/critic_targets"]) == float(np.asarray(cont.valid).sum())
    assert int(state.method_state.cursor) == 1
    bad = {k: float(v) for k, v in metrics.items() if not np.isfinite(float(v))}
    assert not bad, bad


def test_a_pretrained_model_plays_the_games_as_chat_text(setup, tmp_path):
    """ChatCodec: the observation is the chat template around the game's text, each
    candidate a command in the model's tokens ending with the end-of-turn token, and the
    command played is the candidate the model scored (token-in, token-out)."""
    from asct_jax.models.loading import load_pretrained
    from tests.helpers.models import tiny_llm_folder
    from asct_jax.rl.host_games import SYSTEM_PROMPT
    from asct_jax.rl.host_text import ChatCodec

    model, tokenizer = load_pretrained(tiny_llm_folder(str(tmp_path / "tiny")))
    codec = ChatCodec(tokenizer, SYSTEM_PROMPT)
    shape = HostShape(max_turns=2, obs_len=320, feedback_len=48, action_len=16,
                      max_candidates=K)
    graphdef, params = nnx.split(model)
    policy = Policy(graphdef, model.config.vocab_size, shape.obs_len, shape.action_len,
                    shape.feedback_len, codec.prompt_tokens())
    env = BatchedHostEnv([TextWorldEnv(setup["games"], max_turns=HOST_MAX_TURNS)
                          for _ in range(NUM_GAMES)])
    states, _ = env.reset(list(range(NUM_GAMES)))
    batch, host_states = host_rollout(policy, params, env, codec, list(range(NUM_GAMES)),
                                      shape, group_size=1, key=jax.random.key(0))
    pad = codec.pad_id
    for i in range(NUM_GAMES):
        text = host_states[i][0].observation
        chat = tokenizer.apply_chat_template(
            [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}],
            tokenize=False)
        obs = [int(x) for x in np.asarray(batch.obs[i, 0]) if x != pad]
        assert obs == tokenizer.encode(chat, add_special_tokens=False)
        action = [int(x) for x in np.asarray(batch.responses[i, 0]) if x != pad]
        assert action[-1] == codec.pieces.end_of_turn
        command = tokenizer.decode(action[:-1])
        assert command in env.legal_actions(states)[i]
        # The game was sent that command: replaying it gives the stored next state.
        replay, _ = env.step(states, [command if j == i else env.legal_actions(states)[j][0]
                                      for j in range(NUM_GAMES)])
        assert replay[i].observation == host_states[i][1].observation
