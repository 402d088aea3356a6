"""Example canonicalizer plugin for busguard: ``nfc-text-sha256``.

A task whose output is prose (a summary, a translation) has no JSON form to
canonicalize, yet the same text can arrive as different bytes: "é" as one code
point or as "e" plus a combining accent, lines ending in CRLF or LF. This
canonicalizer fixes one spelling (Unicode NFC, LF line endings) and hashes it,
so an awarder that installs it can recompute such a bidder's root.

Input format: UTF-8 text (no byte order mark). Canonical form: CRLF and lone
CR become LF, then the whole text is normalized to NFC. Root: lowercase hex
SHA-256 of the canonical form's UTF-8 bytes. Anything that is not UTF-8 is
refused with MalformedOutput, never decoded with replacement characters.
"""

from __future__ import annotations

import hashlib
import unicodedata

from busguard.policies.award.canonicalizers import MalformedOutput

__all__ = ["NfcTextSha256"]


class NfcTextSha256:
    id = "nfc-text-sha256"
    input_format = (
        "UTF-8 text without a byte order mark; canonical form: CRLF and CR become LF, then Unicode NFC; "
        "root = lowercase hex SHA-256 of the canonical form's UTF-8 bytes"
    )

    def root(self, output: bytes) -> str:
        try:
            text = bytes(output).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedOutput(self.id, "invalid-utf8", f"byte {exc.start}", f"not UTF-8: {exc.reason}") from None
        if text.startswith("\ufeff"):
            raise MalformedOutput(self.id, "byte-order-mark", "byte 0", "the text must not start with a byte order mark")
        canonical = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
