"""`household`: an ALFWorld-like analogue (not ALFWorld): receptacles, objects, text commands.

Task types: pick-and-place ("put the apple in the cabinet"), clean (sink), heat
(microwave), cool (fridge): "put a hot apple in the cabinet". Objects start hidden in
storage receptacles; the agent sees only the contents of the receptacle it stands at
(plus the list of receptacles it has already searched, so x_t alone suffices).

Reward: sparse, 1.0 on the step that completes the task (the episode then ends), else 0.
score = success. Ruin: heating an object that is already hot burns it; a burnt target
makes the task unsolvable (the episode runs on to the turn limit). Recoverable mistakes:
taking the wrong object (put it back anywhere), cooling instead of heating, detours.

Candidates (K = R + N + 4, fixed slots; `slot_kind` gives their Kind):
  [0, R)      "go to the {recep}"
  [R, R+N)    "take the {obj} from the {current recep}"   (object here, hands empty)
  R+N         "put the {held} in the {current recep}"
  R+N+1..+3   "carefully clean the {held} with the sink" / heat ... microwave / cool ... fridge
Filler words ("the", "carefully") are ignored by the parser; names matter.
"""
from __future__ import annotations

from typing import Tuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from asct_jax.envs import _common as C
from asct_jax.envs.base import PAD_ID, SEP_ID

RECEPTACLES = ("counter", "table", "cabinet", "fridge", "microwave", "sink", "drawer", "shelf")
OBJECTS = ("apple", "mug", "potato", "bread", "egg", "plate")
TASK_WORDS = ("put the {o} in the {r}", "put a clean {o} in the {r}",
              "put a hot {o} in the {r}", "put a cool {o} in the {r}")
STATUS = ("clean", "hot", "cold", "burnt")
APPLIANCES = ("sink", "microwave", "fridge")      # used by clean / heat / cool


class Task:
    """HouseholdState.task. A task t > PLACE needs status t - 1 (see Status), made with
    appliance t - 1 (see Appliance)."""
    PLACE, CLEAN, HEAT, COOL = range(4)


class Status:
    """Index into HouseholdState.status[obj] (and STATUS)."""
    CLEAN, HOT, COLD, BURNT = range(4)


class Appliance:
    """Index into APPLIANCES / params.appliances; also the offset of the apply slot."""
    SINK, MICROWAVE, FRIDGE = range(3)


class Kind:
    """Kind of a candidate slot (see `slot_kind`). The apply kinds CLEAN..COOL are
    `Kind.CLEAN + Appliance.*`, and the status they set is `kind - Kind.CLEAN`."""
    GO, TAKE, PUT, CLEAN, HEAT, COOL = range(6)


def required(task):
    """Status needed by a task > PLACE and the appliance that makes it (both task - 1)."""
    return jnp.maximum(task - 1, 0)


def vocabulary():
    return C.words_of(*TASK_WORDS, "task :", "at", "hold", "seen", "go to the",
                      "take the from the", "put the in the", "carefully clean the with the sink",
                      "heat the with the microwave", "cool the with the fridge",
                      "you arrive at you see", "you take the", "you put the in the",
                      "the is now", "task done", *STATUS) | set(RECEPTACLES) | set(OBJECTS)


