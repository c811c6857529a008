"""ScienceWorld's gold paths as an expert the actor can imitate (the warm start's data).

The simulator's gold action sequence of a game is not always playable by a
candidate-scoring actor as is (measured on the short-path tasks):
  * under the "easy" simplification doors are open, and the gold path still opens them
    ("The door is already open."): no-op steps;
  * some gold steps spell an object differently from the valid-action list ("connect
    battery anode to ..." where the list says "connect anode in battery to ...");
  * some gold paths go on after the task is complete ("wait1", "look around").

`admissible_gold_path` plays a game's gold path and returns the commands an actor can
take: a no-op step (its feedback in NOOP_FEEDBACK) is dropped; a step missing from the
valid list is respelled as the valid command of the same verb, among the `tries` ones
naming most of its content words, whose feedback is the gold step's own (checked by
playing both from the same state); steps after the episode ended are dropped. The result
says what was dropped or respelled and whether the path still wins.
"""
from __future__ import annotations

import dataclasses
from typing import List, Sequence, Tuple

from asct_jax.envs.external.base import HostState
from asct_jax.envs.external.command_rules import content_words, verb_of

NOOP_FEEDBACK = ("the door is already open",)


@dataclasses.dataclass(frozen=True)
class GoldPath:
    """A game's gold path in admissible spelling.

    game: "task:variation"; seed: the reset seed that plays it; commands: the path;
    won: playing `commands` completes the task; gold: the simulator's sequence;
    noop, respelled, unmatched, after_done: counts of the gold steps dropped as no-ops,
    respelled, sent as written (no admissible command had their effect), dropped after
    the end.
    """

    game: str
    seed: int
    commands: Tuple[str, ...]
    won: bool
    gold: Tuple[str, ...]
    noop: int = 0
    respelled: int = 0
    unmatched: int = 0
    after_done: int = 0


def _norm(command: str) -> str:
    return " ".join(command.lower().split())


def respell(env, state: HostState, command: str, legal: Sequence[str], tries: int = 5):
    """The valid command with `command`'s effect at `state` (module doc), or None."""
    want = env.step(state, command)[1].feedback
    words = content_words(command)
    same_verb = [c for c in legal if verb_of(c) == verb_of(command)]
    ranked = sorted(same_verb, key=lambda c: (-len(content_words(c) & words), c))
    for c in ranked[:tries]:
        if env.step(state, c)[1].feedback == want:
            return c
    return None


def admissible_gold_path(env, seed: int, tries: int = 5) -> GoldPath:
    """Plays the gold path of game `seed` of a ScienceWorldEnv (module doc)."""
    state, _ = env.reset(seed)
    gold = env.gold_path(state.game)
    state, _ = env.reset(seed)
    out: List[str] = []
    counts = dict(noop=0, respelled=0, unmatched=0, after_done=0)
    for command in gold:
        if state.done:
            counts["after_done"] += 1
            continue
        legal = env.legal_actions(state)
        norm_legal = {_norm(c): c for c in legal}
        cmd = norm_legal.get(_norm(command))
        if cmd is None:
            new, ts = env.step(state, command)
            if any(p in ts.feedback.lower() for p in NOOP_FEEDBACK):
                counts["noop"] += 1
                continue
            cmd = respell(env, state, command, legal, tries)
            counts["respelled" if cmd is not None else "unmatched"] += 1
            cmd = command if cmd is None else cmd
        state, _ = env.step(state, cmd)
        out.append(cmd)
    return GoldPath(game=state.game, seed=int(seed), commands=tuple(out), won=bool(state.won),
                    gold=tuple(gold), **counts)
