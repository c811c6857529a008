"""Several processes, one program: JAX's own multi-process runtime from the config.

    distributed.initialize(run.train.distributed)   # first, before any JAX computation
    ...                                 # the same program on every process
    if distributed.is_primary(): write the run's files

One process per host (or per group of local devices). After `jax.distributed.initialize`
`jax.devices()` lists the devices of every process, so the trainer's mesh
(asct_jax.rl.train_step.make_mesh) spans them all and the one compiled step runs
unchanged: each device rolls out, scores and differentiates its share of the episodes
(the batch is sharded over the mesh), XLA all-reduces the gradients across processes,
and the step's metrics come back fully replicated, so every process reads them. Process
0 writes the run's files (asct_jax.infra.run_logger); orbax checkpoints are written and
read by every process together, in whatever layout the restoring run has.

config.train.distributed (`DistributedConfig`; every process gets the same values but
process_id):
  enabled              False: one process, nothing is initialised.
  coordinator_address  "host:port" of process 0; "" from the cluster's environment.
  num_processes        0: from the cluster's environment.
  process_id           -1: from the cluster's environment.
  initialization_timeout  seconds to wait for every process to join.
  barrier_timeout      seconds a process waits at a barrier for the others: before each
                       compiled program's first run (`aligned`), at exit (jax's shutdown
                       barrier), around checkpoint moves. Default 900.
Left to the environment, `jax.distributed.initialize` detects SLURM, Open MPI, Kubernetes
and Cloud TPU pods itself (docs/multihost.md).
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Optional

from asct_jax.infra.checks import ConfigError, Range
from asct_jax.infra.typed_config import from_section, option

FIELD = "train.distributed"
BARRIER_TIMEOUT_S = 900


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """Section train.distributed (module doc): how the processes of a run join."""

    enabled: bool = option(None, "False: one process, nothing is initialised", False)
    coordinator_address: str = option(None, "host:port of process 0 ('': from the "
                                      "environment)", "")
    num_processes: int = option(Range(0, None, integer=True), "0: from the environment", 0)
    process_id: int = option(Range(-1, None, integer=True), "-1: from the environment", -1)
    initialization_timeout: int = option(Range(1, None, integer=True), "seconds for every "
                                         "process to join", 300)
    barrier_timeout: int = option(Range(1, None, integer=True), "seconds a process waits "
                                  "for the others", BARRIER_TIMEOUT_S)


_barrier_timeout_s = BARRIER_TIMEOUT_S   # this run's train.distributed.barrier_timeout
_barrier_count = itertools.count()


def distributed_config(config: Any) -> DistributedConfig:
    """The DistributedConfig of a ConfigDict's train.distributed (defaults without one);
    a one-line ConfigError naming the field for a value outside its rule."""
    train = config.get("train", {})
    if "distributed" not in train:
        return DistributedConfig()
    return from_section(DistributedConfig, config, FIELD)


def initialize_kwargs(cfg: DistributedConfig) -> dict:
    """The arguments of jax.distributed.initialize for a train.distributed section: the
    fields given, the rest left to jax's cluster detection. ConfigError (one line) for
    an address without a port or a process id outside [0, num_processes)."""
    address = str(cfg.coordinator_address or "")
    n, pid = int(cfg.num_processes), int(cfg.process_id)
    if address:
        host, sep, port = address.rpartition(":")
        if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
            raise ConfigError(f"{FIELD}.coordinator_address", f"{address!r} is not host:port",
                              "'' (from the cluster's environment) or e.g. 10.0.0.1:1234")
    if n and pid >= n:
        raise ConfigError(f"{FIELD}.process_id", f"{pid} with num_processes = {n}",
                          f"-1 (from the cluster's environment) or 0 .. {n - 1}")
    kwargs = {"initialization_timeout": int(cfg.initialization_timeout),
              "shutdown_timeout_seconds": int(cfg.barrier_timeout)}
    for name, value in (("coordinator_address", address or None),
                        ("num_processes", n or None),
                        ("process_id", None if pid < 0 else pid)):
        if value is not None:
            kwargs[name] = value
    return kwargs


def initialize(cfg: DistributedConfig) -> bool:
    """Joins the processes of train.distributed (jax.distributed.initialize) when
    enabled; True if this process is part of a multi-process run. Calling it again in the
    same process (a table's second run) is a no-op. ConfigError if JAX already
    computed something in this process (it must come first) or a field is malformed."""
    import jax

    if not cfg.enabled:
        return jax.distributed.is_initialized()
    kwargs = initialize_kwargs(cfg)
    global _barrier_timeout_s
    _barrier_timeout_s = kwargs["shutdown_timeout_seconds"]
    if jax.distributed.is_initialized():
        return True
    try:
        jax.distributed.initialize(**kwargs)
    except RuntimeError as e:
        if "backend" not in str(e):
            raise
        raise ConfigError(f"{FIELD}.enabled", "JAX computed something in this process before "
                          "the processes joined; initialise first", "False") from None
    except ValueError as e:   # jax could not tell the missing fields from the environment
        raise ConfigError(FIELD, f"enabled, but {str(e).splitlines()[0].rstrip('.')} and "
                          "no cluster environment was detected", "coordinator_address, "
                          "num_processes and process_id, or a SLURM / MPI / TPU environment"
                          ) from None
    return True


def process_index() -> int:
    """This process's index (0 in a single-process run)."""
    import jax

    return jax.process_index()


def is_primary() -> bool:
    """True on the process that writes a run's files (process 0)."""
    return process_index() == 0


def device_put(tree: Any, shardings: Any, may_alias: Optional[bool] = None) -> Any:
    """jax.device_put(tree, shardings), also onto a sharding over several processes, where
    every process passes the same values: jax.device_put takes host values there but
    neither typed PRNG keys nor arrays committed to a local device, so keys go as their
    key data and local arrays through the host. `shardings`: one Sharding or a tree."""
    import jax
    import numpy as np

    if jax.process_count() == 1:
        return jax.device_put(tree, shardings, may_alias=may_alias)

    def put(x, sharding):
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(put(jax.random.key_data(x), sharding),
                                            impl=jax.random.key_impl(x))
        if isinstance(x, jax.Array) and x.is_fully_addressable:
            x = np.asarray(x)
        return jax.device_put(x, sharding)

    if isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda x: put(x, shardings), tree)
    return jax.tree.map(put, tree, shardings)


