"""Figures of an audit, built from its JSON dict only.

Everything here reads the dict written by an audit run (the shape of
``AuditResult.to_json()``), never live objects, so an audit reopened from
history draws exactly the same figures as when it was run.

Two figures, each in two renderings (interactive plotly for the app, PNG via
matplotlib's Agg canvas for the PDF), both drawn from one data-preparation
function so they cannot disagree:

* the KDE plot of a method: the shadow's member vs non-member score
  distributions, with the user's documents marked at their scores -- how a
  document's score compares with what known members and non-members got;
* the S-RAG histogram of a document: the fraction of its probed words per
  probability interval beside the shadow's mean member / non-member histograms.

``scores_csv`` writes the numbers behind the KDE plots (the calibrated scores
they draw and the raw scores behind them, as ML Privacy Meter saves the raw
signal next to each plot), so a reader can redraw or re-test them.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

MEMBER_COLOR = "#d62728"
NONMEMBER_COLOR = "#1f77b4"
DOC_COLOR = "#2ca02c"
#: text colours meet WCAG AA (4.5:1) on white; the line colours above are for marks, not text
DOC_TEXT_COLOR = "#1d6b1d"
THRESHOLD_COLOR = "#666666"
NOTE_COLOR = "#555555"

#: points of the KDE evaluation grid
KDE_GRID_POINTS = 200
#: bins of the histogram drawn when a KDE cannot be estimated
FALLBACK_BINS = 10
#: where the document numbers of a KDE plot go (axes fraction): the first row at ``LABEL_TOP``, each further
#: row ``LABEL_ROW_STEP`` lower (a row is taller than a number: 16 pt in the PDF's figure, 23 px in the app's),
#: at most ``LABEL_ROWS`` rows (``place_labels``)
LABEL_TOP = 0.98
LABEL_ROW_STEP = 0.08
LABEL_ROWS = 6
#: the PNG's document numbers: font size (points), the width of one character of it (bold digits are 0.70 em
#: in DejaVu Sans Bold, a comma less), and the offset from the mark plus the gap to the next label (points)
PNG_LABEL_FONT = 8
PNG_LABEL_CHAR = 0.72 * PNG_LABEL_FONT
PNG_LABEL_PAD = 5.0
#: the app's: font size (px), one character's width, the gap (px), and the narrowest plot area assumed (px; the
#: app's wide layout gives more, and a wider plot only spreads the labels further apart)
PLOTLY_LABEL_FONT = 10
PLOTLY_LABEL_CHAR = 0.7 * PLOTLY_LABEL_FONT
PLOTLY_LABEL_PAD = 4.0
PLOTLY_PLOT_WIDTH = 500.0
#: the most documents a KDE plot numbers one by one (``numbered``); more are drawn as a rug of marks without
#: numbers or key: 4,000 numbers had merged into labels of 3,000 characters, widened the PDF's figure to
#: 23,000 px (its plot then 0.4 cm wide on the page) and made a key of 120,000 characters (session 55). The
#: app's marks still name their document on hover, and every score is in the scores CSV
MAX_NUMBERED = 50


def method_label(method: str) -> str:
    """Display name of a method (``audit_core.methods.method_label``)."""
    from audit_core.methods import method_label as label

    return label(method)


# --------------------------------------------------------------------------- reading the dict


def _finite(x: Any) -> float | None:
    """A float when ``x`` is a finite number, else None (scores may be null in the dict)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def calibration_of(result: dict, method: str) -> dict | None:
    """The shadow calibration of ``method`` in the dict, or None when there is none."""
    cal = (result.get("calibrations") or {}).get(method)
    return cal if isinstance(cal, dict) else None


def method_result(result: dict, doc_id: str, method: str) -> dict | None:
    """One document's result for one method (MethodResult JSON), or None."""
    r = ((result.get("results") or {}).get(doc_id) or {}).get(method)
    return r if isinstance(r, dict) else None


def document_ids(result: dict) -> list[str]:
    """Document ids in audit order: the verdicts' order, then any result not in a verdict."""
    ids = [v.get("doc_id") for v in result.get("verdicts") or [] if isinstance(v, dict)]
    ids = [str(i) for i in ids if i is not None]
    for d in result.get("results") or {}:
        if d not in ids:
            ids.append(str(d))
    return ids


