"""Reconciliation: resolving escalations, exactly once, in view of the auditor."""
