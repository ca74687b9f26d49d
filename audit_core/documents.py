"""The unit of an audit: a document with a stable id."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Document:
    id: str
    text: str

    @property
    def n_words(self) -> int:
        return len(self.text.split())

    def content_hash(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()