def document_scores(result: dict, method: str) -> list[tuple[str, float | None, str | None]]:
    """(doc id, score or None, reason when None) for every document that has a result for ``method``."""
    out = []
    for d in document_ids(result):
        r = method_result(result, d, method)
        if r is None:
            continue
        out.append((d, _finite(r.get("score")), r.get("reason")))
    return out


# --------------------------------------------------------------------------- KDE data


@dataclass
class KdeData:
    """Everything the KDE plot shows, computed once for both renderings."""

    method: str
    members: list[float]
    nonmembers: list[float]
    documents: list[tuple[str, float]]  # (doc id, score) of scored documents
    threshold: float | None
    #: "kde": densities on ``grid``; "histogram": densities per bin of ``edges``; "none": no shadow scores
    mode: str
    grid: np.ndarray | None = None
    member_density: np.ndarray | None = None
    nonmember_density: np.ndarray | None = None
    edges: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)
    #: the highest score called "not found" (few shadow members score that low); None: nothing is cleared
    clear_threshold: float | None = None

    @property
    def note(self) -> str:
        return " ".join(self.notes)

    @property
    def numbered(self) -> bool:
        """Whether each document's mark carries its number (``MAX_NUMBERED``)."""
        return len(self.documents) <= MAX_NUMBERED


def _scores(values: Any) -> list[float]:
    return [f for f in (_finite(v) for v in (values or [])) if f is not None]


def kde_data(result: dict, method: str) -> KdeData:
    """Member / non-member densities of ``method``'s shadow scores and the documents' scores.

    A Gaussian KDE (scipy, Scott's bandwidth) needs at least two distinct
    values per group; otherwise (or when the covariance is singular) the plot
    falls back to density histograms and says so in ``notes``.
    """
    cal = calibration_of(result, method) or {}
    members, nonmembers = _scores(cal.get("member_scores")), _scores(cal.get("nonmember_scores"))
    scored = [(d, s) for d, s, _ in document_scores(result, method) if s is not None]
    unscored = [d for d, s, _ in document_scores(result, method) if s is None]
    data = KdeData(method, members, nonmembers, scored, _finite(cal.get("threshold")), mode="none")
    ev = (cal.get("params") or {}).get("evidence")
    if ev:
        from audit_core.evidence.calibration import clearance, clearing_withheld

        clear = clearance(ev)
        # a line that clears no shadow non-member, or that the method may not use, would only mislead
        if clear["cleared_share"] and clearing_withheld(method) is None:
            data.clear_threshold = _finite(clear["threshold"])
    label = method_label(method)
    if not cal:
        data.notes.append(f"No shadow calibration was stored for {label}, so there is no reference distribution.")
    elif not members and not nonmembers:
        data.notes.append(f"The shadow produced no {label} scores.")
    if not scored:
        data.notes.append(f"No document received a score from {label}.")
    elif unscored:
        data.notes.append(f"{len(unscored)} document(s) without a score from {label} are not shown.")
    if not data.numbered:
        data.notes.append(f"Your {len(data.documents)} scored documents are marked without numbers (more than "
                          f"{MAX_NUMBERED}); each one's score is in the scores CSV.")
    if not members and not nonmembers:
        return data

    everything = members + nonmembers + [s for _, s in scored]
    lo, hi = min(0.0, min(everything)), max(1.0, max(everything))
    groups = {"members": members, "non-members": nonmembers}
    too_few = [g for g, v in groups.items() if len(set(v)) < 2]
    if not too_few:
        from scipy.stats import gaussian_kde

        grid = np.linspace(lo, hi, KDE_GRID_POINTS)
        try:
            data.member_density = gaussian_kde(members)(grid)
            data.nonmember_density = gaussian_kde(nonmembers)(grid)
            data.grid, data.mode = grid, "kde"
            return data
        except np.linalg.LinAlgError as exc:
            data.notes.append(f"A density could not be estimated ({exc}); showing histograms instead.")
    else:
        data.notes.append(
            "A density estimate needs at least two distinct scores per group; shadow "
            + " and ".join(too_few) + " have fewer, so histograms are shown instead."
        )
    edges = np.linspace(lo, hi, FALLBACK_BINS + 1)
    data.edges, data.mode = edges, "histogram"
    data.member_density = _density_hist(members, edges)
    data.nonmember_density = _density_hist(nonmembers, edges)
    return data


