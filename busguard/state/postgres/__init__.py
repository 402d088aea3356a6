"""The PostgreSQL backend: `backend` (its BACKEND and options), `store` (the
guard's PostgresStore), `db` (the session, retries, the schema and its
statements), `locks` (advisory locks on policy rows), `reconcile` (the
reconciler's store)."""
