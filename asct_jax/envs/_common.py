"""Helpers shared by the JAX-native text environments.

* Text tables: templates are encoded to token-id arrays ONCE, in NumPy, at construction
  (`encode_table`); at run time they are indexed with jnp.
* Filler words ("the", "now", "carefully", ...) appear in candidate actions but the parser
  ignores them: an action is canonicalised (filler and everything from EOS on -> PAD,
  then compacted) before it is matched against the canonicalised candidates. So the
  object/component tokens of an action matter and its filler tokens do not.
* `finish_step` implements the protocol's bookkeeping once for every environment:
  no-match -> "nothing happens", turn counter, episode limit, absorbing done.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.envs.base import EOS_ID, PAD_ID, TimeStep, match_action

# Words the action parser ignores (they must never carry meaning in any environment).
FILLER_WORDS = ("the", "a", "now", "carefully", "please", "then", "quickly", "slowly")
NOTHING_TEXT = "nothing happens"
NUMBER_WORDS = tuple(str(i) for i in range(0, 101))

_WORD_RE = re.compile(r"\w+|[^\w\s]+")
_PLACEHOLDER_RE = re.compile(r"\{\w+\}")


def words_of(*texts: str) -> set:
    """Words of template strings (placeholders like {obj} removed), as the tokenizer splits."""
    out = set()
    for t in texts:
        out.update(_WORD_RE.findall(_PLACEHOLDER_RE.sub(" ", t)))
    return out


def encode(text: str, length: int) -> np.ndarray:
    from asct_jax.envs.tokenizer import encode_fixed

    return encode_fixed(text, length)


def encode_table(texts: Sequence[str], length: int, eos: bool = False) -> np.ndarray:
    """[len(texts), length] int32 table; eos=True appends EOS after each text (actions)."""
    rows = []
    for t in texts:
        ids = encode(t, length - 1 if eos else length)
        if eos:
            n = int(np.sum(ids != PAD_ID))
            ids = np.concatenate([ids, [PAD_ID]]).astype(np.int32)
            ids[n] = EOS_ID
        rows.append(ids)
    return np.stack(rows).astype(np.int32)


def filler_ids() -> np.ndarray:
    from asct_jax.envs.tokenizer import get_tokenizer

    vocab = get_tokenizer().get_vocab()
    return np.asarray([vocab[w] for w in FILLER_WORDS], np.int32)


def compact(tokens: jax.Array) -> jax.Array:
    """[..., L] -> [..., L]: non-PAD tokens moved to the front, order kept (stable)."""
    order = jnp.argsort(tokens == PAD_ID, axis=-1, stable=True)
    return jnp.take_along_axis(tokens, order, axis=-1)


def render(segments: Iterable[jax.Array], length: int) -> jax.Array:
    """Concatenate 1-D token segments, squeeze out PADs, pad to `length`.

    The segments' static total length must not exceed `length` (checked at trace time),
    so nothing is ever truncated.
    """
    x = jnp.concatenate([jnp.asarray(s, jnp.int32).reshape(-1) for s in segments])
    if x.shape[0] > length:
        raise ValueError(f"rendered text has static length {x.shape[0]} > {length}")
    x = jnp.pad(x, (0, length - x.shape[0]), constant_values=PAD_ID)
    return compact(x)


def canonical(tokens: jax.Array, fillers: jax.Array) -> jax.Array:
    """[..., A] action tokens -> canonical form: cut at the first EOS, drop filler, compact."""
    after_eos = jnp.cumsum(tokens == EOS_ID, axis=-1) > 0
    drop = after_eos | jnp.any(tokens[..., None] == fillers, axis=-1)
    return compact(jnp.where(drop, PAD_ID, tokens))


def parse_action(cands: jax.Array, legal: jax.Array, action: jax.Array,
                 fillers: jax.Array) -> jax.Array:
    """Index of `action` [A] among legal `cands` [K, A] up to filler words, or -1."""
    action = jnp.asarray(action, jnp.int32).reshape(-1)
    a = canonical(action[: cands.shape[-1]], fillers)
    return match_action(canonical(cands, fillers), legal, a)


def tree_select(pred: jax.Array, a: Any, b: Any) -> Any:
    """Elementwise `a if pred else b` over two pytrees of the same structure."""
    return jax.tree.map(lambda x, y: jnp.where(pred, x, y), a, b)


def uniform_policy(legal: jax.Array, key: jax.Array) -> jax.Array:
    """Uniform random index among legal candidates ([K] bool -> [] int32)."""
    logits = jnp.where(legal, 0.0, -jnp.inf)
    return jax.random.categorical(key, logits).astype(jnp.int32)


def finish_step(env, state, action, params,
                transition: Callable, observe: Callable, info: Callable,
                nothing_fb: np.ndarray, on_timeout: Callable | None = None):
    """Protocol bookkeeping around an environment's `transition`.

    transition(state, idx, rng, params) -> (state, feedback [F], reward []) is called with a
    valid candidate index (the no-match case is handled here). `on_timeout(state, params)
    -> (state, reward)` may add a terminal reward when the turn limit ends the episode.
    """
    cands, legal = env.legal_actions(state, params)
    idx = parse_action(cands, legal, action, env._fillers)
    key, rng = jax.random.split(state.key)
    s_act, fb_act, r_act = transition(state, jnp.maximum(idx, 0), rng, params)
    hit = idx >= 0
    s1 = tree_select(hit, s_act, state)
    fb = jnp.where(hit, fb_act, jnp.asarray(nothing_fb))
    r = jnp.where(hit, r_act, 0.0).astype(jnp.float32)
    s1 = s1.replace(key=key, turn=state.turn + 1)
    timeout = (s1.turn >= env.max_turns) & ~s1.done
    if on_timeout is not None:
        s_to, r_to = on_timeout(s1, params)
        s1 = tree_select(timeout, s_to, s1)
        r = r + jnp.where(timeout, r_to, 0.0)
    s1 = s1.replace(done=s1.done | timeout)
    # Absorbing after done.
    was_done = state.done
    s_out = tree_select(was_done, state, s1)
    ts = TimeStep(
        observation=observe(s_out, params),
        feedback=jnp.where(was_done, PAD_ID, fb).astype(jnp.int32),
        reward=jnp.where(was_done, 0.0, r).astype(jnp.float32),
        done=s_out.done,
        info=info(s_out, params),
    )
    return s_out, ts


def first_timestep(env, state, params, observe, info) -> TimeStep:
    return TimeStep(
        observation=observe(state, params),
        feedback=jnp.full((env.feedback_len,), PAD_ID, jnp.int32),
        reward=jnp.zeros((), jnp.float32),
        done=state.done,
        info=info(state, params),
    )


def f32(x) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def check_choice(field: str, value, allowed: Sequence) -> None:
    if value not in allowed:
        raise ValueError(f"{field}={value!r} is not allowed; allowed values: {list(allowed)}")


class TextEnvMixin:
    """Tokenizer property and filler ids for the text environments."""

    _fillers: np.ndarray

    def _init_text(self):
        self._fillers = filler_ids()

    def _freeze_tables(self):
        """Turn every NumPy table attribute into a jnp array (indexable by tracers)."""
        for k, v in list(vars(self).items()):
            if isinstance(v, np.ndarray):
                setattr(self, k, jnp.asarray(v))

    @property
    def tokenizer(self):
        from asct_jax.envs.tokenizer import get_tokenizer

        return get_tokenizer()

    def uniform_random_policy(self, state, params, key) -> jax.Array:
        """Uniform random index among the legal candidates of `state`."""
        _, legal = self.legal_actions(state, params)
        return uniform_policy(legal, key)


def info_dict(**kw) -> Dict[str, jax.Array]:
    return {k: f32(v) for k, v in kw.items()}