def kde_key(result: dict, method: str) -> list[tuple[int, str, float]]:
    """(number, doc id, score) of each document marked on ``method``'s KDE plot.

    The plots label each mark with its number (an id is often too long to
    print at a mark, and 20 ids overprint); the key says which is which, and
    the app's hover text names the document. Empty when the plot numbers no mark (``KdeData.numbered``).
    """
    d = kde_data(result, method)
    return [(i, doc_id, s) for i, (doc_id, s) in enumerate(d.documents, 1)] if d.numbered else []


def _density_hist(values: list[float], edges: np.ndarray) -> np.ndarray | None:
    if not values:
        return None
    counts, _ = np.histogram(values, bins=edges)
    return counts / (len(values) * np.diff(edges))


# --------------------------------------------------------------------------- document numbers on a KDE plot


@dataclass(frozen=True)
class Label:
    """One label of document numbers on a KDE plot: its text, where its left edge is (data x: the score of its
    first document) and its row (0 at the top, ``LABEL_TOP``)."""

    text: str
    x: float
    row: int
    numbers: tuple[int, ...]

    @property
    def y(self) -> float:
        """Its height in axes fraction (the top of the text)."""
        return LABEL_TOP - self.row * LABEL_ROW_STEP

    def right(self, char_width: float, pad: float) -> float:
        """The data x where its box ends: ``pad`` (offset from the mark and gap to the next) and its characters."""
        return self.x + pad + len(self.text) * char_width


def place_labels(xs: Sequence[float], char_width: float, pad: float, rows: int = LABEL_ROWS) -> list[Label]:
    """Where each document's number goes on a KDE plot, so that no two labels overprint.

    Document ``i`` (0-based in ``xs``) is numbered ``i + 1`` and marked at ``xs[i]``; its label starts there.
    ``char_width`` and ``pad`` are in data units (the caller knows the plot's scale). Labels are placed from
    left to right, each in the first row (from the top) where the label before it has ended; where every one
    of ``rows`` rows is still occupied at its score, its number joins the label that ends first ("3,7,12"),
    whose box then spans its score: close scores stay readable as a list instead of a blob. Cycling through
    four fixed heights had printed numbers of close scores over each other (a browser walk's PDF).
    """
    if char_width <= 0 or pad < 0 or rows < 1:
        raise ValueError("char_width must be positive, pad not negative, rows at least 1")
    labels: list[Label] = []
    ends: list[float] = []  # per row: where its last label ends
    last: list[int] = []  # per row: the index in ``labels`` of its last label
    for i in sorted(range(len(xs)), key=lambda k: (xs[k], k)):
        x, number = float(xs[i]), i + 1
        row = next((k for k, end in enumerate(ends) if end <= x), None)
        if row is None and len(ends) < rows:
            row = len(ends)
            ends.append(-math.inf)
            last.append(-1)
        if row is not None:
            labels.append(Label(str(number), x, row, (number,)))
            last[row] = len(labels) - 1
        else:
            row = min(range(len(ends)), key=lambda k: ends[k])
            old = labels[last[row]]
            labels[last[row]] = Label(f"{old.text},{number}", old.x, row, (*old.numbers, number))
        ends[row] = labels[last[row]].right(char_width, pad)
    return sorted(labels, key=lambda lab: lab.numbers[0])  # in the documents' order, as the key lists them


def x_span(d: "KdeData") -> tuple[float, float]:
    """The score range a KDE plot spans: [0, 1] and every shadow and document score (as ``kde_data``'s grid)."""
    everything = d.members + d.nonmembers + [s for _, s in d.documents]
    return min([0.0, *everything]), max([1.0, *everything])


# --------------------------------------------------------------------------- S-RAG histogram data


