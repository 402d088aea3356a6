"""Crash-proof session/sequence allocation for senders (seed 000's corrective pattern).

The failure seed 000 describes is a sender whose counter is flushed lazily:
after a crash it hands out a number it already used. Here a sequence number
is only ever handed out after a block containing it has been durably
reserved on disk (write to a temp file, fsync, rename, fsync the directory).
On restart the allocator jumps past the whole reserved block, so a number
can be skipped but never reused. The session id stays the same across
restarts, which is what lets the receiver recognise a retransmission.

File format (JSON): {"v": 1, "session_id": "...", "reserved_through": N}
"""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path

import msgspec


class _SessionFile(msgspec.Struct, forbid_unknown_fields=True):
    v: int
    session_id: str
    reserved_through: int


class SessionAllocator:
    def __init__(self, path: str | Path, block: int = 64) -> None:
        if block < 1:
            raise ValueError("block must be at least 1")
        self.path = Path(path)
        self.block = block
        self._lock = threading.Lock()
        if self.path.exists():
            state = msgspec.json.decode(self.path.read_bytes(), type=_SessionFile)
            self.session_id = state.session_id
            self._next = state.reserved_through + 1
        else:
            self.session_id = secrets.token_urlsafe(16)
            self._next = 0
        self._reserved_through = self._next - 1
        self._reserve()

    def _reserve(self) -> None:
        self._reserved_through = self._next + self.block - 1
        body = msgspec.json.encode(_SessionFile(1, self.session_id, self._reserved_through))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def next(self) -> int:
        """A sequence number never handed out before, even across crashes."""
        with self._lock:
            if self._next > self._reserved_through:
                self._reserve()
            seq = self._next
            self._next += 1
            return seq
