"""The generating actor: it writes "<think>...</think><action>...</action>" and the
environment receives the projected action (verl-agent's interface and projection).
`actor.chooser = "generate"` selects it; "candidates" (the default) is
asct_jax.rl.policy.Policy's constrained scoring.

Prompt (`build_prompt`, in the environment's own words with tag tokens for the tiny actor):

    [x_{t-k} <action> a_{t-k} </action>] ... [x_{t-1} <action> a_{t-1} </action>]
    x_t SEP c_1 SEP c_2 SEP ... c_K SEP

verl-agent's prompt holds the task, the current observation, the admissible actions and the
last k = 2 steps; here x_t (which already names the task) is the observation, c_k the legal
candidates (EOS dropped), and each past step its observation and its projected action
(PAD-only for an invalid one). Pieces are compacted (PAD removed) and the policy
left-aligns the prompt as it does an observation.

Response: up to R tokens sampled with a KV cache at temperature / top-p, stopping after the
end-of-turn token (EOS for the tiny actor). Every generated token's log-prob is the
model's full-vocabulary log-softmax at temperature 1 (what the update's ratio compares).
`asct_jax.envs.projection.project_tokens` maps the response to a legal candidate or to an
invalid step (all-PAD action: "Nothing happens."), and an invalid step's reward is reduced
by `invalid_penalty` (0.1). Token classes: action tokens (strictly inside the action tags)
and non-action response tokens (think, tags, EOS); the prompt gets no loss. Per turn the
chooser reports (Choice.extra, averaged over real turns in the rollout's metrics)
gen/invalid, gen/action_tokens, gen/think_tokens (the reasoning, strictly inside the think
tags: `think_mask`), gen/nonaction_tokens and gen/multi_token_action.

`GenerationPolicy` reads the prompt where `Policy` reads the observation and a response
where it reads an action: its log-probs, entropies and distributions are over the full
vocabulary, formed `actor.logits_chunk` logits at a time in the update's passes (a
method's reduction of the next-token distributions runs on each chunk of the pass:
asct_jax.rl.policy.DistReduce, TokenOutputs.reduced).
At restored states the credit methods' rollouts play `generating_actor` (the chooser on
one state; `actor.continuations = "chooser"`). `candidate_log_probs` is what a search
over the candidates (and continuations with `actor.continuations = "score"`) consume: the
actor's probability of writing each legal candidate in the canonical form
"<think> </think> <action> c </action> EOS" under a history-free prompt, normalised over
the legal set (an approximation of its generation: it ignores the think text and the
invalid responses).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.base import EOS_ID
from asct_jax.envs.play import Choice
from asct_jax.envs.projection import (ProjectedAction, Tags, find_first,
                                       project_text_tokens, project_tokens)
from asct_jax.envs.prompt import GenerationPieces
from asct_jax.models import cache as cache_lib
from asct_jax.models import widths
from asct_jax.models.generate import generate, prompt_pass
from asct_jax.rl.padding import left_align, pads_to_right
from asct_jax.rl.policy import DistReduce, Policy, TokenOutputs

CHOOSERS = ("candidates", "generate")
# How pi_old acts at restored states (the credit methods' rollouts and continuations):
# "chooser" as in the rollout (the generating actor writes its turn), "score" sampled from
# candidate_log_probs (the canonical responses' scores; the candidate actor's only way).
RESTORED_ACTING = ("chooser", "score")
# The think part: "required" (the authors' rule: both think tags or the step is invalid;
# the warm start writes an empty "<think> </think>"), "none" (no think part: the warm start
# writes only the action tags and the projection asks for no think tags).
THINK = ("required", "none")


@dataclasses.dataclass(frozen=True)
class GenerationSpec:
    """Static settings of the generating actor (config section `actor`).

    tags: the tag token ids; stop_id: the end-of-turn token (it also ends every
    candidate); pieces: the prompt's layout (GenerationPieces: the tiny actor's by
    default, a chat view's for a pretrained model); response_len: R, the most tokens a
    response has; history: k past steps in the prompt; temperature, top_p: sampling;
    invalid_penalty: subtracted from an invalid step's reward; continuations: how pi_old
    acts at restored states (RESTORED_ACTING); think: the think part (THINK); logits_chunk:
    the most (tokens x vocabulary) logits the update's passes form at once (0 = all).
    """

    tags: Tags
    stop_id: int = EOS_ID
    pieces: GenerationPieces = GenerationPieces()
    response_len: int = 24
    history: int = 2
    temperature: float = 1.0
    top_p: float = 1.0
    invalid_penalty: float = 0.1
    continuations: str = "chooser"
    think: str = "required"
    logits_chunk: int = 2 ** 24

    def prompt_len(self, obs_len: int, num_actions: int, action_len: int) -> int:
        """P: the longest prompt build_prompt can make."""
        step = obs_len + action_len + len(self.tags.action_open) + len(self.tags.action_close)
        return (self.pieces.fixed_len(self.history) + self.history * step + obs_len
                + num_actions * (action_len + len(self.pieces.item_sep)))

    def project(self, response, mask, cands, legal, pad_id: int) -> ProjectedAction:
        """The projection rule (asct_jax.envs.projection): on token ids, or on the text a
        pretrained tokenizer decodes (pieces.tokenizer)."""
        think = self.think == "required"
        if self.pieces.tokenizer is not None:
            return project_text_tokens(response, mask, cands, legal, self.pieces.tokenizer,
                                       pad_id, self.stop_id, think)
        return project_tokens(response, mask, cands, legal, self.tags, pad_id, self.stop_id,
                              think)


def _ids(ids: Tuple[int, ...], n: int) -> chex.Array:
    return jnp.broadcast_to(jnp.asarray(ids, jnp.int32), (n, len(ids)))


def _strip_stop(tokens: chex.Array, stop_id: int, pad_id: int) -> chex.Array:
    return jnp.where(tokens == stop_id, pad_id, tokens)


def _strip_template(obs: chex.Array, pieces: GenerationPieces, pad_id: int) -> chex.Array:
    """obs [..., O] (template head, text, template tail, then PAD) -> the text alone."""
    if not (pieces.strip_head or pieces.strip_tail):
        return obs
    pos = jnp.arange(obs.shape[-1])
    n_real = jnp.sum(obs != pad_id, -1, keepdims=True)
    keep = (pos >= pieces.strip_head) & (pos < n_real - pieces.strip_tail)
    return jnp.where(keep, obs, pad_id)


def think_mask(response: chex.Array, mask: chex.Array, tags: Tags) -> chex.Array:
    """[N, R] bool: the reasoning tokens, strictly between the first think_open tag and the
    first think_close tag (tags excluded; none if a tag is missing or the close comes
    first), as projection's action_mask is for the action tags. On token ids: a pretrained
    tokenizer's tag merged with its neighbours is not found (then 0 tokens)."""
    r = response.shape[-1]
    open_at, close_at = find_first(response, tags.think_open, mask), find_first(
        response, tags.think_close, mask)
    pos = jnp.arange(r)
    return ((open_at < r) & (close_at < r))[..., None] & (
        pos >= (open_at + len(tags.think_open))[..., None]) & (
        pos < close_at[..., None]) & mask


