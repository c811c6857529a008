"""The text interface: in-jit ids of every JAX-native environment equal the model
tokenizer's ids of the rendered chat text, on many states; the policy's prompt pieces
equal the chat template; actions map back to the environment's own actions."""
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax.envs import make
from asct_jax.envs.prompt import render_feedback
from asct_jax.envs.text_interface import LLMView, render_text
from asct_jax.models import gguf_io, loading
from factor_jax.teacher import teacher_prefix

EPISODES = 8
LENGTHS = {"household": (72, 16, 16), "shop": (80, 16, 8), "science": (64, 16, 8)}


@pytest.fixture(scope="module")
def tokenizer():
    return gguf_io.read_tokenizer(loading.smollm2_gguf_path())


def _view(name, tokenizer):
    env, params = make(name, size="small")
    o, a, f = LENGTHS.get(name, (0, 0, 0))   # rag_workflow: the measured lengths
    return LLMView(env, params, tokenizer, obs_len=o, action_len=a, feedback_len=f), params


def _random_play(view, params, key):
    """States, view timesteps and view candidates of random-policy episodes [T, B, ...]."""
    def play(key):
        states, ts = jax.vmap(view.reset, in_axes=(0, None))(jax.random.split(key, EPISODES),
                                                              params)

        def turn(carry, k):
            states, ts = carry
            cands, legal = jax.vmap(view.legal_actions, in_axes=(0, None))(states, params)
            pick = jax.random.categorical(k, jnp.where(legal, 0.0, -1e9), axis=-1)
            action = jnp.take_along_axis(cands, pick[:, None, None], axis=1)[:, 0]
            env_obs = jax.vmap(view.inner.observe, in_axes=(0, None))(states, params)
            env_cands, _ = jax.vmap(view.inner.legal_actions, in_axes=(0, None))(states, params)
            new_states, new_ts = jax.vmap(view.step, in_axes=(0, 0, None))(states, action, params)
            env_action = jnp.take_along_axis(env_cands, pick[:, None, None], axis=1)[:, 0]
            env_next, env_ts = jax.vmap(view.inner.step, in_axes=(0, 0, None))(
                states, env_action, params)
            out = dict(obs=ts.observation, env_obs=env_obs, cands=cands, env_cands=env_cands,
                       feedback=new_ts.feedback, env_feedback=env_ts.feedback,
                       reward=new_ts.reward, env_reward=env_ts.reward,
                       truncated=new_ts.info["text_truncated"])
            return (new_states, new_ts), out

        return jax.lax.scan(turn, (states, ts), jax.random.split(key, view.max_turns))[1]
    return jax.device_get(jax.jit(play)(key))


@pytest.mark.parametrize("name", ["rag_workflow", "household", "shop", "science"])
def test_in_jit_ids_equal_the_tokenizer_on_the_rendered_text(tokenizer, name):
    view, params = _view(name, tokenizer)
    out = _random_play(view, params, jax.random.key(3))
    pad = view.pad_id
    real = lambda ids: [int(i) for i in ids if i != pad]  # noqa: E731
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    checked = 0
    for t in range(view.max_turns):
        for b in range(EPISODES):
            assert real(out["obs"][t, b]) == enc(view.observation_text(out["env_obs"][t, b]))
            fb_text = render_text(view.env_words(out["env_feedback"][t, b]))
            assert real(out["feedback"][t, b]) == enc(fb_text)
            for k in range(view.num_actions):
                assert real(out["cands"][t, b, k]) == enc(
                    view.action_text(out["env_cands"][t, b, k]))
            checked += 1
    assert checked == view.max_turns * EPISODES
    # Token-in, token-out: the view's episode is the environment's episode.
    np.testing.assert_array_equal(out["reward"], out["env_reward"])
    assert float(out["truncated"].max()) == 0.0
    # Right-padded rows (the policy left-aligns them).
    for ids in (out["obs"], out["feedback"], out["cands"]):
        is_pad = ids == pad
        assert np.all(is_pad[..., 1:] >= is_pad[..., :-1])


