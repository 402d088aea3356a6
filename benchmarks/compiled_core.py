"""Instructions per record of the guard's batch stage, pure Python against a
mypyc-compiled copy of the same tree (issue 37, lever 1).

Copies this tree's `busguard/` to a scratch directory, compiles `--modules`
there with mypyc (the one that comes with the `dev` extra's mypy), checks
that each compiled module is the one Python imports from the copy, then runs
`guard_stage_cost.py --callgrind --trees <this tree>,<the copy>` at each
`--batch` size: same records, same batches, instructions counted by
callgrind over the measured batches only, so the answer does not move with
the load on the machine.

    .venv/bin/python benchmarks/compiled_core.py [--batch 1,500] [--modules admission.batch,runtime.guard]
    .venv/bin/python benchmarks/compiled_core.py --edited

`--edited` first makes, in the copy only, the source changes that let mypyc
compile the larger set `EDITED_MODULES` (each msgspec Struct of those
modules moved to a module of its own, imported back under its name; the
rest in `EDITS`), and compiles that set.

Why it is a benchmark and not the build (docs/performance.md, "Compiling
the core with mypyc"): the saving measured was 1-2.4 % at 500-record batches and
2-5.7 % at 1-record batches, and mypyc builds a msgspec Struct defined in a
compiled module without its class keywords (`frozen`, `kw_only`,
`forbid_unknown_fields`, `omit_defaults`, `tag`), silently. This script
refuses a module that defines one.

The last line of stdout is one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TREE = HERE.parent

# The hot modules that mypyc compiles, and that import, on the tree as it is:
# the batch stage, its outputs, the seal's Merkle tree and signing, the
# timestamps' grammar. Adding admission.decide/freshness/fence,
# protocol.envelope, runtime.loop or the SQLite store needs the source
# changes docs/performance.md lists first.
DEFAULT_MODULES = (
    "admission.batch",
    "admission.window",
    "protocol.signing",
    "protocol.merkle",
    "protocol.timestamps",
    "runtime.outputs",
    "runtime.guard",
    "runtime.batch_size",
)
# Compiled after the source changes below (`--edited`): the default set,
# plus admission's decide/freshness/fence, the loop, the SQLite store, the
# envelope's decode and the small modules a 1-record batch runs through.
EDITED_MODULES = (
    *DEFAULT_MODULES,
    "admission.decide",
    "admission.freshness",
    "admission.fence",
    "protocol.envelope",
    "runtime.loop",
    "runtime.stage",
    "runtime.watched",
    "runtime.faults",
    "state.sqlite.db",
    "state.sqlite.store",
    "state.sqlite.buckets",
    "state.sealrows",
    "state.codecs",
    "state.redact",
)
# (module, class, new module, the new module's imports): a msgspec Struct
# (mypyc drops its class keywords) and a @runtime_checkable Protocol (mypyc's
# is not one, isinstance fails at import) moved out of a compiled module
MOVES = (
    (
        "admission/decide.py",
        "Candidate",
        "admission/candidate.py",
        "import msgspec\nfrom busguard.protocol.envelope_struct import Envelope\nfrom busguard.protocol.records import Coordinates\n"
        "from busguard.protocol.registry import KeyWindow\nfrom busguard.state.keys import NonceKey, TaskKey, WindowKey",
    ),
    ("admission/freshness.py", "ReplayVerdict", "admission/verdict.py", "import msgspec"),
    ("admission/fence.py", "Behind", "admission/behind.py", "import msgspec"),
    ("protocol/envelope.py", "Envelope", "protocol/envelope_struct.py", "import msgspec\nfrom busguard.protocol.receipt import Receipt"),
    (
        "runtime/loop.py",
        "Prepares",
        "runtime/prepares.py",
        "from collections.abc import Sequence\nfrom typing import Any, Protocol, runtime_checkable\n"
        "from busguard.runtime.outputs import Output",
    ),
)
# (module, old, new): mypyc names an attribute `_thread`'s C field `__thread`,
# a GCC keyword; `break` inside `with` is unimplemented in mypyc
EDITS = (
    ("state/sqlite/db.py", "self._thread", "self._checkpoint_thread"),
    ("state/sqlite/store.py", "        total = 0\n        while True:\n", "        total = 0\n        more = True\n        while more:\n"),
    (
        "state/sqlite/store.py",
        "(str(now_ms),))\n                    break\n                kind, bucket = passed[0]\n"
        "                total += self._buckets.drop(db, kind, bucket, before)\n",
        "(str(now_ms),))\n                    more = False\n                else:\n                    kind, bucket = passed[0]\n"
        "                    total += self._buckets.drop(db, kind, bucket, before)\n",
    ),
)
# records per run at each batch size: enough batches that the per-record
# figure settles (two runs of one tree agree to 0.1 %), few enough for
# valgrind (about 30 s a run)
RECORDS = {1: 500}
_STRUCT = re.compile(r"^class (\w+)\(\s*msgspec\.Struct\b", re.M)


def module_path(root: Path, name: str) -> Path:
    path = root / "busguard" / (name.replace(".", "/") + ".py")
    if not path.is_file():
        raise SystemExit(f"--modules: {name!r} is not a module of busguard (no {path})")
    return path


def edit(root: Path) -> None:
    """`MOVES` and `EDITS` in the copy; stops naming the first that no longer applies."""
    pkg = root / "busguard"
    for src, cls, dst, imports in MOVES:
        path = pkg / src
        text = path.read_text()
        found = re.search(rf"^(@runtime_checkable\n)?class {cls}\b.*?(?=^\S)", text, re.S | re.M)
        if found is None:
            raise SystemExit(f"--edited: no class {cls} in busguard/{src}: update MOVES")
        text = text[: found.start()] + text[found.end() :]
        module = "busguard." + dst.removesuffix(".py").replace("/", ".")
        text = text.replace(
            "from __future__ import annotations\n", f"from __future__ import annotations\n\nfrom {module} import {cls} as {cls}\n", 1
        )
        path.write_text(text)
        (pkg / dst).write_text(f"from __future__ import annotations\n\n{imports}\n\n\n{found.group(0)}")
    for src, old, new in EDITS:
        path = pkg / src
        text = path.read_text()
        if old not in text:
            raise SystemExit(f"--edited: busguard/{src} no longer contains {old!r}: update EDITS")
        path.write_text(text.replace(old, new))


def build(modules: list[str], out: Path, edited: bool) -> dict[str, float]:
    """The copy, compiled; what the compile cost (wall and the compilers' CPU)."""
    shutil.copytree(TREE / "busguard", out / "busguard", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(TREE / "pyproject.toml", out / "pyproject.toml")  # mypy's settings (strict)
    if edited:
        edit(out)
    paths = [module_path(out, m) for m in modules]
    for m, p in zip(modules, paths, strict=True):
        structs = _STRUCT.findall(p.read_text())
        if structs:
            raise SystemExit(
                f"--modules: {m} defines msgspec Struct {', '.join(structs)}; mypyc would build it without its "
                "class keywords (frozen, kw_only, omit_defaults, ...): move it to a module left uncompiled"
            )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mypyc", *(str(p.relative_to(out)) for p in paths)], cwd=out, capture_output=True, text=True
    )
    wall = time.perf_counter() - w0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        errors = [line for line in (done.stdout + done.stderr).splitlines() if "error" in line.lower()]
        raise SystemExit("mypyc failed:\n" + "\n".join(errors[:20] or (done.stdout + done.stderr).splitlines()[-20:]))
    # each compiled module must be the one the copy imports (an import error in
    # a compiled module, or a stray .py shadowing, would otherwise measure pure code)
    probe = "import importlib, sys\nfor m in sys.argv[1:]:\n    print(importlib.import_module('busguard.' + m).__file__)"
    files = subprocess.run(
        [sys.executable, "-c", probe, *modules], cwd=out, env={**os.environ, "PYTHONPATH": str(out)}, capture_output=True, text=True
    )
    if files.returncode != 0:
        raise SystemExit(f"a compiled module does not import:\n{files.stderr[-3000:]}")
    for m, f in zip(modules, files.stdout.split(), strict=True):
        if not f.endswith(".so") or not f.startswith(str(out)):
            raise SystemExit(f"busguard.{m} imported from {f}, not from the compiled copy")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"build_wall_s": round(wall, 1), "build_cpu_s": round(cpu, 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--modules", help="busguard modules to compile, dotted, comma-separated (default: DEFAULT_MODULES, or EDITED_MODULES)")
    p.add_argument("--edited", action="store_true", help="make the source changes in EDITS and MOVES in the copy first")
    p.add_argument("--batch", default="1,500", help="batch sizes to measure, comma-separated")
    p.add_argument("--records", type=int, default=2000, help="records per run (500 at batch 1 unless given)")
    p.add_argument("--repeats", type=int, default=1, help="interleaved runs of each tree at each batch size")
    p.add_argument("--keep", type=Path, help="build the compiled copy here and leave it (default: a temporary directory)")
    args = p.parse_args()
    chosen = args.modules.split(",") if args.modules else EDITED_MODULES if args.edited else DEFAULT_MODULES
    modules = [m.strip() for m in chosen if m.strip()]
    out: dict[str, Any] = {"modules": modules, "edited": args.edited}
    with tempfile.TemporaryDirectory(prefix="busguard-mypyc-") as scratch:
        copy = args.keep or Path(scratch)
        copy.mkdir(parents=True, exist_ok=True)
        out |= build(modules, copy, args.edited)
        print(f"compiled {len(modules)} modules in {out['build_wall_s']} s ({out['build_cpu_s']} s CPU)", file=sys.stderr, flush=True)
        for batch in (int(b) for b in args.batch.split(",")):
            records = args.records if "--records" in sys.argv else RECORDS.get(batch, args.records)
            argv = [sys.executable, str(HERE / "guard_stage_cost.py"), "--callgrind", "--trees", f"{TREE},{copy}"]
            argv += ["--batch", str(batch), "--records", str(records), "--repeats", str(args.repeats)]
            done = subprocess.run(argv, capture_output=True, text=True, check=True)
            trees = json.loads(done.stdout.strip().splitlines()[-1])["trees"]
            pure, compiled = trees[str(TREE)], trees[str(copy.resolve())]
            out[f"batch_{batch}"] = {
                "records": records,
                "pure_instructions_per_record": pure["total_us"],
                "compiled_instructions_per_record": compiled["total_us"],
                "compiled_over_pure": compiled["ratio_to_first"],
                "compiled_over_pure_range": compiled["ratio_to_first_range"],
            }
            print(f"batch {batch}: {out[f'batch_{batch}']}", file=sys.stderr, flush=True)
    out["load_average"] = os.getloadavg()[0]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
