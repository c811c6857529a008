"""Host environments in worker processes: `ParallelHostEnv`, a drop-in for `BatchedHostEnv`.

    make_env = functools.partial(ScienceWorldEnv, task="find-non-living-thing")
    envs = ParallelHostEnv(make_env, num_envs=8, num_workers=4)
    states, steps = envs.reset(seeds)            # lists of N, as BatchedHostEnv returns
    legal = envs.legal_actions(states)
    states, steps = envs.step(states, actions)
    envs.close()                                 # workers end, and with them their JVMs

Layout: the N environments are split into W contiguous blocks, the first N % W workers
holding one more (N=5, W=2: environments 0-2 in worker 0, 3-4 in worker 1). Each worker
builds its block with make_env() and calls the environments in order, so the results are
those of BatchedHostEnv([make_env() for _ in range(N)]) (identical for W=1).

Protocol, one duplex pipe per worker, messages pickled by the sender before sending:
  parent -> worker   (method, args)      args: one tuple of positional arguments per
                                         environment of the worker's block
  worker -> parent   ("ok", results)     one result per environment, in order
                     ("error", text)     first line "Type: message", then the traceback
The worker first answers ("ok", [max_turns per environment]) once its block is built.
Methods: the HostEnv ones (reset, step, legal_actions, info, restore) and "stats". A batched
call sends every worker its slice, then gathers the replies: the workers run concurrently.
A call that fails in an environment stops the rest of that worker's block (as the serial
loop stops) and is re-raised in the parent as WorkerError; the others keep their results.

A worker closes its environments and exits when its pipe closes (close(), garbage
collection, interpreter exit, or the parent's death) or on SIGTERM; ScienceWorld's Java
process ends with it (its adapter's close, else py4j's die_on_exit). Processes are started
with 'spawn' (the parent has JAX initialised: never fork), so make_env must be picklable
(a module-level class or a functools.partial of one), a script using this needs the
`if __name__ == "__main__":` guard, and a worker's start-up includes importing this
package (~3 s: asct_jax.envs imports JAX).
"""
from __future__ import annotations

import multiprocessing as mp
import pickle
import signal
import sys
import traceback
import weakref
from typing import Callable, Dict, List, Sequence, Tuple

from asct_jax.envs.external.base import HostEnv, HostState, HostTimeStep

CLOSE_TIMEOUT_S = 10.0  # per worker, before SIGTERM, then SIGKILL


class WorkerError(RuntimeError):
    """An exception raised inside a worker (its traceback in the message) or a dead worker."""


def _error_text() -> str:
    etype, value, _ = sys.exc_info()
    return f"{etype.__name__}: {value}\n{traceback.format_exc()}"


