"""The state contract (keys, snapshot, writes, store) and its backends.

One file per role: `keys` (what a batch reads), `snapshot` (what it found),
`writes` (what it persists), `store` (the protocol a backend implements,
and `StateUnavailable`), `codecs` and `sealrows` (encodings the backends
share), `redact` (connection strings fit for logs), `reconcile` (the
reconciler's smaller contract). Each backend is a package with the same
file names, `memory/`, `sqlite/`, `postgres/` (`backend.py`, `store.py`,
and its own helpers), chosen by name in `backends`, the only module
outside a backend's package that names one.
See docs/design.md, "State" and "Adding a state backend".
"""
