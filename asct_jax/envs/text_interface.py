"""A JAX-native environment shown to a pretrained language model as text in its own tokens.

    view = LLMView(env, tokenizer)            # tokenizer: the model's (transformers)
    state, ts = view.reset(key, params)       # ts.observation: the model's token ids
    cands, legal = view.legal_actions(state, params)   # [K, A'] the model's ids
    state, ts = view.step(state, cands[k], params)

The wrapped environment keeps its own word vocabulary and its dynamics; the view renders
every observation, feedback and candidate action as text and gives the model the ids
`tokenizer` would give that text, without leaving jit:

* Text. Words are joined by single spaces, except that a segment's first word and a
  punctuation mark following a word take none ("task: put a mug"); the environment's SEP
  is a newline, EOS and PAD are dropped (`render_text` is the host-side reference).
  The observation is the user message of the model's chat template after a system prompt
  with the task (`system_prompt`); an action is the assistant's reply, ending with the
  template's end-of-turn token; the policy adds the assistant header between the two
  (`prompt_tokens`, asct_jax.envs.prompt.PromptTokens), and the feedback frame is one user
  message: the observation's text, "\\n\\nImmediate feedback from the current step:\\n",
  the feedback, "\\n\\nCorrectly solve the current task.\\n" (asct_jax.envs.prompt; the
  appended frame: the feedback as a second user message after FEEDBACK_INTRO).
* Ids in jit. A static table, built once with the tokenizer, holds each environment
  word's ids with and without a leading space; a rendering gathers the rows of its words
  and compacts them (an exclusive cumsum of their lengths and one scatter). Byte-level
  BPE pre-tokenisers split text at the spaces and punctuation runs this rendering puts
  between words, so the ids equal tokenizer(rendered text) (tested on many states of
  every environment). Where a tokenizer would merge across a word boundary (e.g. a
  pre-tokeniser that joins punctuation with a following newline), the two differ; the
  model is trained on exactly the ids it was scored with, so this is a difference of
  text, never of training data.
* Token-in, token-out: `step` finds the action among the rendered candidates and plays
  that candidate's environment action; anything else is the environment's "nothing
  happens" (an all-PAD action).
* Lengths. O', F', A' are static: by default 1.25x the longest rendering seen in a fixed
  sample of random-policy episodes (rounded up to 8, at most the worst case). A longer
  text is cut at a word boundary, keeping the template; info["text_truncated"] counts it.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Dict, Sequence, Tuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.envs.base import EOS_ID, PAD_ID, SEP_ID, Environment, TimeStep, match_action
from asct_jax.envs.play import play_keys, uniform_chooser
from asct_jax.envs.projection import (ACTION_CLOSE, ACTION_OPEN, THINK_CLOSE, THINK_OPEN,
                                       Tags)
from asct_jax.envs.prompt import (FEEDBACK_INSTRUCTION, FEEDBACK_TITLE, FeedbackFrame,
                                  GenerationPieces, PromptTokens)

SYSTEM_PROMPTS = {
    "rag_workflow": "You answer a multi-hop question by calling tools. Retrieve the evidence "
                    "for every hop, then give the final answer. Costly tools cost more.",
    "household": "You are a household robot. Complete the task with as few actions as "
                 "possible.",
    "shop": "You are shopping on a website. Find and buy the product that matches the "
            "instruction.",
    "science": "You are doing a science experiment in a text world. Complete the task.",
}
DEFAULT_SYSTEM_PROMPT = ("You are an agent in a text environment. Read the observation and "
                         "reply with the next action.")
FEEDBACK_INTRO = "The result of your next action will be:\n"   # the appended frame
# A generating actor's prompt (verl-agent's, in this project's words): the last k steps,
# the current observation, the admissible actions, then the format instruction.
GENERATION_TEXT = {
    "obs_label": "\nObservation:\n", "act_label": "\nYour action: ",
    "cur_label": "\nCurrent observation:\n", "list_header": "\nYour admissible actions:\n",
    "item_sep": "\n",
    "tail": "\nNow it's your turn to take an action. First reason step by step about the "
            "current situation, enclosed within <think> </think> tags. Then choose one "
            "admissible action and present it within <action> </action> tags.",
}
_MARK = "\u2063MARK\u2063"           # a placeholder no template or word contains
_PUNCT = re.compile(r"^[^\w\s]+$")
_SAMPLE_EPISODES, _MARGIN, _ROUND = 64, 1.25, 8


def render_text(words: Sequence[str]) -> str:
    """The text of environment words (host reference of the in-jit rendering).

    `words` are the environment tokenizer's tokens; "<sep>" is a newline, "<pad>" and
    "<eos>" are dropped, a segment's first word and punctuation after a word take no
    leading space.
    """
    out, prev = [], "<sep>"
    for w in words:
        if w in ("<pad>", "<eos>"):
            continue
        if w == "<sep>":
            out.append("\n")
        elif prev == "<sep>" or (_PUNCT.match(w) and not _PUNCT.match(prev)):
            out.append(w)
        else:
            out.append(" " + w)
        prev = w
    return "".join(out)


class ChatPieces:
    """The static ids of the chat template around the environment's text."""

    def __init__(self, tokenizer, system_prompt: str):
        enc = lambda text: list(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
        chat = lambda msgs, **kw: tokenizer.apply_chat_template(msgs, tokenize=False, **kw)  # noqa: E731
        system = [{"role": "system", "content": system_prompt}]
        user = chat(system + [{"role": "user", "content": _MARK}])
        head, tail = user.split(_MARK)
        self.obs_head, self.obs_tail = enc(head), enc(tail)
        generation = chat(system + [{"role": "user", "content": _MARK}],
                          add_generation_prompt=True)
        self.action_header = enc(generation[len(user):])
        reply = chat(system + [{"role": "user", "content": _MARK},
                               {"role": "assistant", "content": _MARK}])
        self.end_of_turn = enc(reply.split(_MARK)[-1])[0]
        two = chat(system + [{"role": "user", "content": _MARK},
                             {"role": "user", "content": FEEDBACK_INTRO + _MARK}])
        fb_head, fb_tail = two[len(user):].split(_MARK)
        # The feedback frame: the user message's end moves after the instruction.
        self.feedback_frame = FeedbackFrame(header=tuple(enc(FEEDBACK_TITLE)),
                                            footer=tuple(enc(FEEDBACK_INSTRUCTION)
                                                         + self.obs_tail),
                                            strip=len(self.obs_tail))
        self.appended_frame = FeedbackFrame(header=tuple(enc(fb_head)),
                                            footer=tuple(enc(fb_tail)))
        self.user_text = (head, tail)

    def prompt_tokens(self, pad_id: int):
        """The policy's static pieces (asct_jax.envs.prompt.PromptTokens)."""
        return PromptTokens(pad_id=pad_id, action_header=tuple(self.action_header),
                            feedback_frame=self.feedback_frame,
                            appended_frame=self.appended_frame)

    def generation_pieces(self, tokenizer):
        """A generating actor's prompt in this template (asct_jax.envs.prompt
        .GenerationPieces): one user message, GENERATION_TEXT around the observations'
        text (their template head and tail stripped), tags as the tokenizer writes them
        alone, the template's end-of-turn token as the stop; projected on decoded text."""
        enc = lambda text: tuple(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
        g = {k: enc(v) for k, v in GENERATION_TEXT.items()}
        return GenerationPieces(
            head=tuple(self.obs_head), obs_label=g["obs_label"], act_label=g["act_label"],
            cur_label=g["cur_label"], list_header=g["list_header"], item_sep=g["item_sep"],
            tail=g["tail"] + tuple(self.obs_tail), strip_head=len(self.obs_head),
            strip_tail=len(self.obs_tail),
            tags=Tags(*(enc(t) for t in (THINK_OPEN, THINK_CLOSE, ACTION_OPEN, ACTION_CLOSE))),
            stop_id=self.end_of_turn, tokenizer=tokenizer)

    def ids(self):
        frames = (self.feedback_frame.header + self.feedback_frame.footer
                  + self.appended_frame.header + self.appended_frame.footer)
        return set(self.obs_head + self.obs_tail + self.action_header + list(frames)
                   + [self.end_of_turn])


class WordTable:
    """Each environment word's ids in the model's tokenizer, with and without a space.

    ids: [V_env, 2, M] int32 (variant 0 " word", 1 "word"; PAD-padded), lens [V_env, 2],
    punct [V_env] bool. SEP renders as a newline, PAD and EOS as nothing; `eos_ids` gives
    EOS's row for actions (the end-of-turn token).
    """

    def __init__(self, env_tokenizer, tokenizer, pad_id: int, end_of_turn: int):
        words = env_tokenizer.convert_ids_to_tokens(list(range(len(env_tokenizer))))
        enc = lambda text: list(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
        rows = []
        for i, w in enumerate(words):
            if i in (PAD_ID, EOS_ID):
                rows.append(([], []))
            elif i == SEP_ID:
                rows.append((enc("\n"), enc("\n")))
            else:
                rows.append((enc(" " + w), enc(w)))
        m = max(len(x) for r in rows for x in r)
        self.ids = np.full((len(words), 2, m), pad_id, np.int32)
        self.lens = np.zeros((len(words), 2), np.int32)
        for i, r in enumerate(rows):
            for v, x in enumerate(r):
                self.ids[i, v, :len(x)] = x
                self.lens[i, v] = len(x)
        self.punct = np.array([bool(_PUNCT.match(w)) and i > SEP_ID
                               for i, w in enumerate(words)], bool)
        self.eos_row = np.full((m,), pad_id, np.int32)
        self.eos_row[0] = end_of_turn
        self.words = words

    def used_ids(self):
        return set(self.ids[self.lens[..., None] > np.arange(self.ids.shape[-1])].tolist())


def _scatter(rows: chex.Array, lens: chex.Array, out_len: int, pad_id: int) -> chex.Array:
    """Concatenates ragged rows: rows [R, M] (the first lens[r] of row r are real) -> [out_len].

    Row r starts at sum_{r' < r} lens[r'] (exclusive cumsum); what falls past out_len is
    dropped, the rest is PAD.
    """
    m = rows.shape[-1]
    start = jnp.cumsum(lens) - lens
    pos = start[:, None] + jnp.arange(m)[None, :]
    pos = jnp.where(jnp.arange(m)[None, :] < lens[:, None], pos, out_len)
    out = jnp.full((out_len,), pad_id, jnp.int32)
    return out.at[pos.reshape(-1)].set(rows.reshape(-1), mode="drop")


def _compact(tokens: chex.Array) -> chex.Array:
    """Real tokens first, order kept (PAD anywhere in the row moves to the end)."""
    order = jnp.argsort(tokens == PAD_ID, stable=True)
    return tokens[order]


class LLMView(Environment):
    """`env` with observations, feedback and actions in a pretrained model's tokens.

    Args:
      env, env_params: the JAX-native environment (its own word vocabulary).
      tokenizer: the model's transformers tokenizer (with a chat template).
      system_prompt: the system message ("" -> SYSTEM_PROMPTS[env.name] or a generic one).
      obs_len, action_len, feedback_len: O', A', F' (0 -> measured on a fixed sample,
        see the module docstring).
    """

    def __init__(self, env: Environment, env_params: Any, tokenizer, system_prompt: str = "",
                 obs_len: int = 0, action_len: int = 0, feedback_len: int = 0):
        self.inner = env
        self.name = env.name
        self.num_actions, self.max_turns = env.num_actions, env.max_turns
        self._tokenizer = tokenizer
        self.system_prompt = system_prompt or SYSTEM_PROMPTS.get(env.name, DEFAULT_SYSTEM_PROMPT)
        self.pieces = ChatPieces(tokenizer, self.system_prompt)
        probe = WordTable(env.tokenizer, tokenizer, -1, self.pieces.end_of_turn)
        self.pad_id = pick_pad(tokenizer, self.pieces.ids() | probe.used_ids())
        self.table = WordTable(env.tokenizer, tokenizer, self.pad_id, self.pieces.end_of_turn)
        self._ids = jnp.asarray(self.table.ids)
        self._lens = jnp.asarray(self.table.lens)
        self._punct = jnp.asarray(self.table.punct)
        self._eos_row = jnp.asarray(self.table.eos_row)
        self._head = np.asarray(self.pieces.obs_head, np.int32)
        self._tail = np.asarray(self.pieces.obs_tail, np.int32)
        m = self.table.ids.shape[-1]
        worst = {"obs": len(self._head) + env.obs_len * m + len(self._tail),
                 "action": env.action_len * m, "feedback": env.feedback_len * m}
        given = {"obs": obs_len, "action": action_len, "feedback": feedback_len}
        if not all(given.values()):
            seen = self._sample_lengths(env_params)
            given = {k: v or min(worst[k], _ROUND * math.ceil(_MARGIN * seen[k] / _ROUND))
                     for k, v in given.items()}
        self.obs_len, self.action_len, self.feedback_len = (
            given["obs"], given["action"], given["feedback"])

    # ------------------------------------------------------------------ rendering
    def _word_rows(self, tokens: chex.Array, action: bool):
        """tokens [L] (env ids) -> rows [L, M], lens [L] of their text (module docstring)."""
        tokens = _compact(tokens)
        prev = jnp.concatenate([jnp.array([SEP_ID], tokens.dtype), tokens[:-1]])
        no_space = (prev == SEP_ID) | (self._punct[tokens] & ~self._punct[prev])
        variant = no_space.astype(jnp.int32)
        rows = self._ids[tokens, variant]
        lens = self._lens[tokens, variant]
        if action:
            is_eos = tokens == EOS_ID
            rows = jnp.where(is_eos[:, None], self._eos_row, rows)
            lens = jnp.where(is_eos, 1, lens)
        return rows, lens

    def _render(self, tokens: chex.Array, out_len: int, action: bool = False,
                head: np.ndarray = np.zeros(0, np.int32),
                tail: np.ndarray = np.zeros(0, np.int32)) -> Tuple[chex.Array, chex.Array]:
        """[L] env ids -> ([out_len] model ids, truncated []): head + text + tail, the
        text cut at a word boundary so that the static head and tail always fit."""
        rows, lens = self._word_rows(tokens, action)
        budget = out_len - len(head) - len(tail)
        kept = jnp.cumsum(lens) <= budget
        truncated = jnp.any(~kept & (lens > 0))
        lens = jnp.where(kept, lens, 0)
        m = rows.shape[-1]
        static = lambda ids: (jnp.pad(jnp.asarray(ids)[:, None], ((0, 0), (0, m - 1)),  # noqa: E731
                                      constant_values=self.pad_id),
                              jnp.ones((len(ids),), jnp.int32))
        h_rows, h_lens = static(head)
        t_rows, t_lens = static(tail)
        out = _scatter(jnp.concatenate([h_rows, rows, t_rows]),
                       jnp.concatenate([h_lens, lens, t_lens]), out_len, self.pad_id)
        return out, truncated

    def render_observation(self, obs: chex.Array) -> Tuple[chex.Array, chex.Array]:
        """[O] env ids -> ([O'] chat-prompt ids, truncated)."""
        return self._render(obs, self.obs_len, head=self._head, tail=self._tail)

    def render_feedback(self, feedback: chex.Array) -> Tuple[chex.Array, chex.Array]:
        return self._render(feedback, self.feedback_len)

    def render_actions(self, cands: chex.Array) -> Tuple[chex.Array, chex.Array]:
        """[K, A] env ids -> ([K, A'] ids ending with the end-of-turn token, truncated [K])."""
        return jax.vmap(lambda c: self._render(c, self.action_len, action=True))(cands)

    def _timestep(self, ts: TimeStep) -> TimeStep:
        obs, cut_o = self.render_observation(ts.observation)
        fb, cut_f = self.render_feedback(ts.feedback)
        info = dict(ts.info, text_truncated=(cut_o | cut_f).astype(jnp.float32))
        return ts.replace(observation=obs, feedback=fb, info=info)

    # ------------------------------------------------------------------ the protocol
    def default_params(self) -> Any:
        return self.inner.default_params()

    def reset(self, key: chex.PRNGKey, params: Any):
        state, ts = self.inner.reset(key, params)
        return state, self._timestep(ts)

    def reset_to(self, state: Any, params: Any):
        state, ts = self.inner.reset_to(state, params)
        return state, self._timestep(ts)

    def step(self, state: Any, action: chex.Array, params: Any):
        cands, legal = self.legal_actions(state, params)
        index = match_action(cands, legal, action)
        env_cands, _ = self.inner.legal_actions(state, params)
        env_action = jnp.where(index >= 0, env_cands[jnp.maximum(index, 0)], PAD_ID)
        state, ts = self.inner.step(state, env_action.astype(jnp.int32), params)
        return state, self._timestep(ts)

    def observe(self, state: Any, params: Any) -> chex.Array:
        return self.render_observation(self.inner.observe(state, params))[0]

    def info(self, state: Any, params: Any) -> Dict[str, chex.Array]:
        info = self.inner.info(state, params)
        return dict(info, text_truncated=jnp.zeros((), jnp.float32))

    def legal_actions(self, state: Any, params: Any) -> Tuple[chex.Array, chex.Array]:
        cands, legal = self.inner.legal_actions(state, params)
        return self.render_actions(cands)[0], legal

    def action_costs(self, state: Any, params: Any) -> chex.Array:
        """[K] float32: the candidates' lengths in the model's tokens."""
        cands, _ = self.legal_actions(state, params)
        return jnp.sum(cands != self.pad_id, axis=-1).astype(jnp.float32)

    def restorable(self, state: Any, params: Any) -> chex.Array:
        return self.inner.restorable(state, params)

    def expert_policy(self, state: Any, params: Any, key: chex.PRNGKey = None) -> chex.Array:
        """The inner environment's scripted expert (a candidate index: the same in both
        vocabularies), for the warm start."""
        return self.inner.expert_policy(state, params, key)

    @property
    def tokenizer(self):
        return self._tokenizer

    def prompt_tokens(self):
        """The policy's static pieces (asct_jax.envs.prompt.PromptTokens) for this view,
        a generating actor's prompt layout included."""
        return dataclasses.replace(self.pieces.prompt_tokens(self.pad_id),
                                   generation=self.pieces.generation_pieces(self._tokenizer))

    # ------------------------------------------------------------------ host reference
    def observation_text(self, env_obs: np.ndarray) -> str:
        """The chat text of an observation (env ids): what tokenizer(...) is compared to."""
        head, tail = self.pieces.user_text
        return head + render_text(self.env_words(env_obs)) + tail

    def action_text(self, env_action: np.ndarray) -> str:
        words = self.env_words(env_action)
        end = self._tokenizer.convert_ids_to_tokens(self.pieces.end_of_turn)
        return render_text(words) + (end if "<eos>" in words else "")

    def env_words(self, ids: np.ndarray):
        """The environment tokenizer's tokens of env ids (host side)."""
        return [self.table.words[i] for i in np.asarray(ids).tolist()]

    def _sample_lengths(self, env_params: Any) -> Dict[str, int]:
        """Longest rendering (no cap) in random-policy episodes from a fixed key."""
        env, static = self.inner, len(self._head) + len(self._tail)

        def longest(rows, action=False):      # rows [..., L] env ids -> [] max text length
            rows = rows.reshape((-1, rows.shape[-1]))
            return jnp.max(jax.vmap(lambda r: jnp.sum(self._word_rows(r, action)[1]))(rows))

        def measure(key):
            eps = play_keys(env, env_params, uniform_chooser,
                            jax.random.split(key, _SAMPLE_EPISODES),
                            jax.random.split(key, env.max_turns))
            rec = eps.record
            obs = jnp.concatenate([rec["obs"].reshape((-1, env.obs_len)),
                                   eps.final.observation])
            return (longest(obs) + static, longest(rec["feedback"]),
                    longest(rec["cand_tokens"], True))

        o, f, a = jax.jit(measure)(jax.random.key(0))
        return {"obs": int(o), "feedback": max(int(f), 1), "action": int(a)}


def pick_pad(tokenizer, used: set) -> int:
    """A special token id the renderings never use (the pad token if it qualifies)."""
    for tok_id in [tokenizer.pad_token_id, *tokenizer.all_special_ids, 0]:
        if tok_id is not None and tok_id not in used:
            return int(tok_id)
    raise ValueError("LLMView: the tokenizer has no special token left to pad with")
