"""The state contract (keys, snapshot, writes, store) and its backends.

One file per role: `keys` (what a batch reads), `snapshot` (what it found),
`writes` (what it persists), `store` (the protocol a backend implements),
`codecs` (encodings the backends share); backends `memory`, `sqlite` (with
`sqlitedb`, the SQLite plumbing) and `postgres` (with `pgsql`, the
PostgreSQL plumbing), chosen by name in `backends`; the reconciler's store,
a second and smaller contract, in `reconcile` (on PostgreSQL:
`pgreconcile`).
See docs/design.md, "State" and "Adding a state backend".
"""
