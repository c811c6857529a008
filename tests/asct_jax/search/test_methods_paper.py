"""The ASCT paper's methods end to end on the ragspace analogue: every visited state is
searched with B trials and full root coverage (no fallback), rule continuations cost no
actor scoring, the execution cache is the method's state and charges a prefix once,
VinePPO's actor scoring is charged once per prefix, its J_search and the token ledger in
both units, and each method's normalisation.

Integration test (asct_jax.search, the ragspace environment, experiments.tables'
asct_ragspace), kept under its entry point: asct_jax.search.methods."""
import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax import search as S
from asct_jax.search.methods import paper_rules, paper_search
from experiments.configs import asct_ragspace, base
from experiments.harness import registry


@pytest.fixture(scope="module")
def setup(credit_setup):
    # conftest: 2 x 2 episodes of the fresh policy (test_credit_methods.py's, on ragspace)
    return credit_setup(base.use_test_model(asct_ragspace.get_config("smoke")))


def _credit(setup, method, mstate="init", **fields):
    c, ctx, params, batch = setup
    c = copy.deepcopy(c)
    for k, v in fields.items():
        section, name = k.split(".")
        c[section][name] = v
    m = registry.get(method)
    cfg = m.make_config(c)
    if mstate == "init":
        mstate = m.init_state(cfg, ctx, params, jax.random.key(3))
    return jax.jit(m.make_credit(cfg, ctx))(params, batch, jax.random.key(2), jnp.int32(0),
                                            mstate)


def test_every_visited_state_is_searched_with_full_root_coverage(setup):
    c, ctx, params, batch = setup
    credit = _credit(setup, "asct_agentuct")
    m = jax.device_get(credit.metrics)
    turns = int(np.asarray(batch.turn_mask).sum())
    assert m["asct/searched_states"] == turns                       # every visited state
    assert m["asct/trials"] == 12 * turns                           # B = 12 each
    assert m["asct/fallback_frac"] == 0.0                           # B >= |A(s)|: covered
    assert m["t_actor"] == 0.0 and m["t_env"] > 0                   # rule continuations
    assert m["aux_tokens"] == pytest.approx(m["t_env"])
    coef = np.asarray(credit.coef)
    assert np.all(np.isfinite(coef)) and np.all(coef[~np.asarray(batch.token_mask)] == 0)
    # The cache came back as the method's state, with the searched prefixes marked.
    assert credit.state is not None and int(np.asarray(credit.state.executed).sum()) > 0


@pytest.mark.slow
def test_the_cache_carried_over_charges_executed_prefixes_nothing(setup):
    first = _credit(setup, "asct_uniform")
    again = _credit(setup, "asct_uniform", mstate=first.state)
    t1, t2 = float(first.metrics["t_env"]), float(again.metrics["t_env"])
    assert t2 < 0.5 * t1          # the same states: most prefixes are cached now
    assert float(again.metrics["asct/trials"]) == float(first.metrics["asct/trials"])
    off = _credit(setup, "asct_uniform", mstate=None, **{"asct.cache": False})
    assert off.state is None and float(off.metrics["t_env"]) > t1


@pytest.mark.slow
def test_actor_rollout_and_vineppo_pay_actor_scoring_once_per_prefix_and_iteration(setup):
    ar = jax.device_get(_credit(setup, "asct_actor_rollout").metrics)
    assert ar["t_actor"] > 0 and ar["asct/fallback_frac"] == 0.0
    vine = _credit(setup, "vineppo")
    again = _credit(setup, "vineppo", mstate=vine.state)
    v1, v2 = jax.device_get(vine.metrics), jax.device_get(again.metrics)
    assert v1["t_actor"] > 0 and v1["t_env"] > 0
    # A new step is a new iteration (a new actor): its scoring is charged again; the
    # executed prefixes stay cached for the run.
    assert v2["t_actor"] == v1["t_actor"] and v2["t_env"] < v1["t_env"]


