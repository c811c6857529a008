"""asct_jax.rl.generation: the generating actor (issue 23) - its prompt, its canonical
response, the token classes the losses split, every environment's invalid step, the
methods' losses on its responses, and every registered method's train step with it."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asct_jax import envs
from asct_jax.envs.base import EOS_ID, PAD_ID, SEP_ID
from asct_jax.envs.play import play
from asct_jax.envs.projection import Tags, project_tokens
from asct_jax.rl.generation import (GenerationChooser, GenerationSpec, build_prompt,
                                    canonical_response, scripted_writer)
from asct_jax.rl.rollout import episodes_to_rollout
from asct_jax.rl.types import action_tokens, nonaction_tokens
from experiments.configs import base
from experiments.harness import registry
from tests.helpers.tiers import examples

TAGS = Tags((90,), (91,), (92,), (93,))     # <think> </think> <action> </action>
AO, AC = 92, 93


def _spec(**kw):
    return GenerationSpec(tags=TAGS, **kw)


def test_build_prompt_is_history_then_observation_then_listed_candidates():
    spec = _spec(history=2)
    obs = jnp.asarray([[5, 6, PAD_ID]])
    cands = jnp.asarray([[[7, EOS_ID, PAD_ID], [8, 9, EOS_ID], [11, EOS_ID, PAD_ID]]])
    legal = jnp.asarray([[True, True, False]])
    hist_obs = jnp.asarray([[[3, PAD_ID, PAD_ID], [4, PAD_ID, PAD_ID]]])
    hist_act = jnp.asarray([[[12, EOS_ID, PAD_ID], [10, PAD_ID, PAD_ID]]])
    hist_live = jnp.asarray([[False, True]])          # the oldest slot is empty
    p = build_prompt(obs, cands, legal, hist_obs, hist_act, hist_live, spec, PAD_ID)
    assert p.shape == (1, spec.prompt_len(3, 3, 3))
    want = [4, AO, 10, AC, 5, 6, SEP_ID, 7, SEP_ID, 8, 9, SEP_ID]   # illegal 11 unlisted
    np.testing.assert_array_equal(p[0, :len(want)], want)
    assert bool(jnp.all(p[0, len(want):] == PAD_ID))


def _household():
    env, params = envs.make("household", "small")
    states, ts = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(3), 4),
                                                         params)
    cands, legal = jax.vmap(env.legal_actions, in_axes=(0, None))(states, params)
    tags = Tags(*((len(env.tokenizer) + i,) for i in range(4)))   # after the words
    return env, params, cands, legal, tags


def test_canonical_response_of_each_candidate_projects_back_to_it():
    env, _, cands, legal, tags = _household()
    spec = GenerationSpec(tags=tags)
    resp = canonical_response(cands, spec, PAD_ID)                    # [N, K, A + 5]
    n, k, r = resp.shape
    flat = resp.reshape(n * k, r)
    proj = project_tokens(flat, flat != PAD_ID, jnp.repeat(cands, k, 0),
                          jnp.repeat(legal, k, 0), tags, PAD_ID, EOS_ID)
    want = jnp.tile(jnp.arange(k), n)
    live = legal.reshape(-1)
    np.testing.assert_array_equal(np.asarray(proj.index)[live], np.asarray(want)[live])
    assert bool(jnp.all(proj.valid[live]))
    # The action tokens are exactly the candidate's own (EOS dropped), after <action>.
    n_words = jnp.sum((cands != PAD_ID) & (cands != EOS_ID), -1).reshape(-1)
    np.testing.assert_array_equal(jnp.sum(proj.action_mask, -1)[live], n_words[live])
    assert bool(jnp.all(jnp.where(proj.action_mask, flat, 0) < tags.think_open[0]))


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=24))
def test_action_and_nonaction_tokens_partition_the_scored_tokens(bits):
    from asct_jax.rl.types import Rollout

    tm = jnp.asarray([[[b[0] for b in bits]]])
    am = jnp.asarray([[[b[1] for b in bits]]])
    fields = {f: None for f in Rollout.__dataclass_fields__}
    batch = Rollout(**dict(fields, token_mask=tm, action_mask=am))
    a, na = action_tokens(batch), nonaction_tokens(batch)
    assert not bool(jnp.any(a & na))
    np.testing.assert_array_equal(a | na, tm)
    np.testing.assert_array_equal(a, tm & am)
    # The candidate-scoring actor (no action_mask): every scored token is an action token.
    plain = Rollout(**dict(fields, token_mask=tm))
    np.testing.assert_array_equal(action_tokens(plain), tm)
    assert not bool(jnp.any(nonaction_tokens(plain)))


@pytest.mark.parametrize("name", envs.list_envs())
def test_every_environment_treats_the_all_pad_action_as_a_no_op(name):
    env, params = envs.make(name, "small")
    s, _ = env.reset(jax.random.key(0), params)
    _, legal = env.legal_actions(s, params)
    s2, ts = env.step(s, jnp.full((env.action_len,), PAD_ID, jnp.int32), params)
    _, legal2 = env.legal_actions(s2, params)
    assert float(ts.reward) == 0.0 and not bool(ts.done)
    np.testing.assert_array_equal(legal, legal2)


def _play(writer_pick, spec, env, params, write_spec=None, groups=2, size=2):
    """Rollout of a scripted writer (writing with write_spec's tags, default spec's)."""
    writer = scripted_writer(write_spec or spec, writer_pick, PAD_ID)
    chooser = GenerationChooser(spec, writer, PAD_ID)
    eps = jax.jit(lambda k: play(env, params, chooser, k, groups, size, PAD_ID))(
        jax.random.key(1))
    return episodes_to_rollout(eps)


@pytest.mark.slow
def test_expert_responses_are_valid_and_garbage_is_penalised_as_a_no_op():
    from asct_jax.rl.warm_start import noisy_expert_index
    env, params, _, _, tags = _household()
    spec = GenerationSpec(tags=tags, response_len=env.action_len + 5, invalid_penalty=0.25)
    expert = noisy_expert_index(env, params, 0.0)
    good = _play(expert, spec, env, params)
    assert float(jnp.sum(jnp.where(good.turn_mask, good.turn_info["gen/invalid"], 0))) == 0
    assert float(jnp.mean(good.final_info["success"])) == 1.0
    assert good.prompts.shape[-1] == spec.prompt_len(env.obs_len, env.num_actions,
                                                     env.action_len)
    # Action tokens: the candidate's words; the 5 tag / EOS tokens are non-action tokens.
    non = jnp.sum(nonaction_tokens(good), -1)
    np.testing.assert_array_equal(non[good.turn_mask], 5)

    # A writer whose think tag is not <think>: every step invalid (all-PAD, a no-op for
    # the environment), its reward the environment's minus the penalty.
    no_think = GenerationSpec(tags=tags._replace(think_open=(tags.action_close[0] + 1,)),
                              response_len=spec.response_len)
    bad = _play(expert, spec, env, params, write_spec=no_think)
    live = bad.turn_mask
    assert bool(jnp.all(bad.turn_info["gen/invalid"][live] == 1.0))
    np.testing.assert_allclose(bad.rewards[live], -0.25)
    np.testing.assert_allclose(bad.penalties, jnp.where(live, 0.25, 0.0))
    assert float(jnp.mean(bad.final_info["success"])) == 0.0

    # actor.think = "none": the expert writes "<action> c </action> EOS" (3 non-action
    # tokens), every step valid; the same response is invalid where think is required.
    none = GenerationSpec(tags=tags, response_len=spec.response_len, think="none")
    lean = _play(expert, none, env, params)
    assert float(jnp.sum(jnp.where(lean.turn_mask, lean.turn_info["gen/invalid"], 0))) == 0
    assert float(jnp.mean(lean.final_info["success"])) == 1.0
    np.testing.assert_array_equal(jnp.sum(nonaction_tokens(lean), -1)[lean.turn_mask], 3)
    strict = _play(expert, spec, env, params, write_spec=none)
    assert bool(jnp.all(strict.turn_info["gen/invalid"][strict.turn_mask] == 1.0))


def _generate_config(method: str, env: str = "household"):
    c = base.use_test_model(base.get_config())
    c.env.name = env
    c.method = method
    c.actor.chooser = "generate"
    c.actor.response_len = 12
    c.rollout.num_groups, c.rollout.group_size = 2, 2
    c.ppo.epochs, c.ppo.minibatches = 1, 1
    c.asct.trials = 2
    c.vineppo.k = 2
    c.train.progress = False
    return c


@pytest.mark.slow
def test_factor_loss_splits_action_and_nonaction_tokens_by_hand(credit_setup):
    """At q = 1: L_act = -(1/N_act) sum_actions mean_{j in action} C_j and
    L_nonact = -(1/N_non) sum_{non-action tokens} A_seq(episode), on expert responses
    (3 tags before the action words, </action> and EOS after)."""
    from asct_jax.rl.types import Credit
    from asct_jax.rl.warm_start import expert_episodes
    c, ctx, params, _ = credit_setup(_generate_config("factor"))
    fc = registry.get("factor").make_config(c)
    batch = expert_episodes(ctx.env, ctx.env_params, jax.random.key(2), 4, 0.0,
                            spec=ctx.policy.spec).rollout
    b, t, r = batch.responses.shape
    rng = np.random.default_rng(0)
    coef = jnp.asarray(rng.normal(size=(b, t, r)), jnp.float32)
    a_seq = jnp.asarray(rng.normal(size=(b,)), jnp.float32)
    credit = Credit(coef=coef, value_targets=None, loss_inputs={"a_seq": a_seq}, metrics={})
    out = type("Out", (), {"logp": batch.logp_old})
    ppo = type("PPO", (), {"clip_eps": 0.2})
    loss_fn = registry.get("factor").make_policy_loss(fc, ctx)
    parts, m = loss_fn(out, batch, credit, ppo)
    loss = parts["act"] + parts["nonact"]

    tm, am = np.asarray(batch.token_mask), np.asarray(batch.action_mask)
    act_means, non = [], []
    for i in range(b):
        for j in range(t):
            if not tm[i, j].any():
                continue
            pos = np.flatnonzero(tm[i, j])
            acts = [p for p in pos if am[i, j, p]]
            assert acts == list(range(3, 3 + len(acts)))        # after <think></think><action>
            act_means.append(np.mean(np.asarray(coef)[i, j, acts]))
            non += [float(a_seq[i])] * (len(pos) - len(acts))
    np.testing.assert_allclose(m["loss_act"], -np.mean(act_means), rtol=1e-5)
    np.testing.assert_allclose(m["loss_nonact"], -np.mean(non), rtol=1e-5)
    np.testing.assert_allclose(loss, -np.mean(act_means) - np.mean(non), rtol=1e-5)


@pytest.mark.slow
def test_prefix_cached_candidate_scores_equal_the_full_pass(credit_setup):
    """candidate_log_probs shares the prompt's KV cache between the K responses (the
    prompt pass and theirs on the prompt's real columns, models.widths); the scores equal
    the uncached pass over [prompt | response] on every column for every candidate."""
    c, ctx, params, _ = credit_setup(_generate_config("grpo"))
    pol = ctx.policy
    states, ts = jax.vmap(ctx.env.reset, in_axes=(0, None))(
        jax.random.split(jax.random.key(5), 3), ctx.env_params)
    cands, legal = jax.vmap(ctx.env.legal_actions, in_axes=(0, None))(states, ctx.env_params)
    cand_logp, token_logp, value = jax.jit(pol.candidate_log_probs)(
        params, ts.observation, cands, legal)
    n, k, _ = cands.shape
    none = jnp.zeros((n, pol.spec.history), bool)
    prompt = build_prompt(ts.observation, cands, legal,
                          jnp.zeros((n, pol.spec.history, ts.observation.shape[1]), jnp.int32),
                          jnp.zeros((n, pol.spec.history, cands.shape[2]), jnp.int32),
                          none, pol.spec, PAD_ID)
    flat = canonical_response(cands, pol.spec, PAD_ID).reshape(n * k, -1)
    logp, _, v = pol.action_log_probs(params, jnp.repeat(prompt, k, 0), flat)
    want = jnp.where(flat != PAD_ID, logp, 0.0).reshape(n, k, -1)
    np.testing.assert_allclose(token_logp, want, atol=2e-5)
    np.testing.assert_allclose(value, v.reshape(n, k)[:, 0], atol=2e-5)
    assert bool(jnp.all(jnp.where(legal, cand_logp, 0.0) <= 0.0))
    np.testing.assert_allclose(jnp.sum(jnp.where(legal, jnp.exp(cand_logp), 0.0), -1), 1.0,
                               rtol=1e-5)


@pytest.mark.slow
def test_the_chunked_vocabulary_pass_equals_the_whole_one(credit_setup):
    """GenerationPolicy._vocab_pass in chunks (actor.logits_chunk) gives the token
    log-probs, entropies, a distribution reduction (FACTOR's KL to its teacher) and the
    gradient of the unchunked pass; the reduction is factor_jax.forward_kl over the full
    vocabulary."""
    import copy
    import dataclasses
    import factor_jax as fj
    from factor_jax.teacher import kl_reduce, teacher_prefix
    c, ctx, params, batch = credit_setup(_generate_config("factor"))
    whole = ctx.policy
    chunked = copy.copy(whole)
    chunked.spec = dataclasses.replace(whole.spec, logits_chunk=5 * whole.vocab_size)
    flat = lambda x: x.reshape((-1,) + x.shape[2:])
    prompt, resp = flat(batch.obs), flat(batch.responses)
    teacher = whole.distributions(params, teacher_prefix(whole, prompt, flat(batch.feedback)),
                                  resp)
    assert resp.size > 5   # several chunks

    def run(pol):
        def loss(p):
            out = pol.action_outputs(p, prompt, resp, dist_reduce=(kl_reduce.fn, teacher[1]))
            return jnp.sum(out.logp) + jnp.sum(out.reduced), out
        return jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    (lw, ow), gw = run(whole)
    (lc, oc), gc = run(chunked)
    for a, b in ((oc.logp, ow.logp), (oc.entropy, ow.entropy), (oc.reduced, ow.reduced),
                 (lc, lw)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree.leaves(gc), jax.tree.leaves(gw)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    logp_all = jax.nn.log_softmax(whole.merge(params).logits(
        whole._hidden(whole.merge(params), prompt, resp)[0]), -1)
    want = fj.forward_kl(jnp.swapaxes(teacher[1], -1, -2), jnp.swapaxes(logp_all, -1, -2),
                         jnp.ones(logp_all.shape, bool).swapaxes(-1, -2))
    np.testing.assert_allclose(ow.reduced, want, rtol=1e-4, atol=1e-6)
    assert ow.dist_logp is None and float(jnp.min(ow.reduced)) >= -1e-6


@pytest.mark.slow
@pytest.mark.parametrize("method", registry.names())
def test_every_method_trains_a_step_with_the_generating_actor(method, tmp_path):
    from asct_jax.rl.build import build_learner
    from asct_jax.rl.sources import JaxEnvSource
    c = _generate_config(method, "rag_workflow" if method.startswith("asct") else "household")
    c.train.results_dir = str(tmp_path)
    # An entropy term: every method's step moves the parameters even where its own credit
    # and losses are 0 on this batch (FACTOR's first step on an all-fail batch).
    c.ppo.ent_coef = 0.01
    source = JaxEnvSource(c)
    learner = build_learner(c, registry.get(method), source)
    before = jax.tree.map(np.asarray, learner.init_state.params)   # the step donates it
    state, m = source.make_step(learner)(learner.init_state, 0)
    assert np.isfinite(m["train/loss"]) and np.isfinite(m["train/grad_norm"])
    assert 0.0 <= m["rollout/gen/invalid"] <= 1.0 and m["rollout/gen/nonaction_tokens"] > 0
    changed = any(float(jnp.max(jnp.abs(a - b))) > 0 for a, b in
                  zip(jax.tree.leaves(state.params), jax.tree.leaves(before)))
    assert changed


def _play_by_hand(env, env_params, actor, state, key, steps):
    """play_from's loop written out in Python: (return, tokens, calls, penalties)."""
    carry, g, tok, pens = actor.init(state), 0.0, 0.0, []
    for _ in range(steps):
        key, sub = jax.random.split(key)
        choice, carry = actor.act(state, sub, carry)
        pen = choice.penalty
        state, ts = env.step(state, choice.env_actions if choice.env_actions is not None
                             else choice.response, env_params)
        g, tok = g + float(ts.reward) - float(pen), tok + float(choice.tokens)
        pens.append(float(pen))
        if bool(ts.done):
            break
    return g, tok, len(pens), pens


@pytest.mark.slow
def test_generating_continuations_write_their_turns_and_pay_for_invalid_ones(credit_setup):
    """In generate mode pi_old writes its turns at restored states too (credit.state_actor,
    actor.continuations = "chooser"): play_from equals the same steps taken by hand, an
    invalid response costs the 0.1 penalty, the token cost is the responses' length; with
    "score" the continuation samples a legal candidate (no penalty, candidate tokens)."""
    from asct_jax.rl.actor import writes_at_restored_states
    from asct_jax.rl.credit import state_actor
    from asct_jax.envs.play import play_from
    c, ctx, params, _ = credit_setup(_generate_config("factor"))
    assert writes_at_restored_states(ctx.policy)
    env, ep = ctx.env, ctx.env_params
    state, _ = env.reset(jax.random.key(3), ep)
    key = jax.random.key(4)
    actor = state_actor(ctx, params)
    out = jax.jit(lambda s, k: play_from(env, ep, actor, s, k, 5))(state, key)
    g, tok, calls = out.ret, out.tokens, out.calls
    g_h, tok_h, calls_h, pens = _play_by_hand(env, ep, actor, state, key, 5)
    assert int(calls) == calls_h
    np.testing.assert_allclose([float(g), float(tok)], [g_h, tok_h], rtol=1e-5, atol=1e-6)
    assert all(p in (0.0, pytest.approx(0.1)) for p in pens) and max(pens) == pytest.approx(0.1)
    assert tok_h > 3 * calls_h                    # whole responses, not candidate labels

    c.actor.continuations = "score"
    _, ctx_s, _, _ = credit_setup(c)
    assert not writes_at_restored_states(ctx_s.policy)
    _, _, _, pens_s = _play_by_hand(env, ep, state_actor(ctx_s, params), state, key, 5)
    assert max(pens_s) == 0.0


@pytest.mark.slow
def test_factor_credit_on_the_prompts_columns_equals_the_whole_prompts(credit_setup):
    """The passes over the prompts' real columns only (models.widths: the rollout's and
    the continuations' prompt pass, the rollout's value, FACTOR's features and teacher
    pass) give the rollout, the continuations and FACTOR's credit of the passes over all
    P columns (policy.prompt_widths = 1): the same tokens, env calls and outcomes, the values and
    credit up to float32 summation order."""
    from asct_jax.models import widths
    from asct_jax.rl.rollout import rollout
    from factor_jax.teacher import teacher_outputs
    c, ctx, params, _ = credit_setup(_generate_config("factor"))
    c.factor.warmup_steps = 0          # TAC's credit: the critic's values enter it
    method = registry.get("factor")
    fc = method.make_config(c)
    pol, env, ep = ctx.policy, ctx.env, ctx.env_params

    def run():
        batch = jax.jit(lambda p, k: rollout(pol, p, env, ep, k, 2, 2))(params,
                                                                       jax.random.key(0))
        mstate = method.init_state(fc, ctx, params, jax.random.key(1))
        credit = jax.jit(method.make_credit(fc, ctx))(params, batch, jax.random.key(2),
                                                      jnp.int32(5), mstate)
        feats = jax.jit(pol.features)(params, batch.prompts.reshape(-1, pol.input_len))
        teacher = jax.jit(lambda p, b: teacher_outputs(ctx, p, b))(params, batch)
        return batch, credit, feats, teacher

    pol.prompt_widths = 1
    ref = run()
    pol.prompt_widths = 4
    got = run()
    real = np.asarray(ref[0].prompts != PAD_ID)
    assert real.sum(-1).max() <= widths.widths(pol.input_len, 4)[-2]    # a narrower width ran
    np.testing.assert_array_equal(got[0].responses, ref[0].responses)
    np.testing.assert_array_equal(got[0].turn_mask, ref[0].turn_mask)
    np.testing.assert_allclose(got[0].logp_old, ref[0].logp_old, atol=1e-5)
    np.testing.assert_allclose(got[0].values, ref[0].values, atol=1e-5)
    for k in ("env_calls", "aux_tokens", "factor/checkpoints", "factor/scored"):
        assert float(got[1].metrics[k]) == float(ref[1].metrics[k]), k
    np.testing.assert_allclose(got[1].metrics["factor/value_mean"],
                               ref[1].metrics["factor/value_mean"], atol=1e-5)
    np.testing.assert_allclose(got[1].coef, ref[1].coef, atol=1e-5)
    np.testing.assert_allclose(got[2], ref[2], atol=1e-5)
    for a, b in zip(got[3], ref[3]):
        np.testing.assert_allclose(a, b, atol=1e-5)
