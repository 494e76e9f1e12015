"""The local backend: every server a process on 127.0.0.1, one module each (``kafka_node``,
``secantus``, ``fault_proxy``, ``spark_standalone``) on the shared ``server`` core; the
environment that starts, watches and stops them is ``environment``."""

from harness.environment.local.environment import (
    LocalEnvironment,
    LocalOptions,
    Progress,
    reap_orphans,
)

__all__ = ["LocalEnvironment", "LocalOptions", "Progress", "reap_orphans"]
