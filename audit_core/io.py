"""Writing the files the auditor keeps on the owner's computer: atomically, and readable by the owner only.

The cache holds the owner's documents, questions made from them, the target's
answers and shadow observations. Each file is written to a temporary file of
its own in the same folder (two processes preparing the same thing never
rename each other's half-written file) and then moved into place, so a crash
leaves the old file or none, never half of one.

Inside the cache every folder is 0700 and every file 0600 (``private_dir``,
``private_umask`` for what third-party libraries write there), a link found in
place of a cache file is replaced, never followed (``write_private_atomic``),
and what two processes may build at once is built under a lock (``file_lock``).
"""
from __future__ import annotations

import os
import stat
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def write_private_bytes(path: Path | str, data: bytes, follow_links: bool = True) -> Path:
    """Write ``data`` to ``path`` readable by the owner only (0600), atomically; the folder is created if missing.

    For every file the auditor keeps (shadow observations, questions, an uploaded corpus in any encoding,
    the CLI's unredacted results): under a umask of 022 ``write_bytes`` left them readable by every user of
    the computer.

    ``follow_links`` is for a path the user names (``--out``): a link is followed (the file it names is
    replaced, not the link), and a path that is no regular file (``/dev/stdout``, a named pipe) is a stream
    the user chose, written in place. Without it (the cache's own files) the path is taken as it is: a link, a
    pipe or a device found there was planted or left by mistake, and following it would let whoever put it
    there make the auditor overwrite another of the owner's files; it is replaced by the file, and every
    missing folder on the way is made 0700 (``private_dir``).
    """
    if follow_links:
        path = Path(os.path.realpath(path))
        try:
            regular = stat.S_ISREG(path.stat().st_mode)
        except FileNotFoundError:
            regular = True
        if not regular:
            with open(path, "wb") as fh:
                fh.write(data)
            return path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    else:
        path = Path(path)
        private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # created 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)  # replaces a link or a pipe at ``path`` itself, never what it points to
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_private_atomic(path: Path | str, text: str) -> Path:
    """``write_private_bytes`` for text, in UTF-8, for the cache's own files: a link at ``path`` is replaced,
    not followed (whoever can plant one must not choose which of the owner's files is overwritten)."""
    return write_private_bytes(path, text.encode("utf-8"), follow_links=False)


def private_dir(path: Path | str) -> Path:
    """The folder ``path`` inside the cache, made with every missing folder on the way 0700, and taken private
    (0700, the owner's own bits kept) where this user owns it and the group or others may enter it.

    ``mkdir(parents=True, mode=0o700)`` gives the mode to the last folder only (its parents are made 0777 less
    the umask, 0755), and folders made by older versions stayed 0755: the cache root's 0700 limits who can
    reach them, but a cache copied or moved elsewhere would carry them open.
    """
    path = Path(path)
    missing = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:  # another process made it meanwhile
            pass
    if not path.is_dir():
        raise NotADirectoryError(20, "not a folder", str(path))
    _tighten(path)
    return path


def _tighten(path: Path) -> None:
    """0700 / 0600 for a folder or file of this user that the group or others may use (never through a link)."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        return
    if st.st_mode & 0o077 and (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        try:
            os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
        except OSError:  # a read-only file system: used as it is
            pass


def make_tree_private(root: Path | str) -> None:
    """Take the group's and others' access away from every folder and file of this user under ``root``
    (a knowledge base written by an older version, or by a library under the usual umask of 022)."""
    root = Path(root)
    _tighten(root)
    for folder, dirs, files in os.walk(root):  # os.walk does not descend into linked folders
        for name in [*dirs, *files]:
            _tighten(Path(folder) / name)


_UMASK_LOCK = threading.Lock()
_UMASK_DEPTH = 0
_UMASK_SAVED = 0


@contextmanager
def private_umask() -> Iterator[None]:
    """A umask of 077 for the block: for what third-party libraries write into the cache (chromadb's database
    and index files, ``save_pretrained``'s JSON files), which take no mode of their own.

    The umask is the process's, so it is set for the block only (a library user's own files are made with
    their umask again after it); overlapping blocks of several threads count, and the first one's umask is
    put back when the last one ends (saving and restoring it per block would leave 077 behind when two
    overlap). Files another thread makes meanwhile are made private too, which takes nothing from the owner.
    """
    global _UMASK_DEPTH, _UMASK_SAVED
    with _UMASK_LOCK:
        if _UMASK_DEPTH == 0:
            _UMASK_SAVED = os.umask(0o077)
        _UMASK_DEPTH += 1
    try:
        yield
    finally:
        with _UMASK_LOCK:
            _UMASK_DEPTH -= 1
            if _UMASK_DEPTH == 0:
                os.umask(_UMASK_SAVED)


@contextmanager
def file_lock(path: Path | str) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the block, waiting for whoever holds it (another process or
    thread): for what two processes may build in the cache at once (a chromadb collection, a de-quantized
    model), the second then finds the first's work done instead of deleting it half-way.

    ``fcntl.flock`` on a lock file of its own (0600, never opened through a link); the lock goes with the
    descriptor, so a process that dies holding it releases it. The file is left in place: removing it while
    another process waits on it would let a third lock a new file beside them.
    """
    import fcntl

    path = Path(path)
    private_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
