"""docs/compromise-handoff.md is the decision boundary: its three tables are
compared with verdict.py over every combination of inputs, every row is
reachable, and the worked example and the codes are true."""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from busguard.policies.compromise.manifest import manifest_input
from busguard.policies.compromise.message import (
    DECLARATION_CONTEXT,
    CompromiseDeclaration,
    IntegrityStatus,
    InteractionRule,
    MessageCode,
    decode_strict,
    statement_id,
)
from busguard.policies.compromise.verdict import (
    Attester,
    CompromisePolicy,
    HandoffFacts,
    ScopeMatch,
    ScopeState,
    SessionState,
    StripReason,
    SuccessorEvidence,
    SuccessorState,
    VerdictReason,
    disposition,
    evaluate,
    gate,
    successor_treatment,
)
from busguard.protocol.envelope import b64url_decode_strict
from busguard.protocol.signing import public_key_from_seed, sign, verify_signature

DOC = (Path(__file__).resolve().parents[2] / "docs" / "compromise-handoff.md").read_text(encoding="utf-8")

Row = list[frozenset[str] | None]  # None: "—", matches anything


def _cell(text: str) -> frozenset[str] | None:
    text = text.strip()
    if text == "—":
        return None
    text = text.removeprefix("stripped:").strip()
    return frozenset(part.strip().strip("`") for part in text.split(" / "))


def table(name: str) -> tuple[list[str], list[Row]]:
    match = re.search(rf"<!-- table:{name} -->\n((?:\|.*\|\n)+)", DOC)
    assert match is not None, f"docs/compromise-handoff.md has no table:{name}"
    lines = match.group(1).splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert set(lines[1].replace("|", "").split()) == {"---"}
    rows = [[_cell(c) for c in line.strip("|").split("|")] for line in lines[2:]]
    assert all(len(r) == len(header) for r in rows), f"table:{name}: ragged row"
    return header, rows


def first_match(rows: list[Row], inputs: tuple[str, ...]) -> int:
    for i, row in enumerate(rows):
        if all(cell is None or value in cell for cell, value in zip(row, inputs, strict=False)):
            return i
    raise AssertionError(f"no row matches {inputs}")


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def the(cell: frozenset[str] | None) -> str:
    assert cell is not None and len(cell) == 1, f"an output cell holds exactly one value, not {cell}"
    return next(iter(cell))


# ------------------------------------------------------------------ table A


def test_table_a_successor_treatment_matches_the_implementation_exhaustively() -> None:
    header, rows = table("successor")
    assert header == ["receipt", "signed by", "successor under notice", "treated as", "re-derivation claim counts"]
    used: set[int] = set()
    statuses = ["none", *(s.value for s in IntegrityStatus)]
    for status, by, notice, claim in itertools.product(statuses, [a.value for a in Attester], [True, False], [True, False]):
        i = first_match(rows, (status, by, yes(notice)))
        used.add(i)
        evidence = (
            None
            if status == "none"
            else SuccessorEvidence(status=IntegrityStatus(status), attested_by=Attester(by), rederives_operational_state=claim)
        )
        treated, rederives = successor_treatment(evidence, notice)
        assert treated == SuccessorState(the(rows[i][3])), (status, by, notice)
        assert rederives == (claim and the(rows[i][4]) == "yes"), (status, by, notice, claim)
    assert used == set(range(len(rows))), f"rows never reached: {set(range(len(rows))) - used}"


# ------------------------------------------------------------------ table B


def test_table_b_component_disposition_matches_the_implementation_exhaustively() -> None:
    header, rows = table("component")
    assert header == ["session", "scope", "operational", "against scope", "disposition"]
    used: set[int] = set()
    for compromised, scope, operational, against in itertools.product([True, False], ScopeState, [True, False], ScopeMatch):
        i = first_match(rows, ("compromised" if compromised else "clean", scope.value, yes(operational), against.value))
        used.add(i)
        why = disposition(compromised, scope, operational, against)
        assert (why.value if why is not None else "transfer") == the(rows[i][4]), (compromised, scope, operational, against)
    assert used == set(range(len(rows))), f"rows never reached: {set(range(len(rows))) - used}"


# ------------------------------------------------------------------ table C

C_HEADER = [
    "session",
    "requires declaration",
    "operational",
    "successor re-derives",
    "every component stripped",
    "successor",
    "interaction",
    "verdict",
    "route",
    "reason",
]