def wrap_action(action: chex.Array, live: chex.Array, spec: GenerationSpec,
                pad_id: int) -> chex.Array:
    """[N, A] action (stop token dropped) -> [N, A + tags] "<action> a </action>", all PAD
    where ~live [N]."""
    n = action.shape[0]
    out = jnp.concatenate([_ids(spec.tags.action_open, n),
                           _strip_stop(action, spec.stop_id, pad_id),
                           _ids(spec.tags.action_close, n)], axis=1)
    return jnp.where(live[:, None], out, pad_id)


def build_prompt(obs: chex.Array, cands: chex.Array, legal: chex.Array,
                 hist_obs: chex.Array, hist_act: chex.Array, hist_live: chex.Array,
                 spec: GenerationSpec, pad_id: int) -> chex.Array:
    """The prompt of the module docstring (in spec.pieces' layout), compacted to the
    left (right-padded).

    Args: obs [N, O]; cands [N, K, A], legal [N, K]; hist_obs [N, k, O], hist_act [N, k, A],
      hist_live [N, k] bool (oldest first).
    Returns: [N, P] int32, P = spec.prompt_len(O, K, A).
    """
    chex.assert_rank([obs, cands, legal, hist_obs, hist_act, hist_live], [2, 3, 2, 3, 3, 2])
    n, k_hist = obs.shape[0], hist_obs.shape[1]
    pc = spec.pieces
    ids = lambda t: _ids(t, n)                                            # noqa: E731
    text = lambda x: _strip_template(x.astype(jnp.int32), pc, pad_id)    # noqa: E731
    past = []
    for i in range(k_hist):                                              # static k (2)
        live = hist_live[:, i, None]
        step = jnp.concatenate([ids(pc.obs_label), text(hist_obs[:, i]), ids(pc.act_label)], 1)
        past += [jnp.where(live, step, pad_id),
                 wrap_action(hist_act[:, i], hist_live[:, i], spec, pad_id)]
    sep = jnp.broadcast_to(jnp.asarray(pc.item_sep, jnp.int32),
                           cands.shape[:2] + (len(pc.item_sep),))
    listed = jnp.concatenate([_strip_stop(cands, spec.stop_id, pad_id), sep], -1)
    listed = jnp.where(legal[..., None], listed, pad_id).reshape(n, -1)   # c_k item_sep
    prompt = jnp.concatenate([ids(pc.head)] + past + [ids(pc.cur_label), text(obs),
                                                      ids(pc.list_header), listed,
                                                      ids(pc.tail)], axis=1)
    return pads_to_right(prompt, pad_id)


