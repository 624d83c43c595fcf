"""Scale-out on Ray: eagerrt models on pools of Ray actors, called like local ones.

Work sent to Ray is coarse (a Ray call costs a fraction of a millisecond), so
eagerrt ships whole models and batches, never single ops. :func:`deploy` puts a
model on replicas that each build it once; calling the deployment returns
tensors at once, completed by Ray, which the rest of eagerrt treats as any
pending tensor: ``await`` them, read them with ``.numpy()``, compute on them,
put the deployment in an ``ert.pipeline`` stage or behind a ``MicroBatcher``.

Ray is an optional dependency (``pip install 'eagerrt[distributed]'``);
``import eagerrt`` never imports it. Start Ray as you would anyway
(``ray.init()`` on a laptop, ``ray.init(address="auto")`` on a cluster) or let
the first deployment start a local one.

>>> import eagerrt as ert
>>> ert.distributed.thread_environment(2)["MKL_NUM_THREADS"]
'2'
"""

from __future__ import annotations

from .remote_model import RemoteModel, ReplicaLost, deploy
from .replica import LOOPBACK_ENVIRONMENT, thread_environment

__all__ = ["LOOPBACK_ENVIRONMENT", "RemoteModel", "ReplicaLost", "deploy", "thread_environment"]
