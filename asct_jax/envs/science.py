"""`science`: a ScienceWorld-like analogue (not ScienceWorld): multi-step procedures.

Task families (each with name variants): change of state ("boil the water" on the stove /
"freeze the water" in the freezer), growing a plant ("grow a bean plant"), and testing
conductivity ("test if the fork conducts electricity": wire it, wire the bulb, observe,
then put it in the green box if conductive, red if not; conductivity is hidden and drawn
per episode, only observing the bulb reveals it).

A procedure is a table-driven machine over milestone bits: every candidate action has
required bits, bits it sets and clears, a ruin flag or ruin-if-bits (e.g. focusing on the
wrong thing, watering twice, freezing the seed), an optional hidden-variable condition and
an optional chance of success (hard preset: "wait" works with probability p_wait).

Score = progress in [0, 100]: the sum of the weights of the milestones reached, 100 when
the final milestone is reached (success; the episode ends), 0 after a ruin (the episode
ends). Reward = score increment / 100 at every step (so the return equals final score/100;
a ruin gives a negative reward that takes back the progress made). info: success, score.
Candidate slots are shuffled per episode.
"""
from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from asct_jax.envs import _common as C
from asct_jax.envs.base import PAD_ID, SEP_ID
from asct_jax.infra.checks import check_range

NB = 6                      # milestone bits per procedure; the last one is the final one
FINAL = NB - 1              # index of the final milestone bit (success)
PLAN_LEN = 6                # steps of an expert plan (-1 = no step)
SEEDS = ("bean", "pea", "corn")
CONDUCT_OBJS = ("fork", "nail", "eraser", "coin", "pencil", "spoon")
DISTRACT_SMALL = ("look around", "read the thermometer", "open the door")
DISTRACT_HARD = ("close the door", "check the inventory")


class Family:
    """Task family of a procedure variant."""
    CHANGE_OF_STATE, GROW_PLANT, CONDUCTIVITY = range(3)


def _act(text, req=(), set_=None, clear=(), ruin_if=(), ruin=False, need=-1, stoch=False):
    return dict(text=text, req=req, set=set_, clear=clear, ruin_if=ruin_if, ruin=ruin,
                need=need, stoch=stoch)


