"""The cache folder and the files written from the owner's texts are private on every use, not only when new.

The cache holds the owner's documents, the target's answers and canary seeds, and the shadow calibrations and
questions read back from it decide audits. A folder made 0755 (by ``mkdir``, an older version, a backup) stayed
0755: only a folder the auditor created itself was made 0700.
"""
from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from audit_core import models
from audit_core.io import write_private_bytes
from audit_core.models import cache_dir, cache_warning


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_an_existing_cache_folder_of_this_user_is_made_private_on_use(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o755)
    monkeypatch.setenv("RPA_CACHE_DIR", str(root))
    assert cache_dir() == root and _mode(root) == 0o700
    root.chmod(0o770)  # opened again later (a restore, a chmod -R): closed on the next use
    cache_dir()
    assert _mode(root) == 0o700 and cache_warning(root) is None
    root.chmod(0o555)  # made read-only on purpose: stays read-only for its owner (the CLI then says so)
    cache_dir()
    assert _mode(root) == 0o500
    root.chmod(0o700)


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners")
def test_a_cache_folder_of_someone_else_is_used_and_said_to_be_writable_by_others(tmp_path, monkeypatch, caplog,
                                                                                  capsys):
    """Not ours to chmod (and not failed for): used as it is, with a clear warning that others can write into it."""
    from app.cli import _cache_problem

    root = tmp_path / "shared-cache"
    root.mkdir()
    root.chmod(0o777)
    monkeypatch.setenv("RPA_CACHE_DIR", str(root))
    if os.getuid() == 0:  # root can give the folder away (root's own folders are not "someone else's")
        os.chown(root, 4242, -1)
    else:  # the folder now belongs to someone else, as far as the auditor can tell
        me = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: me + 4242)
    monkeypatch.setattr(models, "_WARNED", set())
    caplog.set_level(logging.WARNING, logger="audit_core.models")
    assert cache_dir() == root and _mode(root) == 0o777  # left as it is, no error
    cache_dir()
    warned = [r.getMessage() for r in caplog.records if "can be written by others" in r.getMessage()]
    assert len(warned) == 1  # once per folder, though cache_dir is called on every cache read
    said = cache_warning(root)
    assert str(root) in said and "another user owns it" in said and "everyone may write" in said
    assert "RPA_CACHE_DIR" in said
    assert _cache_problem() is None  # usable: the CLI goes on, and says so
    assert "warning: the cache folder" in capsys.readouterr().err
    # a CLI run says it once: its own "warning:" line, and no log line beside it (printed by Python's
    # last-resort handler, it had said the same twice)
    monkeypatch.setattr(models, "_WARNED", set())
    caplog.clear()
    assert _cache_problem() is None
    cache_dir()
    assert capsys.readouterr().err.count("can be written by others") == 1
    assert not [r for r in caplog.records if "can be written by others" in r.getMessage()]
    root.chmod(0o755)  # another user's folder that only its owner can write: that owner still can
    assert "another user owns it" in cache_warning(root) and "everyone" not in cache_warning(root)
    root.chmod(0o700)


def test_private_bytes_are_written_0600_atomically_whatever_the_umask(tmp_path):
    """An uploaded corpus (any encoding) and the CLI's unredacted --out were written 0644 under a umask of 022."""
    old = os.umask(0o022)
    try:
        target = tmp_path / "uploads" / "corpus.csv"
        data = "text\nR\u00e9ponds\n".encode("cp1252")  # kept byte for byte, not decoded
        assert write_private_bytes(target, data) == target
        assert target.read_bytes() == data and _mode(target) == 0o600
        assert _mode(target.parent) == 0o700 and not list(target.parent.glob("*.tmp"))
        target.chmod(0o644)
        write_private_bytes(target, b"again")
        assert target.read_bytes() == b"again" and _mode(target) == 0o600
        link = tmp_path / "link.json"  # --out through a link: the file it names is written, the link stays
        link.symlink_to(target)
        write_private_bytes(link, b"through the link")
        assert link.is_symlink() and target.read_bytes() == b"through the link"
        if hasattr(os, "mkfifo"):  # --out /dev/stdout or a named pipe: written in place, never replaced
            import threading

            fifo = tmp_path / "pipe"
            os.mkfifo(fifo)
            got = []
            reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
            reader.start()
            write_private_bytes(fifo, b"streamed")
            reader.join(10)
            assert got == [b"streamed"] and stat.S_ISFIFO(fifo.lstat().st_mode)
    finally:
        os.umask(old)
