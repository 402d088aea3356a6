"""`benchmarks/compiled_core.py` (mypyc against the pure tree, docs/performance.md)
keeps measuring what it says: its source changes still apply to this tree and
leave every moved class importable, unchanged, from its old module; and it
refuses to compile a module that defines a msgspec Struct, whose class
keywords mypyc would drop without a word. No compile here (mypyc takes a
minute); the benchmark itself checks that the compiled modules are the ones
imported.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compiled_core", BENCH / "compiled_core.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_edits_apply_and_keep_each_moved_class_where_it_was(tmp_path: Path) -> None:
    cc = _load()
    shutil.copytree(cc.TREE / "busguard", tmp_path / "busguard", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    cc.edit(tmp_path)
    probe = (
        "import importlib, msgspec, sys\n"
        "for src, cls, dst in (a.split(':') for a in sys.argv[1:]):\n"
        "    old = getattr(importlib.import_module(src), cls)\n"
        "    assert old is getattr(importlib.import_module(dst), cls), (src, cls)\n"
        "    assert old.__module__ == dst, (cls, old.__module__)\n"
        "    if issubclass(old, msgspec.Struct):\n"
        "        print(cls, old.__struct_config__.frozen)\n"
    )
    moves = [
        f"busguard.{src.removesuffix('.py').replace('/', '.')}:{cls}:busguard.{dst.removesuffix('.py').replace('/', '.')}"
        for src, cls, dst, _ in cc.MOVES
    ]
    done = subprocess.run(
        [sys.executable, "-c", probe, *moves], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    # the Structs keep their keywords in their own (uncompiled) modules
    assert sorted(done.stdout.split("\n")[:-1]) == ["Behind True", "Candidate True", "Envelope True", "ReplayVerdict True"]
    for src, old, new in cc.EDITS:
        text = (tmp_path / "busguard" / src).read_text()
        assert new in text and old not in text.replace(new, ""), (src, old)


def test_a_module_defining_a_struct_is_refused_before_compiling(tmp_path: Path) -> None:
    cc = _load()
    with pytest.raises(SystemExit, match=r"admission\.decide defines msgspec Struct Candidate.*class keywords"):
        cc.build(["admission.decide"], tmp_path, False)
    assert not (tmp_path / "build").exists()  # mypyc never ran
    # once moved out (--edited), the module is accepted as far as the check goes
    edited = tmp_path / "edited"
    edited.mkdir()
    shutil.copytree(cc.TREE / "busguard", edited / "busguard", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    cc.edit(edited)
    assert cc._STRUCT.findall((edited / "busguard" / "admission" / "decide.py").read_text()) == []
