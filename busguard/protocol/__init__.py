"""Wire-protocol primitives: agent identity, timestamps and Ed25519 signing."""
