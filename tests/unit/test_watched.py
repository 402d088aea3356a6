"""A followed file (here the guard's key registry): a change is picked up
before the next batch, and a file that does not load leaves the previous
contents in force."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from busguard.errors import ConfigError
from busguard.protocol.identity import canonical_principal
from busguard.protocol.reasons import Reason
from busguard.protocol.registry import KeyRegistry
from busguard.runtime.watched import WatchedFile
from tests.unit.harness import NOW, agent


def _agents(*names: str, revoked_at: str | None = None) -> str:
    extra = f'revoked_at = "{revoked_at}"\n' if revoked_at else ""
    return "".join(f'[[agent]]\nid = "{agent(n)}"\n{extra}\n' for n in names)


def _write(path: Path, text: str) -> None:
    """Replace the file the way editors and config managers do (new inode)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@pytest.fixture
def keys(tmp_path: Path) -> tuple[WatchedFile[KeyRegistry], list[str]]:
    path = tmp_path / "keys.toml"
    path.write_text(_agents("alice"))
    watched = WatchedFile(path, KeyRegistry.load, what="key registry")
    results: list[str] = []
    watched.on_reload = results.append
    return watched, results


def _who(watched: WatchedFile[KeyRegistry]) -> set[str]:
    return set(watched.current().principals)


def test_an_unchanged_file_is_not_read_again(keys: tuple[WatchedFile[KeyRegistry], list[str]]) -> None:
    watched, results = keys
    first = watched.current()
    assert watched.current() is first and results == []


def test_an_enrolment_and_a_revocation_take_effect_without_a_restart(keys: tuple[WatchedFile[KeyRegistry], list[str]]) -> None:
    watched, results = keys
    _write(watched.path, _agents("alice", "bob"))
    assert _who(watched) == {canonical_principal(agent("alice")), canonical_principal(agent("bob"))}
    _write(watched.path, _agents("alice", "bob", revoked_at="2026-11-29T11:00:00Z"))
    lookup = watched.current().lookup(canonical_principal(agent("bob")), None, NOW)
    assert lookup.reason is Reason.REVOKED_KEY
    assert results == ["reloaded", "reloaded"]


def test_an_in_place_edit_is_seen_too(keys: tuple[WatchedFile[KeyRegistry], list[str]]) -> None:
    watched, results = keys
    watched.path.write_text(_agents("alice", "carol"))  # same inode; size and mtime change
    assert canonical_principal(agent("carol")) in _who(watched)
    assert results == ["reloaded"]


def test_a_bad_file_keeps_the_previous_registry_and_is_reported_once(keys: tuple[WatchedFile[KeyRegistry], list[str]]) -> None:
    watched, results = keys
    before = watched.current()
    _write(watched.path, _agents("alice") + '[[agent]]\nid = ""\n')
    assert watched.current() is before
    assert watched.current() is before
    assert results == ["error"]
    _write(watched.path, _agents("alice", "dave"))
    assert canonical_principal(agent("dave")) in _who(watched)
    assert results == ["error", "reloaded"]


def test_a_deleted_file_keeps_the_previous_registry(keys: tuple[WatchedFile[KeyRegistry], list[str]]) -> None:
    watched, results = keys
    before = watched.current()
    watched.path.unlink()
    assert watched.current() is before and results == ["error"]


def test_watching_can_be_switched_off(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(_agents("alice"))
    watched = WatchedFile(path, KeyRegistry.load, what="key registry", watch=False)
    _write(path, _agents("alice", "bob"))
    assert _who(watched) == {canonical_principal(agent("alice"))}


def test_a_bad_file_at_start_is_a_config_error_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text('[[agent]]\nid = ""\n')
    with pytest.raises(ConfigError) as info:
        WatchedFile(path, KeyRegistry.load, what="key registry")
    assert "agent[0].id" in str(info.value) and str(path) in str(info.value)


def test_a_non_utf8_edit_keeps_the_previous_registry_and_names_the_byte(
    keys: tuple[WatchedFile[KeyRegistry], list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    watched, results = keys
    before = watched.current()
    tmp = watched.path.with_suffix(".tmp")
    tmp.write_bytes(_agents("alice").encode() + b'[[agent]]\nid = "\xff\xfe"\n')
    os.replace(tmp, watched.path)
    assert watched.current() is before and watched.current() is before
    assert results == ["error"]
    out = capsys.readouterr().out
    assert out.count("key registry not reloaded") == 1 and str(watched.path) in out and "0xff" in out
    _write(watched.path, _agents("alice", "erin"))
    assert canonical_principal(agent("erin")) in _who(watched)
    assert results == ["error", "reloaded"]


def test_a_path_that_is_not_a_regular_file_is_not_read(keys: tuple[WatchedFile[KeyRegistry], list[str]]) -> None:
    """A directory (unreadable as a file) or a FIFO (reading it would block the batch loop)."""
    watched, results = keys
    before = watched.current()
    watched.path.unlink()
    watched.path.mkdir()
    assert watched.current() is before and watched.current() is before
    watched.path.rmdir()
    os.mkfifo(watched.path)
    assert watched.current() is before
    assert results == ["error", "error"]
    watched.path.unlink()
    _write(watched.path, _agents("alice", "frank"))
    assert canonical_principal(agent("frank")) in _who(watched)
    assert results == ["error", "error", "reloaded"]


def test_a_read_failure_is_retried_without_a_change_and_reported_once(tmp_path: Path) -> None:
    """An OSError (e.g. EACCES while a config manager fixes the mode) can clear
    without the file changing, so it is retried before every batch; it is
    logged and counted once."""
    path = tmp_path / "keys.toml"
    path.write_text(_agents("alice"))
    failing = {"now": False}

    def load(p: Path) -> KeyRegistry:
        if failing["now"]:
            raise PermissionError(13, "Permission denied", str(p))
        return KeyRegistry.load(p)

    watched = WatchedFile(path, load, what="key registry")
    results: list[str] = []
    watched.on_reload = results.append
    before = watched.current()
    failing["now"] = True
    _write(path, _agents("alice", "gina"))
    for _ in range(3):
        assert watched.current() is before
    assert results == ["error"]
    failing["now"] = False  # readable again; the file itself did not change
    assert canonical_principal(agent("gina")) in _who(watched)
    assert results == ["error", "reloaded"]


def test_any_loader_failure_keeps_the_previous_contents(keys: tuple[WatchedFile[KeyRegistry], list[str]]) -> None:
    watched, results = keys
    before = watched.current()

    def broken(p: Path) -> KeyRegistry:
        raise RuntimeError("a bug in the loader")

    watched._load = broken
    _write(watched.path, _agents("alice", "hank"))
    assert watched.current() is before and results == ["error"]


def test_a_failing_reload_hook_does_not_escape(keys: tuple[WatchedFile[KeyRegistry], list[str]]) -> None:
    watched, _ = keys

    def hook(result: str) -> None:
        raise ValueError("metrics registry gone")

    watched.on_reload = hook
    _write(watched.path, _agents("alice", "ivy"))
    assert canonical_principal(agent("ivy")) in _who(watched)


def test_a_non_utf8_file_at_start_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_bytes(b"\xff")
    with pytest.raises(ConfigError) as info:
        WatchedFile(path, KeyRegistry.load, what="key registry")
    assert str(path) in str(info.value) and "UTF-8" in str(info.value)


def test_a_fifo_at_start_is_a_config_error_not_a_hang(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    os.mkfifo(path)
    with pytest.raises(ConfigError) as info:
        WatchedFile(path, KeyRegistry.load, what="key registry")
    assert "regular file" in str(info.value) and str(path) in str(info.value)
