"""Whose directory `state.path` is, decided before RocksDB touches it.

RocksDB opens any database it is pointed at, another application's as
readily as busguard's, and creates its files (`LOCK`, `LOG`, `OPTIONS-*`,
`IDENTITY`, ...) in any directory; `rocksdict` adds its
`rocksdict-config.json`, even to a directory it then fails to open. A file
name such as `CURRENT` proves nothing (issue 35). So busguard marks the
directories it creates with a file of its own, `busguard-store.json`, whose
content names busguard, the store and the backend, written atomically (a
temporary file, fsync, rename, fsync of the directory) before RocksDB
creates anything there. Every open checks it first:

* the marker, with busguard's content: ours, opened;
* no directory, or an empty one: new; created, marked, then opened;
* otherwise refused (`StoreDirectoryRefused`, naming the path, what is
  there and what is allowed), with nothing written, except
* a store an earlier busguard made (before the marker existed): a
  RocksDB database (`CURRENT` naming a `MANIFEST-*` that exists) that
  holds every one of busguard's own META keys (layout.META_NAMES). It is
  read through a scratch directory of symbolic links to its files,
  read-only, so neither RocksDB nor rocksdict writes a byte in it; once
  recognised, the marker is written (`claim`) or not (`check`, for
  `busguard state show`, which writes nothing) and it opens as before.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Final, Literal

import msgspec
import rocksdict
import structlog

from busguard.errors import ConfigError
from busguard.state.rocksdb.layout import META, META_NAMES

log = structlog.get_logger(__name__)

MARKER: Final = "busguard-store.json"
_PENDING: Final = MARKER + ".tmp"
#: A marker is a few dozen bytes; a larger file of that name is not busguard's, and is not read whole.
MAX_MARKER_BYTES: Final = 4096
_MANIFEST: Final = re.compile(rb"(MANIFEST-[0-9]{1,20})\n")
#: Never linked into the probe's scratch directory: what RocksDB and rocksdict would write to.
_NOT_LINKED: Final = {"LOCK", "rocksdict-config.json", MARKER, _PENDING}


class Marker(msgspec.Struct, frozen=True, kw_only=True):
    """`busguard-store.json`. `v` is this file's format, not the store's schema (`M schema`)."""

    application: Literal["busguard"] = "busguard"
    store: Literal["state"] = "state"
    backend: Literal["rocksdb"] = "rocksdb"
    v: Literal[1] = 1


_marker_decoder: Final = msgspec.json.Decoder(Marker)
_ALLOWED: Final = (
    "a directory that does not exist yet or is empty (busguard creates its store there, marked with "
    f"{MARKER}), or a store busguard created; give the state store a directory of its own"
)


class StoreDirectoryRefused(ConfigError):
    """`state.path` names a directory busguard did not create. A config
    error (one line, exit 2): the path is wrong, nothing is unreachable.
    The state layer knows the directory, not the config file: the line
    names the directory and the setting."""

    def __init__(self, path: Path, found: str) -> None:
        self.path = path
        self.found = found
        super().__init__(str(path), "", None, f"not a directory busguard created (state.path): it holds {found}; allowed: {_ALLOWED}")


def claim(path: Path) -> None:
    """Make sure `path` is a directory busguard may open its store in,
    creating and marking it when it is new or an earlier busguard's."""
    if _check(path) != "ours":
        if not path.is_dir():
            path.mkdir(parents=True)
            _fsync_dir(path.parent)
        _write_marker(path)


def check(path: Path) -> None:
    """`claim` for a reader: refuses the same directories, writes nothing."""
    _check(path)


def _check(path: Path) -> Literal["ours", "new", "earlier"]:
    if not path.is_dir():
        return "new"
    names = sorted(e.name for e in path.iterdir() if e.name != _PENDING)  # a marker write cut short: not a file of anyone else's
    if MARKER in names:
        problem = _not_a_marker(path / MARKER)
        if problem is not None:
            raise StoreDirectoryRefused(path, f"a {MARKER} that is not busguard's marker ({problem})")
        return "ours"
    if not names:
        return "new"
    shown = ", ".join(names[:6]) + (", …" if len(names) > 6 else "")
    listing = f"{len(names)} entr{'y' if len(names) == 1 else 'ies'} ({shown}) and no {MARKER}"
    if _manifest(path) is None:
        raise StoreDirectoryRefused(path, listing)
    problem = _earlier_busguard_store(path)
    if problem is not None:
        raise StoreDirectoryRefused(path, f"{listing}: a RocksDB database that {problem}")
    log.info("state store made by an earlier busguard, recognised by its own keys; marking it", path=str(path), marker=MARKER)
    return "earlier"


def _not_a_marker(file: Path) -> str | None:
    try:
        with file.open("rb") as f:
            raw = f.read(MAX_MARKER_BYTES + 1)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    if len(raw) > MAX_MARKER_BYTES:
        return f"more than {MAX_MARKER_BYTES} bytes"
    try:
        _marker_decoder.decode(raw)
    except msgspec.MsgspecError as exc:
        return str(exc)
    return None


def _manifest(path: Path) -> str | None:
    """The manifest `CURRENT` names, when it is a RocksDB `CURRENT` whose manifest is there."""
    current = path / "CURRENT"
    try:
        if not current.is_file() or current.stat().st_size > 64:
            return None
        m = _MANIFEST.fullmatch(current.read_bytes())
    except OSError:
        return None
    if m is None or not (path / m.group(1).decode()).is_file():
        return None
    return m.group(1).decode()


def _earlier_busguard_store(path: Path) -> str | None:
    """None when the database holds busguard's META keys, else what it is.
    Read-only through symbolic links in a scratch directory: RocksDB and
    rocksdict write what they write (rocksdict's config file) there."""
    scratch = Path(tempfile.mkdtemp(prefix="busguard-rocksdb-probe-"))
    try:
        for entry in path.iterdir():
            if entry.is_file() and entry.name not in _NOT_LINKED and not entry.name.startswith("LOG"):
                (scratch / entry.name).symlink_to(entry.resolve())
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(False)
        try:
            db = rocksdict.Rdict(str(scratch), options, column_families={"default": options}, access_type=rocksdict.AccessType.read_only())
        except Exception as exc:  # rocksdict raises Exception for every RocksDB error
            return f"cannot be read ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        try:
            missing = [name.decode() for name in META_NAMES if db.get(META + name) is None]
        finally:
            db.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if missing:
        return f"lacks busguard's own keys ({', '.join(missing)}): another application's"
    return None


def _write_marker(path: Path) -> None:
    pending = path / _PENDING
    with pending.open("wb") as f:
        f.write(msgspec.json.encode(Marker()) + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(pending, path / MARKER)
    _fsync_dir(path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
