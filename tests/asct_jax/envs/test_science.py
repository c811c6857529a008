"""asct_jax.envs.science: the presets' procedure sets (variants, families of probability 1/3
each, every text in the vocabulary); reset's draws; `step` against a plain-Python machine
built from `procedures()` (required bits, bits set and cleared, ruins, the hidden
conductivity, "wait" that works with probability p_wait, score = the milestones' weights,
100 at the final one, 0 after a ruin, reward = score increment / 100; the feedback and
observation texts; actions parsed up to filler words), the frequency of a working "wait",
and the scripted expert (it succeeds in every variant, whatever the hidden bit, announcing
each sub-goal as its `expert_rationale`). Settings out of range are one-line errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from asct_jax.envs import EOS_ID, PAD_ID, UNK_ID
from asct_jax.envs.science import FINAL, NB, PLAN_LEN, Family, Science, expert_policy
from asct_jax.envs.tokenizer import get_tokenizer

ENVS = {"small": Science.from_size("small"), "hard": Science.from_size("hard")}
TOK = get_tokenizer()


def text(ids):
    ids = np.asarray(ids)
    return TOK.decode(ids[ids != PAD_ID])


@pytest.fixture(scope="module", params=["small", "hard"])
def env(request):
    """(env, procedures, jitted reset, jitted step, jitted vmapped expert turn)."""
    e = ENVS[request.param]

    def expert_turn(s, params):
        a = expert_policy(s, params)
        s2, ts = e.step(s, e.legal_actions(s, params)[0][a], params)
        return e.expert_rationale(s, params), s2, ts
    return (e, e.params.procedures(), jax.jit(e.reset), jax.jit(e.step),
            jax.jit(jax.vmap(expert_turn, in_axes=(0, None))))


@pytest.mark.parametrize("size, variants, actions", [("small", 8, 9), ("hard", 11, 16)])
def test_the_presets_procedure_sets(size, variants, actions):
    e = ENVS[size]
    assert (e.V, e.num_actions) == (variants, actions)
    probs = np.asarray(e.params.variant_probs)
    for fam in (Family.CHANGE_OF_STATE, Family.GROW_PLANT, Family.CONDUCTIVITY):
        in_fam = probs[e.family == fam]
        assert in_fam.sum() == pytest.approx(1 / 3) and np.ptp(in_fam) < 1e-7
    assert UNK_ID not in np.asarray(e.t_act) and UNK_ID not in np.asarray(e.t_task)
    assert UNK_ID not in np.asarray(e.t_phrase)
    assert ((np.asarray(e.t_act) == EOS_ID).sum(-1) == 1).all()    # text, EOS, PAD: fits
    assert e.params.p_wait == (1.0 if size == "small" else pytest.approx(0.6))


@pytest.mark.parametrize("field, value, allowed", [
    ("num_seeds", 4, "[1, 3]"), ("num_seeds", 0, "[1, 3]"), ("num_conduct_objects", 0, "[1, 6]"),
    ("num_conduct_objects", 7, "[1, 6]"), ("num_distractors", 4, "[0, 3]"),
    ("max_turns", 0, "[1, inf)")])
def test_a_procedure_count_out_of_range_names_the_field_and_its_range(field, value, allowed):
    with pytest.raises(ValueError) as e:
        Science.from_size("small", **{field: value})
    assert str(e.value) == f"{field}: {value} is out of range; allowed: int in {allowed}"


def test_reset_draws_variant_hidden_bit_and_slot_order(env):
    e, procs, reset = env[:3]
    keys = jax.random.split(jax.random.PRNGKey(0), 3000)
    s, ts = jax.vmap(reset, in_axes=(0, None))(keys, e.params)
    freq = np.bincount(np.asarray(s.variant), minlength=e.V) / 3000
    probs = np.asarray(e.params.variant_probs)
    assert (np.abs(freq - probs) < 4 * np.sqrt(probs * (1 - probs) / 3000)).all()
    assert abs(np.asarray(s.hidden).mean() - 0.5) < 4 * 0.5 / np.sqrt(3000)
    np.testing.assert_array_equal(np.sort(np.asarray(s.perm), 1),
                                  np.broadcast_to(np.arange(e.num_actions), s.perm.shape))
    assert not np.asarray(s.bits).any() and not np.asarray(s.score).any()
    assert not np.asarray(ts.done).any() and not np.asarray(ts.info["success"]).any()
    assert text(ts.observation[0]) == f"task : {procs[int(s.variant[0])]['task']} <sep> <sep> score 0"


# -- the machine ------------------------------------------------------------------------------

def ref_step(proc, bits, hidden, a, lucky):
    """(bits, score, ruin, feedback text) after action a of procedure `proc`."""
    act = proc["acts"][a]
    met = all(bits[r] for r in act["req"])
    ruin = (met and (act["ruin"] or act["need"] not in (-1, hidden))) or \
        any(bits[b] for b in act["ruin_if"])
    new = list(bits)
    if met and lucky and not ruin:
        if act["set"] is not None:
            new[act["set"]] = True
        for c in act["clear"]:
            new[c] = False
    score = 0.0 if ruin else 100.0 if new[FINAL] else float(
        sum(w for w, b in zip(proc["weights"], new) if b))
    fb = ("you ruined the task" if ruin else "nothing changes" if not met else
          "nothing changes yet" if not lucky else
          f"result : {proc['phrases'][hidden][act['set']]}" if act["set"] is not None else
          "result : pot empty" if act["clear"] else "nothing changes")
    return new, score, ruin, fb


def ref_expert(proc, bits, hidden):
    return next(a for a in proc["plan"][hidden] if a >= 0 and not bits[proc["acts"][a]["set"]])


@given(seed=st.integers(0, 10_000), p_wait=st.sampled_from([0.0, 1.0]))
def test_step_follows_the_procedure_tables(env, seed, p_wait):
    """Eight turns of the expert's, random and unparseable actions from a random variant
    and hidden bit, against ref_step (p_wait 0 or 1: "wait" never or always works)."""
    e, procs, reset, step = env[:4]
    params = e.params.replace(p_wait=jnp.float32(p_wait))
    rng = np.random.default_rng(seed)
    v, hidden = int(rng.integers(e.V)), int(rng.integers(2))
    s, _ = reset(jax.random.PRNGKey(seed), params)
    s = s.replace(variant=jnp.int32(v), hidden=jnp.int32(hidden))
    proc, perm = procs[v], np.asarray(s.perm)
    cands = np.asarray(e.legal_actions(s, params)[0])
    bits, score, done = [False] * NB, 0.0, False
    for turn in range(1, 9):
        kind = rng.choice(["expert", "random", "garbage"], p=[0.5, 0.4, 0.1])
        a = ref_expert(proc, bits, hidden) if kind == "expert" else int(rng.integers(len(perm)))
        slot = int(np.flatnonzero(perm == a)[0])
        action = cands[slot].copy()
        if kind == "garbage":
            action[:] = PAD_ID
            action[0] = EOS_ID
        elif rng.random() < 0.5:                     # without its filler words: the same action
            kept = action[~np.isin(action, np.asarray(e._fillers))]
            action = np.pad(kept, (0, len(action) - len(kept)))
        s, ts = step(s, jnp.asarray(action), params)
        if kind == "garbage":
            reward, fb = 0.0, "nothing happens"
        else:
            lucky = not proc["acts"][a]["stoch"] or p_wait == 1.0
            bits, new_score, ruin, fb = ref_step(proc, bits, hidden, a, lucky)
            reward, score = (new_score - score) / 100, new_score
            done = ruin or bits[FINAL]
        assert text(ts.feedback) == fb, (turn, kind, proc["acts"][a]["text"])
        assert float(ts.reward) == pytest.approx(reward, abs=1e-6)
        np.testing.assert_array_equal(s.bits, bits)
        assert (float(s.score), bool(ts.done), int(s.turn)) == (score, done, turn)
        assert float(ts.info["score"]) == score
        assert float(ts.info["success"]) == float(bits[FINAL] and fb != "you ruined the task")
        shown = [w for b, ph in zip(bits, proc["phrases"][hidden]) if b for w in ph.split()]
        assert text(ts.observation) == " ".join(
            ["task", ":", proc["task"], "<sep>", *shown, "<sep>", "score", str(int(score))])
        if done:
            break


def _act(env, v, bits, action_text, hidden=0):
    """(bits, feedback, score, reward, done) of `action_text` from variant v's state with
    milestones `bits` (its score their weights)."""
    e, procs, reset, step = env[:4]
    weights = procs[v]["weights"]
    s, _ = reset(jax.random.PRNGKey(0), e.params)
    s = s.replace(variant=jnp.int32(v), hidden=jnp.int32(hidden),
                  bits=jnp.asarray([b in bits for b in range(NB)]),
                  score=jnp.float32(sum(weights[b] for b in bits)))
    cands = np.asarray(e.legal_actions(s, e.params)[0])
    slot = [TOK.decode(c[c > EOS_ID]) for c in cands].index(action_text)
    s2, ts = step(s, jnp.asarray(cands[slot]), e.params)
    return (set(np.flatnonzero(np.asarray(s2.bits))), text(ts.feedback), float(s2.score),
            round(float(ts.reward), 6), bool(ts.done))


BOIL, BEAN = 0, 2      # variants: "boil the water", "grow a bean plant"
RULES = [   # variant, bits, action -> bits, feedback, score, reward, done
    (BOIL, {0, 1, 2, 3}, "pour out the water", ({0}, "result : pot empty", 10, -0.5, False)),
    (BOIL, set(), "pour out the water", (set(), "nothing changes", 0, 0, False)),
    (BOIL, {0}, "focus on the water", ({0}, "you ruined the task", 0, -0.1, True)),
    (BOIL, {0, 1, 2, 3, 4}, "focus on the steam", ({0, 1, 2, 3, 4, 5}, "result : steam focused",
                                                   100, 0.2, True)),
    (BEAN, {0, 1}, "water the flower pot", ({0, 1, 2}, "result : soil watered", 45, 0.2, False)),
    (BEAN, {0, 1, 2}, "water the flower pot", ({0, 1, 2}, "you ruined the task", 0, -0.45, True)),
    (BEAN, set(), "put the seed in the freezer", (set(), "nothing changes", 0, 0, False)),
    (BEAN, {0}, "put the seed in the freezer", ({0}, "you ruined the task", 0, -0.1, True)),
    (BEAN, {0, 1, 2}, "wait for a while", ({0, 1, 2}, "nothing changes", 45, 0, False))]


@pytest.mark.parametrize("v, bits, action, want", RULES)
def test_clearing_ruins_and_requirements(env, v, bits, action, want):
    """Written out, not derived from ref_step: emptying the pot clears its milestones,
    watering twice / freezing a held seed / focusing on the wrong thing ruin, a step
    whose requirements are unmet changes nothing (the "wait" row: the pot not sunlit)."""
    assert _act(env, v, bits, action) == want


@pytest.mark.parametrize("hidden", [0, 1])
def test_the_hidden_conductivity_decides_the_box(env, hidden):
    """An observed object put in the box of its conductivity succeeds; the other box ruins
    (even if the bulb was never observed)."""
    e, procs, reset, step = env[:4]
    v = int(np.flatnonzero(e.family == Family.CONDUCTIVITY)[0])
    s, _ = reset(jax.random.PRNGKey(0), e.params)
    s = s.replace(variant=jnp.int32(v), hidden=jnp.int32(hidden))
    cands = np.asarray(e.legal_actions(s, e.params)[0])
    slot = {TOK.decode(c[c > EOS_ID]): i for i, c in enumerate(cands)}
    obj = procs[v]["task"].split()[3]
    right, wrong = (f"put the {obj} in the {c} box" for c in
                    (("red", "green") if hidden == 0 else ("green", "red")))
    held = s.replace(bits=jnp.asarray([True, True, True, True, False, False]),
                     score=jnp.float32(60.0))
    for start, box, want in ((held, right, (1.0, 100.0, 0.4)), (held, wrong, (0.0, 0.0, -0.6)),
                             (held.replace(bits=held.bits.at[3].set(False)), wrong,
                              (0.0, 0.0, -0.6))):
        s2, ts = step(start, jnp.asarray(cands[slot[box]]), e.params)
        assert bool(ts.done)
        assert (float(ts.info["success"]), float(s2.score)) == want[:2]
        assert float(ts.reward) == pytest.approx(want[2])


def test_wait_works_with_probability_p_wait(env):
    """The expert's "wait" (pot on an active stove / freezer) from 2 V states at a time
    (the expert test's batch, one compilation), 1980 keys: bit 4 set with frequency p_wait
    (1 in small, 0.6 in hard)."""
    e, _, reset, _, expert_turn = env
    v = int(np.flatnonzero(e.family == Family.CHANGE_OF_STATE)[0])
    s0, _ = reset(jax.random.PRNGKey(0), e.params)
    s0 = s0.replace(variant=jnp.int32(v), bits=jnp.asarray([True] * 4 + [False] * 2))
    n, got = 2 * e.V, []
    for i in range(-(-1980 // n)):
        s = jax.tree.map(lambda x: jnp.stack([x] * n), s0).replace(
            key=jax.random.split(jax.random.PRNGKey(i), n))
        got.append(np.asarray(expert_turn(s, e.params)[1].bits[:, 4]))
    p, freq = float(e.params.p_wait), np.concatenate(got).mean()
    assert abs(freq - p) < 4 * np.sqrt(p * (1 - p) / 1980) + 1e-9


def test_the_expert_succeeds_in_every_variant_announcing_its_subgoals(env):
    """Every (variant, hidden bit) from one reset state: the expert reaches the final
    milestone in its plan's steps (return 1); before each step its rationale is the
    feedback the step then gives, less the words the hidden bit decides."""
    e, procs, reset, _, expert_turn = env
    params = e.params.replace(p_wait=jnp.float32(1.0))
    combos = [(v, h) for v in range(e.V) for h in (0, 1)]
    s0, _ = reset(jax.random.PRNGKey(3), params)
    s = jax.tree.map(lambda x: jnp.stack([x] * len(combos)), s0)
    s = s.replace(variant=jnp.asarray([v for v, _ in combos], jnp.int32),
                  hidden=jnp.asarray([h for _, h in combos], jnp.int32))
    ret = np.zeros(len(combos))
    for _ in range(PLAN_LEN):
        was_done = np.asarray(s.done)
        rationale, s, ts = expert_turn(s, params)
        ret += np.asarray(ts.reward)
        for i, (v, h) in enumerate(combos):
            if was_done[i]:
                continue
            fb = text(ts.feedback[i]).split()
            other = procs[v]["phrases"][1 - h]
            bit = [p for p in procs[v]["phrases"][h]].index(" ".join(fb[2:]))
            said = [w for w, o in zip(fb[2:], other[bit].split()) if w == o]
            assert text(rationale[i]).split() == fb[:2] + said, (procs[v]["task"], h, fb)
    assert np.asarray(ts.info["success"]).all() and np.asarray(s.done).all()
    np.testing.assert_allclose(ret, 1.0, atol=1e-6)
    steps = [sum(a >= 0 for a in procs[v]["plan"][h]) for v, h in combos]
    np.testing.assert_array_equal(s.turn, steps)