def _procedures(num_seeds: int, num_conduct_objects: int, num_distractors: int,
                hard_actions: bool):
    """List of procedure variants: dict(task, family, phrases[2][NB], weights[NB], acts, plan).

    num_distractors: how many of DISTRACT_SMALL every procedure lists; hard_actions: the
    extra ruin / distractor actions (incl. DISTRACT_HARD) of the hard preset.
    """
    hard = hard_actions
    distract = DISTRACT_SMALL[:num_distractors]
    out = []
    for goal in ("stove", "freezer"):
        boil = goal == "stove"
        other = "freezer" if boil else "stove"
        place = (lambda g: "put the pot on the stove" if g == "stove" else
                 "put the pot in the freezer")
        prod = "steam" if boil else "ice"
        ph = ["pot held", "pot filled", f"pot {'heating' if boil else 'cooling'}",
              f"{goal} on", f"water {'boiling' if boil else 'frozen'}", f"{prod} focused"]
        acts = [_act("pick up the metal pot", set_=0), _act("fill the pot with water", (0,), 1),
                _act(place(goal), (1,), 2), _act(f"activate the {goal}", (2,), 3),
                _act("wait for a while", (3,), 4, stoch=True),
                _act(f"focus on the {prod}", (4,), 5), _act("focus on the water", ruin=True),
                _act(place(other), (1,)), _act("pour out the water", (1,), clear=(1, 2, 3, 4))]
        acts += [_act(t) for t in distract]
        if hard:
            acts += [_act("focus on the pot", ruin=True), _act(f"activate the {other}")]
            acts += [_act(t) for t in DISTRACT_HARD]
        out.append(dict(task=f"{'boil' if boil else 'freeze'} the water",
                        family=Family.CHANGE_OF_STATE,
                        phrases=[ph, ph], weights=[10, 15, 15, 20, 20, 20], acts=acts,
                        plan=[[0, 1, 2, 3, 4, 5]] * 2))
    for seed in SEEDS[:num_seeds]:
        ph = ["seed held", "seed planted", "soil watered", "pot sunlit", "plant grown",
              "plant focused"]
        acts = [_act(f"pick up the {seed} seed", set_=0),
                _act("plant the seed in the flower pot", (0,), 1),
                _act("water the flower pot", (1,), 2, ruin_if=(2,)),
                _act("move the pot to the window", (1,), 3),
                _act("wait for a while", (2, 3), 4, stoch=True),
                _act(f"focus on the {seed} plant", (4,), 5),
                _act("focus on the flower pot", ruin=True),
                _act("put the seed in the freezer", (0,), ruin=True),
                _act("activate the stove")]
        acts += [_act(t) for t in distract]
        if hard:
            acts += [_act("focus on the window", ruin=True), _act("pour out the water")]
            acts += [_act(t) for t in DISTRACT_HARD]
        out.append(dict(task=f"grow a {seed} plant", family=Family.GROW_PLANT, phrases=[ph, ph],
                        weights=[10, 15, 20, 15, 20, 20], acts=acts,
                        plan=[[0, 1, 2, 3, 4, 5]] * 2))
    for obj in CONDUCT_OBJS[:num_conduct_objects]:
        base = [f"{obj} held", f"{obj} wired", "bulb wired", None, "", "task complete"]
        ph = [[p if p is not None else f"bulb {s}" for p in base] for s in ("off", "on")]
        acts = [_act(f"pick up the {obj}", set_=0),
                _act(f"connect the {obj} to the battery", (0,), 1),
                _act("connect the bulb to the battery", (), 2),
                _act("observe the light bulb", (1, 2), 3),
                _act(f"put the {obj} in the green box", (0,), 5, need=1),
                _act(f"put the {obj} in the red box", (0,), 5, need=0),
                _act("focus on the battery", ruin=True), _act("wait for a while"),
                _act("activate the stove")]
        acts += [_act(t) for t in distract]
        if hard:
            acts += [_act("focus on the wire", ruin=True), _act("pour out the water")]
            acts += [_act(t) for t in DISTRACT_HARD]
        out.append(dict(task=f"test if the {obj} conducts electricity",
                        family=Family.CONDUCTIVITY,
                        phrases=ph, weights=[10, 15, 15, 20, 0, 40], acts=acts,
                        plan=[[0, 1, 2, 3, 5, -1], [0, 1, 2, 3, 4, -1]]))
    return out


def vocabulary():
    words = set()
    for params in (ScienceParams.small(), ScienceParams.hard()):
        for p in params.procedures():
            words |= C.words_of(p["task"], *[a["text"] for a in p["acts"]],
                                *[x for row in p["phrases"] for x in row])
    return words | C.words_of("task : score result nothing changes yet you ruined the task",
                              "task complete pot empty")


@functools.lru_cache(maxsize=None)
def _tables(num_seeds: int, num_conduct_objects: int, num_distractors: int,
            hard_actions: bool):
    """NumPy tables of the procedure variants (see `Science.__init__`)."""
    procs = _procedures(num_seeds, num_conduct_objects, num_distractors, hard_actions)
    family = np.asarray([p["family"] for p in procs], np.int32)
    fam_count = np.bincount(family, minlength=3).astype(np.float32)
    probs = 1.0 / (3.0 * fam_count[family])       # each family 1/3
    sets = np.stack([[_mask(() if a["set"] is None else (a["set"],)) for a in p["acts"]]
                     for p in procs])
    return dict(variant_probs=probs / probs.sum(), sets=sets,
                plan=np.asarray([p["plan"] for p in procs], np.int32))      # [V, 2, PLAN_LEN]