@dataclass
class HistogramData:
    """One document's S-RAG histogram (fractions) beside the shadow's mean histograms."""

    doc_id: str
    labels: list[str]  # interval labels, e.g. "[0.0, 0.1)"
    document: list[float] | None  # fractions per bin; None when the document has no histogram
    members: list[float] | None
    nonmembers: list[float] | None
    n_probes: int
    below_topk_share: float | None
    notes: list[str] = field(default_factory=list)

    @property
    def note(self) -> str:
        return " ".join(self.notes)


def interval_labels(bins: int) -> list[str]:
    """Labels of the m equal intervals of [0, 1]; the last one is closed, as in S-RAG's binning."""
    out = []
    for j in range(bins):
        a, b = j / bins, (j + 1) / bins
        out.append(f"[{a:.2g}, {b:.2g}{']' if j == bins - 1 else ')'}")
    return out


def srag_histogram_data(result: dict, doc_id: str, method: str = "srag") -> HistogramData:
    """The document's histogram of probed-word probabilities and the shadow's means, as fractions.

    A document whose probes failed has no histogram (S-RAG refuses to build
    one with holes); the figure then shows the shadow only and says why.
    """
    res = method_result(result, doc_id, method) or {}
    ev = res.get("evidence") or {}
    cal = calibration_of(result, method) or {}
    params = cal.get("params") or {}
    counts = _scores(ev.get("histogram")) if ev.get("histogram") is not None else None
    members = _scores(params.get("member_hist_mean")) or None
    nonmembers = _scores(params.get("nonmember_hist_mean")) or None
    cfg_bins = (params.get("config") or {}).get("bins")
    bins = len(counts) if counts else (len(members) if members else (len(nonmembers) if nonmembers else cfg_bins))
    notes: list[str] = []
    if not isinstance(bins, int) or bins < 1:
        bins = 0
        notes.append("No S-RAG histogram is available for this audit.")

    doc_fracs = None
    n = 0
    if not res:
        notes.append("S-RAG was not run on this document.")
    elif counts is None:
        from audit_core.verdict import plain_reason  # a reason's machine code is no sentence

        why = plain_reason(res.get("reason")) or "no histogram was recorded"
        notes.append(f"This document has no S-RAG histogram: {why}.")
    else:
        n = int(round(sum(counts)))
        if n > 0:
            doc_fracs = [c / n for c in counts]
        else:
            notes.append("This document's histogram is empty (no probes).")
    for name, series in (("member", members), ("non-member", nonmembers)):
        if series is not None and len(series) != bins:
            notes.append(f"The shadow {name} histogram has {len(series)} bins, not {bins}; it is not shown.")
    if members is not None and len(members) != bins:
        members = None
    if nonmembers is not None and len(nonmembers) != bins:
        nonmembers = None
    if bins and members is None and nonmembers is None:
        notes.append("No shadow histograms were stored for comparison.")
    return HistogramData(
        doc_id=doc_id,
        labels=interval_labels(bins) if bins else [],
        document=doc_fracs,
        members=members,
        nonmembers=nonmembers,
        n_probes=n,
        below_topk_share=_finite(ev.get("below_topk_share")),
        notes=notes,
    )


# --------------------------------------------------------------------------- plotly


def _ptext(text: str) -> str:
    """Text for plotly labels: plotly reads a subset of HTML, so a document id like "<b>" must be escaped."""
    import html

    return html.escape(text, quote=False)


def _kde_title(d: KdeData) -> str:
    return f"{method_label(d.method)}: shadow member vs non-member scores"


