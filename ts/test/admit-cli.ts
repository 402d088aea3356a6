/**
 * Reads a JSON array of fetches in tests/vectors/consumer/consumer.json's form
 * on stdin and prints the admitting decision on each (deliveries, refusals,
 * positions): what tests/unit/test_ts_admit_differential.py compares with
 * busguard's `AdmittingConsumer.admit` on mutated fetches.
 */
import { readFileSync } from "node:fs";
import { decideFetch } from "./verdicts.js";

const docs = JSON.parse(readFileSync(0, "utf8")) as unknown[];
process.stdout.write(JSON.stringify(docs.map((d) => decideFetch(d))) + "\n");
