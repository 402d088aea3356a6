"""The auditor: rebuild every task's lineage from the audit log alone and prove
(or refute) exactly-once admission. `lineage` is the pure core, `reader` the
Kafka shell, `report` the rendering, `commands` the CLI and `run_audit`."""
