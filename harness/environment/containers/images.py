"""The lab's own images, built on this machine and reused: there is no registry to pull from.

* ``chaoslab-base``: a Debian root filesystem made by ``debootstrap`` from Debian's packages
  (Python 3, Java 17, iproute2 for ``tc``), imported as an image.
* ``chaoslab-deps``: ``deps.Containerfile`` on top of it - the lab's Python dependencies, pinned
  to the versions installed here and installed from wheels built here (pip's cache: no download
  the host has not made already), and the jars ``chaoslab fetch`` put in ``.chaoslab/jars``.
* ``chaoslab-lab``: ``lab.Containerfile``, the lab's sources on top of that. Every server and client
  of the containers backend runs it: a Kafka node, MongoDB (SecantusDB), the fault proxy, a
  consumer. They differ only by command, as the local backend's processes do, so one image
  keeps them at one version. Apart from ``chaoslab-deps`` because the lab changes far more
  often: its build context is the lab's sources (the requirements' is far larger:
  docs/environment.md).

Each image is tagged with a hash of everything it is made of (the package list, the
Containerfile, the pinned requirements, the jars' names and sizes, the lab's sources): an image
whose tag exists is up to date and is not built again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import docker.errors
from packaging.requirements import Requirement
from testcontainers.core.image import DockerImage

from harness.environment import jars
from harness.environment.base import BackendUnavailable
from harness.environment.containers.engine import Engine
from harness.errors import LabError
from harness.paths import project_root

Progress = Callable[[str], None]
HERE = Path(__file__).resolve().parent
DEPS_CONTAINERFILE = HERE / "deps.Containerfile"
LAB_CONTAINERFILE = HERE / "lab.Containerfile"
SUITE = "bookworm"  # the Debian release of this machine's Python (3.11) and Java (17)
PACKAGES = (
    "python3", "python3-venv", "openjdk-17-jre-headless", "iproute2", "procps", "ca-certificates",
    "postgresql",
)  # fmt: skip
# The lab's requirements an image does not need: notebooks and plots are the host's business
# (measured: the consumers, the proxy and SecantusDB import none of them). testcontainers stays:
# harness.environment imports every backend, this one too.
NOT_IN_IMAGE = frozenset({"jupyterlab", "papermill", "matplotlib"})
IMAGE_HOME = "/opt/chaoslab"  # CHAOSLAB_HOME in the image: its jars are under .chaoslab/jars
IMAGE_PYTHON = f"{IMAGE_HOME}/venv/bin/python"
BUILD_TIMEOUT_S = 1800.0
LABEL = "chaoslab.image"


class ImageBuildError(LabError):
    """An image could not be built (the message ends with the build's last lines)."""


@dataclass(frozen=True)
class ImageRef:
    name: str  # chaoslab-base, chaoslab-lab
    digest: str  # the content hash of its inputs

    @property
    def tag(self) -> str:
        return f"localhost/{self.name}:{self.digest}"


def _hash(parts: Iterable[str | bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def base_ref() -> ImageRef:
    return ImageRef("chaoslab-base", _hash([SUITE, "minbase", *PACKAGES]))


def requirements() -> list[str]:
    """The lab's runtime requirements and theirs, pinned to the versions installed here (so the
    containers run what the local backend runs), minus ``NOT_IN_IMAGE``'s trees."""
    env = {"extra": ""}
    pinned: dict[str, str] = {}
    wanted = [Requirement(r) for r in metadata.requires("chaoslab") or []]
    todo = [r for r in wanted if r.name not in NOT_IN_IMAGE]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = req.name.lower().replace("_", "-")
        if name in pinned:
            continue
        dist = metadata.distribution(req.name)
        pinned[name] = dist.version
        todo += [Requirement(r) for r in dist.requires or []]
    return sorted(f"{name}=={version}" for name, version in pinned.items())


def _sources() -> list[Path]:
    root = project_root()
    files = [root / "pyproject.toml", *sorted((root / "harness").rglob("*"))]
    return [f for f in files if f.is_file() and "__pycache__" not in f.parts]


def _jar_listing() -> list[str]:
    return [
        f"{j.parent.name}/{j.name}:{j.stat().st_size}" for s in jars.every_set() for j in s.jars()
    ]


def deps_ref() -> ImageRef:
    parts: list[str | bytes] = [base_ref().tag, DEPS_CONTAINERFILE.read_bytes(), *requirements()]
    return ImageRef("chaoslab-deps", _hash([*parts, *_jar_listing()]))


def lab_ref() -> ImageRef:
    root = project_root()
    parts: list[str | bytes] = [deps_ref().tag, LAB_CONTAINERFILE.read_bytes()]
    parts += [p for f in _sources() for p in (str(f.relative_to(root)), f.read_bytes())]
    return ImageRef("chaoslab-lab", _hash(parts))


def exists(engine: Engine, ref: ImageRef) -> bool:
    client = engine.client()
    try:
        client.images.get(ref.tag)
    except docker.errors.ImageNotFound:
        return False
    finally:
        client.close()
    return True


# -- building -----------------------------------------------------------------------------------


def build_base(engine: Engine, progress: Progress, *, force: bool = False) -> ImageRef:
    """Make the base image's root filesystem with debootstrap and import it (once; again when
    ``force``d, as ``make bench`` does to time it)."""
    ref = base_ref()
    if exists(engine, ref) and not force:
        return ref
    if shutil.which("debootstrap") is None:
        raise BackendUnavailable(
            "building the lab's base image needs debootstrap (on Debian: apt-get install "
            "debootstrap; make does it when run as root)"
        )
    progress(f"building {ref.tag}: a Debian {SUITE} root filesystem with debootstrap "
             "(once; about a minute)")  # fmt: skip
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="chaoslab-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        argv = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE,
                str(rootfs)]  # fmt: skip
        _run(argv, "debootstrap")
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        archive = Path(tmp) / "rootfs.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(rootfs, arcname=".")
        repository = ref.tag.rsplit(":", 1)[0]
        client = engine.client(timeout=600)
        try:
            answer = client.api.import_image_from_file(str(archive), repository=repository)
            # podman's Docker API tags an import "latest" whatever tag it is given: tagged here.
            image_id = json.loads(answer.strip().splitlines()[-1])["id"]
            client.images.get(image_id).tag(repository, ref.digest)
            client.images.remove(f"{repository}:latest", noprune=True)
        finally:
            client.close()
    if not exists(engine, ref):
        raise ImageBuildError(f"importing {ref.tag} reported no error, but the image is absent")
    progress(f"  {ref.tag} built in {time.monotonic() - started:.0f}s")
    return ref


def _run(argv: list[str], what: str) -> None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ImageBuildError(f"{what} took longer than {BUILD_TIMEOUT_S:.0f}s") from None
    if out.returncode != 0:
        tail = (out.stdout + out.stderr)[-3000:]
        raise ImageBuildError(f"{what} failed (exit {out.returncode}):\n{tail}")


_PIP = ("-m", "pip", "--disable-pip-version-check", "wheel", "--quiet", "--no-deps")


def _deps_context(directory: Path, base: ImageRef) -> None:
    """The requirements' build context: their wheels and the jars."""
    wheels = directory / "wheels"
    _run([sys.executable, *_PIP, "--wheel-dir", str(wheels), *requirements()],
         "building the requirements' wheels")  # fmt: skip
    (directory / "requirements.txt").write_text("\n".join(requirements()) + "\n")
    for jar_set in jars.every_set():
        jar_set.classpath()  # JarsMissing says how to fetch them
        shutil.copytree(jar_set.directory, directory / "jars" / jar_set.directory.name)
    _containerfile(directory, DEPS_CONTAINERFILE, base)


def _lab_context(directory: Path, base: ImageRef) -> None:
    """The lab's build context: its sources."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(project_root() / "harness", directory / "harness", ignore=ignore)
    _containerfile(directory, LAB_CONTAINERFILE, base)


def _containerfile(directory: Path, template: Path, base: ImageRef) -> None:
    (directory / "Containerfile").write_text(template.read_text().replace("${BASE}", base.tag))


def _build(
    engine: Engine,
    ref: ImageRef,
    base: ImageRef,
    context: Callable[[Path, ImageRef], None],
    progress: Progress,
    force: bool,
) -> ImageRef:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="chaoslab-image-") as tmp:
        context(Path(tmp), base)
        image = DockerImage(
            path=tmp,
            tag=ref.tag,
            dockerfile_path="Containerfile",
            clean_up=False,
            docker_client_kw=engine.client_kw(),
            labels={LABEL: ref.name},
            rm=True,
            no_cache=force,
        )
        try:
            image.build()
        except docker.errors.BuildError as exc:
            lines = "".join(str(chunk.get("stream", "")) for chunk in exc.build_log)
            raise ImageBuildError(f"building {ref.tag} failed: {exc}\n{lines[-3000:]}") from None
    progress(f"  {ref.tag} built in {time.monotonic() - started:.0f}s")
    return ref


def build_deps(engine: Engine, progress: Progress, *, force: bool = False) -> ImageRef:
    """The requirements' image, built if its tag is absent (after the base image); ``force``:
    built again without the engine's layer cache."""
    ref = deps_ref()
    if exists(engine, ref) and not force:
        return ref
    base = build_base(engine, progress)
    progress(f"building {ref.tag}: the lab's Python requirements and jars (once per change of "
             "them; a few minutes)")  # fmt: skip
    return _build(engine, ref, base, _deps_context, progress, force)


def build_lab(engine: Engine, progress: Progress, *, force: bool = False) -> ImageRef:
    """The lab's image, built if its tag is absent (after the requirements' image); ``force``:
    built again without the engine's layer cache."""
    ref = lab_ref()
    if exists(engine, ref) and not force:
        return ref
    deps = build_deps(engine, progress)
    progress(f"building {ref.tag}: the lab itself (once per change of the lab)")
    return _build(engine, ref, deps, _lab_context, progress, force)