def barrier(name: str) -> None:
    """Waits until every process reached `name` (nothing in a single-process run): the
    coordination service's barrier, not a collective, with train.distributed's
    barrier_timeout. Every process must call the same barriers in the same order."""
    import jax

    if jax.process_count() > 1:
        from jax._src import distributed as jax_distributed

        jax_distributed.global_state.client.wait_at_barrier(
            f"asct_{name}_{next(_barrier_count)}", int(_barrier_timeout_s * 1000))


def aligned(fn: Callable, name: str) -> Callable:
    """`fn` (a jitted function) that, in a multi-process run, is compiled ahead of its first
    call with each argument signature and run only once every process has compiled it
    (`barrier`). XLA:CPU's gloo collectives give the processes ~30 s to meet at a program's
    first collective, which processes compiling at different speeds (a loaded machine)
    miss. One process: `fn` itself."""
    import jax

    if jax.process_count() == 1:
        return fn
    compiled = {}

    def call(*args):
        leaves, treedef = jax.tree.flatten(args)
        key = (treedef, tuple((getattr(x, "shape", None), str(getattr(x, "dtype", type(x))))
                              for x in leaves))
        if key not in compiled:
            compiled[key] = fn.lower(*args).compile()
            barrier(f"compiled_{name}")
        return compiled[key](*args)
    return call