def kde_figure_plotly(result: dict, method: str):
    """Interactive KDE plot of ``method`` with each document marked at its score (plotly Figure)."""
    import plotly.graph_objects as go

    d = kde_data(result, method)
    fig = go.Figure()
    for name, dens, color, n in _density_groups(d):
        if dens is None:
            continue
        if d.mode == "kde":
            fig.add_trace(go.Scatter(x=d.grid, y=dens, mode="lines", name=f"{name} (n={n})",
                                     line={"color": color}, fill="tozeroy", opacity=0.5))
        else:
            centers = (d.edges[:-1] + d.edges[1:]) / 2
            fig.add_trace(go.Bar(x=centers, y=dens, width=np.diff(d.edges), name=f"{name} (n={n})",
                                 marker_color=color, opacity=0.5))
    if d.mode == "histogram":
        fig.update_layout(barmode="overlay")
    # vertical lines are built as one list: add_vline per document is slow for large audits
    shapes, labels = [], []
    def vline(x: float, color: str, dash: str | None = None) -> None:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                       "line": {"color": color, "width": 1.5, "dash": dash or "solid"}})
    if d.threshold is not None:
        vline(d.threshold, THRESHOLD_COLOR, "dash")
        labels.append({"x": d.threshold, "y": 0, "xref": "x", "yref": "paper", "text": "threshold",
                       "showarrow": False, "xanchor": "left", "yanchor": "bottom",
                       "font": {"size": 10, "color": THRESHOLD_COLOR}})
    if d.clear_threshold is not None:
        vline(d.clear_threshold, THRESHOLD_COLOR, "dot")
        labels.append({"x": d.clear_threshold, "y": 0.08, "xref": "x", "yref": "paper", "text": "not found below",
                       "showarrow": False, "xanchor": "right", "yanchor": "bottom",
                       "font": {"size": 10, "color": THRESHOLD_COLOR}})
    if d.documents and d.numbered:
        for _, s in d.documents:
            vline(s, DOC_COLOR)
        lo, hi = x_span(d)
        per_px = 1.1 * (hi - lo) / PLOTLY_PLOT_WIDTH  # plotly's autorange pads the span a little
        for lab in place_labels([s for _, s in d.documents], PLOTLY_LABEL_CHAR * per_px, PLOTLY_LABEL_PAD * per_px):
            names = "<br>".join(f"{n}. {_ptext(d.documents[n - 1][0])}" for n in lab.numbers)
            labels.append({"x": lab.x, "y": lab.y, "xref": "x", "yref": "paper", "text": lab.text,
                           "showarrow": False, "xanchor": "left", "yanchor": "top", "hovertext": names,
                           "font": {"size": PLOTLY_LABEL_FONT, "color": DOC_TEXT_COLOR}})
    if d.documents:  # numbered or not, every document is a mark named on hover
        fig.add_trace(go.Scatter(
            x=[s for _, s in d.documents], y=[0.0] * len(d.documents), mode="markers",
            name="your documents", marker={"color": DOC_COLOR, "size": 10, "symbol": "diamond"},
            text=[_ptext(doc_id) for doc_id, _ in d.documents], customdata=list(range(1, len(d.documents) + 1)),
            hovertemplate="%{customdata}. %{text}: score %{x:.3f}<extra></extra>",
        ))
    if d.notes:
        labels.append({"text": _ptext(d.note), "xref": "paper", "yref": "paper", "x": 0, "y": 1.0, "xanchor": "left",
                       "yanchor": "bottom", "showarrow": False, "align": "left", "font": {"size": 11, "color": NOTE_COLOR}})
    fig.update_layout(title=_kde_title(d), xaxis_title="calibrated score", yaxis_title="density",
                      legend={"orientation": "h", "y": -0.2}, margin={"t": 80, "b": 80},
                      shapes=shapes, annotations=labels)
    if d.mode == "none":
        fig.update_xaxes(range=[0, 1])
    return fig


def srag_histogram_figure_plotly(result: dict, doc_id: str):
    """Interactive grouped bar chart: the document's S-RAG histogram beside the shadow's means."""
    import plotly.graph_objects as go

    h = srag_histogram_data(result, doc_id)
    fig = go.Figure()
    for name, series, color in (("this document", h.document, DOC_COLOR),
                                ("shadow members (mean)", h.members, MEMBER_COLOR),
                                ("shadow non-members (mean)", h.nonmembers, NONMEMBER_COLOR)):
        if series is not None:
            fig.add_trace(go.Bar(x=h.labels, y=series, name=name, marker_color=color))
    fig.update_layout(barmode="group", title=_ptext(f"S-RAG: probed-word probabilities of {doc_id}"),
                      xaxis_title="probability the target gave to the true next word",
                      yaxis_title="fraction of probed words", legend={"orientation": "h", "y": -0.25},
                      margin={"t": 60, "b": 100})
    if h.notes:
        fig.add_annotation(text=_ptext(h.note), xref="paper", yref="paper", x=0, y=1.0, yanchor="bottom",
                           showarrow=False, align="left", font={"size": 11, "color": NOTE_COLOR})
    return fig


