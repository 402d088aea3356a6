"""Admission checks applied to each record before it is forwarded."""