def canonical_response(cands: chex.Array, spec: GenerationSpec, pad_id: int) -> chex.Array:
    """[..., K, A] -> [..., K, A + 5]: "<think> </think> <action> c </action> EOS" (A + 3)
    (what the warm start teaches and candidate_log_probs scores), right-padded; without
    the think tags when spec.think is "none"."""
    lead = cands.shape[:-1]
    t = spec.tags
    think = t.think_open + t.think_close if spec.think == "required" else ()
    head = jnp.broadcast_to(jnp.asarray(think + t.action_open, jnp.int32),
                            lead + (len(think + t.action_open),))
    tail = jnp.broadcast_to(jnp.asarray(t.action_close + (spec.stop_id,), jnp.int32),
                            lead + (len(t.action_close) + 1,))
    body = _strip_stop(cands, spec.stop_id, pad_id)
    out = jnp.concatenate([head, body, tail], axis=-1)
    return pads_to_right(out.reshape(-1, out.shape[-1]), pad_id).reshape(out.shape)


class GenerationPolicy(Policy):
    """A Policy whose actor writes its turn (module docstring). `input_len` is the prompt
    length P, `action_len` the response length R; `env_obs_len` / `env_action_len` /
    `num_actions` the environment's O, A and K (for the history-free prompt)."""

    chooser = "generate"

    def __init__(self, graphdef, vocab_size: int, spec: GenerationSpec, env_obs_len: int,
                 env_action_len: int, num_actions: int, feedback_len: int, prompt=None,
                 prompt_widths: int = widths.BUCKETS):
        kwargs = {} if prompt is None else {"prompt": prompt}
        super().__init__(graphdef, vocab_size,
                         spec.prompt_len(env_obs_len, num_actions, env_action_len),
                         spec.response_len, feedback_len, label_score="sum",
                         prompt_widths=prompt_widths, **kwargs)
        self.spec = spec
        self.env_obs_len, self.env_action_len = env_obs_len, env_action_len
        self.num_actions = num_actions

    # -- the update's passes: prompt [N, P], response [N, R] ------------------------
    def _full(self, model, prefix, response):
        """(log_softmax [N, R, V], value [N]) of the response after the prefix."""
        hidden, value, _ = self._hidden(model, prefix, response)
        return jax.nn.log_softmax(model.logits(hidden).astype(jnp.float32), -1), value

    @staticmethod
    def _token_stats(logp_all, response):
        logp = jnp.take_along_axis(logp_all, response[..., None], axis=-1)[..., 0]
        entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
        return logp, entropy

    def _vocab_pass(self, model, hidden, response, dist_reduce: DistReduce = None):
        """Per-token statistics of the full-vocabulary log-softmax, formed at most
        `spec.logits_chunk` (tokens x V) logits at a time: hidden [N, R, H], response
        [N, R], dist_reduce None or (fn, inputs: pytree of [N, R, ...]) -> (logp [N, R],
        entropy [N, R], reduced [N, R] = fn per position, or None).

        The N R token rows run as a lax.map over equal chunks (their number the smallest
        divisor of N R that keeps a chunk within the limit), each under jax.checkpoint, so
        neither pass holds more than one chunk's [c, V] logits (the backward recomputes
        them); the values are the unchunked ones (each row's softmax is its own)."""
        n, r, h = hidden.shape
        rows = n * r

        def stats(args):
            hid, tok, inputs = args                                 # [c, H], [c], [c, ...]
            logp_all = jax.nn.log_softmax(model.logits(hid).astype(jnp.float32), -1)
            logp, ent = self._token_stats(logp_all, tok)
            if inputs is None:
                return logp, ent, None
            # each row's distribution over V in the [..., K, A] layout: K = V, A = 1
            support = jnp.ones(logp_all.shape + (1,), bool)
            reduced = dist_reduce[0](logp_all[..., None], support,
                                     jax.tree.map(lambda x: x[..., None], inputs))
            return logp, ent, reduced[..., 0]                       # per row

        flat = (hidden.reshape(rows, h), response.reshape(rows),
                None if dist_reduce is None else jax.tree.map(
                    lambda x: x.reshape((rows,) + x.shape[2:]), dist_reduce[1]))
        most = max(1, self.spec.logits_chunk // self.vocab_size)  # token rows per chunk
        if self.spec.logits_chunk <= 0 or most >= rows:
            out = stats(flat)
        else:
            # m chunks of equal size (m divides the rows: no padded copy of the inputs)
            m = next(m for m in range(-(-rows // most), rows + 1) if rows % m == 0)
            split = lambda x: None if x is None else x.reshape((m, rows // m) + x.shape[1:])
            out = jax.lax.map(jax.checkpoint(stats), jax.tree.map(split, flat))
        return jax.tree.map(lambda x: x.reshape(n, r), out)

    def action_log_probs(self, params, prompt, response, cands=None, legal=None):
        """Full-vocabulary log pi(y_j | prompt, y_<j) [N, R], entropy [N, R], value [N]."""
        model = self.merge(params)
        hidden, value, _ = self._hidden(model, prompt, response)
        logp, ent, _ = self._vocab_pass(model, hidden, response)
        return logp, ent, value

    def action_outputs(self, params, prompt, response, cands=None, legal=None,
                       dist_reduce: DistReduce = None) -> TokenOutputs:
        """As Policy.action_outputs over the full vocabulary, whose [N, R, V]
        distribution is never formed whole (_vocab_pass): dist_logp and support are None;
        with `dist_reduce` = (fn, inputs [N, R, V] pytree), reduced [N, R]: fn on each
        chunk of rows (each row's distribution given as [V, 1], its support all True)."""
        model = self.merge(params)
        hidden, value, _ = self._hidden(model, prompt, response)
        logp, ent, reduced = self._vocab_pass(model, hidden, response, dist_reduce)
        return TokenOutputs(logp=logp, entropy=ent, value=value, reduced=reduced)

    def scored_tokens(self, response: chex.Array) -> chex.Array:
        return response != self.pad_id

    def token_log_probs(self, params, prefix, response, cands=None, legal=None):
        """Full-vocabulary log pi(y_j | prefix, y_<j) [N, R] after any prefix [N, P']."""
        model = self.merge(params)
        hidden, _, _ = self._hidden(model, prefix, response)
        return self._vocab_pass(model, hidden, response)[0]

    def distributions(self, params, prefix, response, cands=None, legal=None):
        """The token log-probs [N, R] after any prefix, the log-softmax [N, R, V] (this
        policy's distribution layout, what a DistReduce's inputs follow) and a support
        [N, 1, 1] of True (every token). Never differentiated (a frozen scorer's pass): it
        skips the columns of the prefix that are PAD in every row (models.widths)."""
        model = self.merge(params)
        logp_all = widths.right_padded(lambda x: self._full(model, x, response)[0], prefix,
                                       self.pad_id, self.prompt_widths)
        return (self._token_stats(logp_all, response)[0], logp_all,
                jnp.ones((response.shape[0], 1, 1), bool))

    # -- at restored states: the environment's observation [N, O] ---------------------
    def candidate_log_probs(self, params, obs, cands, legal):
        """pi(a_k | s) over the legal candidates: softmax_k of the full-vocabulary log-prob
        of writing canonical_response(c_k) after the history-free prompt (module
        docstring). The prompt is run once per state and its KV cache shared by the K
        responses (prefix caching: N P + N K R' tokens instead of N K (P + R')).
        Returns cand_logp [N, K], token_logp [N, K, R'] (canonical_response), value [N]."""
        n, k, _ = cands.shape
        none = jnp.zeros((n, self.spec.history), bool)
        prompt = build_prompt(obs, cands, legal,
                              jnp.zeros((n, self.spec.history, obs.shape[1]), jnp.int32),
                              jnp.zeros((n, self.spec.history, cands.shape[2]), jnp.int32),
                              none, self.spec, self.pad_id)
        resp = canonical_response(cands, self.spec, self.pad_id)            # [N, K, R']
        flat = resp.reshape(n * k, -1)
        logp_all, value = self._cached_full(self.merge(params), prompt, flat, k)
        logp, _ = self._token_stats(logp_all, flat)
        token_logp = jnp.where(flat != self.pad_id, logp, 0.0).reshape(n, k, -1)
        score = jnp.where(legal, jnp.sum(token_logp, -1), -1e9)
        cand_logp = jnp.where(legal, jax.nn.log_softmax(score, axis=-1), -1e9)
        return cand_logp, token_logp, value

    def _cached_full(self, model, prompt, responses, k: int):
        """prompt [N, P] right-padded, responses [N k, R'] (row i k + j continues prompt i)
        -> (log_softmax [N k, R', V], value [N]); equal to _full on the repeated prompt.
        The prompt pass and the responses' run on the prompt's real columns
        (models.widths)."""
        prefix = self._with_action_header(left_align(prompt, self.pad_id))    # [N, P']

        def on(ids, mask):                                                   # [N, W]
            cache, last = prompt_pass(model, ids, mask, responses.shape[1])  # last [N, H]
            value = model.value(last[:, None])[:, 0].astype(jnp.float32)
            resp_hidden, _ = model.hidden_states(responses, jnp.ones(responses.shape, bool),
                                                 cache=cache_lib.repeat(cache, k))
            # token j is predicted from the prompt's last slot (j = 0) or response token j - 1
            first = jnp.repeat(last[:, None], k, axis=0)
            pred = jnp.concatenate([first, resp_hidden[:, :-1]], axis=1)     # [N k, R', H]
            return jax.nn.log_softmax(model.logits(pred).astype(jnp.float32), -1), value
        return widths.left_padded(on, prefix, prefix != self.pad_id, self.prompt_widths)


# -- the rollout's chooser ------------------------------------------------------------
# (key, prompt [N, P], cands, legal, states) -> (response [N, R], logp [N, R], mask [N, R],
# value [N], extra: dict of [N, ...] for Choice.extra)
Writer = Callable[..., Tuple[Any, ...]]


def model_writer(policy: GenerationPolicy, params: Any, greedy: bool,
                 with_value: bool = True) -> Writer:
    """The actor samples its response with a KV cache (a Writer); with_value=False skips
    the critic's pass over the prompt (value 0)."""
    spec = policy.spec

    def write(key, prompt, cands, legal, states):
        model = policy.merge(params)
        ids = policy._with_action_header(left_align(prompt, policy.pad_id))
        out = generate(model, ids, ids != policy.pad_id, key,
                       max_new_tokens=spec.response_len, temperature=spec.temperature,
                       top_p=spec.top_p, greedy=greedy, stop_tokens=(spec.stop_id,),
                       prefill_buckets=policy.prompt_widths)
        tokens = jnp.where(out.mask, out.tokens, policy.pad_id)
        value = (policy.acting_value(params, prompt) if with_value
                 else jnp.zeros(prompt.shape[:1], jnp.float32))
        return tokens, out.logp, out.mask, value, {}
    return write


def generating_actor(env, env_params: Any, policy: GenerationPolicy, params: Any):
    """pi_old writing its turn at ONE restored state (an envs.play.StateActor): the
    rollout's chooser on a batch of one, its prompt history empty at the restored state
    and filled by the continuation's own steps; the projected action is sent, an invalid
    one with its penalty; the token cost is the response's length."""
    from asct_jax.envs.play import StateActor

    chooser = GenerationChooser(policy.spec, model_writer(policy, params, greedy=False,
                                                          with_value=False), policy.pad_id)
    one = lambda x: x[None]  # noqa: E731

    def init(state):
        cands, _ = env.legal_actions(state, env_params)
        return chooser.init(1, env.observe(state, env_params).shape[-1], cands.shape[-1])

    def act(state, key, carry):
        cands, legal = env.legal_actions(state, env_params)
        choice, carry = chooser.turn(key, jax.tree.map(one, state),
                                     one(env.observe(state, env_params)), one(cands),
                                     one(legal), carry)
        tokens = jnp.sum(choice.scored, -1).astype(jnp.float32)
        return jax.tree.map(lambda x: x[0], choice.replace(tokens=tokens)), carry

    return StateActor(init=init, act=act)


class GenerationChooser:
    """A stateful chooser (asct_jax.envs.play): its carry is the last k steps
    (obs [N, k, O], projected action [N, k, A], live [N, k]) the prompt shows."""

    def __init__(self, spec: GenerationSpec, writer: Writer, pad_id: int):
        self.spec, self.writer, self.pad_id = spec, writer, pad_id

    def init(self, batch: int, obs_len: int, action_len: int):
        k = self.spec.history
        return (jnp.full((batch, k, obs_len), self.pad_id, jnp.int32),
                jnp.full((batch, k, action_len), self.pad_id, jnp.int32),
                jnp.zeros((batch, k), bool))

    def __call__(self, key, states, ts, cands, legal, costs, carry):
        return self.turn(key, states, ts.observation, cands, legal, carry)

    def turn(self, key, states, obs, cands, legal, carry):
        """One turn of N episodes from their observations obs [N, O] -> (Choice, carry)."""
        hist_obs, hist_act, hist_live = carry
        prompt = build_prompt(obs, cands, legal, hist_obs, hist_act, hist_live, self.spec,
                              self.pad_id)
        response, logp, mask, value, written = self.writer(key, prompt, cands, legal, states)
        proj = self.spec.project(response, mask, cands, legal, self.pad_id)
        penalty = jnp.where(proj.valid, 0.0, self.spec.invalid_penalty)
        n_act = jnp.sum(proj.action_mask, -1)
        think = jnp.sum(mask, -1) - n_act
        # per turn: action tokens (inside the action tags), reasoning tokens (inside the
        # think tags), non-action tokens (the rest: reasoning, tags, EOS)
        extra = {"prompts": prompt, "action_mask": proj.action_mask & mask,
                 "gen/invalid": (~proj.valid).astype(jnp.float32),
                 "gen/action_tokens": n_act.astype(jnp.float32),
                 "gen/think_tokens": jnp.sum(think_mask(response, mask, self.spec.tags),
                                             -1).astype(jnp.float32),
                 "gen/nonaction_tokens": think.astype(jnp.float32),
                 "gen/multi_token_action": (n_act >= 2).astype(jnp.float32), **written}
        shift = lambda h, x: jnp.concatenate([h[:, 1:], x[:, None]], axis=1)  # noqa: E731
        carry = (shift(hist_obs, obs), shift(hist_act, proj.action),
                 shift(hist_live, jnp.ones(obs.shape[:1], bool)))
        choice = Choice(response=response, index=proj.index, logp=logp, value=value,
                        scored=mask, env_actions=proj.action, penalty=penalty, extra=extra)
        return choice, carry


def scripted_writer(spec: GenerationSpec, pick: Callable, pad_id: int) -> Writer:
    """A writer that answers pick(key, states, cands, legal) -> (index [N], expert [N]) in
    the canonical form (the warm start's scripted expert); logp and value are 0, extra["expert"]
    the pick's flag."""

    def write(key, prompt, cands, legal, states):
        index, expert = pick(key, states, cands, legal)
        resp = jnp.take_along_axis(canonical_response(cands, spec, pad_id),
                                   index[:, None, None], axis=1)[:, 0]
        r = spec.response_len
        resp = jnp.pad(resp, ((0, 0), (0, max(r - resp.shape[1], 0))),
                       constant_values=pad_id)[:, :r]
        mask = resp != pad_id
        return (resp, jnp.zeros(resp.shape, jnp.float32), mask, jnp.zeros(resp.shape[:1]),
                {"expert": expert})
    return write