def test_chat_pieces_reproduce_the_template(tokenizer):
    """[obs | action header | action] and the teacher's prompt are the chat template."""
    view, params = _view("household", tokenizer)
    state, ts = view.reset(jax.random.key(0), params)
    cands, _ = view.legal_actions(state, params)
    env_cands, _ = view.inner.legal_actions(state, params)
    p = view.prompt_tokens()
    obs = [int(i) for i in np.asarray(ts.observation) if i != p.pad_id]
    act = [int(i) for i in np.asarray(cands[0]) if i != p.pad_id]
    system = {"role": "system", "content": view.system_prompt}
    user = {"role": "user", "content": render_text(view.env_words(
        np.asarray(view.inner.observe(state, params))))}
    reply = render_text(view.env_words(np.asarray(env_cands[0])))
    full = tokenizer.apply_chat_template(
        [system, user, {"role": "assistant", "content": reply}], tokenize=False)
    ids = tokenizer.encode(full, add_special_tokens=False)
    assert ids[:len(obs) + len(p.action_header) + len(act)] == obs + list(p.action_header) + act
    fb_text = "you see a mug"
    fb = tokenizer.encode(fb_text, add_special_tokens=False)
    pad = jnp.full((1, 3), p.pad_id, jnp.int32)           # trailing PAD, moved out
    policy = types.SimpleNamespace(prompt=p, pad_id=p.pad_id, vocab_size=len(tokenizer))

    def teacher_ids(prompt):
        prefix = teacher_prefix(policy, jnp.concatenate([jnp.asarray([obs]), pad], 1),
                                jnp.concatenate([jnp.asarray([fb]), pad], 1), prompt)
        return [int(i) for i in np.asarray(prefix[0]) if i != p.pad_id] + list(p.action_header)

    # SERL's teacher prompt: ONE user message (OliverLeeXZ/SERL privileged_context.py).
    serl = {"role": "user", "content": user["content"] + "\n\nImmediate feedback from the "
            "current step:\nyou see a mug\n\nCorrectly solve the current task.\n"}
    assert serl["content"] == render_feedback(user["content"], fb_text)
    text = tokenizer.apply_chat_template([system, serl], tokenize=False,
                                         add_generation_prompt=True)
    assert tokenizer.encode(text, add_special_tokens=False) == teacher_ids("serl")
    # The earlier prompt ("appended"): the feedback as a second user message.
    appended = tokenizer.apply_chat_template(
        [system, user, {"role": "user", "content": "The result of your next action will be:\n"
                        + fb_text}], tokenize=False, add_generation_prompt=True)
    assert tokenizer.encode(appended, add_special_tokens=False) == teacher_ids("appended")


def test_an_unknown_action_is_nothing_happens_and_truncation_is_counted(tokenizer):
    env, params = make("household", size="small")
    view = LLMView(env, params, tokenizer, obs_len=40, action_len=16, feedback_len=16)
    state, ts = view.reset(jax.random.key(0), params)
    assert float(ts.info["text_truncated"]) == 1.0      # 40 tokens cannot hold the prompt
    obs = np.asarray(ts.observation)
    assert obs[obs != view.pad_id][-len(view.pieces.obs_tail):].tolist() == view.pieces.obs_tail
    bogus = jnp.full((view.action_len,), view.pad_id, jnp.int32).at[0].set(42)
    _, ts_view = view.step(state, bogus, params)
    _, ts_env = env.step(state, jnp.zeros((env.action_len,), jnp.int32), params)
    np.testing.assert_array_equal(np.asarray(ts_view.reward), np.asarray(ts_env.reward))
    assert render_text(view.env_words(np.asarray(ts_env.feedback))) == "nothing happens"


# -- the generating actor through the chat view (issue 23) ---------------------------
def _generation_setup(tokenizer):
    from asct_jax.rl.generation import GenerationSpec, build_prompt
    view, params = _view("household", tokenizer)
    pieces = view.prompt_tokens().generation
    spec = GenerationSpec(tags=pieces.tags, stop_id=pieces.stop_id, pieces=pieces)
    states, ts = jax.vmap(view.reset, in_axes=(0, None))(jax.random.split(jax.random.key(4), 3),
                                                          params)
    cands, legal = jax.vmap(view.legal_actions, in_axes=(0, None))(states, params)
    n, k = 3, spec.history
    prompt = build_prompt(ts.observation, cands, legal,
                          jnp.zeros((n, k, ts.observation.shape[1]), jnp.int32),
                          jnp.zeros((n, k, cands.shape[2]), jnp.int32), jnp.zeros((n, k), bool),
                          spec, view.pad_id)
    return view, spec, ts, cands, legal, prompt


