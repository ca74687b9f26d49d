"""S2MIA baseline (Li et al., 2024): does the RAG system complete a document the way the document goes on?

The first half of the document (by words) is the query; the system's answer
is compared with the document's second half. Two variants share one probe,
so one stored observation (method "s2mia") serves both:

* S2MIA-T (``s2mia_t``): threshold on the cosine similarity (all-MiniLM-L6-v2)
  between the answer and the second half;
* S2MIA-M (``s2mia_m``): a seeded scikit-learn classifier trained on the
  shadow's features [similarity, answer perplexity (mean negative logprob of
  the answer's tokens), unigram overlap (BLEU-1)]. Li et al. and Liu et al.
  use XGBoost; a standardised logistic regression is the default here because
  shadow sets are small, gradient boosting is available.

Without logprobs S2MIA-M uses a classifier trained without the perplexity
feature and says so in the evidence.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from audit_core.documents import Document
from audit_core.methods.base import (Calibration, MembershipMethod, MethodResult, Observation, QueryCost,
                                     send_all, template_words)
from audit_core.evidence.calibration import DEFAULT_FPR, apply_evidence, fit_evidence, fpr_key
from audit_core.methods.baseline_common import decide, fit_threshold, last_completion, split_halves, unusable
from audit_core.scoring import norm_words
from audit_core.target.base import ChatRequest, NoLogprobs, Target

#: the query prompt; {query} is the document's first half
PROMPT = (
    "Here is the beginning of a text:\n\n{query}\n\n"
    "Continue this text, or answer it if it is a question. "
    "Write only the continuation, with no introduction or explanation."
)

FULL_FEATURES = ("similarity", "answer_nll", "bleu1")
REDUCED_FEATURES = ("similarity", "bleu1")


@dataclass
class S2miaConfig:
    """Probe and feature parameters, shared by both variants, and S2MIA-M's classifier."""

    embedder: str = "all-minilm-l6-v2"  # the embedder of the S-RAG paper's setup
    min_words: int = 8  # each half needs a few words for a meaningful similarity
    tokens_per_word: float = 1.5  # answer budget: about as long as the second half
    min_answer_tokens: int = 16
    max_answer_tokens: int = 128  # caps the cost of long documents
    use_logprobs: bool = True  # the perplexity feature; set False for endpoints that refuse them
    # S2MIA-M only (the probe ignores them):
    classifier: str = "logistic"  # "logistic" or "gradient_boosting"
    seed: int = 0
    cv_folds: int = 5  # out-of-fold probabilities give the shadow AUC and the threshold


@dataclass
class S2miaFeatures:
    similarity: float  # cosine(answer, second half), in [-1, 1]
    bleu1: float  # clipped unigram precision of the answer x brevity penalty
    answer_nll: float | None  # mean -logprob of the answer's tokens; None without logprobs
    answer: str

    def vector(self, names: Sequence[str]) -> list[float]:
        return [float(getattr(self, n)) for n in names]


def bleu1(candidate: str, reference: str) -> float:
    """BLEU with unigrams only: clipped precision times the brevity penalty."""
    cand, ref = norm_words(candidate), norm_words(reference)
    if not cand or not ref:
        return 0.0
    rc = Counter(ref)
    matched = sum(min(c, rc[w]) for w, c in Counter(cand).items())
    bp = 1.0 if len(cand) > len(ref) else math.exp(1 - len(ref) / len(cand))
    return bp * matched / len(cand)


def answer_budget(n_second_words: int, cfg: S2miaConfig) -> int:
    return max(cfg.min_answer_tokens, min(cfg.max_answer_tokens, math.ceil(cfg.tokens_per_word * n_second_words)))


def probe_s2mia(doc: Document, target: Target, cfg: S2miaConfig) -> Observation:
    """The probe shared by S2MIA-T and S2MIA-M: one query, the first half of the document."""
    obs = Observation("s2mia", doc.id, data={"logprobs_requested": cfg.use_logprobs})
    halves = split_halves(doc.text, cfg.min_words)
    if halves is None:
        obs.skipped = "document_too_short"
        return obs
    obs.data.update(first_half=halves.first, second_half=halves.second)

    def req(logprobs: bool) -> ChatRequest:
        return ChatRequest.chat([{"role": "user", "content": PROMPT.format(query=halves.first)}],
                                max_tokens=answer_budget(halves.n_second_words, cfg), temperature=0.0,
                                logprobs=logprobs)

    out = send_all(target, [req(cfg.use_logprobs)], obs)
    if isinstance(out[0], NoLogprobs):
        send_all(target, [req(False)], obs)  # similarity needs no logprobs
        obs.data["logprobs_refused"] = True
    return obs


