"""Writing the files the auditor keeps on the owner's computer: atomically, and readable by the owner only.

The cache holds the owner's documents, questions made from them, the target's
answers and shadow observations. Each file is written to a temporary file of
its own in the same folder (two processes preparing the same thing never
rename each other's half-written file) and then moved into place, so a crash
leaves the old file or none, never half of one.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_private_bytes(path: Path | str, data: bytes) -> Path:
    """Write ``data`` to ``path`` readable by the owner only (0600), atomically; the folder is created if missing.

    For every file the auditor keeps (shadow observations, questions, an uploaded corpus in any encoding,
    the CLI's unredacted results): under a umask of 022 ``write_bytes`` left them readable by every user of
    the computer. A link is followed (the file it names is replaced, not the link);
    a path that is no regular file (``/dev/stdout``, a named pipe) is a stream the user chose, written in place.
    """
    import stat

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
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # created 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_private_atomic(path: Path | str, text: str) -> Path:
    """``write_private_bytes`` for text, in UTF-8."""
    return write_private_bytes(path, text.encode("utf-8"))
