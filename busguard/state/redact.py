"""Connection strings in logs and errors: never with their password.

Neutral (no driver is imported until `scrub` needs libpq's parser): the
commands, the config checks and the membership claim name a backend's
target through it without importing a backend module.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit, urlunsplit

_KV_PASSWORD: Final = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_URI_QUERY_PASSWORD: Final = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def redact(dsn: str) -> str:
    """`dsn` with any password replaced by `***` (URI and key=value forms)."""
    if "://" in dsn:
        try:
            parts = urlsplit(dsn)
        except ValueError:
            return "<unparseable DSN>"
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hostport = netloc.rpartition("@")
            if ":" in userinfo:
                userinfo = userinfo.split(":", 1)[0] + ":***"
            netloc = f"{userinfo}@{hostport}"
        text = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
        return _URI_QUERY_PASSWORD.sub(r"\1***", text)
    return _KV_PASSWORD.sub(r"\1***", dsn)


def _password(dsn: str) -> str | None:
    from psycopg.conninfo import conninfo_to_dict

    try:
        value = conninfo_to_dict(dsn).get("password")
    except Exception:
        return None
    return None if value is None else str(value)


_URI_USERINFO = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def scrub(text: str, dsn: str) -> str:
    """`text` (a driver message) with the DSN's password removed wherever it
    appears: the literal secret, and anything shaped like one."""
    secret = _password(dsn)
    if secret:
        text = text.replace(secret, "***")
    text = _URI_USERINFO.sub(r"\1***@", text)
    return _URI_QUERY_PASSWORD.sub(r"\1***", _KV_PASSWORD.sub(r"\1***", text))
