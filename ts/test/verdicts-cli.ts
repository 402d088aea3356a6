/**
 * Prints `{file: {case: verdict}}` for every shared vector file this package
 * judges (JSON on stdout), and the files it does not judge yet: what
 * tests/unit/test_ts_vectors.py compares with busguard's Python verdicts.
 */
import { NOT_YET, allVerdicts } from "./verdicts.js";

const verdicts = Object.fromEntries(Object.entries(allVerdicts()).map(([name, r]) => [name, r.verdicts]));
process.stdout.write(JSON.stringify({ verdicts, not_yet: NOT_YET }) + "\n");
