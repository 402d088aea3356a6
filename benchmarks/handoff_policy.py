"""Cost of seed 004's policy per session handoff, through admit_batch on a MemoryStore.

Two runs of N records each: signed `session-handoff` records (declared,
scoped, successor receipt, interaction rule: four inner signatures; one
forged component stripped, so a replacement is built) and the same values as
plain `handoff` records (no policy). The difference per record is what the
policy costs on top of admission. Single thread, no Kafka.

    .venv/bin/python benchmarks/handoff_policy.py [N]
"""

from __future__ import annotations

import sys
import time

from busguard.admission.batch import Input, admit_batch
from busguard.admission.types import AdmissionPolicy
from busguard.demo.handoff import FORGED, MEMORY, PLAN, SESSION, SUCCESSOR, Party, Scenario
from busguard.policies.compromise.message import IntegrityStatus, InteractionRule
from busguard.policies.compromise.policy import CompromiseSettings
from busguard.protocol.identity import canonical_principal
from busguard.protocol.keyfile import new_identity
from busguard.protocol.records import Coordinates
from busguard.protocol.registry import KeyRegistry, KeyWindow
from busguard.state.memory.store import MemoryStore


def main(n: int) -> None:
    parties = {name: Party(name, new_identity()) for name in (SESSION, SUCCESSOR, "operator")}
    registry = KeyRegistry(
        {canonical_principal(p.name): (KeyWindow(key_id="k1", public_key=p.identity.public_key),) for p in parties.values()}
    )
    sc = Scenario(parties)
    policy = AdmissionPolicy(policy_settings={"compromise": CompromiseSettings()})
    handoffs = [
        sc.handoff(
            f"h-{i}",
            [PLAN, FORGED],
            declared=True,
            scope=[PLAN, MEMORY],
            successor=IntegrityStatus.VERIFIED_CLEAN,
            rule=InteractionRule.PARTIAL_TRANSFER,
        )
        for i in range(n)
    ]
    plain = [
        parties[SESSION].sender.sign(kind="handoff", task_id=f"p-{i}", receiver=SUCCESSOR, payload=r.value, issued_at_ms=sc.now)
        for i, r in enumerate(handoffs)
    ]
    results = {}
    for name, records in (("session-handoff", handoffs), ("handoff (no policy)", plain)):
        store = MemoryStore(created_at=sc.now - 3_600_000)
        inputs = [Input(Coordinates(topic="in", partition=0, offset=i), r.value, r.headers) for i, r in enumerate(records)]
        t0 = time.perf_counter()
        for start in range(0, n, 500):
            decisions = admit_batch(inputs[start : start + 500], store=store, registry=registry, now_ms=sc.now, policy=policy)
            assert all(d.outcome == "forward" for d in decisions), {d.reason for d in decisions}
        results[name] = (time.perf_counter() - t0) / n * 1e6
        print(f"{name:<22} {results[name]:8.1f} µs/record  ({n} records, batches of 500)")
    print(f"policy cost            {results['session-handoff'] - results['handoff (no policy)']:8.1f} µs/handoff")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
