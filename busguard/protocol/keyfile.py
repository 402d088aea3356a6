"""Private key files, as written by `busguard keygen` and read by senders and the guard.

JSON, mode 0600: {"v": 1, "agent_id": "tulpa:z6Mk…", "seed": "<32 bytes, unpadded base64url>"}.
The agent id is derived from the key and stored only so a human can see
whose key it is; it is checked on load so a mixed-up file is caught early.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from busguard.errors import ConfigError
from busguard.protocol.envelope import b64url_decode_strict, b64url_encode
from busguard.protocol.identity import agent_id_for_key
from busguard.protocol.signing import generate_keypair, public_key_from_seed


class KeyFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    v: int = 1
    agent_id: str
    seed: str


class Identity(msgspec.Struct, frozen=True, kw_only=True):
    seed: bytes
    public_key: bytes
    agent_id: str


def new_identity() -> Identity:
    seed, pk = generate_keypair()
    return Identity(seed=seed, public_key=pk, agent_id=agent_id_for_key(pk))


def write_key(path: str | Path, ident: Identity, *, overwrite: bool = False) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(msgspec.json.encode(KeyFile(agent_id=ident.agent_id, seed=b64url_encode(ident.seed))) + b"\n")
        f.flush()
        os.fsync(f.fileno())


def read_key(path: str | Path) -> Identity:
    path = Path(path)
    try:
        data = msgspec.json.decode(path.read_bytes(), type=KeyFile)
    except FileNotFoundError:
        raise ConfigError(str(path), "", None, "the key file does not exist (create one with `busguard keygen`)") from None
    except msgspec.ValidationError as exc:
        raise ConfigError.from_validation(str(path), exc) from None
    except msgspec.DecodeError as exc:
        raise ConfigError(str(path), "", None, f"not a busguard key file (JSON): {exc}") from None
    try:
        seed = b64url_decode_strict(data.seed, 32)
    except ValueError as exc:
        raise ConfigError(str(path), "seed", "<redacted>", f"32 bytes of unpadded base64url ({exc})") from None
    pk = public_key_from_seed(seed)
    if agent_id_for_key(pk) != data.agent_id:
        raise ConfigError(str(path), "agent_id", data.agent_id, f"the id of the key in this file, {agent_id_for_key(pk)}")
    return Identity(seed=seed, public_key=pk, agent_id=data.agent_id)


def load_or_create(path: str | Path, create: bool) -> Identity:
    if create and not Path(path).exists():
        ident = new_identity()
        try:
            write_key(path, ident)
        except FileExistsError:  # another process won the race
            return read_key(path)
        return ident
    return read_key(path)
