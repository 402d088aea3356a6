"""Install an example kind from examples/ as a user would, and run `busguard` with it (the kind tests)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from .paths import REPO


def install_example(example: Path, tmp_path: Path) -> Path:
    """pip-install a copy of the example (the checkout stays untouched) into its own directory."""
    source, target = tmp_path / example.name, tmp_path / "site"
    shutil.copytree(example, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(source)], check=True)
    return target


def busguard(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`busguard <args>` in a fresh environment that has the installed kind and busguard on its path."""
    env = {"PYTHONPATH": f"{site}:{REPO}", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "busguard.cli", *args], capture_output=True, text=True, env=env, timeout=120)