def extract_features(observations: Sequence[Observation], embedder: str) -> list[S2miaFeatures | str]:
    """Features per observation, or the reason it has none ("empty_answer", a target error...).

    All answers and second halves are embedded in one batch.
    """
    out: list[S2miaFeatures | str] = []
    pending: list[tuple[int, str, str, float | None]] = []
    for i, obs in enumerate(observations):
        bad = unusable("s2mia", obs)
        if bad is not None:
            out.append(bad.reason or "unusable")
            continue
        comp = last_completion(obs)
        assert comp is not None  # unusable() rules out observations without a response
        if not comp.text.strip():
            out.append("empty_answer")
            continue
        nll = None
        if comp.tokens:
            nll = -float(np.mean([t.logprob for t in comp.tokens]))
        out.append("")  # placeholder, filled below
        pending.append((i, comp.text, obs.data["second_half"], nll))
    if pending:
        from audit_core.models import embed

        texts = [a for _, a, _, _ in pending] + [s for _, _, s, _ in pending]
        emb = embed(texts, embedder)
        n = len(pending)
        for j, (i, answer, second, nll) in enumerate(pending):
            sim = float(np.dot(emb[j], emb[n + j]))
            out[i] = S2miaFeatures(similarity=sim, bleu1=bleu1(answer, second), answer_nll=nll, answer=answer)
    return out


def _evidence(f: S2miaFeatures, obs: Observation) -> dict:
    ev: dict[str, Any] = {"answer": f.answer, "second_half": obs.data.get("second_half"),
                          "similarity": f.similarity, "bleu1": f.bleu1}
    if f.answer_nll is not None:
        ev["answer_nll"] = f.answer_nll
        ev["answer_perplexity"] = math.exp(f.answer_nll)
    return ev


class _S2miaBase(MembershipMethod):
    version = "1"
    scoring_revision = "1"  # session 60: words compared after Unicode and typographic normalisation (norm_words)
    requires_logprobs = False
    shared_probe_scope = "s2mia"  # both variants send the same request

    def __init__(self, config: S2miaConfig | None = None) -> None:
        self.config = config or S2miaConfig()
        self.min_words = self.config.min_words

    def probe(self, doc: Document, target: Target) -> Observation:
        return probe_s2mia(doc, target, self.config)

    def query_cost(self, n_words: int) -> QueryCost | None:
        """One continuation of the first half, about as long as the second."""
        if n_words < max(2, self.config.min_words):
            return None
        half = n_words // 2
        return QueryCost(1, template_words(PROMPT) + half, answer_budget(n_words - half, self.config))


class S2miaThresholdMethod(_S2miaBase):
    """S2MIA-T: member when the answer is semantically close to the second half.

    Score = the cosine similarity clipped to [0, 1] (a negative cosine means
    "unrelated" as much as 0 does); the raw cosine stays in the evidence.
    """

    name = "s2mia_t"

    @staticmethod
    def _score(f: S2miaFeatures) -> float:
        return min(1.0, max(0.0, f.similarity))

    def prepare(self, members: Sequence[Observation], nonmembers: Sequence[Observation]) -> Calibration:
        fm = extract_features(members, self.config.embedder)
        fn = extract_features(nonmembers, self.config.embedder)
        return fit_threshold(
            self.name,
            [self._score(f) if isinstance(f, S2miaFeatures) else None for f in fm],
            [self._score(f) if isinstance(f, S2miaFeatures) else None for f in fn],
            default=None,  # no principled similarity threshold without shadow data
            params={"embedder": self.config.embedder},
        )

    def score(self, obs: Observation, calibration: Calibration) -> MethodResult:
        f = extract_features([obs], self.config.embedder)[0]
        if not isinstance(f, S2miaFeatures):
            return unusable(self.name, obs) or MethodResult(self.name, obs.doc_id, None, None, f, {})
        return decide(self.name, obs, self._score(f), calibration, _evidence(f, obs))


