"""Which admissible commands become the actor's candidates when a game lists too many.

ScienceWorld lists a median of 951 valid commands per state (up to 3720), most of them
"move X to Y" pairs; the candidate-scoring actor reads K of them. Cutting the sorted list
at K keeps mostly "focus on X" (a wrong focus ends the episode at -100), so no gold path
survives. `VerbQuotaRule` keeps K commands without looking at the gold path:

  1. group the commands by their verb (`verb_of`: "focus on", "move", "go to", ...);
  2. keep every command of KEEP_VERBS (navigation and the object-free commands: at most
     ~15 in a ScienceWorld state);
  3. inside every other verb, rank by relevance to the task: the number of the task
     description's content words the command's objects name (`object_words`), more
     first; ties in a seeded random order, the seed drawn from (rule seed, game, turn);
  4. give verb v a quota of the remaining room proportional to sqrt(n_v) (n_v its
     commands; at least 1), take the verbs' ranked lists round-robin up to their quotas,
     then past them while room remains.

The result is deterministic in (commands, task, game, turn, seed) and returned in the
game's order. tests/asct_jax/envs/external/test_command_rules.py; the share of gold steps it
keeps is measured by experiments/checks/scienceworld_gold.py.
"""
from __future__ import annotations

import hashlib
import re
from typing import Dict, List, Sequence

import numpy as np

# Verbs of more than one word (the longest match wins); every other verb is the first word.
MULTI_WORD_VERBS = ("look around", "look at", "look in", "pick up", "put down", "go to",
                    "teleport to", "focus on", "connect", "disconnect")
# Verbs kept whole: moving between rooms and the commands without an object.
KEEP_VERBS = ("go to", "teleport to", "look around", "inventory", "wait", "wait1", "task")
STOP_WORDS = frozenset(
    "a an the is to your you of in on it and then first task be this that at or for with "
    "into from by as when which are can its if will".split())


def verb_of(command: str) -> str:
    """The command's verb: a multi-word verb it starts with, else its first word."""
    c = command.strip().lower()
    for v in sorted(MULTI_WORD_VERBS, key=len, reverse=True):
        if c == v or c.startswith(v + " "):
            return v
    return c.split(" ", 1)[0] if c else ""


def content_words(text: str) -> frozenset:
    """Lower-cased words of `text` (letters, digits, hyphens) that are not stop words."""
    return frozenset(w for w in re.findall(r"[a-z0-9\-]+", text.lower())
                     if w not in STOP_WORDS and len(w) > 1)


def object_words(command: str) -> frozenset:
    """The content words of a command without its verb's."""
    return content_words(command) - content_words(verb_of(command))


def _rng(seed: int, game: str, turn: int) -> np.random.Generator:
    digest = hashlib.sha256(f"{seed}|{game}|{turn}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


class VerbQuotaRule:
    """Keeps at most K commands: navigation, then verb quotas, task-relevant first
    (module doc).

    Args:
      max_candidates: K.
      seed: the rule's seed (the tie order).
      keep_verbs: verbs whose commands are all kept first (navigation and the
        object-free commands; within K, in the game's order).
    """

    def __init__(self, max_candidates: int, seed: int = 0,
                 keep_verbs: Sequence[str] = KEEP_VERBS):
        if int(max_candidates) < 1:
            raise ValueError(f"max_candidates={max_candidates!r}: must be an int >= 1")
        self.max_candidates, self.seed = int(max_candidates), int(seed)
        self.keep_verbs = frozenset(keep_verbs)

    def __call__(self, commands: Sequence[str], task: str, game: str = "",
                 turn: int = 0) -> List[str]:
        k = self.max_candidates
        if len(commands) <= k:
            return list(commands)
        words = content_words(task)
        ties = _rng(self.seed, game, turn).permutation(len(commands))
        by_verb: Dict[str, List[int]] = {}
        for i, c in enumerate(commands):
            by_verb.setdefault(verb_of(c), []).append(i)
        keep = [i for v in sorted(by_verb) if v in self.keep_verbs for i in by_verb[v]][:k]
        rest = {v: sorted(ix, key=lambda i: (-len(object_words(commands[i]) & words), ties[i]))
                for v, ix in sorted(by_verb.items()) if v not in self.keep_verbs}
        room = k - len(keep)
        if rest and room > 0:
            # quota_v = room * sqrt(n_v) / sum_u sqrt(n_u), at least 1 while room lasts.
            roots = {v: np.sqrt(len(ix)) for v, ix in rest.items()}
            total = sum(roots.values())
            quota = {v: max(1, int(room * roots[v] / total)) for v in rest}
            taken = {v: 0 for v in rest}
            while len(keep) < k and any(taken[v] < len(rest[v]) for v in rest):
                for v in rest:   # round-robin up to each quota, then past it
                    over = all(taken[u] >= min(quota[u], len(rest[u])) for u in rest)
                    if taken[v] < len(rest[v]) and (taken[v] < quota[v] or over) \
                            and len(keep) < k:
                        keep.append(rest[v][taken[v]])
                        taken[v] += 1
        return [commands[i] for i in sorted(keep)]