def _c_inputs() -> Iterator[tuple[SessionState, bool, bool, bool, bool, SuccessorState, InteractionRule | None]]:
    flags = [True, False]
    yield from itertools.product(SessionState, flags, flags, flags, flags, SuccessorState, [*InteractionRule, None])


def test_table_c_verdict_matches_the_implementation_exhaustively() -> None:
    header, rows = table("verdict")
    assert header == C_HEADER
    used: set[int] = set()
    count = 0
    for session, strict, operational, rederives, all_stripped, successor, rule in _c_inputs():
        key = (
            session.value,
            yes(strict),
            yes(operational),
            yes(rederives),
            yes(all_stripped),
            successor.value,
            rule.value if rule else "none",
        )
        i = first_match(rows, key)
        used.add(i)
        got = gate(
            session, CompromisePolicy(require_declaration_for_compromised=strict), operational, rederives, all_stripped, successor, rule
        )
        assert tuple(g.value for g in got) == (the(rows[i][7]), the(rows[i][8]), the(rows[i][9])), key
        count += 1
    assert count == 3 * 2 * 2 * 2 * 2 * 2 * 4
    assert used == set(range(len(rows))), f"rows never reached: {set(range(len(rows))) - used}"


def test_each_verdict_reason_is_exactly_one_row_of_table_c() -> None:
    _, rows = table("verdict")
    reasons = [the(r[9]) for r in rows]
    assert sorted(reasons) == sorted(r.value for r in VerdictReason)


# ------------------------------------------------------------------ docs and code agree


def _codes_table(title: str) -> list[str]:
    section = DOC.split(title, 1)[1]
    block = re.search(r"((?:\|.*\|\n)+)", section)
    assert block is not None
    return [line.split("|")[1].strip().strip("`") for line in block.group(1).splitlines()[2:]]


def test_every_code_is_documented_once() -> None:
    assert sorted(_codes_table("**Verdict reasons**")) == sorted(r.value for r in VerdictReason)
    assert sorted(_codes_table("**Strip reasons**")) == sorted(r.value for r in StripReason)
    check_section = DOC.split("**Check codes**", 1)[1]
    inline = set(re.findall(r"`([a-z0-9_]+)`", check_section.split("| code |", 1)[0]))
    tabled = _codes_table("**Check codes**")
    assert len(tabled) == len(set(tabled))
    assert inline | set(tabled) == {c.value for c in MessageCode}


def _blocks() -> dict[str, str]:
    return dict(re.findall(r"^```(compromise-[a-z-]+)\n(.*?)\n```$", DOC, re.M | re.S))


def test_worked_declaration_verifies_and_is_what_the_seed_signs() -> None:
    b = _blocks()
    statement = b["compromise-declaration"].encode()
    assert len(statement) == 168
    assert bytes.fromhex(b["compromise-declaration-domain-hex"]) == DECLARATION_CONTEXT
    seed = bytes.fromhex(b["compromise-seed-hex"])
    public_key = bytes.fromhex(b["compromise-public-key-hex"])
    assert public_key_from_seed(seed) == public_key
    signature = b64url_decode_strict(b["compromise-declaration-signature"], 64)
    assert sign(seed, DECLARATION_CONTEXT + statement) == signature
    assert verify_signature(public_key, DECLARATION_CONTEXT + statement, signature)
    assert statement_id(CompromiseDeclaration, statement) == b["compromise-declaration-id"]
    decoded = decode_strict(statement, CompromiseDeclaration, "example")
    assert (decoded.handoff_id, decoded.signer) == ("handoff-0001", "session-a")


def test_worked_manifest_recomputes() -> None:
    b = _blocks()
    facts = msgspec.json.decode(b["compromise-manifest-facts"].encode(), type=HandoffFacts)
    assert facts.components[0].sha256 == hashlib.sha256(b"plan").hexdigest()
    verdict = evaluate(facts, CompromisePolicy())
    assert (verdict.verdict, verdict.route, verdict.reason) == ("scoped", "forward", "scoped_handoff")
    raw = manifest_input(facts, CompromisePolicy(), [None], verdict.verdict, verdict.route, verdict.reason)
    expected = bytes.fromhex("".join(b["compromise-manifest-input-hex"].split()))
    assert raw == expected
    assert len(raw) == 331
    assert verdict.manifest_digest == b["compromise-manifest-digest"] == hashlib.sha256(raw).hexdigest()


@pytest.mark.parametrize("label", ["compromise-manifest-input-hex", "compromise-declaration-domain-hex"])
def test_hex_blocks_are_lowercase(label: str) -> None:
    assert re.fullmatch(r"[0-9a-f\s]+", _blocks()[label])
