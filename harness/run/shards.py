"""The library across machines: ``chaoslab matrix --shard K/N`` runs a deterministic share of
the scenarios, and ``chaoslab report DIR...`` merges the shards' directories into one report.

Every shard computes the same split from the same scenario list and the same measured times
(``scenarios/durations.json``, written by ``chaoslab matrix --durations``): longest first, each
to the shard with the least time so far (the classic greedy for balanced makespans). A shard's
directory keeps what it ran with (``shard.json``), so a merge can refuse directories that do not
belong together: another tree of the lab, or other seeds or overrides.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self

import harness
from harness import paths
from harness.errors import BadInput

MANIFEST = "shard.json"
DURATIONS = "durations.json"  # in the scenarios' folder
# A scenario nobody timed yet (a team's own) counts as this many seconds.
UNTIMED_S = 120.0
_SHARD = re.compile(r"^(\d+)/(\d+)$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (both from 1)."""

    index: int = 1
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> Self:
        found = _SHARD.match(text.strip())
        if not found or not 1 <= int(found[1]) <= int(found[2]):
            raise BadInput(f"--shard: K/N with 1 <= K <= N (e.g. 1/2), got {text!r}")
        return cls(int(found[1]), int(found[2]))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def split(times: Mapping[str, float], count: int) -> list[list[str]]:
    """``count`` shares of the scenarios named in ``times`` (name -> seconds), balanced: the
    longest first, each to the share with the least time so far (ties: the lower share, and
    names in order - the same split on every machine)."""
    shares: list[list[str]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for name in sorted(times, key=lambda n: (-times[n], n)):
        least = min(range(count), key=lambda i: (loads[i], i))
        shares[least].append(name)
        loads[least] += times[name]
    return shares


def durations_file() -> Path:
    return paths.scenarios_dir() / DURATIONS


def load_durations(path: Path | None = None) -> dict[str, float]:
    """The measured seconds of each scenario ({} if none were written); BadInput, naming the
    file, if it is not a JSON object of names and seconds."""
    path = path or durations_file()
    refused = f"{path}: not measured times (a JSON object of scenario names and seconds)"
    again = "write it again with chaoslab matrix --durations, or remove it"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise BadInput(f"{refused} ({exc}); {again}") from exc
    seconds = (int, float)
    if not isinstance(raw, dict) or not all(
        isinstance(v, seconds) and not isinstance(v, bool) for v in raw.values()
    ):
        raise BadInput(f"{refused}; {again}")
    return {str(k): float(v) for k, v in raw.items()}


def record_durations(path: Path, measured: Mapping[str, float]) -> None:
    """Write ``measured`` (name -> seconds) into ``path``, keeping the scenarios it lacks."""
    known = load_durations(path) if path.exists() else {}
    known.update({k: round(v, 1) for k, v in measured.items() if v > 0})
    path.write_text(json.dumps(dict(sorted(known.items())), indent=2) + "\n")


def share_of(names: Sequence[str], shard: Shard, times: Mapping[str, float]) -> list[str]:
    """The scenarios (of ``names``) shard ``shard`` runs, in ``names``' order."""
    timed = {n: times.get(n, UNTIMED_S) for n in names}
    mine = set(split(timed, shard.count)[shard.index - 1])
    return [n for n in names if n in mine]


def tree_id() -> str:
    """A digest of the lab's code and its scenario library: two shards are of one tree only if
    every file of them is the same (a commit id says less of a checkout with changes)."""
    digest = hashlib.sha256()
    for root, pattern in (
        (Path(harness.__file__).parent, "*.py"),
        (paths.scenarios_dir(), "*.yaml"),
    ):
        for path in sorted(root.rglob(pattern)):
            digest.update(f"{root.name}/{path.relative_to(root).as_posix()}".encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Manifest:
    """What a matrix directory ran, and with what: the merge's check."""

    shard: str  # "K/N"
    scenarios: tuple[str, ...]  # the run folders, in order
    tree: str
    revision: str
    options: tuple[tuple[str, str], ...]  # the overrides every shard must share (seed...)
    # The scenarios the whole matrix was given, before the split: every shard of one merge
    # was split from the same list.
    split_of: tuple[str, ...] = ()

    def write(self, folder: Path) -> None:
        (folder / MANIFEST).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, folder: Path) -> Self | None:
        """The manifest in ``folder``; None if it has none; BadInput naming the file if it
        cannot be read as one."""
        path = folder / MANIFEST
        try:
            raw: dict[str, Any] = json.loads(path.read_text())
            made = cls(
                shard=str(Shard.parse(raw["shard"])),
                scenarios=tuple(map(str, raw["scenarios"])),
                tree=str(raw["tree"]),
                revision=str(raw["revision"]),
                options=tuple((str(k), str(v)) for k, v in raw["options"]),
                split_of=tuple(map(str, raw.get("split_of", ()))),
            )
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError, KeyError, TypeError, BadInput) as exc:
            raise BadInput(f"{path}: not a matrix's {MANIFEST} ({exc!r})") from None
        return made