@pytest.mark.slow
def test_vineppo_j_search_and_the_ledger_in_both_units(setup):
    """asct.actor_token_unit (read by VinePPO too) picks T_aux's actor-scoring unit; both
    units are always logged; VinePPO's J_search is Eq. 5 (the same search either way, so
    the two J_search differ by beta x the t_actor difference / K); the ledger's main
    trajectory and optimizer pass cover the batch's decisions."""
    from asct_jax.search.ledger import BETA_REPORT
    c, ctx, params, batch = setup
    m = {u: jax.device_get(_credit(setup, "vineppo", **{"asct.actor_token_unit": u}).metrics)
         for u in ("words", "chat")}
    for u in ("words", "chat"):
        assert m[u]["t_actor"] == pytest.approx(m[u][f"ledger/continuations/{u}"])
        assert m[u]["aux_tokens"] == pytest.approx(m[u]["t_env"] + m[u]["t_actor"])
    w, ch = m["words"], m["chat"]
    assert ch["t_actor"] > w["t_actor"] > 0 and ch["t_env"] == w["t_env"]
    assert ch["ledger/continuations/words"] == w["t_actor"]          # both always logged
    k = w["vineppo/trials"]
    assert w["j_search"] - ch["j_search"] == pytest.approx(
        BETA_REPORT * (ch["t_actor"] - w["t_actor"]) / k, rel=1e-4)
    assert 0 < w["j_search"] < 1
    parts = sum(w[f"ledger/env/{p}"] for p in ctx.env.cost_parts)
    assert parts == pytest.approx(w["t_env"], rel=1e-5)
    turns = float(np.asarray(batch.turn_mask).sum())
    assert w["ledger/decisions"] == turns and 0 < w["ledger/main_decisions"] <= turns
    per_state = ch["ledger/optimizer_pass/chat"] / turns
    assert per_state > w["ledger/optimizer_pass/words"] / turns
    assert ch["ledger/optimizer_pass/chat_per_label"] > ch["ledger/optimizer_pass/chat"]
    asct = jax.device_get(_credit(setup, "asct_agentuct").metrics)
    assert asct["ledger/continuations/chat"] == 0
    # Nothing scored them before: every (question, prefix) of the batch once (the
    # episodes of one question share their first decisions).
    st = jax.device_get(batch.states)
    mask = np.asarray(batch.turn_mask)
    pairs = {(int(st.qid[b, t]), int(st.node[b, t])) for b, t in zip(*np.nonzero(mask))}
    assert asct["ledger/main_decisions"] == len(pairs) < turns


def test_actor_token_unit_is_checked_at_the_edge(setup):
    from asct_jax.infra.checks import ConfigError
    from asct_jax.search.methods import vineppo_config
    c = copy.deepcopy(setup[0])
    c.asct.actor_token_unit = "words"
    assert vineppo_config(c).actor_token_unit == "words"
    c.asct.actor_token_unit = "bytes"
    with pytest.raises(ConfigError, match="asct.actor_token_unit"):
        registry.get("asct_uniform").make_config(c)
    with pytest.raises(ConfigError, match="asct.actor_token_unit"):
        vineppo_config(c)


def test_utility_per_difficulty_regroups_the_held_out_evaluation(setup, tmp_path):
    from experiments.tables import asct_ragspace as script
    c, ctx, params, batch = setup
    c = copy.deepcopy(c)
    c.train.eval_episodes = 24
    per = script.difficulty_eval(c, params)
    counts = {d: per[f"difficulty/{d}/count"] for d in script.DIFFICULTY
              if f"difficulty/{d}/count" in per}
    assert sum(counts.values()) == 24 and len(counts) >= 2
    # The greedy evaluation's own episodes: their count-weighted mean is its utility.
    mean = sum(per[f"difficulty/{d}/utility"] * n for d, n in counts.items()) / 24
    ref = script.held_out_eval(c, params)["eval/env/utility"]
    assert mean == pytest.approx(ref, abs=1e-5)
    runs = {"m": [dict(per), {k: v + 0.1 if k.endswith("utility") else v
                              for k, v in per.items()}]}
    base = {"hotpot/base": {"difficulty/easy/utility": 0.7}}
    text = script.difficulty_table(runs, base, str(tmp_path))
    assert "| easy" in text and "±" in text and "Untrained base" in text
    assert (tmp_path / "difficulty.md").read_text() == text
    assert (tmp_path / "difficulty.json").exists()


