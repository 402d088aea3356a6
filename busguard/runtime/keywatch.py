"""The key registry as the guard sees it: re-read when its file changes, so a
revocation, a rotation or an enrolment takes effect without a restart.

The file is stat'ed before every batch (microseconds); only when its identity
(inode, size, modification time) changes is it read and parsed again. A file
that does not load leaves the previous registry in force: a half-written edit
must neither open the gate nor lock every sender out. That is reported once
per change (an error log line naming the file, field and value, and
`busguard_key_registry_reloads_total{result="error"}`), and the next change
is tried again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import structlog

from busguard.errors import ConfigError
from busguard.protocol.keys import KeyRegistry

log = structlog.get_logger(__name__)

_Stamp = tuple[int, int, int] | None


def _stamp(path: Path) -> _Stamp:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class RegistryFile:
    """Loads at construction (a bad file is a start-up ConfigError, as before);
    afterwards `current()` never raises. `on_reload`, if set, hears each
    change's result ("reloaded" or "error"), e.g. to count it."""

    def __init__(self, path: Path, *, watch: bool = True) -> None:
        self.path = path
        self.watch = watch
        self.on_reload: Callable[[str], None] | None = None
        self._seen = _stamp(path)  # taken before reading: a write after it shows up as a change
        self.registry = KeyRegistry.load(path)

    def current(self) -> KeyRegistry:
        """The registry to judge the next batch with."""
        if not self.watch:
            return self.registry
        stamp = _stamp(self.path)
        if stamp == self._seen:
            return self.registry
        self._seen = stamp
        try:
            self.registry = KeyRegistry.load(self.path)
        except ConfigError as exc:
            log.error("key registry not reloaded; the previous one stays in force", path=str(self.path), error=str(exc))
            result = "error"
        else:
            log.info("key registry reloaded", path=str(self.path), agents=len(self.registry.principals))
            result = "reloaded"
        if self.on_reload is not None:
            self.on_reload(result)
        return self.registry