@struct.dataclass
class HouseholdParams:
    """Every setting of `household` (presets: `small()`, `hard()`).

    rooms: the receptacles in slot order (R = len); start: where the agent starts;
    num_objects: objects N (OBJECTS[:N]); storage: receptacles where objects start and
    destinations lie; max_turns: turn budget T; action_len / obs_len / feedback_len: token
    lengths A / O / F; task_probs: [4] probabilities of the place/clean/heat/cool tasks.
    """

    rooms: Tuple[str, ...] = C.static_field()
    start: str = C.static_field()
    num_objects: int = C.static_field()
    storage: Tuple[str, ...] = C.static_field()
    max_turns: int = C.static_field()
    action_len: int = C.static_field()
    obs_len: int = C.static_field()
    feedback_len: int = C.static_field()
    task_probs: chex.Array                     # [4] float32

    @classmethod
    def small(cls) -> "HouseholdParams":
        """A three-receptacle kitchen (no fridge: no cool tasks), one distractor object,
        place-heavy task mix, so a uniform random policy succeeds ~8% of the time."""
        return cls(rooms=("counter", "microwave", "sink"), start="counter", num_objects=2,
                   storage=("counter", "microwave", "sink"), max_turns=10, action_len=8,
                   obs_len=48, feedback_len=12,
                   task_probs=jnp.asarray((0.7, 0.15, 0.15, 0.0), jnp.float32))

    @classmethod
    def hard(cls) -> "HouseholdParams":
        return cls(rooms=RECEPTACLES, start="table", num_objects=6,
                   storage=("counter", "table", "cabinet", "fridge", "drawer", "shelf"),
                   max_turns=15, action_len=8, obs_len=48, feedback_len=12,
                   task_probs=jnp.asarray((0.25, 0.25, 0.25, 0.25), jnp.float32))

    def validate(self) -> None:
        for r in (self.start, *self.storage):
            C.check_choice("receptacle", r, self.rooms)
        if not 1 <= self.num_objects <= len(OBJECTS):
            raise ValueError(f"num_objects must be in [1, {len(OBJECTS)}], got {self.num_objects}")
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")

    @property
    def appliances(self) -> jax.Array:
        """[3] int32 receptacle slot of the sink, microwave, fridge; -1 if not in the rooms
        (its action is then never legal)."""
        return jnp.asarray([self.rooms.index(r) if r in self.rooms else -1
                            for r in APPLIANCES], jnp.int32)


@chex.dataclass(frozen=True)
class HouseholdState:
    key: chex.PRNGKey
    turn: chex.Array               # [] int32
    done: chex.Array               # [] bool
    loc: chex.Array                # [] int32 receptacle index of the agent
    obj_loc: chex.Array            # [N] int32 receptacle of each object, -1 = held
    held: chex.Array               # [] int32 object index or -1
    status: chex.Array             # [N, 4] bool, indexed by Status
    seen: chex.Array               # [R] bool receptacles visited
    task: chex.Array               # [] int32 Task
    target: chex.Array             # [] int32 object
    dest: chex.Array               # [] int32 receptacle
    success: chex.Array            # [] bool


