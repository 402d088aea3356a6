"""A file the running processes follow: the key registry (guard) and the
operators file (reconciler), so a revocation, a rotation or an enrolment
takes effect without a restart.

The file is stat'ed before every batch (microseconds); only when its identity
(inode, size, modification and status-change times) changes is it read and
parsed again. A file that does not load, for whatever reason (unreadable,
not a regular file, not UTF-8, not TOML, a bad field, or any other error of
the loader), leaves the previous contents in force: a half-written edit
must neither open the gate nor lock everybody out, and it must never stop
the process that follows it. Each distinct failure is reported once (an
error log line naming the file and the error, and
`busguard_config_reloads_total{result="error"}`). A failure to read (an
OSError: permissions, a vanished file) is retried before every batch,
since it can clear without the file changing; a file whose contents do not
load is tried again when it next changes.
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

import structlog

from busguard.errors import ConfigError

log = structlog.get_logger(__name__)

T = TypeVar("T")
_Stamp = tuple[int, int, int, int, bool] | None


def _stamp(path: Path) -> _Stamp:
    """The file's identity; ctime is in it so a chmod that makes an
    unreadable file readable again counts as a change."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, stat.S_ISREG(st.st_mode))


def _why(exc: BaseException) -> str:
    if isinstance(exc, ConfigError):
        return str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {exc.start} ({exc.reason})"
    return f"{type(exc).__name__}: {exc}"


class WatchedFile(Generic[T]):
    """Loads at construction (a bad file is a start-up ConfigError); afterwards
    `current()` never raises. `on_reload`, if set, hears each change's result
    ("reloaded", or "error" once per distinct failure), e.g. to count it."""

    def __init__(self, path: Path, load: Callable[[Path], T], *, what: str, watch: bool = True) -> None:
        self.path = path
        self.what = what
        self.watch = watch
        self.on_reload: Callable[[str], None] | None = None
        self._load = load
        self._seen = _stamp(path)  # taken before reading: a write after it shows up as a change
        self._failed: tuple[_Stamp, str] | None = None  # the failure last reported
        self._retry = False  # the last attempt could not read the file: try again
        if self._seen is not None and not self._seen[4]:
            raise ConfigError(str(path), "", None, f"the {what} must be a regular file (this is a directory, a FIFO or a device)")
        self.value = load(path)

    def current(self) -> T:
        """The contents to judge the next batch with."""
        if not self.watch:
            return self.value
        stamp = _stamp(self.path)
        if stamp == self._seen and not self._retry:
            return self.value
        self._seen = stamp
        try:
            if stamp is not None and not stamp[4]:
                raise ConfigError(str(self.path), "", None, "a regular file (this is a directory, a FIFO or a device; it is not read)")
            value = self._load(self.path)
        except Exception as exc:  # noqa: BLE001 -- documented never to raise: any failure keeps the previous contents
            self._retry = stamp is None or isinstance(exc, OSError) or isinstance(exc.__cause__, OSError)
            failure = (stamp, _why(exc))
            if failure == self._failed:
                return self.value
            self._failed = failure
            log.error(
                f"{self.what} not reloaded; the previous one stays in force",
                path=str(self.path),
                error=failure[1],
                error_type=type(exc).__name__,
            )
            result = "error"
        else:
            self.value, self._failed, self._retry = value, None, False
            log.info(f"{self.what} reloaded", path=str(self.path))
            result = "reloaded"
        if self.on_reload is not None:
            try:
                self.on_reload(result)
            except Exception:  # noqa: BLE001 -- a broken counter must not stop the batch either
                log.exception(f"{self.what}: reload hook failed", path=str(self.path))
        return self.value