def _serve(conn, make_env: Callable[[], HostEnv], count: int) -> None:
    """Worker loop: build `count` environments, answer (method, args) until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and closes us
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    envs: List[HostEnv] = []
    try:
        try:
            envs.extend(make_env() for _ in range(count))
            reply = ("ok", [env.max_turns for env in envs])
        except Exception:
            reply = ("error", _error_text())
        while True:
            try:
                data = pickle.dumps(reply)
            except Exception:  # a result that does not pickle
                data = pickle.dumps(("error", _error_text()))
            try:
                conn.send_bytes(data)
                method, args = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):  # the parent closed the pipe (or died)
                return
            try:
                if method == "stats":
                    reply = ("ok", [dict(env.stats) for env in envs])
                else:
                    reply = ("ok", [getattr(env, method)(*a) for env, a in zip(envs, args)])
            except Exception:
                reply = ("error", _error_text())
    finally:
        for env in envs:
            try:
                env.close()
            except Exception:
                traceback.print_exc()


def _shutdown(procs, conns) -> None:
    """Close the pipes, wait for the workers to exit, SIGTERM then SIGKILL stragglers."""
    for conn in conns:
        conn.close()
    for p in procs:
        p.join(CLOSE_TIMEOUT_S)
        if p.exitcode is None:
            p.terminate()
            p.join(CLOSE_TIMEOUT_S)
        if p.exitcode is None:
            p.kill()
            p.join()


class ParallelHostEnv:
    """N host environments in W worker processes; the methods of `BatchedHostEnv`.

    Args:
      make_env: picklable factory of one environment, called N times across the workers.
      num_envs: N >= 1.
      num_workers: W, 1 <= W <= N.
    Raises WorkerError when building an environment fails in a worker.
    """

    def __init__(self, make_env: Callable[[], HostEnv], num_envs: int, num_workers: int):
        num_envs, num_workers = int(num_envs), int(num_workers)
        if num_envs < 1:
            raise ValueError(f"num_envs={num_envs}; pass num_envs >= 1.")
        if not 1 <= num_workers <= num_envs:
            raise ValueError(f"num_workers={num_workers} with num_envs={num_envs}; pass "
                             f"1 <= num_workers <= num_envs.")
        self._n = num_envs
        sizes = [num_envs // num_workers + (w < num_envs % num_workers)
                 for w in range(num_workers)]
        starts = [sum(sizes[:w]) for w in range(num_workers)]
        self._blocks = [(s, s + n) for s, n in zip(starts, sizes)]
        ctx = mp.get_context("spawn")
        self._procs, self._conns = [], []
        self._finalize = weakref.finalize(self, _shutdown, self._procs, self._conns)
        try:
            for w, size in enumerate(sizes):
                parent_end, child_end = ctx.Pipe()
                proc = ctx.Process(target=_serve, args=(child_end, make_env, size),
                                   name=f"ParallelHostEnv-{w}", daemon=True)
                proc.start()
                child_end.close()  # so the parent sees EOF when the worker dies
                self._procs.append(proc)
                self._conns.append(parent_end)
            blocks = self._gather("make_env", range(num_workers))
        except BaseException:
            self.close()
            raise
        self._max_turns = max(m for block in blocks for m in block)

    def __len__(self) -> int:
        return self._n

    @property
    def max_turns(self) -> int:
        return self._max_turns

    @property
    def num_workers(self) -> int:
        return len(self._procs)

    @property
    def stats(self) -> Dict[str, int]:
        """Each counter of the environments' `stats` summed over all N environments."""
        total: Dict[str, int] = {}
        for s in self._call("stats", [()] * self._n):
            for k, v in s.items():
                total[k] = total.get(k, 0) + v
        return total

    def reset(self, seeds: Sequence[int]) -> Tuple[List[HostState], List[HostTimeStep]]:
        self._check(seeds, "seeds")
        out = self._call("reset", [(s,) for s in seeds])
        return [o[0] for o in out], [o[1] for o in out]

    def step(self, states: Sequence[HostState], actions: Sequence[str]
             ) -> Tuple[List[HostState], List[HostTimeStep]]:
        self._check(states, "states")
        self._check(actions, "actions")
        out = self._call("step", list(zip(states, actions)))
        return [o[0] for o in out], [o[1] for o in out]

    def legal_actions(self, states: Sequence[HostState]) -> List[List[str]]:
        self._check(states, "states")
        return self._call("legal_actions", [(s,) for s in states])

    def info(self, states: Sequence[HostState]) -> List[Dict[str, float]]:
        self._check(states, "states")
        return self._call("info", [(s,) for s in states])

    def restore(self, states: Sequence[HostState]) -> None:
        self._check(states, "states")
        self._call("restore", [(s,) for s in states])

    def close(self) -> None:
        """Ends the workers (each closes its environments first); idempotent."""
        self._finalize()

    # --- protocol -------------------------------------------------------------------
    def _check(self, xs, what: str) -> None:
        if len(xs) != self._n:
            raise ValueError(f"{what} has {len(xs)} entries for {self._n} environments; "
                             "pass one per environment.")

    def _call(self, method: str, args: List[tuple]) -> list:
        """Send each worker (method, its slice of args); the N results in order."""
        if not self._finalize.alive:
            raise RuntimeError("ParallelHostEnv is closed; build a new one.")
        messages = [pickle.dumps((method, args[a:b])) for a, b in self._blocks]
        try:
            for conn, data in zip(self._conns, messages):
                try:
                    conn.send_bytes(data)
                except OSError:  # a dead worker: its receive below reports it
                    pass
            replies = self._gather(method, range(len(self._procs)))
        except WorkerError:
            raise
        except BaseException:  # e.g. Ctrl-C while waiting: the pipes would be out of step
            self.close()
            raise
        return [r for block in replies for r in block]

    def _gather(self, method: str, workers) -> List[list]:
        """Every worker's reply (all are read, so the pipes stay in step); then the first
        error, if any, as WorkerError (after closing all workers when one died)."""
        replies, errors, died = [], [], False
        for w in workers:
            a, b = self._blocks[w]
            where = f"ParallelHostEnv worker {w} (environments {a}..{b - 1}) in {method}"
            try:
                kind, payload = pickle.loads(self._conns[w].recv_bytes())
            except (EOFError, OSError):
                died = True
                self._procs[w].join(1.0)
                errors.append(f"{where}: the worker died (exit code "
                              f"{self._procs[w].exitcode}); all workers are closed.")
                continue
            if kind == "ok":
                replies.append(payload)
            else:
                first, _, tb = payload.partition("\n")
                errors.append(f"{where}: {first}\n\nWorker traceback:\n{tb}")
        if died:
            self.close()
        if errors:
            raise WorkerError(errors[0])
        return replies