class Household(C.TextEnvironment):
    name = "household"
    params_cls = HouseholdParams

    def __init__(self, params: HouseholdParams | None = None):
        params = HouseholdParams.small() if params is None else params
        params.validate()
        self.params = params
        recs = tuple(params.rooms)
        self.R, self.N = len(recs), params.num_objects
        self.storage = np.asarray([recs.index(r) for r in params.storage], np.int32)
        self.start = recs.index(params.start)
        self.num_actions = self.R + self.N + 1 + len(APPLIANCES)
        self.action_len = params.action_len
        self.obs_len = params.obs_len
        self.feedback_len = params.feedback_len
        self.max_turns = params.max_turns
        self._init_text()
        R, N, A = self.R, self.N, self.action_len
        objs = OBJECTS[:N]
        self.t_go = C.encode_table([f"go to the {r}" for r in recs], A, eos=True)
        self.t_take = C.encode_table([f"take the {o} from the {r}" for o in objs for r in recs],
                                     A, eos=True).reshape(N, R, A)
        self.t_put = C.encode_table([f"put the {o} in the {r}" for o in objs for r in recs],
                                    A, eos=True).reshape(N, R, A)
        self.t_apply = np.stack([     # [N, 3, A], indexed by Appliance
            C.encode_table([f"carefully clean the {o} with the sink" for o in objs], A, eos=True),
            C.encode_table([f"heat the {o} with the microwave" for o in objs], A, eos=True),
            C.encode_table([f"cool the {o} with the fridge" for o in objs], A, eos=True)], 1)
        self.t_task = C.encode_table([t.format(o=o, r=r) for t in TASK_WORDS for o in objs
                                      for r in recs], 8).reshape(len(TASK_WORDS), N, R, 8)
        self.t_rec = C.encode_table(recs, 1)[:, 0]
        self.t_obj = C.encode_table(objs, 1)[:, 0]
        self.t_status = C.encode_table(STATUS, 1)[:, 0]
        self.w = {w: int(C.encode(w, 1)[0]) for w in ("task", ":", "at", "hold", "seen",
                                                      "put", "then", "take", "from", "in",
                                                      "with")}
        self.t_verb = C.encode_table(("clean", "heat", "cool"), 1)[:, 0]   # by Appliance
        self.t_appliance = C.encode_table(APPLIANCES, 1)[:, 0]
        F = self.feedback_len
        self.f_arrive = C.encode("you arrive at", F)
        self.f_see = C.encode("you see", F)
        self.f_take = C.encode("you take the", F)
        self.f_put = C.encode("you put the", F)
        self.f_in = C.encode("in the", F)
        self.f_now = C.encode("is now", F)
        self.f_done = C.encode("task done", F)
        self._freeze_tables()

    # ------------------------------------------------------------------ protocol
    def reset_env(self, key, params) -> HouseholdState:
        key, k_task, k_obj, k_dest, k_loc, k_shift = jax.random.split(key, 6)
        N = self.N
        task = jax.random.choice(k_task, len(TASK_WORDS), p=params.task_probs).astype(jnp.int32)
        target = jax.random.randint(k_obj, (), 0, N, jnp.int32)
        storage = jnp.asarray(self.storage)
        dest_i = jax.random.randint(k_dest, (), 0, storage.shape[0])
        dest = storage[dest_i]
        # Objects start in storage receptacles; the target never starts at its destination.
        locs = storage[jax.random.randint(k_loc, (N,), 0, storage.shape[0])]
        shift = storage[(dest_i + 1 + jax.random.randint(k_shift, (), 0, storage.shape[0] - 1))
                        % storage.shape[0]]
        locs = locs.at[target].set(jnp.where(locs[target] == dest, shift, locs[target]))
        return HouseholdState(
            key=key, turn=jnp.zeros((), jnp.int32), done=jnp.zeros((), bool),
            loc=jnp.asarray(self.start, jnp.int32),
            obj_loc=locs.astype(jnp.int32), held=jnp.asarray(-1, jnp.int32),
            status=jnp.zeros((N, len(STATUS)), bool),
            seen=jnp.zeros((self.R,), bool).at[self.start].set(True),
            task=task, target=target, dest=dest.astype(jnp.int32),
            success=jnp.zeros((), bool))

    def legal_actions(self, state, params):
        held = jnp.maximum(state.held, 0)
        cands = jnp.concatenate([
            jnp.asarray(self.t_go),
            jnp.asarray(self.t_take)[:, state.loc],
            jnp.asarray(self.t_put)[held, state.loc][None],
            jnp.asarray(self.t_apply)[held]], 0)
        return cands.astype(jnp.int32), legal_mask(state, params)

    # ------------------------------------------------------------------ dynamics
    def transition(self, s: HouseholdState, idx, rng, params):
        R, N, F = self.R, self.N, self.feedback_len
        held = jnp.maximum(s.held, 0)
        kind = slot_kind(idx, R, N)
        # go
        go_to = jnp.minimum(idx, R - 1)
        here = jnp.where(s.obj_loc == go_to, jnp.asarray(self.t_obj), PAD_ID)
        fb_go = C.render([self.f_arrive, jnp.asarray(self.t_rec)[go_to][None], self.f_see, here], F * 3)[:F]
        s_go = s.replace(loc=go_to, seen=s.seen.at[go_to].set(True))
        # take
        j = jnp.clip(idx - R, 0, N - 1)
        fb_take = C.render([self.f_take, jnp.asarray(self.t_obj)[j][None]], F * 2)[:F]
        s_take = s.replace(obj_loc=s.obj_loc.at[j].set(-1), held=j)
        # put
        obj_loc = s.obj_loc.at[held].set(s.loc)
        fb_put = C.render([self.f_put, jnp.asarray(self.t_obj)[held][None], self.f_in,
                           jnp.asarray(self.t_rec)[s.loc][None]], F * 4)[:F]
        s_put = s.replace(obj_loc=obj_loc, held=jnp.asarray(-1, jnp.int32))
        req_ok = jnp.where(s.task == Task.PLACE, True, s.status[s.target, required(s.task)])
        success = ((kind == Kind.PUT) & (held == s.target) & (s.loc == s.dest) & req_ok
                   & ~s.status[s.target, Status.BURNT])
        s_put = s_put.replace(success=success, done=success)
        fb_put = jnp.where(success, C.render([fb_put[:8], self.f_done[:2]], F * 2)[:F], fb_put)
        # clean / heat / cool the held object (heating a hot object burns it)
        st = s.status[held]
        clean = st.at[Status.CLEAN].set(True)
        heat = (st.at[Status.HOT].set(True).at[Status.COLD].set(False)
                .at[Status.BURNT].set(st[Status.BURNT] | st[Status.HOT]))
        cool = st.at[Status.COLD].set(True).at[Status.HOT].set(False)
        applied = jnp.clip(kind - Kind.CLEAN, 0, 2)      # Appliance; also the Status it sets
        new_st = jnp.stack([clean, heat, cool])[applied]
        word = jnp.where(new_st[Status.BURNT], Status.BURNT, applied)
        fb_app = C.render([jnp.asarray(self.t_obj)[held][None], self.f_now[:2],
                           jnp.asarray(self.t_status)[word][None]], F * 2)[:F]
        s_app = s.replace(status=s.status.at[held].set(new_st))
        states = {Kind.GO: s_go, Kind.TAKE: s_take, Kind.PUT: s_put, Kind.CLEAN: s_app,
                  Kind.HEAT: s_app, Kind.COOL: s_app}
        fbs = {Kind.GO: fb_go, Kind.TAKE: fb_take, Kind.PUT: fb_put, Kind.CLEAN: fb_app,
               Kind.HEAT: fb_app, Kind.COOL: fb_app}
        out_s, out_fb = s_go, fb_go
        for k in (Kind.TAKE, Kind.PUT, Kind.CLEAN, Kind.HEAT, Kind.COOL):
            out_s = C.tree_select(kind == k, states[k], out_s)
            out_fb = jnp.where(kind == k, fbs[k], out_fb)
        return out_s, out_fb, success.astype(jnp.float32)

    def observe(self, s: HouseholdState, params) -> jax.Array:
        """[O] int32: the observation tokens of state `s` (what reset/step return)."""
        w = self.w
        here = jnp.where(s.obj_loc == s.loc, jnp.asarray(self.t_obj), PAD_ID)
        held = jnp.maximum(s.held, 0)
        has = s.held >= 0
        hold_obj = jnp.where(has, jnp.asarray(self.t_obj)[held], PAD_ID)
        hold_st = jnp.where(has & s.status[held], jnp.asarray(self.t_status), PAD_ID)
        seen = jnp.where(s.seen, jnp.asarray(self.t_rec), PAD_ID)
        return C.render([
            [w["task"], w[":"]], jnp.asarray(self.t_task)[s.task, s.target, s.dest], [SEP_ID],
            [w["at"], jnp.asarray(self.t_rec)[s.loc], w[":"]], here, [SEP_ID],
            [w["hold"]], hold_st, hold_obj[None], [SEP_ID],
            [w["seen"]], seen], self.obs_len)

    def info(self, s: HouseholdState, params):
        return C.info_dict(success=s.success, score=s.success)

    rationale_len = 8

    def expert_rationale(self, s: HouseholdState, params) -> jax.Array:
        """[8] int32: the expert's sub-goal (expert_policy's branches): the object and the
        receptacle it is heading for, in its words:
          a wrong object held      "put {held} then take {target}"
          fetch the target         "take {target} from {where it is}"
          make its status          "{clean|heat|cool} {target} with {appliance}"
          deliver it               "put [{clean|hot|cold}] {target} in {destination}"."""
        w, t_obj = self.w, jnp.asarray(self.t_obj)
        r = lambda *words: C.render([jnp.stack([jnp.asarray(x, jnp.int32) for x in words])],
                                    self.rationale_len)  # noqa: E731
        obj = t_obj[s.target]
        need = s.task > Task.PLACE
        req = required(s.task)
        holding_t = s.held == s.target
        have_status = jnp.where(need, s.status[s.target, req], True)
        drop = r(w["put"], t_obj[jnp.maximum(s.held, 0)], w["then"], w["take"], obj)
        fetch = r(w["take"], obj, w["from"],
                  jnp.asarray(self.t_rec)[jnp.maximum(s.obj_loc[s.target], 0)])
        make = r(jnp.asarray(self.t_verb)[req], obj, w["with"],
                 jnp.asarray(self.t_appliance)[req])
        deliver = r(w["put"], jnp.where(need, jnp.asarray(self.t_status)[req], PAD_ID), obj,
                    w["in"], jnp.asarray(self.t_rec)[s.dest])
        return jnp.where((s.held >= 0) & ~holding_t, drop, jnp.where(
            ~holding_t, fetch, jnp.where(~have_status, make, deliver))).astype(jnp.int32)


