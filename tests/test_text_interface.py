"""The text interface: in-jit ids of every JAX-native environment equal the model
tokenizer's ids of the rendered chat text, on many states; the policy's prompt pieces
equal the chat template; actions map back to the environment's own actions."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax.envs import make
from asct_jax.envs.base import vmap_reset, vmap_step
from asct_jax.envs.text_interface import LLMView, render_text
from asct_jax.models import gguf_io, loading

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
        states, ts = vmap_reset(view, jax.random.split(key, EPISODES), params)

        def turn(carry, k):
            states, ts = carry
            cands, legal = jax.vmap(view.legal_actions, in_axes=(0, None))(states, params)
            pick = jax.random.categorical(k, jnp.where(legal, 0.0, -1e9), axis=-1)
            action = jnp.take_along_axis(cands, pick[:, None, None], axis=1)[:, 0]
            env_obs = jax.vmap(view.inner.observe, in_axes=(0, None))(states, params)
            env_cands, _ = jax.vmap(view.inner.legal_actions, in_axes=(0, None))(states, params)
            new_states, new_ts = vmap_step(view, states, action, params)
            env_next, env_ts = vmap_step(view.inner, states,
                                         jnp.take_along_axis(env_cands, pick[:, None, None],
                                                             axis=1)[:, 0], params)
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
    teacher = tokenizer.apply_chat_template(
        [system, user, {"role": "user", "content": "The result of your next action will be:\n"
                        + fb_text}], tokenize=False, add_generation_prompt=True)
    fb = tokenizer.encode(fb_text, add_special_tokens=False)
    assert tokenizer.encode(teacher, add_special_tokens=False) == (
        obs + list(p.feedback_header) + fb + list(p.feedback_footer) + list(p.action_header))


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
