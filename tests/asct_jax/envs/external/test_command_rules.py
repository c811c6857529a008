"""ScienceWorld's candidate rule (asct_jax.envs.external.command_rules; fast, synthetic)."""
import collections

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asct_jax.envs.external.command_rules import (KEEP_VERBS, VerbQuotaRule, object_words,
                                                  verb_of)
from tests.helpers.tiers import examples


TASK = ("Your task is to find a(n) non-living thing. First, focus on the thing. Then, move "
        "it to the red box in the kitchen.")


def _commands(n_move=40, n_focus=12):
    objs = [f"thing {i}" for i in range(n_move)]
    return (["go to kitchen", "go to hallway", "look around", "inventory", "wait1"]
            + [f"focus on {o}" for o in objs[:n_focus]]
            + [f"move {o} to {dst}" for o in objs for dst in ("red box", "table")]
            + ["open door to kitchen", "pick up thing 3", "read book"])


def test_verb_of_and_object_words():
    assert verb_of("focus on cup") == "focus on"
    assert verb_of("go to kitchen") == "go to"
    assert verb_of("look around") == "look around" and verb_of("look at cup") == "look at"
    assert verb_of("move cup to red box") == "move"
    assert object_words("focus on red box") == {"red", "box"}


def test_rule_keeps_navigation_quotas_and_relevance():
    cmds = _commands()
    rule = VerbQuotaRule(24, seed=0)
    kept = rule(cmds, TASK, "find-non-living-thing:0", 0)
    assert len(kept) == 24 and len(set(kept)) == 24
    assert kept == [c for c in cmds if c in kept]           # the game's order
    for c in cmds:                                           # navigation whole
        if verb_of(c) in KEEP_VERBS:
            assert c in kept
    verbs = collections.Counter(verb_of(c) for c in kept)
    assert verbs["move"] > verbs["focus on"] >= 1 and verbs["read"] == 1   # sqrt quotas
    moves = [c for c in kept if verb_of(c) == "move"]
    assert all(c.endswith("red box") for c in moves)         # task-relevant objects first
    assert rule(cmds, TASK, "find-non-living-thing:0", 0) == kept          # deterministic
    assert rule(cmds, TASK, "find-non-living-thing:0", 1) != kept          # seeded per turn
    assert rule(cmds[:10], TASK) == cmds[:10]                # fewer than K: all of them
    with pytest.raises(ValueError, match="max_candidates"):
        VerbQuotaRule(0)


@settings(max_examples=examples(50), deadline=None)
@given(n_move=st.integers(0, 30), n_focus=st.integers(0, 30), k=st.integers(1, 60),
       turn=st.integers(0, 5))
def test_rule_keeps_min_k_n_distinct_commands(n_move, n_focus, k, turn):
    cmds = _commands(n_move, min(n_focus, n_move))
    kept = VerbQuotaRule(k)(cmds, TASK, "g", turn)
    assert len(kept) == min(k, len(cmds))
    assert set(kept) <= set(cmds) and len(set(kept)) == len(kept)
