"""The sender's side of seed 004's statements: sign them, and build the
components and scope entries a handoff carries (the session, its successor,
an operator; busguard's own checks are in checks.py)."""

from __future__ import annotations

from busguard.policies.compromise.message import (
    CONTEXTS,
    NOTICE_CONTEXT,
    Component,
    CompromiseNotice,
    ScopeEntry,
    SignedStatement,
    Statement,
    component_sha256,
    encode,
)
from busguard.protocol.envelope import b64url_encode
from busguard.protocol.signing import Signer


def sign_statement(signer: Signer, statement: Statement) -> SignedStatement:
    """Encode `statement` once and sign those bytes under its domain."""
    raw = encode(statement)
    signature = signer.sign(CONTEXTS[type(statement)] + raw)
    return SignedStatement(statement=b64url_encode(raw), signature=b64url_encode(signature))


def sign_notice(signer: Signer, notice: CompromiseNotice) -> tuple[bytes, bytes]:
    """A notice as it travels on its own: (statement bytes, 64-byte signature)."""
    raw = encode(notice)
    return raw, signer.sign(NOTICE_CONTEXT + raw)


def inline_component(name: str, content: bytes, *, operational: bool, encoding: str = "application/octet-stream") -> Component:
    return Component(name=name, operational=operational, encoding=encoding, content=b64url_encode(content))


def scope_entry(component: Component) -> ScopeEntry:
    """The scope entry that vouches for exactly this component."""
    return ScopeEntry(
        name=component.name, sha256=component_sha256(component), operational=component.operational, encoding=component.encoding
    )