def merge_problems(found: Iterable[tuple[Path, Manifest | None]]) -> list[str]:
    """Why these directories cannot be merged into one report ([] if they can): each must be a
    matrix directory of the same tree, with the same options, and together every shard of one
    split exactly once."""
    pairs = list(found)
    problems = [f"{d}: not a matrix directory (no {MANIFEST})" for d, m in pairs if m is None]
    known = [(d, m) for d, m in pairs if m is not None]
    if not known:
        return problems
    first_dir, first = known[0]
    for folder, manifest in known[1:]:
        if manifest.tree != first.tree:
            problems.append(
                f"{folder}: another tree of the lab ({manifest.revision}, {manifest.tree}) than "
                f"{first_dir} ({first.revision}, {first.tree})"
            )
        if manifest.options != first.options:
            problems.append(
                f"{folder}: run with {_said(manifest.options)}, {first_dir} with "
                f"{_said(first.options)}"
            )
        if manifest.split_of != first.split_of:
            problems.append(
                f"{folder}: a shard of {_listed(manifest.split_of)}, {first_dir} of "
                f"{_listed(first.split_of)}"
            )
    shards = [Shard.parse(m.shard) for _d, m in known]
    counts = {s.count for s in shards}
    if len(counts) > 1:
        problems.append(f"shards of different splits: {', '.join(map(str, shards))}")
    else:
        (count,) = counts
        indexes = [s.index for s in shards]
        if twice := sorted({i for i in indexes if indexes.count(i) > 1}):
            problems.append(f"shard {', '.join(f'{i}/{count}' for i in twice)} given twice")
        if lacking := [i for i in range(1, count + 1) if i not in indexes]:
            problems.append(
                f"shard {', '.join(f'{i}/{count}' for i in lacking)} missing: merge every "
                "shard's directory"
            )
        elif not twice and not problems:
            problems += _partition_problems([m for _d, m in known])
    return problems


def _partition_problems(manifests: Sequence[Manifest]) -> list[str]:
    """Every scenario of the split in exactly one shard: shards split by different measured
    times (one run after another on one machine, each writing the file the next splits by) ran
    some scenarios twice and others in none."""
    where: dict[str, list[str]] = {}
    for manifest in manifests:
        for name in dict.fromkeys(folder.split("/")[0] for folder in manifest.scenarios):
            where.setdefault(name, []).append(manifest.shard)
    why = f"the shards were split by different measured times (run each with the same {DURATIONS})"
    problems = [
        f"{name} ran in shards {', '.join(ran_in)}: {why}"
        for name, ran_in in where.items()
        if len(ran_in) > 1
    ]
    if missing := [n for n in manifests[0].split_of if n not in where]:
        problems.append(f"{', '.join(missing)} in no shard: {why}")
    return problems


def _listed(names: Sequence[str]) -> str:
    return f"{len(names)} scenarios ({', '.join(names)})" if names else "an unsaid list"


def _said(options: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{k} {v}" for k, v in options) or "no overrides"