# --------------------------------------------------------------------------- matplotlib (PNG)


def _new_figure(width: float = 7.0, height: float = 3.6):
    """A figure on its own Agg canvas: no pyplot, so no global state shared between threads."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _png(fig, dpi: int) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def _mtext(text: str) -> str:
    """Text for matplotlib: a "$" in a document id would otherwise start math mode."""
    return text.replace("$", r"\$")


def _wrap(text: str, width: int = 95) -> str:
    import textwrap

    return _mtext("\n".join(textwrap.wrap(text, width)))


def _density_groups(d: "KdeData") -> tuple[tuple[str, object, str, int], ...]:
    """(label, density, colour, count) of the shadow's two classes, shared by both renderers."""
    return (("shadow members", d.member_density, MEMBER_COLOR, len(d.members)),
            ("shadow non-members", d.nonmember_density, NONMEMBER_COLOR, len(d.nonmembers)))


def kde_png(result: dict, method: str, dpi: int = 110, notes: bool = True) -> bytes:
    """The KDE plot of ``method`` as PNG bytes (matplotlib Agg), for the PDF report.

    ``notes=False`` leaves the plot's notes (``KdeData.notes``) out of the image, for a caller that prints them
    as text under it: the PDF did both, and said "No document received a score from ..." twice.
    """
    return _png(kde_matplotlib(kde_data(result, method), notes), dpi)


def kde_matplotlib(d: KdeData, notes: bool = True):
    """The KDE plot as a matplotlib Figure (``kde_png``), with each label of document numbers where
    ``place_labels`` puts it at this figure's scale."""
    fig = _new_figure()
    ax = fig.add_subplot(1, 1, 1)
    for name, dens, color, n in _density_groups(d):
        if dens is None:
            continue
        if d.mode == "kde":
            ax.plot(d.grid, dens, color=color, label=f"{name} (n={n})")
            ax.fill_between(d.grid, dens, color=color, alpha=0.25)
        else:
            ax.bar(d.edges[:-1], dens, width=np.diff(d.edges), align="edge", color=color, alpha=0.45,
                   label=f"{name} (n={n})")
    if d.threshold is not None:
        ax.axvline(d.threshold, color=THRESHOLD_COLOR, linestyle="--", linewidth=1, label="threshold")
    if d.clear_threshold is not None:
        ax.axvline(d.clear_threshold, color=THRESHOLD_COLOR, linestyle=":", linewidth=1, label="not found below")
    if d.numbered:
        for i, (doc_id, s) in enumerate(d.documents):
            ax.axvline(s, color=DOC_COLOR, linewidth=1.2,
                       label="your documents (numbered; key below)" if i == 0 else None)
    elif d.documents:  # a rug at the foot of the plot: one short mark per document, no number
        ax.plot([s for _, s in d.documents], [0.0] * len(d.documents), "|", color=DOC_COLOR, markersize=14,
                alpha=0.5, label=f"your documents ({len(d.documents)})", transform=ax.get_xaxis_transform())
    if d.mode == "none":
        ax.set_xlim(0, 1)
    if d.documents and d.numbered:
        lo, hi = ax.get_xlim()
        ax.set_xlim(lo, hi)  # the scale the labels are placed at: nothing drawn after may change it
        per_pt = (hi - lo) / (fig.get_figwidth() * 72 * ax.get_position().width)
        for lab in place_labels([s for _, s in d.documents], PNG_LABEL_CHAR * per_pt, PNG_LABEL_PAD * per_pt):
            ax.annotate(lab.text, xy=(lab.x, lab.y), xycoords=("data", "axes fraction"), xytext=(2, 0),
                        textcoords="offset points", fontsize=PNG_LABEL_FONT, fontweight="bold", ha="left",
                        va="top", color=DOC_TEXT_COLOR,
                        bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.75})
    ax.set_xlabel("calibrated score")
    ax.set_ylabel("density")
    ax.set_title(_kde_title(d), fontsize=11)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=4, frameon=False)
    if d.notes and notes:
        fig.text(0.01, -0.12, _wrap(d.note), fontsize=8, color=NOTE_COLOR, va="top")
    return fig