@struct.dataclass
class ScienceParams:
    """Every setting of `science` (presets: `small()`, `hard()`).

    Static: the procedure set (num_seeds of SEEDS for the plant tasks, num_conduct_objects
    of CONDUCT_OBJS for the conductivity tasks, num_distractors of DISTRACT_SMALL,
    hard_actions: the extra ruin / distractor actions), max_turns T, token lengths
    action_len / obs_len / feedback_len. Array: p_wait, the success probability of a
    stochastic ("wait") step. variant_probs, plan and sets are derived from the procedures.
    """

    num_seeds: int = C.static_field()
    num_conduct_objects: int = C.static_field()
    num_distractors: int = C.static_field()
    hard_actions: bool = C.static_field()
    max_turns: int = C.static_field()
    action_len: int = C.static_field()
    obs_len: int = C.static_field()
    feedback_len: int = C.static_field()
    p_wait: chex.Array             # []

    @classmethod
    def small(cls) -> "ScienceParams":
        return cls(num_seeds=2, num_conduct_objects=4, num_distractors=0, hard_actions=False,
                   max_turns=10, action_len=8, obs_len=40, feedback_len=8,
                   p_wait=jnp.asarray(1.0, jnp.float32))

    @classmethod
    def hard(cls) -> "ScienceParams":
        return cls(num_seeds=3, num_conduct_objects=6, num_distractors=len(DISTRACT_SMALL),
                   hard_actions=True, max_turns=14, action_len=8, obs_len=40, feedback_len=8,
                   p_wait=jnp.asarray(0.6, jnp.float32))

    def validate(self) -> None:
        check_range("num_seeds", self.num_seeds, 1, len(SEEDS), integer=True)
        check_range("num_conduct_objects", self.num_conduct_objects, 1, len(CONDUCT_OBJS),
                    integer=True)
        check_range("num_distractors", self.num_distractors, 0, len(DISTRACT_SMALL),
                    integer=True)
        check_range("max_turns", self.max_turns, 1, integer=True)

    def _key(self):
        return (self.num_seeds, self.num_conduct_objects, self.num_distractors,
                self.hard_actions)

    def procedures(self):
        return _procedures(*self._key())

    @property
    def variant_probs(self) -> jax.Array:
        """[V] probability of each procedure variant (each family 1/3)."""
        return jnp.asarray(_tables(*self._key())["variant_probs"])

    @property
    def plan(self) -> jax.Array:
        """[V, 2, PLAN_LEN] int32 expert plan per variant and hidden bit."""
        return jnp.asarray(_tables(*self._key())["plan"])

    @property
    def sets(self) -> jax.Array:
        """[V, K, NB] bool milestone set by each action."""
        return jnp.asarray(_tables(*self._key())["sets"])


@chex.dataclass(frozen=True)
class ScienceState:
    key: chex.PRNGKey
    turn: chex.Array               # [] int32
    done: chex.Array               # [] bool
    variant: chex.Array            # [] int32 procedure variant
    perm: chex.Array               # [K] int32 candidate slot -> procedure action
    hidden: chex.Array             # [] int32 hidden bit (conductivity)
    bits: chex.Array               # [NB] bool milestones reached
    ruined: chex.Array             # [] bool
    score: chex.Array              # [] float32 progress 0..100


def _mask(bits) -> np.ndarray:
    m = np.zeros((NB,), bool)
    m[list(bits)] = True
    return m


