"""Sharding the cohort axis over devices (one machine or a multi-host cluster).

The round splits its padded cohort evenly over the ``"clients"`` axis of a
`jax.sharding.Mesh`; every device trains, clips and sums its own clients (in chunks),
and one ``psum`` over the axis combines the per-device sums. The server step then runs
replicated. Keys are folded from *population* client ids, so the same seed gives the
same run on 1 or many devices (up to float summation order).

Multi-host (GPU/TPU clusters): start the same script on every host, call
``jax.distributed.initialize()`` first (it reads the coordinator address, process
count and id from the cluster environment, e.g. SLURM or Cloud TPU, or take them as
arguments), then build ``client_mesh()`` which then spans ``jax.devices()`` of all hosts.
See README.md, "Multi-device and multi-host runs".
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import numpy as np

from fedjax_dp.validation import FedJaxDpError

CLIENTS_AXIS = "clients"


def client_mesh(devices: Optional[Sequence[jax.Device]] = None) -> jax.sharding.Mesh:
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
  """
  if mesh is None:
    return tree
  return jax.device_put(tree, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))


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