def test_paper_search_binds_c_exp_and_c_tok_once():
    """paper_rules: each rule's selection, expansion and continuation, c_exp and c_tok
    bound there; ActorRollout swaps in the pi_old continuation."""
    r = paper_rules("agentuct", c_exp=1.0, c_tok=2e-4)
    assert r.selection.func is S.agentuct and r.selection.keywords == {"c_exp": 1.0, "c_tok": 2e-4}
    assert r.expansion.func is S.cost_weighted_expansion and r.expansion.keywords == {"c_tok": 2e-4}
    assert r.continuation.func is S.cost_weighted_continuation
    assert r.continuation.keywords == {"c_tok": 2e-4}
    u = paper_rules("uct", c_exp=1.0, actor_suffixes=True)
    assert u.selection.keywords == {"c_exp": 1.0} and u.expansion is S.uniform_expansion
    assert u.continuation is S.actor_continuation
    assert paper_rules("uniform") == S.SearchRules(S.uniform, S.uniform_expansion,
                                                   S.uniform_continuation)
    with pytest.raises(ValueError, match="rule"):
        paper_rules("puct")
    ac = registry.get("asct_actor_rollout").make_config(base.get_config())
    cfg, rules = paper_search(ac, "uniform", actor_rollout=True)
    assert (cfg.num_simulations, cfg.max_depth, cfg.node_policy) == (12, 1, True)
    assert rules.continuation is S.actor_continuation
    cfg, rules = paper_search(ac, "agentuct")
    assert (cfg.max_depth, cfg.node_policy) == (None, False)
    assert rules.selection.keywords == {"c_exp": 1.4, "c_tok": 1e-4}


def test_ledger_summary_and_table_hand_counted(tmp_path):
    """The table script's Table 3 from a run's totals: T_aux = T_env + the continuations'
    scoring in each unit, the actor subtotal = continuations + main trajectory + optimizer
    forwards, tokens per actor state = one pass / decisions; a run without the ledger has
    no row."""
    from experiments.tables import asct_ragspace as script
    s = {"total/t_env": 100.0, "total/ledger/decisions": 4.0, "mean/j_search": 0.5}
    for u, (cont, main, fwd, one) in {"words": (10, 5, 20, 10), "chat": (30, 12, 60, 30),
                                      "chat_per_label": (70, 20, 140, 70)}.items():
        s.update({f"total/ledger/continuations/{u}": cont,
                  f"total/ledger/main_trajectory/{u}": main,
                  f"total/ledger/optimizer_forwards/{u}": fwd,
                  f"total/ledger/optimizer_pass/{u}": one})
    led = script.ledger_summary(s)
    assert led["ledger/t_aux/words"] == 110 and led["ledger/t_aux/chat"] == 130
    assert led["ledger/actor_subtotal/words"] == 35 and led["ledger/actor_subtotal/chat"] == 102
    assert led["ledger/per_state/words"] == 2.5 and led["ledger/per_state/chat_per_label"] == 17.5
    assert script.ledger_summary({"total/t_env": 0.0}) == {}
    text = script.ledger_table({"vineppo": [{**s, **led}], "ppo_return": [{"x": 1.0}]},
                               str(tmp_path))
    assert "vineppo" in text and "ppo_return" not in text and "0.500" in text
    assert "tokens / actor state (chat)" in text and (tmp_path / "ledger.json").exists()
