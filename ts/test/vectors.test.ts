/**
 * Every case of every shared vector file this package judges gives the
 * verdict the file expects (tests/vectors/**, the same files the Python
 * tests read): one test per file, failing with every differing case named.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { FILES } from "./verdicts.js";

const MIN_CASES: Readonly<Record<string, number>> = {
  "external/wycheproof/ed25519_test.json": 151,
  "external/ink/principal-normalization.json": 10,
  "external/ink/timestamp-validity.json": 25,
  "external/ink/replay-freshness.json": 10,
  "external/ink/merkle-consistency.json": 19,
  "external/jcs": 6,
  "valid.json": 20,
  "invalid.json": 80,
  "sequences.json": 50,
  "receipts/receipts.json": 80,
  "readers/compromise-handoff.json": 125,
};

for (const [name, run] of Object.entries(FILES)) {
  void test(`vectors: ${name}`, () => {
    const result = run();
    assert.deepEqual(result.mismatches, [], `${name}: ${result.mismatches.length} case(s) differ`);
    assert.ok(Object.keys(result.verdicts).length >= (MIN_CASES[name] ?? 1), `${name} looks truncated`);
  });
}
