"""Which member id the static rejoin heartbeats keep alive (busguard.runtime.rejoin):
only the one the group gave this name, never a look-alike's."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from busguard.runtime.rejoin import answers_static_joins_at_once, predecessor_member_id

U = "08507889-783c-4749-b28d-24a8b58314cc"


def test_the_names_member_id_is_found_among_others() -> None:
    ids = [f"guard-0-{uuid.uuid4()}", f"guard-1-{U}", f"guard-2-{uuid.uuid4()}", f"busguard-guard-consumer-{uuid.uuid4()}"]
    assert predecessor_member_id("guard-1", ids) == f"guard-1-{U}"


def test_a_longer_name_with_the_same_prefix_is_not_ours() -> None:
    assert predecessor_member_id("guard-1", [f"guard-10-{U}", f"guard-1-x-{U}"]) is None


def test_no_member_or_a_tail_that_is_not_a_uuid_is_none() -> None:
    assert predecessor_member_id("guard-1", []) is None
    assert (
        predecessor_member_id("guard-1", ["guard-1-" + "z" * 36, f"guard-1-{U}x", "guard-1-" + U.replace("-", "")[:28] + "----" + U[-4:]])
        is None
    )


def test_two_members_under_one_name_are_ambiguous() -> None:
    assert predecessor_member_id("guard-1", [f"guard-1-{U}", f"guard-1-{uuid.uuid4()}"]) is None


@given(st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True), st.lists(st.text(max_size=80), max_size=8))
def test_only_an_instance_uuid_id_is_ever_returned(instance: str, others: list[str]) -> None:
    found = predecessor_member_id(instance, others)
    assert found is None or (
        found in others
        and found.startswith(f"{instance}-")
        and str(uuid.UUID(found[len(instance) + 1 :])) == found[len(instance) + 1 :].lower()
    )


#: ApiVersions keys as measured on loopback (docs/notes-broker.md, "Static membership on Apache Kafka")
TANSU_510F3E2 = [
    0,
    1,
    2,
    3,
    8,
    9,
    10,
    11,
    12,
    13,
    14,
    15,
    16,
    17,
    18,
    19,
    20,
    21,
    22,
    24,
    25,
    26,
    28,
    29,
    30,
    32,
    36,
    42,
    44,
    46,
    50,
    51,
    60,
    69,
    71,
    75,
]
KAFKA_4_4_0 = [*range(0, 52), 55, 57, 60, 61, *range(64, 70), 74, 75, *range(76, 82), *range(83, 95)]


def test_the_bridge_runs_on_tansu_and_not_on_apache_kafka_4() -> None:
    assert not answers_static_joins_at_once(TANSU_510F3E2)
    assert answers_static_joins_at_once(KAFKA_4_4_0)
    assert not answers_static_joins_at_once([])