def srag_histogram_png(result: dict, doc_id: str, dpi: int = 110) -> bytes:
    """The document's S-RAG histogram beside the shadow's means as PNG bytes, for the PDF report."""
    h = srag_histogram_data(result, doc_id)
    fig = _new_figure(7.0, 3.2)
    ax = fig.add_subplot(1, 1, 1)
    series = [(n, s, c) for n, s, c in (("this document", h.document, DOC_COLOR),
                                        ("shadow members (mean)", h.members, MEMBER_COLOR),
                                        ("shadow non-members (mean)", h.nonmembers, NONMEMBER_COLOR))
              if s is not None]
    x = np.arange(len(h.labels))
    width = 0.8 / max(1, len(series))
    for i, (name, s, color) in enumerate(series):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, s, width=width, color=color, label=name)
    ax.set_xticks(x)
    ax.set_xticklabels(h.labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_xlabel("probability the target gave to the true next word", fontsize=9)
    ax.set_ylabel("fraction of probed words", fontsize=9)
    ax.set_title(_mtext(f"S-RAG histogram: {doc_id[:50]}"), fontsize=10)
    if series:
        ax.legend(fontsize=8, frameon=False)
    if h.notes:
        fig.text(0.01, -0.2, _wrap(h.note), fontsize=8, color=NOTE_COLOR, va="top")
    return _png(fig, dpi)


# --------------------------------------------------------------------------- raw scores


#: the columns of the scores CSV: ``calibrated_score`` is what the KDE plot draws, ``raw_score`` the method's
#: own reading that its thresholds were set on (empty where the audit did not keep it)
SCORES_HEADER = ("method", "group", "id", "calibrated_score", "raw_score", "reason")


def _shadow_raw(cal: dict, group: str, n: int) -> list[float | None]:
    """The raw shadow scores behind ``group``'s calibrated ones, index by index (``apply_evidence`` maps each
    raw score of the calibration's evidence to the calibrated one in its place), or Nones where they are not
    kept or do not line up."""
    raw = _scores(((cal.get("params") or {}).get("evidence") or {}).get(group))
    return raw if len(raw) == n else [None] * n


def score_rows(result: dict, method: str) -> list[list[str]]:
    """The rows of ``method`` in the scores CSV (``SCORES_HEADER``): each shadow member's and non-member's
    score (numbered: the shadow's scores carry no document ids), then each document's, or why it has none."""
    from audit_core.report import csv_cell, scrub_text  # report builds on this module

    cal = calibration_of(result, method) or {}
    cell = lambda x: "" if x is None else repr(x)  # noqa: E731 - full precision, empty for none
    rows = []
    for group, key, raw_key in (("shadow_member", "member_scores", "member_raw"),
                                ("shadow_nonmember", "nonmember_scores", "nonmember_raw")):
        scores = _scores(cal.get(key))
        for i, (s, raw) in enumerate(zip(scores, _shadow_raw(cal, raw_key, len(scores)))):
            rows.append([csv_cell(method), group, f"{group}_{i}", cell(s), cell(raw), ""])
    for doc_id, s, reason in document_scores(result, method):
        ev = (method_result(result, doc_id, method) or {}).get("evidence") or {}
        raw = _finite(ev.get("raw_score")) if isinstance(ev, dict) and s is not None else None
        why = "" if s is not None else scrub_text(reason or "")
        rows.append([csv_cell(method), "document", csv_cell(doc_id), cell(s), cell(raw), csv_cell(why)])
    return rows


def scores_csv(result: dict, methods: list[str]) -> str:
    """The scores behind the KDE plots of ``methods`` (as ML Privacy Meter saves the raw signal next to each
    plot), so that a reader can redraw or re-test them: ``SCORES_HEADER``, then ``score_rows`` per method."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(SCORES_HEADER)
    for m in methods:
        w.writerows(score_rows(result, m))
    return buf.getvalue()


def raw_scores_csv(result: dict, method: str) -> str:
    """The scores behind the KDE plot of one method (``scores_csv``), for the download beside its plot."""
    return scores_csv(result, [method])
