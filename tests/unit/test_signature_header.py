"""The signature header's decoder is tuned for speed (translate, then strict
base64); prove it accepts exactly the spelling docs/protocol.md allows,
86 characters of unpadded base64url whose last one has zero low bits, and
decodes it to the same 64 bytes a plain decoder would."""

from __future__ import annotations

import base64
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.protocol.envelope import HEADER_SIGNATURE, open_envelope
from busguard.protocol.reasons import Reason
from busguard.protocol.receipt import ReceiptError
from tests.unit.harness import sender

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
RECORD = sender("alice").sign(kind="handoff", task_id="t-1", receiver="bob", payload=b"{}")


def _reference(header: bytes) -> bytes | None:
    """The rule as written: regex, last-character bits, then a plain decode."""
    if re.fullmatch(rb"[A-Za-z0-9_-]{86}", header) is None or ALPHABET.index(chr(header[85])) & 0xF:
        return None
    return base64.urlsafe_b64decode(header + b"==")


well_formed = st.binary(min_size=64, max_size=64).map(lambda b: base64.urlsafe_b64encode(b).rstrip(b"="))


@st.composite
def one_byte_off(draw: st.DrawFn) -> bytes:
    """A well-formed header with one byte replaced, inserted or deleted."""
    header = bytearray(draw(well_formed))
    i = draw(st.integers(0, 85))
    byte = draw(st.sampled_from(b"+/=\n .\x00\xff" + ALPHABET.encode()))
    edit = draw(st.sampled_from(["replace", "insert", "delete"]))
    if edit == "replace":
        header[i] = byte
    elif edit == "insert":
        header.insert(i, byte)
    else:
        del header[i]
    return bytes(header)


near_signatures = st.one_of(well_formed, one_byte_off(), st.binary(min_size=84, max_size=88))


@settings(max_examples=3000, deadline=None)
@given(near_signatures)
def test_signature_header_matches_the_written_rule(header: bytes) -> None:
    headers = [(k, header if k == HEADER_SIGNATURE else v) for k, v in RECORD.headers]
    try:
        decoded: bytes | None = open_envelope(RECORD.value, headers).signature
    except ReceiptError as exc:
        assert exc.reason is Reason.BAD_BASE64
        decoded = None
    assert decoded == _reference(header), header
