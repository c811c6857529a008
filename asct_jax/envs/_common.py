"""Helpers shared by the JAX-native text environments.

* Text tables: templates are encoded to token-id arrays ONCE, in NumPy, at construction
  (`encode_table`); at run time they are indexed with jnp.
* Filler words ("the", "now", "carefully", ...) appear in candidate actions but the parser
  ignores them: an action is canonicalised (filler and everything from EOS on -> PAD,
  then compacted) before it is matched against the canonicalised candidates. So the
  object/component tokens of an action matter and its filler tokens do not.
* `TextEnvironment.step_env` parses the action against the legal candidates and calls the
  environment's `transition` with the candidate index; no match -> "nothing happens".
  The rest of the bookkeeping (turn counter, episode limit, absorbing done) is
  `asct_jax.envs.base.Environment.step`.
* Settings: every environment has ONE frozen `flax.struct` dataclass of settings (its
  Params), with `small()` / `hard()` presets; fields marked `static_field()` fix shapes and
  tables (they are part of the pytree structure, not traced), the others are arrays.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict, Iterable, Mapping, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from asct_jax.envs.base import EOS_ID, PAD_ID, Environment, match_action, tree_select  # noqa: F401
from asct_jax.envs.tokenizer import encode_fixed, get_tokenizer
from asct_jax.infra.checks import check_choice  # noqa: F401  (C.check_choice in the envs)

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


def vocabulary() -> set:
    """Words every text environment uses: filler, numbers, NOTHING_TEXT, punctuation."""
    return set(FILLER_WORDS) | set(NUMBER_WORDS) | words_of(NOTHING_TEXT, ":", ".", ",")


def encode(text: str, length: int) -> np.ndarray:
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


def uniform_policy(legal: jax.Array, key: jax.Array) -> jax.Array:
    """Uniform random index among legal candidates ([K] bool -> [] int32)."""
    logits = jnp.where(legal, 0.0, -jnp.inf)
    return jax.random.categorical(key, logits).astype(jnp.int32)


def f32(x) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


class TextEnvironment(Environment):
    """Base of the text environments: action parsing, tokenizer, tables, settings.

    Subclasses set `params_cls` (their settings dataclass) and implement
    `transition(state, idx, key, params) -> (state, feedback [F], reward [])`, called with
    the index of a legal candidate; an action that matches none is a "nothing happens"
    step (state unchanged, reward 0, feedback `f_nothing`).
    """

    params_cls: Any = None
    _fillers: np.ndarray
    f_nothing: Any

    @classmethod
    def from_size(cls, size: str = "small", **overrides) -> "TextEnvironment":
        """The environment of preset `size` with settings fields overridden."""
        return cls(with_overrides(cls.name, preset(cls.params_cls, size), overrides))

    def _init_text(self):
        self._fillers = filler_ids()
        self.f_nothing = encode(NOTHING_TEXT, self.feedback_len)

    def _freeze_tables(self):
        """Turn every NumPy table attribute into a jnp array (indexable by tracers)."""
        for k, v in list(vars(self).items()):
            if isinstance(v, np.ndarray):
                setattr(self, k, jnp.asarray(v))

    def default_params(self):
        return self.params

    def step_env(self, state, action, key, params):
        cands, legal = self.legal_actions(state, params)
        idx = parse_action(cands, legal, action, self._fillers)
        s_act, fb_act, r_act = self.transition(state, jnp.maximum(idx, 0), key, params)
        hit = idx >= 0
        return (tree_select(hit, s_act, state),
                jnp.where(hit, fb_act, jnp.asarray(self.f_nothing)),
                jnp.where(hit, r_act, 0.0).astype(jnp.float32))

    def transition(self, state, idx, key, params):
        raise NotImplementedError

    @property
    def tokenizer(self):
        return get_tokenizer()

    def uniform_random_policy(self, state, params, key) -> jax.Array:
        """Uniform random index among the legal candidates of `state`."""
        _, legal = self.legal_actions(state, params)
        return uniform_policy(legal, key)

    def expert_policy(self, state, params, key=None):
        return self._module().expert_policy(state, params, key)

    def scripted_policy(self, name: str):
        """The module's `<name>_policy(state, params, key)` (e.g. "expert", "base", "random")."""
        fn = getattr(self._module(), f"{name}_policy", None)
        if fn is None:
            have = sorted(k[:-7] for k in dir(self._module()) if k.endswith("_policy")
                          and callable(getattr(self._module(), k)))
            raise ValueError(f"warm_start.imitated: {self.name} has no {name!r} policy; "
                             f"allowed: {have}")
        return fn

    def random_policy(self, state, params, key):
        return self.uniform_random_policy(state, params, key)

    @classmethod
    def _module(cls):
        import sys

        return sys.modules[cls.__module__]


# ---------------------------------------------------------------------------- settings
SIZES = ("small", "hard")


def static_field(**kw):
    """A settings field that fixes shapes or tables: static (not traced) under jit."""
    return struct.field(pytree_node=False, **kw)


def settings_fields(cls) -> Tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def preset(params_cls, size: str):
    """`params_cls.small()` / `params_cls.hard()`, or a ValueError naming the sizes."""
    check_choice("size", size, SIZES)
    return getattr(params_cls, size)()


def check_fields(env_name: str, names: Iterable[str], allowed: Sequence[str]) -> None:
    """One-line ValueError for a name that is not a settings field."""
    for k in names:
        if k not in allowed:
            raise ValueError(f"unknown field {k!r} for environment {env_name!r}; "
                             f"allowed fields: {list(allowed)}")


def with_overrides(env_name: str, params, overrides: Mapping[str, Any]):
    """`params` with fields replaced; array fields keep their dtype and shape."""
    check_fields(env_name, overrides, settings_fields(type(params)))
    static = {f.name for f in dataclasses.fields(params) if not f.metadata.get("pytree_node", True)}
    new = {}
    for k, v in overrides.items():
        if k in static:
            new[k] = v
        else:
            old = jnp.asarray(getattr(params, k))
            v = jnp.asarray(v, old.dtype)
            if v.shape != old.shape:
                raise ValueError(f"{k} must have shape {old.shape}, got {v.shape}")
            new[k] = v
    params = params.replace(**new)
    params.validate()
    return params


def info_dict(**kw) -> Dict[str, jax.Array]:
    return {k: f32(v) for k, v in kw.items()}

