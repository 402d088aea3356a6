"""merkle-sha256: our published vectors, the INK RFC 9162 consistency vectors, properties."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.policies.award.canonicalizers import MalformedOutput, MerkleSha256, merkle_leaves
from busguard.protocol.merkle import (
    EMPTY_ROOT,
    ProofError,
    leaf_hash,
    merkle_root,
    parse_hash,
    verify_consistency,
    verify_inclusion,
)

REPO = Path(__file__).resolve().parents[2]
MERKLE_DIR = REPO / "tests" / "vectors" / "merkle"
INK_CONSISTENCY = REPO / "tests" / "vectors" / "external" / "ink" / "merkle-consistency.json"

DOC: Any = json.loads((MERKLE_DIR / "merkle-sha256.json").read_text(encoding="utf-8"))
INK: Any = json.loads(INK_CONSISTENCY.read_text(encoding="utf-8"))
SIZES = [0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("merkle_vector_generator", MERKLE_DIR / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()


def _h(hexes: list[str]) -> list[bytes]:
    return [bytes.fromhex(x) for x in hexes]


# ------------------------------------------------------- the vector file itself


def test_vectors_are_reproducible_from_the_generator(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(MERKLE_DIR / "generate.py"), "--out", str(tmp_path)], check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merkle-sha256.json"]
    assert (tmp_path / "merkle-sha256.json").read_bytes() == (MERKLE_DIR / "merkle-sha256.json").read_bytes()


def test_generator_is_independent_of_busguard_and_rfc8785() -> None:
    tree = ast.parse((MERKLE_DIR / "generate.py").read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_vectors_cover_the_promised_sizes_and_cases() -> None:
    assert DOC["format"] == "busguard.merkle-sha256.v1"
    assert DOC["canonicalizer"] == "merkle-sha256"
    sizes = [len(t["leaves"]) for t in DOC["trees"] if t["caseId"].startswith("n")]
    assert sizes == SIZES
    assert {"edge-records", "depth-limit-accepted"} <= {t["caseId"] for t in DOC["trees"]}
    assert len(DOC["inclusion"]) == sum(SIZES) + 7
    assert len(DOC["consistency"]) == sum(1 for n in SIZES for m in SIZES if m <= n) + 5
    assert len(DOC["rejects"]) == 27
    for section in ("trees", "inclusion", "consistency", "rejects"):
        ids = [c["caseId"] for c in DOC[section]]
        assert len(set(ids)) == len(ids), section


# ----------------------------------------------------------------- the trees


@pytest.mark.parametrize("case", DOC["trees"], ids=lambda c: c["caseId"])
def test_tree_vector(case: Any) -> None:
    output = bytes.fromhex(case["outputHex"])
    assert output.decode("utf-8") == case["output"]
    leaves = merkle_leaves(output)
    assert [leaf.decode("utf-8") for leaf in leaves] == case["leaves"]
    assert [leaf_hash(leaf).hex() for leaf in leaves] == case["leafHashes"]
    assert merkle_root(_h(case["leafHashes"])).hex() == case["root"]
    assert MerkleSha256().root(output) == case["root"]


def test_empty_tree_root_is_sha256_of_nothing() -> None:
    assert MerkleSha256().root(b"[]") == EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_leaf_bytes_are_the_records_jcs_not_their_text() -> None:
    # The same records spelled two ways give one root; any change to a record changes it.
    a = MerkleSha256().root(b'[{"b":1,"a":"\\u00e9"}, 2]')
    assert a == MerkleSha256().root('[ {"a":"\u00e9","b":1.0} ,2.0]'.encode())
    assert a != MerkleSha256().root(b'[{"b":1,"a":"e"}, 2]')
    assert a != MerkleSha256().root(b'[2, {"b":1,"a":"\\u00e9"}]')  # order is part of the commitment


@pytest.mark.parametrize("case", DOC["rejects"], ids=lambda c: c["caseId"])
def test_reject_vector(case: Any) -> None:
    with pytest.raises(MalformedOutput) as info:
        MerkleSha256().root(bytes.fromhex(case["outputHex"]))
    assert info.value.problem == case["problem"]
    assert info.value.canonicalizer == "merkle-sha256"


def test_not_an_array_names_what_it_got() -> None:
    with pytest.raises(MalformedOutput, match="must be a JSON array of records, got a JSON object"):
        MerkleSha256().root(b'{"records": []}')


# -------------------------------------------------------------------- proofs


@pytest.mark.parametrize("case", DOC["inclusion"], ids=lambda c: c["caseId"])
def test_inclusion_vector(case: Any) -> None:
    ok = verify_inclusion(
        case["leafIndex"], case["treeSize"], bytes.fromhex(case["leafHash"]), _h(case["proof"]), bytes.fromhex(case["root"])
    )
    assert ok is (case["expect"] == "accept")


@pytest.mark.parametrize("case", DOC["consistency"], ids=lambda c: c["caseId"])
def test_consistency_vector(case: Any) -> None:
    ok = verify_consistency(
        case["first"], case["second"], bytes.fromhex(case["firstRoot"]), bytes.fromhex(case["secondRoot"]), _h(case["proof"])
    )
    assert ok is (case["expect"] == "accept")


def test_ink_consistency_file_complete() -> None:
    assert INK["format"] == "ink.conformance.v1"
    assert INK["category"] == "merkle-consistency"
    results = [c["expect"]["result"] for c in INK["cases"]]
    assert (results.count("accept"), results.count("reject"), len(results)) == (9, 10, 19)


def _ink_verdict(case: Any) -> bool:
    i = case["input"]
    try:
        return verify_consistency(
            i["first"],
            i["second"],
            parse_hash(i["firstRoot"], "firstRoot"),
            parse_hash(i["secondRoot"], "secondRoot"),
            [parse_hash(p, f"proof[{n}]") for n, p in enumerate(i["proof"])],
        )
    except ProofError:
        return False


@pytest.mark.parametrize("case", INK["cases"], ids=lambda c: c["caseId"])
def test_ink_merkle_consistency(case: Any) -> None:
    assert _ink_verdict(case) is (case["expect"]["result"] == "accept")


@pytest.mark.parametrize(
    ("case_id", "message"),
    [
        ("first-greater-than-second-rejects", "cannot be a prefix"),
        ("malformed-proof-element-rejects", "proof[0] must be 64 lowercase hex"),
        ("second-above-safe-integer-rejects", "second tree size must be an integer from 0 to 2**53 - 1"),
    ],
)
def test_ink_malformed_cases_are_refused_as_malformed(case_id: str, message: str) -> None:
    case = next(c for c in INK["cases"] if c["caseId"] == case_id)
    i = case["input"]
    with pytest.raises(ProofError) as info:
        verify_consistency(
            i["first"],
            i["second"],
            parse_hash(i["firstRoot"], "firstRoot"),
            parse_hash(i["secondRoot"], "secondRoot"),
            [parse_hash(p, f"proof[{n}]") for n, p in enumerate(i["proof"])],
        )
    assert message in str(info.value)


@pytest.mark.parametrize(
    "call",
    [
        lambda: verify_inclusion(0, 1, b"short", [], EMPTY_ROOT),
        lambda: verify_inclusion(-1, 1, EMPTY_ROOT, [], EMPTY_ROOT),
        lambda: verify_inclusion(True, 2, EMPTY_ROOT, [], EMPTY_ROOT),
        lambda: verify_consistency(1, 2, EMPTY_ROOT, EMPTY_ROOT, ["ab" * 32]),  # hex text, not bytes
        lambda: verify_consistency(1, 2**53, EMPTY_ROOT, EMPTY_ROOT, []),
    ],
)
def test_malformed_proof_questions_raise(call: Any) -> None:
    with pytest.raises(ProofError):
        call()


# ---------------------------------------------------------------- properties


_LEAVES = st.lists(st.binary(max_size=8), min_size=0, max_size=40)


@settings(max_examples=150, deadline=None)
@given(_LEAVES)
def test_bottom_up_root_equals_the_rfc_definition(leaves: list[bytes]) -> None:
    assert merkle_root([leaf_hash(x) for x in leaves]) == GEN.mth(leaves)


@settings(max_examples=100, deadline=None)
@given(_LEAVES.filter(bool), st.data())
def test_every_rfc_inclusion_path_verifies_and_any_flipped_bit_does_not(leaves: list[bytes], data: st.DataObject) -> None:
    n = len(leaves)
    m = data.draw(st.integers(0, n - 1))
    proof = GEN.path(m, leaves)
    root = GEN.mth(leaves)
    assert verify_inclusion(m, n, leaf_hash(leaves[m]), proof, root)
    if proof:
        k = data.draw(st.integers(0, len(proof) - 1))
        bit = data.draw(st.integers(0, 255))
        bad = list(proof)
        bad[k] = bytes(b ^ (1 << (bit % 8)) if i == bit // 8 else b for i, b in enumerate(bad[k]))
        assert not verify_inclusion(m, n, leaf_hash(leaves[m]), bad, root)
    assert not verify_inclusion(m, n, leaf_hash(leaves[m] + b"x"), proof, root)


@settings(max_examples=100, deadline=None)
@given(_LEAVES.filter(bool), st.data())
def test_every_rfc_consistency_proof_verifies_and_a_changed_history_does_not(leaves: list[bytes], data: st.DataObject) -> None:
    n = len(leaves)
    m = data.draw(st.integers(0, n))
    proof = GEN.consistency(m, leaves)
    first, second = GEN.mth(leaves[:m]), GEN.mth(leaves)
    assert verify_consistency(m, n, first, second, proof)
    if 0 < m:
        rewritten = [*leaves[: m - 1], leaves[m - 1] + b"!", *leaves[m:]]  # history changed inside the prefix
        assert not verify_consistency(m, n, first, GEN.mth(rewritten), proof)
    if 0 < m < n:
        assert not verify_consistency(m, n, first, second, proof[:-1])
        assert not verify_consistency(m, n, first, second, [*proof, second])
