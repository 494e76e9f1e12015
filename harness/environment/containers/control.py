"""The container faults' operations on one environment's containers, through the engine's API.

Containers are found by name (``chaoslab-<env id>-<server or client name>``), so that a fault
started from one process acts on containers another process started (``chaoslab up`` then
``chaoslab run --env``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence

import docker
import docker.errors
from docker.models.containers import Container

from harness.environment.base import ContainerControl
from harness.errors import LabError

STOP_GRACE_S = 10
INTERFACE = "eth0"  # a container's interface on its network (the only one it has)


class ContainerActionFailed(LabError):
    """The engine refused an action on a container (the message says which and why)."""


class EngineContainers(ContainerControl):
    def __init__(
        self,
        client: Callable[[], docker.DockerClient],
        env_id: str,
        network: str,
        addresses: Mapping[str, str],
    ) -> None:
        """``addresses``: the servers' fixed addresses on ``network`` (kept on reconnecting)."""
        self._client, self._env_id, self._network = client, env_id, network
        self._addresses = dict(addresses)

    def _get(self, name: str) -> Container:
        try:
            return self._client().containers.get(f"chaoslab-{self._env_id}-{name}")
        except docker.errors.NotFound:
            raise ContainerActionFailed(f"no container {name!r} in this environment") from None

    def kill(self, name: str) -> None:
        container = self._get(name)
        if container.status == "paused":
            container.unpause()
        if container.status == "running":
            container.kill()

    def stop(self, name: str) -> None:
        container = self._get(name)
        if container.status == "paused":
            container.unpause()
        container.stop(timeout=STOP_GRACE_S)

    def start(self, name: str) -> None:
        self._get(name).start()

    def pause(self, name: str) -> None:
        self._get(name).pause()

    def unpause(self, name: str) -> None:
        container = self._get(name)
        if container.status == "paused":
            container.unpause()

    def disconnect(self, name: str) -> None:
        network = self._client().networks.get(self._network)
        network.disconnect(self._get(name), force=True)

    def reconnect(self, name: str) -> None:
        container = self._get(name)
        container.reload()
        if self._network in container.attrs["NetworkSettings"]["Networks"]:
            return
        network = self._client().networks.get(self._network)
        network.connect(container, aliases=[name], ipv4_address=self._addresses.get(name))

    def netem(self, name: str, rule: Sequence[str]) -> None:
        container = self._get(name)
        if rule:
            argv = ["tc", "qdisc", "replace", "dev", INTERFACE, "root", "netem", *rule]
        else:
            argv = ["tc", "qdisc", "del", "dev", INTERFACE, "root"]
        code, output = container.exec_run(argv)
        if code != 0 and rule:
            text = output.decode(errors="replace").strip()
            # Measured on this project's machines: "Specified qdisc kind is unknown" - their
            # kernel has no sch_netem (nor tbf), and modules cannot be loaded.
            raise ContainerActionFailed(f"{' '.join(argv)} in {name} failed ({code}): {text}")

    def drop(self, name: str, percent: float) -> None:
        """Drop ``percent`` of the packets the container sends (0 lifts it): an iptables rule in
        its network namespace, entered from this machine (a rootful engine's containers are
        this machine's processes), so the image needs no iptables and no capability."""
        container = self._get(name)
        container.reload()
        pid = int(container.attrs["State"]["Pid"])
        chance = f"{percent / 100:.4f}"
        rule = ["OUTPUT", "-m", "statistic", "--mode", "random", "--probability", chance,
                "-j", "DROP"]  # fmt: skip
        enter = ["nsenter", "-t", str(pid), "-n", "iptables"]
        subprocess.run([*enter, "-F", "OUTPUT"], capture_output=True, timeout=30, check=False)
        if percent:
            done = subprocess.run([*enter, "-A", *rule], capture_output=True, text=True, timeout=30)
            if done.returncode != 0:
                raise ContainerActionFailed(f"dropping packets in {name}: {done.stderr.strip()}")

    def state(self, name: str) -> str:
        try:
            return str(self._get(name).status)
        except ContainerActionFailed:
            return "absent"
