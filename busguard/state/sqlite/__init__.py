"""The SQLite backend: `backend` (its BACKEND and options), `store` (the
guard's SqliteStore), `db` (connections, transactions, the checkpoint
thread), `buckets` (time-bucketed nonce and task tables), `reconcile` (the
reconciler's store)."""