def test_generation_prompt_is_one_user_message_with_the_observation_and_actions(tokenizer):
    view, spec, ts, cands, legal, prompt = _generation_setup(tokenizer)
    assert prompt.shape[1] == spec.prompt_len(view.obs_len, view.num_actions, view.action_len)
    text = tokenizer.decode([int(t) for t in prompt[0] if t != view.pad_id])
    obs_text = tokenizer.decode([int(t) for t in ts.observation[0] if t != view.pad_id])
    head, tail = view.pieces.user_text
    assert text.startswith(head) and text.endswith(tail) and text.count("<|im_start|>") == 2
    assert obs_text[len(head):-len(tail)] in text          # the observation without template
    for c, ok in zip(cands[0], legal[0]):
        words = tokenizer.decode([int(t) for t in c if t not in (view.pad_id,
                                                                 spec.stop_id)])
        assert (("\n" + words + "\n") in text) == bool(ok)  # one line per admissible action
    assert "<action> </action> tags" in text


def test_text_projection_decodes_the_response_and_marks_the_action_tokens(tokenizer):
    from asct_jax.envs.projection import project_text_host
    view, spec, _, cands, legal, _ = _generation_setup(tokenizer)
    live = [k for k in range(cands.shape[1]) if legal[0, k]]
    words = tokenizer.decode([int(t) for t in cands[0, live[-1]]
                              if t not in (view.pad_id, spec.stop_id)])
    cases = [(f"<think>I should act.</think>\n<action>{words.upper()} </action>", live[-1]),
             (f"<action>{words}</action>", -1),                         # no think
             ("<think>x</think><action>fly to the moon</action>", -1),    # inadmissible
             (f"<think>x</think> {words}", -1)]                           # no action tags
    r = 48
    rows = [tokenizer.encode(t, add_special_tokens=False) for t, _ in cases]
    resp = np.zeros((len(rows), r), np.int32)
    mask = np.zeros((len(rows), r), bool)
    for i, ids in enumerate(rows):
        resp[i, :len(ids)], mask[i, :len(ids)] = ids, True
    n = len(rows)
    index, valid, amask, has_think, has_action = project_text_host(
        resp, mask, np.repeat(np.asarray(cands[:1]), n, 0), np.repeat(np.asarray(legal[:1]), n, 0),
        tokenizer, view.pad_id, spec.stop_id)
    np.testing.assert_array_equal(index, [k for _, k in cases])
    np.testing.assert_array_equal(valid, [k >= 0 for _, k in cases])
    np.testing.assert_array_equal(has_think, [True, False, True, True])
    np.testing.assert_array_equal(has_action, [True, True, True, False])
    inside = tokenizer.decode(resp[0][amask[0]])
    assert words.upper() in inside and "think" not in inside and not amask[3].any()
    # In jit, through the host callback: the same answer, the action row of the view.
    spec_out = jax.jit(lambda *a: spec.project(*a, view.pad_id))(
        jnp.asarray(resp), jnp.asarray(mask), jnp.repeat(cands[:1], n, 0),
        jnp.repeat(legal[:1], n, 0))
    np.testing.assert_array_equal(spec_out.index, index)
    np.testing.assert_array_equal(spec_out.action[0], cands[0, live[-1]])
    assert bool(jnp.all(spec_out.action[1:] == view.pad_id))


def test_a_view_starts_an_episode_on_a_chosen_question(tokenizer):
    """LLMView.reset_to renders a given initial state as reset does (reset = reset_to of
    reset_env's state), so the question walk (asct_jax.envs.questions) plays through it."""
    from asct_jax.envs.questions import question_env, reset_question

    view, params = _view("ragspace", tokenizer)
    key = jax.random.PRNGKey(5)
    s, ts = view.reset_to(view.inner.reset_env(key, params), params)
    s_ref, ts_ref = view.reset(key, params)
    for a, b in zip(jax.tree.leaves((s, ts)), jax.tree.leaves((s_ref, ts_ref))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert question_env(view) is view.inner
    s, ts = reset_question(view, key, jnp.int32(7), params)
    assert int(s.qid) == 7
    np.testing.assert_array_equal(np.asarray(ts.observation),
                                  np.asarray(view.observe(s, params)))
