"""`busguard demo`: the whole system on one machine, in one command.

Starts the embedded broker, writes a throwaway deployment (config, key
registry, keys) into a work directory, runs the guard and the reconciler
in-process, drives a scripted scenario through them with the sender SDK,
then prints where every record went and why, and ends with the auditor's
verdict. Exit code 0 only if every record landed where it should and the
audit proves exactly-once admission per task.

The scenario, one record per step (the labels are what the summary prints):

     clean handoff                 -> downstream      admitted
     the same record again         -> dead-letter     exact_duplicate
     its nonce under another task  -> dead-letter     nonce_replay
     executor acks (legacy)        -> downstream      admitted
     crash, ack re-sent, new nonce -> reconciliation  ambiguous_retransmission (seed 000),
                                      resolved by policy, first ack re-sent on replies
     executor acks (session)       -> downstream      admitted
     crash, restart, re-sent       -> dead-letter     retransmission (supersedes link, no 2nd ack)
     forged signature              -> dead-letter     bad_signature
     issued 10 minutes ago         -> dead-letter     timestamp_expired
     not a receipt                 -> dead-letter     not_json
     same task, other payload      -> reconciliation  task_conflict, held, resolved by an operator
"""

from __future__ import annotations

from busguard.demo.run import run_demo

__all__ = ["run_demo"]
