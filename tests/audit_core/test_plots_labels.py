"""The document numbers on a KDE plot (``plots.place_labels``) and the plot's notes, said once.

A browser walk's PDF showed the numbers of documents with close scores printed over each other (four fixed
heights in turn), and "No document received a score from ..." twice (in the image and under it).
"""
from __future__ import annotations

import io
import itertools
import random

import numpy as np
import pytest

from audit_core import plots, report
from audit_core.plots import LABEL_ROWS, Label, place_labels

CHAR, PAD = 0.01, 0.006  # data units of one character and of the offset plus gap


def _boxes_overlap(a: Label, b: Label) -> bool:
    """Whether two labels' boxes overlap: same row and overlapping spans (rows are a number's height apart)."""
    return a.row == b.row and a.x < b.right(CHAR, PAD) and b.x < a.right(CHAR, PAD)


def _check(xs: list[float], labels: list[Label]) -> None:
    numbers = [n for lab in labels for n in lab.numbers]
    assert sorted(numbers) == list(range(1, len(xs) + 1))  # every document numbered, once
    for lab in labels:
        assert lab.text == ",".join(map(str, lab.numbers))
        assert 0 <= lab.row < LABEL_ROWS and lab.y > 0
        for n in lab.numbers:  # a label begins at its first score and spans every score it names
            assert lab.x <= xs[n - 1] <= lab.right(CHAR, PAD)
    for a, b in itertools.combinations(labels, 2):
        assert not _boxes_overlap(a, b), (a, b)


def test_labels_of_close_scores_do_not_overlap():
    xs = [0.500 + 0.001 * i for i in range(8)]  # eight documents within a character's width
    labels = place_labels(xs, CHAR, PAD)
    _check(xs, labels)
    assert max(lab.row for lab in labels) == LABEL_ROWS - 1  # stacked in rows first ...
    assert any(len(lab.numbers) > 1 for lab in labels)  # ... then listed beside one mark


def test_labels_of_twenty_equal_scores_are_one_readable_list_per_row():
    xs = [0.7] * 20
    labels = place_labels(xs, CHAR, PAD)
    _check(xs, labels)
    assert len(labels) == LABEL_ROWS


def test_labels_of_scores_far_apart_stay_in_one_row_each_alone():
    xs = [0.1, 0.5, 0.3, 0.9]
    labels = place_labels(xs, CHAR, PAD)
    _check(xs, labels)
    assert {lab.row for lab in labels} == {0} and sorted(lab.text for lab in labels) == ["1", "2", "3", "4"]


@pytest.mark.parametrize("seed", range(20))
def test_labels_never_overlap_on_random_clusters(seed):
    rng = random.Random(seed)
    centres = [rng.random() for _ in range(rng.randint(1, 4))]
    xs = [min(1.0, max(0.0, rng.choice(centres) + rng.gauss(0, 0.01))) for _ in range(rng.randint(1, 60))]
    _check(xs, place_labels(xs, CHAR, PAD))


def test_place_labels_refuses_a_scale_it_cannot_place_at():
    with pytest.raises(ValueError):
        place_labels([0.5], 0.0, PAD)
    assert place_labels([], CHAR, PAD) == []


def _result(scores: list[float | None], reason: str = "too many non-answers: the target refused") -> dict:
    """An audit dict with MBA's shadow calibration and one result per score (None: no score, with ``reason``)."""
    rng = np.random.default_rng(0)
    ids = [f"doc-{i}" for i in range(len(scores))]
    results = {d: {"mba": {"method": "mba", "doc_id": d, "score": s, "decision": None,
                           "reason": None if s is not None else reason, "evidence": {}}}
               for d, s in zip(ids, scores)}
    verdicts = [{"doc_id": d, "verdict": "inconclusive", "score": None, "rule": "R1", "reason": f"MBA: {reason}",
                 "methods": {"mba": {"score": s, "decision": None, "reason": None if s is not None else reason}}}
                for d, s in zip(ids, scores)]
    return {"target": "demo", "created": "2025-05-01T10:00:00+00:00", "config": {"methods": ["mba"]},
            "documents": [{"id": d, "text": "Some words of a document."} for d in ids],
            "results": results, "verdicts": verdicts,
            "calibrations": {"mba": {"method": "mba", "threshold": 0.6,
                                     "member_scores": [float(x) for x in rng.beta(5, 2, 40)],
                                     "nonmember_scores": [float(x) for x in rng.beta(2, 5, 40)],
                                     "shadow_auc": 0.8, "params": {}}}}


