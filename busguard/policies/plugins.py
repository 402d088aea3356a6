"""Kinds from other packages: the `busguard.kinds` entry point group.

A distribution adds a kind with one line of its pyproject.toml:

    [project.entry-points."busguard.kinds"]
    quota = "busguard_quota.kind:SPEC"

where the object named is a `KindSpec` (or a callable returning one) whose
`kind` is the entry point's name. busguard loads the group once, when the
kind registry is first imported, so every process that reads the registry
(the guard, the reconciler, `busguard audit`, the CLI) knows the same kinds.

Refused, with the entry point and its distribution named: a name that is a
built-in kind (a built-in's meaning is fixed by docs/protocol.md and cannot
be swapped by installing a package) or another plugin's, anything that does
not load into a `KindSpec`, and a spec whose `kind` is not the name. A
refused plugin is left out of the registry and reported by `load_errors`;
`busguard` refuses to run any command while there is one (cli.main), so a
guard never starts without a kind its operator installed.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from busguard.policies import KindSpec

ENTRY_POINT_GROUP: Final = "busguard.kinds"


def _where(ep: importlib.metadata.EntryPoint) -> str:
    dist = ep.dist
    owner = f"distribution {dist.name!r} {dist.version}" if dist is not None else "an unknown distribution"
    return f"kind plugin {ep.name!r} = {ep.value!r} ({owner})"


def discover(
    builtin: Collection[str], spec_type: type[KindSpec], entry_points: Iterable[importlib.metadata.EntryPoint] | None = None
) -> tuple[list[KindSpec], list[str]]:
    """The installed plugins' specs, and one message per plugin refused."""
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if entry_points is None else entry_points
    specs: dict[str, KindSpec] = {}
    errors: list[str] = []
    for ep in sorted(found, key=lambda e: (e.name, e.value)):
        where = _where(ep)
        if ep.name in builtin:
            errors.append(f"{where}: {ep.name!r} is a built-in kind, which a plugin cannot replace; choose another kind name")
            continue
        if ep.name in specs:
            errors.append(f"{where}: another plugin already registers kind {ep.name!r}")
            continue
        try:
            obj: object = ep.load()
            if callable(obj) and not isinstance(obj, spec_type):
                factory: Callable[[], object] = obj
                obj = factory()
        except Exception as exc:  # third-party import-time code: reported with its origin, never a crash of busguard
            errors.append(f"{where}: failed to load: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(obj, spec_type):
            errors.append(f"{where}: loads a {type(obj).__name__}, not a busguard.policies.KindSpec")
        elif obj.kind != ep.name:
            errors.append(f"{where}: its KindSpec is for kind {obj.kind!r}; the entry point's name must be the kind")
        else:
            specs[ep.name] = obj
    return list(specs.values()), errors
