"""Compromised-session handoffs (seed 004): the `session-handoff` receipt kind.

- `message`: the payload, its four signed statements and the compromise notice;
- `checks`: signatures, bindings and notices -> the verdict's facts (pure);
- `verdict`: the decision boundary -> CLEAN / SCOPED / DOUBLE_COMPROMISE_CAUTION / PROHIBITED;
- `policy`: the two registered kinds' policies (`session-handoff`,
  `compromise-notice`) on the seam: notice state, routing, annotations;
- `lifecycle`: when a notice counts (expiry, clearance) and its row;
- `clearance`: the `compromise-clearance` kind: an issuer lifts its notice.

Specified in docs/compromise-handoff.md (payload, tables, digest) and
docs/protocol.md section 14 (on the bus).
"""
