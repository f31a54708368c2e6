"""Sharding the cohort axis over devices (one machine or a multi-host cluster).

The round splits its padded cohort evenly over the ``"clients"`` axis of a
`jax.sharding.Mesh`; every device trains, clips and sums its own clients (in chunks),
and one ``psum`` over the axis combines the per-device sums. The server step then runs
replicated. Keys are folded from *population* client ids, so the same seed gives the
same run on 1 or many devices (up to float summation order).

Multi-process (several hosts, or several processes on one host): start the same
program in every process and call `initialize_distributed` (``jax.distributed``)
before any JAX computation; ``client_mesh()`` then spans ``jax.devices()`` of all
processes (`global_client_mesh` for a given number of devices per process). Every
process runs the same host code (sampling is inside the jitted round; the privacy
ledger composes the same replicated metrics), and the arrays the round reads are global
``jax.Array``s: `replicate` builds them from each process's identical host copy with
``jax.make_array_from_callback`` (never a ``device_put`` of process-local arrays), and
the round's outputs are fully replicated, so every process reads them on the host
without a gather. Only process 0 writes files (`is_primary`). With 2 devices on the
mesh the run is the same whether they sit in one process or in two (tested by
tests/test_multiprocess.py). See README.md, "Multi-process and multi-host runs".
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import jax
import numpy as np

from fedjax_dp.validation import FedJaxDpError, check_int

CLIENTS_AXIS = "clients"


def client_mesh(devices: Optional[Sequence[Any]] = None) -> jax.sharding.Mesh:
  """A 1-D mesh with axis ``"clients"`` over ``devices`` (default: ``jax.devices()``,
  all devices of all processes).

  Raises:
    FedJaxDpError: an empty device list.
  """
  devices = list(jax.devices() if devices is None else devices)
  if not devices:
    raise FedJaxDpError("devices must hold at least one device.")
  return jax.sharding.Mesh(np.array(devices), (CLIENTS_AXIS,))


def mesh_size(mesh: Optional[jax.sharding.Mesh]) -> int:
  """Devices on the mesh's ``"clients"`` axis (1 without a mesh).

  Raises:
    FedJaxDpError: a mesh without a ``"clients"`` axis.
  """
  if mesh is None:
    return 1
  if CLIENTS_AXIS not in mesh.shape:
    raise FedJaxDpError(
        f"mesh must have a {CLIENTS_AXIS!r} axis (see client_mesh), got axes "
        f"{tuple(mesh.shape)}.")
  return int(mesh.shape[CLIENTS_AXIS])


def replicate(tree, mesh: Optional[jax.sharding.Mesh]):
  """Places every leaf of ``tree`` on all devices of ``mesh`` (replicated); returns
  ``tree`` unchanged without a mesh.

  Give the jitted round its population data and initial state this way: inputs that
  live on one device would be copied to the mesh at every call, and a state whose
  placement changes after the first round would trigger a second compilation.

  In a multi-process run (a mesh with devices of other processes) each leaf becomes a
  global ``jax.Array`` built with ``jax.make_array_from_callback`` from this process's
  host copy, which must be the same in every process (it is: every process loads the
  same data and initialises from the same seed). ``jax.device_put`` would compare the
  copies across processes (an all-gather of the whole population) instead.
  """
  if mesh is None:
    return tree
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  if replicated.is_fully_addressable:
    return jax.device_put(tree, replicated)

  def leaf(x):
    if isinstance(x, jax.Array) and x.sharding == replicated:
      return x
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, replicated, lambda index: host[index])

  return jax.tree_util.tree_map(leaf, tree)


def global_client_mesh(per_process: Optional[int] = None) -> jax.sharding.Mesh:
  """`client_mesh` over the first ``per_process`` local devices (default: all) of every
  process, ordered by process index and then local device order, so that cohort slots
  fall on mesh positions the same way whether the devices sit in one process or in
  many.

  Raises:
    FedJaxDpError: ``per_process`` < 1 or more than a process has.
  """
  by_process = {}
  for d in jax.devices():
    by_process.setdefault(d.process_index, []).append(d)
  fewest = min(len(v) for v in by_process.values())
  n = fewest if per_process is None else int(per_process)
  if not 1 <= n <= fewest:
    raise FedJaxDpError(f"devices (per process) must be in [1, {fewest}], got {n}.",
                        option="devices")
  devices = [d for p in sorted(by_process)
             for d in sorted(by_process[p], key=lambda d: d.id)[:n]]
  return client_mesh(devices)


def is_primary() -> bool:
  """Whether this is the process that writes a run's files and prints (process 0; the
  only process of a single-process run)."""
  return jax.process_index() == 0


def initialize_distributed(coordinator_address: Optional[str] = None,
                           num_processes: Optional[int] = None,
                           process_id: Optional[int] = None) -> None:
  """Joins a multi-process run (``jax.distributed.initialize``); call it in every
  process before any JAX computation.

  JAX detects what is not given from the cluster's environment (SLURM, Open MPI, Cloud
  TPU, ...); a manual launch (e.g. several processes on one machine) gives all three.
  On CPUs the cross-process collectives use gloo unless
  ``jax_cpu_collectives_implementation`` says otherwise.

  Args:
    coordinator_address: ``HOST:PORT`` where process 0 serves the coordinator, or None.
    num_processes: the number of processes (>= 1), or None.
    process_id: this process's index in ``[0, num_processes)``, or None.

  Raises:
    FedJaxDpError: bad values (`check_distributed_args`; naming the option), JAX
      already initialised, or a cluster JAX cannot detect (option ``distributed``).
  """
  check_distributed_args(coordinator_address, num_processes, process_id)
  if jax.distributed.is_initialized():
    raise FedJaxDpError("distributed: this process has already joined a multi-process "
                        "run (jax.distributed.initialize was called).",
                        option="distributed")
  if getattr(jax.config, "jax_cpu_collectives_implementation", None) is None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  try:
    jax.distributed.initialize(coordinator_address, num_processes, process_id)
  except (ValueError, RuntimeError) as e:
    raise FedJaxDpError(
        f"distributed: joining the multi-process run failed: {e} (outside a cluster that "
        "JAX detects, i.e. SLURM, Open MPI or Cloud TPU, give coordinator_address, "
        "num_processes and process_id; JAX must not have computed anything before).",
        option="distributed") from e


def check_distributed_args(coordinator_address: Optional[str] = None,
                           num_processes: Optional[int] = None,
                           process_id: Optional[int] = None) -> None:
  """Checks the values given for `initialize_distributed` (None: detected by JAX).

  Raises:
    FedJaxDpError: ``coordinator_address`` not ``HOST:PORT`` with a port in
      [1, 65535], ``num_processes`` < 1, or ``process_id`` < 0 or, with
      ``num_processes``, not below it; naming the option.
  """
  if coordinator_address is not None:
    host, _, port = str(coordinator_address).rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
      raise FedJaxDpError(f"coordinator_address must be HOST:PORT with a port in "
                          f"[1, 65535], e.g. localhost:12355, got {coordinator_address!r}.",
                          option="coordinator_address")
  if num_processes is not None:
    check_int("num_processes", num_processes, minimum=1)
  if process_id is not None:
    process_id = check_int("process_id", process_id, minimum=0)
    if num_processes is not None and process_id >= num_processes:
      raise FedJaxDpError(f"process_id must be in [0, num_processes - 1] = [0, "
                          f"{int(num_processes) - 1}], got {process_id}.",
                          option="process_id")


def split_host_cpu(count: Optional[int] = None, env=None):
  """Adds ``--xla_force_host_platform_device_count=count`` (default: one per core) to
  ``XLA_FLAGS`` in ``env`` (default ``os.environ``) unless a device count is already
  set there; returns ``env``.

  On a CPU, XLA runs the small matmuls of local training at a fraction of the dense
  matmul rate when it spreads each one over all cores; one device per core, with the
  cohort sharded over them (`client_mesh`), keeps every core busy with its own
  clients (about 2x on the 2-core benchmark machine, see benchmarks/RESULTS.md). It
  takes effect only if called before JAX initialises its backends (importing jax is
  fine; the first computation or ``jax.devices()`` is too late).
  """
  import os
  env = os.environ if env is None else env
  flags = env.get("XLA_FLAGS", "")
  count = (os.cpu_count() or 1) if count is None else int(count)
  if "xla_force_host_platform_device_count" not in flags and count > 1:
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()
  return env
