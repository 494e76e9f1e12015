"""The local backend: every server a process on 127.0.0.1, one module each (``kafka_node``,
``secantus``, ``fault_proxy``, ``spark_standalone``) on the shared ``server`` core; the
environment that starts and controls them is ``environment``, on ``processes`` - the life of an
environment of processes, which the external backend (the fault proxy alone) shares."""

from harness.environment.local.environment import LocalEnvironment, LocalOptions
from harness.environment.local.processes import Progress, reap_orphans

__all__ = ["LocalEnvironment", "LocalOptions", "Progress", "reap_orphans"]
