"""The quota kind through busguard's real admission path (busguard.testing).

Run from this directory with busguard installed: `python -m pytest tests`.
With the package installed, its entry point registers the kind in every
busguard process; these tests also work uninstalled, registering the spec
themselves the way the entry point would.
"""

from __future__ import annotations

import msgspec
import pytest
from busguard_quota.kind import QUOTA_EXCEEDED, SPEC, QuotaSettings

from busguard.admission.types import AdmissionPolicy
from busguard.policies import KINDS
from busguard.testing import Harness, agent, sender

TO = agent("executor")


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, SPEC.kind, SPEC)  # type: ignore[index]  # what the busguard.kinds entry point does


def part(i: int, task: str = "stream-1", who: str = "planner"):  # type: ignore[no-untyped-def]
    return sender(who).sign(kind="quota", task_id=task, receiver=TO, payload=msgspec.json.encode({"part": i}))


def test_the_first_three_parts_of_a_task_are_admitted_and_the_fourth_is_quota_exceeded() -> None:
    decisions = Harness().feed(*(part(i) for i in range(4)))
    assert [(d.outcome, d.reason) for d in decisions] == [("forward", "admitted")] * 3 + [("reject", QUOTA_EXCEEDED)]
    assert [d.annotations for d in decisions[:3]] == [{"quota.used": "1"}, {"quota.used": "2"}, {"quota.used": "3"}]


def test_the_limit_comes_from_the_config_section() -> None:
    h = Harness(policy=AdmissionPolicy(policy_settings={"quota": QuotaSettings(max_per_task=1)}))
    assert [d.reason for d in h.feed(part(0), part(1))] == ["admitted", QUOTA_EXCEEDED]


def test_each_sender_and_task_has_its_own_count_and_a_copy_is_a_replay() -> None:
    h = Harness()
    first = part(0)
    assert [d.reason for d in h.feed(first, part(0, task="stream-2"), part(0, who="executor"))] == ["admitted"] * 3
    assert h.one(first).reason == "nonce_replay"  # busguard's own check still holds for the kind


def test_a_forged_part_costs_no_quota() -> None:
    h = Harness(policy=AdmissionPolicy(policy_settings={"quota": QuotaSettings(max_per_task=1)}))
    donor, wanted = part(0), part(1)
    forged_value, forged_headers = (
        wanted.value,
        [(n, dict(donor.headers)[n] if n == "busguard-signature" else v) for n, v in wanted.headers],
    )
    assert h.feed_raw([(forged_value, forged_headers)])[0].reason == "bad_signature"
    assert h.one(wanted).reason == "admitted"  # the forgery did not use up the only slot
