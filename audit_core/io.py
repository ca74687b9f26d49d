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


def write_private_atomic(path: Path | str, text: str) -> Path:
    """Write ``text`` to ``path`` (mode 0600), atomically; the folder is created if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