class Science(C.TextEnvironment):
    name = "science"
    params_cls = ScienceParams

    def __init__(self, params: ScienceParams | None = None):
        params = ScienceParams.small() if params is None else params
        params.validate()
        self.params = params
        procs = params.procedures()
        self.V = len(procs)
        self.num_actions = len(procs[0]["acts"])
        assert all(len(p["acts"]) == self.num_actions for p in procs)
        self.action_len = params.action_len
        self.obs_len = params.obs_len
        self.feedback_len = params.feedback_len
        self.max_turns = params.max_turns
        self.family = np.asarray([p["family"] for p in procs], np.int32)
        self._init_text()
        K, A, V = self.num_actions, self.action_len, self.V
        self.t_act = C.encode_table([a["text"] for p in procs for a in p["acts"]], A,
                                    eos=True).reshape(V, K, A)
        self.t_task = C.encode_table([p["task"] for p in procs], 7)
        self.t_phrase = C.encode_table([x for p in procs for row in p["phrases"] for x in row],
                                       2).reshape(V, 2, NB, 2)
        self.weights = np.asarray([p["weights"] for p in procs], np.float32)
        self.req = np.stack([[_mask(a["req"]) for a in p["acts"]] for p in procs])
        self.set = np.stack([[_mask(() if a["set"] is None else (a["set"],)) for a in p["acts"]]
                             for p in procs])
        self.clear = np.stack([[_mask(a["clear"]) for a in p["acts"]] for p in procs])
        self.ruin_if = np.stack([[_mask(a["ruin_if"]) for a in p["acts"]] for p in procs])
        self.ruin = np.asarray([[a["ruin"] for a in p["acts"]] for p in procs])
        self.need = np.asarray([[a["need"] for a in p["acts"]] for p in procs], np.int32)
        self.stoch = np.asarray([[a["stoch"] for a in p["acts"]] for p in procs])
        self.plan = np.asarray([p["plan"] for p in procs], np.int32)   # [V, 2, PLAN_LEN]
        F = self.feedback_len
        self.w_num = np.asarray([int(C.encode(w, 1)[0]) for w in C.NUMBER_WORDS], np.int32)
        self.w = {w: int(C.encode(w, 1)[0]) for w in ("task", ":", "score", "result")}
        self.f_nochange = C.encode("nothing changes", F)
        self.f_notyet = C.encode("nothing changes yet", F)
        self.f_ruin = C.encode("you ruined the task", F)
        self.f_empty = C.encode("result : pot empty", F)
        self._freeze_tables()

    def _tables(self):
        """Procedure tables in a dict of jnp arrays (named for readability in the dynamics)."""
        return {k: jnp.asarray(getattr(self, k)) for k in (
            "t_act", "t_phrase", "weights", "req", "set", "clear", "ruin_if", "ruin", "need",
            "stoch", "plan")}

    # ------------------------------------------------------------------ protocol
    def reset_env(self, key, params) -> ScienceState:
        key, k1, k2, k3 = jax.random.split(key, 4)
        return ScienceState(
            key=key, turn=jnp.zeros((), jnp.int32), done=jnp.zeros((), bool),
            variant=jax.random.choice(k1, self.V, p=params.variant_probs).astype(jnp.int32),
            perm=jax.random.permutation(k2, self.num_actions).astype(jnp.int32),
            hidden=jax.random.bernoulli(k3).astype(jnp.int32),
            bits=jnp.zeros((NB,), bool), ruined=jnp.zeros((), bool),
            score=jnp.zeros((), jnp.float32))

    def legal_actions(self, state, params):
        cands = jnp.asarray(self.t_act)[state.variant, state.perm]
        return cands.astype(jnp.int32), jnp.ones((self.num_actions,), bool)

    # ------------------------------------------------------------------ dynamics
    def transition(self, s: ScienceState, idx, rng, params):
        T = self._tables()
        v, a = s.variant, s.perm[idx]
        req, st, clr = T["req"][v, a], T["set"][v, a], T["clear"][v, a]
        met = jnp.all(s.bits | ~req)
        lucky = ~T["stoch"][v, a] | jax.random.bernoulli(rng, params.p_wait)
        need = T["need"][v, a]
        wrong_hidden = (need >= 0) & (need != s.hidden)
        ruin = (met & (T["ruin"][v, a] | wrong_hidden)) | jnp.any(s.bits & T["ruin_if"][v, a])
        effect = met & lucky & ~ruin
        bits = jnp.where(effect, (s.bits | st) & ~clr, s.bits)
        final = bits[FINAL]
        score = jnp.where(ruin, 0.0, jnp.where(final, 100.0,
                                                jnp.sum(jnp.where(bits, T["weights"][v], 0.0))))
        # Feedback: the phrase of the milestone set, "pot empty", or no change.
        bit = jnp.argmax(st)
        phrase = T["t_phrase"][v, s.hidden, bit]
        F = self.feedback_len
        fb_set = C.render([[self.w["result"], self.w[":"]], phrase], F)
        fb = jnp.where(ruin, jnp.asarray(self.f_ruin), jnp.where(
            ~met, jnp.asarray(self.f_nochange), jnp.where(
                ~lucky, jnp.asarray(self.f_notyet), jnp.where(
                    jnp.any(st), fb_set, jnp.where(jnp.any(clr), jnp.asarray(self.f_empty),
                                                   jnp.asarray(self.f_nochange))))))
        s2 = s.replace(bits=bits, ruined=s.ruined | ruin, score=score, done=ruin | final)
        return s2, fb, (score - s.score) / 100.0

    def observe(self, s: ScienceState, params) -> jax.Array:
        """[O] int32: the observation tokens of state `s` (what reset/step return)."""
        phrases = jnp.asarray(self.t_phrase)[s.variant, s.hidden]         # [NB, 2]
        shown = jnp.where(s.bits[:, None], phrases, PAD_ID).reshape(-1)
        score_w = jnp.asarray(self.w_num)[jnp.clip(s.score.astype(jnp.int32), 0, 100)]
        return C.render([[self.w["task"], self.w[":"]], jnp.asarray(self.t_task)[s.variant],
                         [SEP_ID], shown, [SEP_ID], [self.w["score"], score_w]], self.obs_len)

    def info(self, s: ScienceState, params):
        return C.info_dict(success=s.bits[FINAL] & ~s.ruined, score=s.score)

    rationale_len = 4

    def expert_rationale(self, s: ScienceState, params) -> jax.Array:
        """[4] int32: the expert's sub-goal, the milestone its next plan step
        (expert_policy) reaches, as the feedback announces it: "result : {phrase}" (e.g.
        "result : pot filled"), the phrase's words that depend on the hidden bit dropped
        (observing the bulb: "result : bulb", not its unseen "on" / "off")."""
        T = self._tables()
        steps = T["plan"][s.variant, s.hidden]                              # [PLAN_LEN]
        sets = T["set"][s.variant, jnp.maximum(steps, 0)]                   # [PLAN_LEN, NB]
        todo = (steps >= 0) & ~jnp.any(sets & s.bits, axis=-1)
        bit = jnp.argmax(sets[jnp.argmax(todo)])
        both = T["t_phrase"][s.variant, :, bit]                              # [2, 2]
        phrase = jnp.where(both[0] == both[1], both[0], PAD_ID)
        return C.render([[self.w["result"], self.w[":"]], phrase], self.rationale_len)


def expert_policy(s: ScienceState, params: ScienceParams, key=None) -> jax.Array:
    """Privileged scripted expert: the first step of the variant's plan (given the hidden
    bit) whose milestone is not reached yet, mapped through the slot permutation.
    [] int32 slot index."""
    steps = params.plan[s.variant, s.hidden]                            # [PLAN_LEN]
    sets = params.sets[s.variant, jnp.maximum(steps, 0)]                # [PLAN_LEN, NB]
    todo = (steps >= 0) & ~jnp.any(sets & s.bits, axis=-1)
    a = steps[jnp.argmax(todo)]
    return jnp.argmax(s.perm == a).astype(jnp.int32)


def random_policy(state: ScienceState, params, key) -> jax.Array:
    """Uniform random index among the (all legal) candidates: [] int32."""
    return C.uniform_policy(jnp.ones(state.perm.shape[-1:], bool), key)
