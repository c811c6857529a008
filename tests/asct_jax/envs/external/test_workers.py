"""Host environments in worker processes (asct_jax.envs.external.workers.ParallelHostEnv).

A pure-Python toy game (CounterEnv, picklable by reference: the spawned workers import
this module) makes the fast tests; one slow test plays real ScienceWorld on two workers.
Every worker start imports JAX (~3 s of CPU), so the tests start few workers.
"""
import functools
import gc
import importlib.util
import os
import shutil
import signal

import numpy as np
import pytest

from asct_jax.envs.external import (BatchedHostEnv, ParallelHostEnv, ScienceWorldEnv,
                                    WorkerError)
from asct_jax.envs.external.base import HostEnv, LiveStep


class CounterEnv(HostEnv):
    """Toy game: count up to the target 3 + seed % 3 with "inc" (won); below 0 is lost.
    "dec" is legal above 0, "look" always; "boom" raises inside the game."""

    name = "counter"

    def __init__(self, max_turns: int = 6, fail: bool = False):
        super().__init__(max_turns)
        if fail:
            raise RuntimeError("cannot build the counter game")
        self._count = self._target = 0

    def _game_for(self, seed):
        return f"counter:{3 + seed % 3}"

    def _task(self):
        return f"Count to {self._target}."

    def _start(self, game, seed):
        self._target, self._count = int(game.split(":")[1]), 0
        return self._live("You see 0.")

    def _advance(self, action, replay=False):
        if action == "boom":
            raise ValueError("boom in the counter game")
        self._count += {"inc": 1, "dec": -1}.get(action, 0)
        return self._live(f"You see {self._count}." if action in ("inc", "dec", "look")
                          else "Nothing happens.")

    def _live(self, text):
        won = self._count == self._target
        return LiveStep(text=text, score=float(self._count), done=won or self._count < 0,
                        won=won)

    def _legal(self):
        return ["dec", "inc", "look"] if self._count > 0 else ["inc", "look"]


def _drive(env, seeds, turns=5, rng_seed=0):
    """Seeded uniform play over the legal actions (an unknown command at turn 2), then a
    restore to turn 2 (reset + replay) and one more step from there: every output."""
    rng = np.random.default_rng(rng_seed)
    states, steps = env.reset(seeds)
    out, history = [states, steps], [states]
    for t in range(turns):
        legal = env.legal_actions(states)
        actions = [c[int(rng.integers(len(c)))] if c else "look" for c in legal]
        actions[0] = "xyzzy" if t == 2 else actions[0]
        states, steps = env.step(states, actions)
        out += [legal, actions, states, steps, env.info(states)]
        history.append(states)
    back = history[2]
    env.restore(back)
    out += [env.legal_actions(back), env.step(back, ["inc"] * len(back)), env.info(back)]
    return out


def _exited(procs):
    return all(p.exitcode is not None for p in procs)


@pytest.mark.parametrize("workers", [1, 2])
def test_parallel_equals_serial(workers):
    seeds = [0, 1, 2]  # N = 3: W = 2 puts environments 0-1 in worker 0, 2 in worker 1
    serial_envs = [CounterEnv() for _ in seeds]
    serial = BatchedHostEnv(serial_envs)
    par = ParallelHostEnv(CounterEnv, num_envs=3, num_workers=workers)
    procs = list(par._procs)
    try:
        assert len(par) == 3 and par.max_turns == serial.max_turns == 6
        assert par.num_workers == workers
        assert _drive(par, seeds) == _drive(serial, seeds)
        total = {k: sum(e.stats[k] for e in serial_envs) for k in serial_envs[0].stats}
        assert par.stats == total and total["replays"] >= 1
    finally:
        par.close()
    assert _exited(procs)
    par.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        par.reset(seeds)