def slot_kind(idx, R: int, N: int) -> jax.Array:
    """Kind of candidate slot idx: [0, R) go, [R, R+N) take, R+N put, then one apply slot
    per Appliance."""
    return jnp.where(idx < R, Kind.GO, jnp.where(idx < R + N, Kind.TAKE,
                                                 idx - (R + N) + Kind.PUT))


def expert_policy(s: HouseholdState, params, key=None) -> jax.Array:
    """Privileged scripted expert (knows where the target is): [] int32 slot index.

    Sizes come from the state's shapes (R = seen.shape[0], N = obj_loc.shape[0]).
    """
    R, N = s.seen.shape[-1], s.obj_loc.shape[-1]
    put_slot = R + N
    need = s.task > Task.PLACE
    have_status = jnp.where(need, s.status[s.target, required(s.task)], True)
    appliance = params.appliances[required(s.task)]
    holding_t = s.held == s.target
    tl = s.obj_loc[s.target]
    a_fetch = jnp.where(s.loc == tl, R + s.target, tl)              # walk to it, take it
    # apply slot of appliance task - 1: put_slot + 1 + (task - 1)
    a_status = jnp.where(s.loc == appliance, put_slot + s.task, appliance)  # clean/heat/cool
    a_deliver = jnp.where(s.loc == s.dest, put_slot, s.dest)        # walk to dest, put
    a = jnp.where((s.held >= 0) & ~holding_t, put_slot,             # put a wrong object down
                  jnp.where(~holding_t, a_fetch, jnp.where(~have_status, a_status, a_deliver)))
    return a.astype(jnp.int32)


def legal_mask(state: HouseholdState, params: HouseholdParams) -> jax.Array:
    """[K] bool legality of the fixed candidate slots."""
    R = state.seen.shape[-1]
    has = state.held >= 0
    return jnp.concatenate([
        jnp.arange(R) != state.loc, (state.obj_loc == state.loc) & ~has, has[None],
        has & (state.loc == params.appliances)])


def random_policy(state: HouseholdState, params, key) -> jax.Array:
    """Uniform random index among the legal candidates: [] int32."""
    return C.uniform_policy(legal_mask(state, params), key)
