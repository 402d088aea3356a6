"""Compromised-session handoffs (seed 004): the `session-handoff` receipt kind.

- `message`: the payload, its four signed statements and the compromise notice;
- `checks`: signatures, bindings and notices -> the verdict's facts (pure);
- `verdict`: the decision boundary -> CLEAN / SCOPED / DOUBLE_COMPROMISE_CAUTION / PROHIBITED.

Specified in docs/compromise-handoff.md. Not yet registered in
`busguard.policies.KINDS`: the stream wiring waits for the policy seam.
"""
