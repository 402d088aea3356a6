"""The memory backend: `backend` (its BACKEND and options) and `store`
(MemoryStore, also the reference model the other backends' property tests
compare with). Nothing survives the process."""
