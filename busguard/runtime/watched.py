"""A file the running processes follow: the key registry (guard) and the
operators file (reconciler), so a revocation, a rotation or an enrolment
takes effect without a restart.

The file is stat'ed before every batch (microseconds); only when its identity
(inode, size, modification time) changes is it read and parsed again. A file
that does not load leaves the previous contents in force: a half-written edit
must neither open the gate nor lock everybody out. That is reported once per
change (an error log line naming the file, field and value, and
`busguard_config_reloads_total{result="error"}`), and the next change is
tried again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

import structlog

from busguard.errors import ConfigError

log = structlog.get_logger(__name__)

T = TypeVar("T")
_Stamp = tuple[int, int, int] | None


def _stamp(path: Path) -> _Stamp:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class WatchedFile(Generic[T]):
    """Loads at construction (a bad file is a start-up ConfigError); afterwards
    `current()` never raises. `on_reload`, if set, hears each change's result
    ("reloaded" or "error"), e.g. to count it."""

    def __init__(self, path: Path, load: Callable[[Path], T], *, what: str, watch: bool = True) -> None:
        self.path = path
        self.what = what
        self.watch = watch
        self.on_reload: Callable[[str], None] | None = None
        self._load = load
        self._seen = _stamp(path)  # taken before reading: a write after it shows up as a change
        self.value = load(path)

    def current(self) -> T:
        """The contents to judge the next batch with."""
        if not self.watch:
            return self.value
        stamp = _stamp(self.path)
        if stamp == self._seen:
            return self.value
        self._seen = stamp
        try:
            self.value = self._load(self.path)
        except ConfigError as exc:
            log.error(f"{self.what} not reloaded; the previous one stays in force", path=str(self.path), error=str(exc))
            result = "error"
        else:
            log.info(f"{self.what} reloaded", path=str(self.path))
            result = "reloaded"
        if self.on_reload is not None:
            self.on_reload(result)
        return self.value