def test_worker_error_is_reraised_with_its_traceback():
    par = ParallelHostEnv(functools.partial(CounterEnv, max_turns=4), num_envs=2,
                          num_workers=2)
    try:
        states, _ = par.reset([0, 1])
        with pytest.raises(WorkerError) as err:
            par.step(states, ["inc", "boom"])
        first, rest = str(err.value).split("\n", 1)
        assert first == ("ParallelHostEnv worker 1 (environments 1..1) in step: "
                         "ValueError: boom in the counter game")
        assert "Worker traceback:\nTraceback" in rest and "in _advance" in rest
        # The workers are still in step: the next call answers as a serial batch would.
        serial = BatchedHostEnv([CounterEnv(max_turns=4) for _ in range(2)])
        s_states, _ = serial.reset([0, 1])
        assert par.step(states, ["inc", "look"]) == serial.step(s_states, ["inc", "look"])
        with pytest.raises(ValueError, match="actions has 1 entries for 2 environments"):
            par.step(states, ["inc"])
    finally:
        par.close()


def test_failing_factory_and_dead_worker_close_everything():
    with pytest.raises(WorkerError, match=r"worker 0 \(environments 0\.\.1\) in make_env: "
                                          r"RuntimeError: cannot build the counter game"):
        ParallelHostEnv(functools.partial(CounterEnv, fail=True), num_envs=2, num_workers=1)
    par = ParallelHostEnv(CounterEnv, num_envs=2, num_workers=2)
    procs = list(par._procs)
    states, _ = par.reset([0, 1])
    os.kill(procs[1].pid, signal.SIGKILL)
    procs[1].join(10)
    with pytest.raises(WorkerError, match=r"worker 1 \(environments 1\.\.1\) in legal_actions: "
                                          r"the worker died \(exit code -9\)"):
        par.legal_actions(states)
    assert _exited(procs)


def test_garbage_collection_ends_the_workers():
    par = ParallelHostEnv(CounterEnv, num_envs=1, num_workers=1)
    procs = list(par._procs)
    par.reset([0])
    del par
    gc.collect()
    assert _exited(procs)


@pytest.mark.parametrize("num_envs, num_workers, message", [
    (0, 1, "num_envs=0; pass num_envs >= 1"),
    (2, 0, "num_workers=0 with num_envs=2; pass 1 <= num_workers <= num_envs"),
    (2, 3, "num_workers=3 with num_envs=2; pass 1 <= num_workers <= num_envs")])
def test_bad_arguments(num_envs, num_workers, message):
    with pytest.raises(ValueError, match=message):
        ParallelHostEnv(CounterEnv, num_envs=num_envs, num_workers=num_workers)


def _process_alive(pid):
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("java") is None or importlib.util.find_spec("scienceworld")
                    is None, reason="needs Java and the scienceworld package")
def test_scienceworld_on_two_workers_equals_serial():
    make = functools.partial(ScienceWorldEnv, task="find-non-living-thing",
                             variations=[0, 1], max_turns=10)
    actions = ["open door to kitchen", "xyzzy", "go to kitchen", "look around"]
    serial = BatchedHostEnv([make(), make()])
    par = ParallelHostEnv(make, num_envs=2, num_workers=2)
    try:
        runs = []
        for env in (serial, par):
            states, steps = env.reset([0, 1])
            run = [states, steps]
            for a in actions:
                states, steps = env.step(states, [a, a])
                run += [states, steps]
            runs.append(run + [env.legal_actions(states)])
        assert runs[0] == runs[1]
        assert [s.game for s in runs[1][0]] == ["find-non-living-thing:0",
                                                "find-non-living-thing:1"]
        assert runs[1][-2][0].observation != runs[1][-2][1].observation
        # HostEnv attributes reach through the generic call: the workers' Java processes.
        java = par._call("__getattribute__", [("java_pid",)] * 2)
        assert all(_process_alive(pid) for pid in java)
    finally:
        serial.close()
        par.close()
    assert not any(_process_alive(pid) for pid in java)