class S2miaModelMethod(_S2miaBase):
    """S2MIA-M: a classifier on [similarity, perplexity, BLEU-1] trained on the shadow."""

    name = "s2mia_m"

    def _new_model(self):
        c = self.config
        if c.classifier == "logistic":
            from sklearn.linear_model import LogisticRegression
            from sklearn.pipeline import make_pipeline
            from sklearn.preprocessing import StandardScaler

            return make_pipeline(StandardScaler(), LogisticRegression(random_state=c.seed))
        if c.classifier == "gradient_boosting":
            from sklearn.ensemble import GradientBoostingClassifier

            return GradientBoostingClassifier(random_state=c.seed)
        raise ValueError(f"unknown S2MIA-M classifier '{c.classifier}'; use 'logistic' or 'gradient_boosting'")

    def _fit(self, X: np.ndarray, y: np.ndarray) -> dict | None:
        """Fit on all rows; threshold and AUC from out-of-fold probabilities."""
        from sklearn.model_selection import StratifiedKFold, cross_val_predict

        n_min = int(min((y == 1).sum(), (y == 0).sum()))
        if n_min < 2:
            return None
        folds = StratifiedKFold(n_splits=min(self.config.cv_folds, n_min), shuffle=True,
                                random_state=self.config.seed)
        oof = cross_val_predict(self._new_model(), X, y, cv=folds, method="predict_proba")[:, 1]
        model = self._new_model().fit(X, y)
        m, n = oof[y == 1].tolist(), oof[y == 0].tolist()
        ev = fit_evidence(m, n, source=f"{folds.get_n_splits()}-fold out-of-fold classifier probabilities")
        return {"model": model, "threshold": ev["at_fpr"][fpr_key(DEFAULT_FPR)]["threshold_raw"], "auc": ev["auc"],
                "evidence": ev, "rows": int(len(y))}

    def prepare(self, members: Sequence[Observation], nonmembers: Sequence[Observation]) -> Calibration:
        fm = [f for f in extract_features(members, self.config.embedder) if isinstance(f, S2miaFeatures)]
        fn = [f for f in extract_features(nonmembers, self.config.embedder) if isinstance(f, S2miaFeatures)]
        models: dict[str, dict] = {}
        for key, names in (("full", FULL_FEATURES), ("reduced", REDUCED_FEATURES)):
            rows = [(f, 1) for f in fm] + [(f, 0) for f in fn]
            if key == "full":
                rows = [(f, y) for f, y in rows if f.answer_nll is not None]
            if not rows:
                continue
            X = np.array([f.vector(names) for f, _ in rows], dtype=float)
            y = np.array([lab for _, lab in rows])
            fitted = self._fit(X, y)
            if fitted is not None:
                models[key] = {**fitted, "features": list(names)}
        params: dict[str, Any] = {
            "classifier": self.config.classifier, "seed": self.config.seed,
            "embedder": self.config.embedder,
            "shadow_members_used": len(fm), "shadow_nonmembers_used": len(fn),
            "shadow_inconclusive": len(members) + len(nonmembers) - len(fm) - len(fn),
            "models": {k: {"features": v["features"], "threshold": v["threshold"], "auc": v["auc"], "rows": v["rows"],
                           "evidence": v["evidence"]} for k, v in models.items()},
        }
        main = models.get("full") or models.get("reduced")
        if main is None:
            params["threshold_source"] = "none"
            return Calibration(self.name, params=params, model=None)
        params["threshold_source"] = "shadow_out_of_fold"
        cal = Calibration(self.name, params=params,
                          model={k: {"model": v["model"], "threshold": v["threshold"], "features": v["features"],
                                     "key": k} for k, v in models.items()})
        return apply_evidence(cal, main["evidence"], DEFAULT_FPR)

    def score(self, obs: Observation, calibration: Calibration) -> MethodResult:
        f = extract_features([obs], self.config.embedder)[0]
        if not isinstance(f, S2miaFeatures):
            return unusable(self.name, obs) or MethodResult(self.name, obs.doc_id, None, None, f, {})
        ev = _evidence(f, obs)
        models = calibration.model or {}
        if f.answer_nll is not None and "full" in models:
            chosen = models["full"]
        elif "reduced" in models:
            chosen = models["reduced"]
            ev["features_note"] = ("the target returned no logprobs: classifier without perplexity"
                                   if f.answer_nll is None else
                                   "the shadow had no logprobs: classifier without perplexity")
        else:
            return MethodResult(self.name, obs.doc_id, None, None, "uncalibrated", ev)
        x = np.array([f.vector(chosen["features"])], dtype=float)
        p = float(chosen["model"].predict_proba(x)[0, 1])
        ev.update(features=chosen["features"])
        chosen_ev = (calibration.params.get("models") or {}).get(chosen.get("key"), {}).get("evidence")
        if chosen_ev is None:  # a hand-built calibration: its own threshold, no FPR statement
            ev["threshold"] = chosen["threshold"]
            return MethodResult(self.name, obs.doc_id, p, bool(p >= chosen["threshold"]), None, ev)
        return decide(self.name, obs, p, replace(calibration, params={**calibration.params, "evidence": chosen_ev}), ev)