def test_the_pdf_figure_prints_numbers_of_close_scores_apart():
    """Drawn at the PDF's scale, the numbers' boxes on the rendered figure do not overlap (they did: numbers
    1 and 5 of eight documents within 0.01 were printed at the same height over each other)."""
    r = _result([0.50 + 0.0012 * i for i in range(8)] + [0.2, 0.9])
    fig = plots.kde_matplotlib(plots.kde_data(r, "mba"))
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    marks = [t for t in ax.texts if t.get_text().replace(",", "").isdigit()]
    assert sorted(int(n) for t in marks for n in t.get_text().split(",")) == list(range(1, 11))
    boxes = [t.get_window_extent(renderer) for t in marks]
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)


def test_the_app_figure_places_its_numbers_in_rows_too():
    r = _result([0.50 + 0.0012 * i for i in range(8)])
    fig = plots.kde_figure_plotly(r, "mba")
    marks = [a for a in fig.layout.annotations if a.text and a.text.replace(",", "").isdigit()]
    assert sorted(int(n) for a in marks for n in a.text.split(",")) == list(range(1, 9))
    assert len({round(a.y, 6) for a in marks}) > 1  # stacked, not side by side over each other
    merged = next((a for a in marks if "," in a.text), None)
    if merged is not None:  # hovering a list names every document in it
        assert all(f"{n}. doc-{n - 1}" in merged.hovertext for n in map(int, merged.text.split(",")))


def test_no_document_scored_is_said_once_in_the_pdf(monkeypatch):
    """The PDF printed the plot's note in the image and again under it."""
    from pypdf import PdfReader

    drawn = []
    real = plots._png
    monkeypatch.setattr(plots, "_png", lambda fig, dpi: drawn.append(fig) or real(fig, dpi))
    r = _result([None, None])
    assert report.plotted_methods(r) == ["mba"]
    note = "No document received a score from MBA."
    assert plots.kde_data(r, "mba").notes == [note]
    pdf = report.pdf_report(r)
    text = " ".join(" ".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages).split())
    assert text.count(note) == 1
    kde = [f for f in drawn if f.axes and f.axes[0].get_title().startswith("MBA")]
    assert kde and not any(note in t.get_text() for f in kde for t in f.texts)
    # a PNG made on its own (outside the PDF) still carries its note
    alone = plots.kde_matplotlib(plots.kde_data(r, "mba"))
    assert any(note in t.get_text() for t in alone.texts)


def test_a_large_collection_is_marked_as_a_rug_without_numbers_or_key():
    """4,000 numbers merged into labels of 3,000 characters, widened the PDF's figure to 23,000 px (its plot
    0.4 cm wide on the page) and made a key of 120,000 characters (session 55). Beyond MAX_NUMBERED the marks
    carry no number, the key is empty, the plot says why, and the app's figure draws no line per document."""
    from PIL import Image

    rng = np.random.default_rng(1)
    big = _result([float(x) for x in rng.uniform(0.05, 0.95, plots.MAX_NUMBERED + 1)])
    d = plots.kde_data(big, "mba")
    assert not d.numbered and plots.kde_key(big, "mba") == []
    assert f"Your {plots.MAX_NUMBERED + 1} scored documents are marked without numbers" in d.note
    fig = plots.kde_matplotlib(d)
    assert not [t for t in fig.axes[0].texts if t.get_text().replace(",", "").isdigit()]
    width, _ = Image.open(io.BytesIO(plots.kde_png(big, "mba"))).size
    small = _result([0.2, 0.5, 0.9])
    assert plots.kde_data(small, "mba").numbered and [n for n, _, _ in plots.kde_key(small, "mba")] == [1, 2, 3]
    assert width <= 1.2 * Image.open(io.BytesIO(plots.kde_png(small, "mba"))).size[0]
    app = plots.kde_figure_plotly(big, "mba")
    assert not [a for a in app.layout.annotations if a.text and a.text.replace(",", "").isdigit()]
    assert len(app.layout.shapes) <= 2  # the thresholds only, not a line per document
    marks = next(t for t in app.data if t.name == "your documents")
    assert len(marks.x) == plots.MAX_NUMBERED + 1  # every document still a mark, named on hover
