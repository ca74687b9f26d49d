"""Hebrew and Arabic in the PDF report, drawn readably.

reportlab draws one glyph per character, left to right: an Arabic word came out as separate letters and
every right-to-left word backwards. Each line is put in the order of the Unicode bidirectional algorithm
(python-bidi's ``bidi.algorithm``: its faster ``bidi.get_display`` does not mirror brackets, and "(2)" in a
Hebrew line came out ")2(") after Arabic letters take their joined forms (arabic-reshaper), which DejaVu Sans, the
report's font, draws. The reordering is line by line, so a text longer than one line of its box is wrapped
first (``BidiText``).
"""

from __future__ import annotations

import functools
from typing import Callable

import arabic_reshaper
from bidi.algorithm import get_base_level, get_display
from reportlab.lib.enums import TA_RIGHT
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.utils import simpleSplit
from reportlab.platypus import Flowable, Paragraph


@functools.lru_cache(maxsize=1)
def _reshaper() -> arabic_reshaper.ArabicReshaper:
    """arabic-reshaper giving only letter forms DejaVu Sans has: its one default ligature the font lacks (the
    word Allah as one glyph, U+FDF2) stays letters. Vowel marks are dropped (its default): reportlab would
    draw each beside its letter rather than over it."""
    return arabic_reshaper.ArabicReshaper(configuration={"arabic ligature allah": "False"})


def _in_drawing_order(lines: list[str]) -> str:
    """Shaped lines, each put in drawing order on its own, joined by line ends."""
    return "\n".join(get_display(line) for line in lines)


def visual(text: str) -> str:
    """``text`` in drawing order, each line on its own: right for a line that fits its box (an id, a table
    cell, a sentence)."""
    shaped = _reshaper().reshape(text)
    return _in_drawing_order(shaped.split("\n"))


class BidiText(Flowable):
    """A text with right-to-left words, wrapped in logical order to the width it is given and then put in
    drawing order line by line; set flush right when its first strong letter is right to left.

    ``drawn`` is text every character of which a font of the report draws; ``markup`` makes Paragraph
    markup of it (the report's escaping and fonts).
    """

    def __init__(self, drawn: str, style: ParagraphStyle, markup: Callable[[str], str]):
        super().__init__()
        self.drawn, self.style, self.markup = drawn, style, markup
        self._para: Paragraph | None = None

    def _laid_out(self, width: float) -> Paragraph:
        st = self.style
        room = max(width - st.leftIndent - st.rightIndent - 2 * (st.borderPadding or 0), 4 * st.fontSize)
        shaped = _reshaper().reshape(self.drawn)
        lines: list[str] = []
        for line in shaped.split("\n"):
            lines.extend(simpleSplit(line, st.fontName, st.fontSize, room) or [""])
        rtl = get_base_level(shaped) == 1
        style = ParagraphStyle(f"{st.name}-rtl", parent=st, alignment=TA_RIGHT) if rtl else st
        return Paragraph(self.markup(_in_drawing_order(lines)), style)

    def wrap(self, availWidth: float, availHeight: float) -> tuple[float, float]:  # noqa: N803 - reportlab's
        self._para = self._laid_out(availWidth)
        return self._para.wrap(availWidth, availHeight)

    def split(self, availWidth: float, availHeight: float) -> list:  # noqa: N803
        return self._laid_out(availWidth).split(availWidth, availHeight)

    def getSpaceBefore(self) -> float:  # noqa: N802 - reportlab's
        return self.style.spaceBefore

    def getSpaceAfter(self) -> float:  # noqa: N802
        return self.style.spaceAfter

    def draw(self) -> None:
        self._para.drawOn(self.canv, 0, 0)
