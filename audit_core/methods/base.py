"""The method interface shared by S-RAG, MBA and the baselines.

Probing (paid target queries) and scoring (offline) are separate, so stored
observations can be re-scored with another calibration without querying again:

    obs = method.probe(doc, target)            # raw answers, queries, tokens
    cal = method.prepare(member_obs, nonmember_obs)   # fitted on the SHADOW only
    res = method.score(obs, cal)                # score in [0, 1], decision, evidence

A failed target call is data: the observation records the error and the
result is inconclusive with that reason. No score is ever invented.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator, Sequence

from audit_core.documents import Document
from audit_core.target.base import ChatRequest, Completion, Target, TargetError


@dataclass
class Observation:
    """Everything one method learned about one document from one target."""

    method: str
    doc_id: str
    requests: list[dict] = field(default_factory=list)  # ChatRequest.to_json()
    responses: list[dict | None] = field(default_factory=list)  # Completion.to_json() or None
    errors: list[str | None] = field(default_factory=list)  # "reason: message" for failed calls
    data: dict[str, Any] = field(default_factory=dict)  # method-specific (probed words, masks...)
    skipped: str | None = None  # why the method could not probe this document at all

    @property
    def queries(self) -> int:
        return len(self.requests)

    @property
    def failed(self) -> int:
        return sum(e is not None for e in self.errors)

    def tokens_used(self) -> tuple[int, int]:
        p = c = 0
        for r in self.responses:
            if r:
                p += r["usage"]["prompt_tokens"]
                c += r["usage"]["completion_tokens"]
        return p, c

    def add(self, request_json: dict, outcome: Completion | TargetError) -> None:
        self.requests.append(request_json)
        if isinstance(outcome, TargetError):
            self.responses.append(None)
            self.errors.append(f"{outcome.reason}: {outcome}")
        else:
            self.responses.append(outcome.to_json())
            self.errors.append(None)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Observation":
        return cls(**d)


@dataclass
class Calibration:
    """What a method learned on the shadow: threshold or model, plus the shadow's own scores."""

    method: str
    threshold: float | None = None
    member_scores: list[float] = field(default_factory=list)  # shadow members (for KDE plots)
    nonmember_scores: list[float] = field(default_factory=list)
    shadow_auc: float | None = None  # out-of-fold AUC on the shadow documents
    params: dict[str, Any] = field(default_factory=dict)  # "evidence": audit_core.evidence.calibration.fit_evidence
    #: the false-positive rate the threshold was set for (None: a hand-built threshold, no FPR statement)
    fpr: float | None = None
    model: Any = None  # e.g. a trained classifier; not serialised by to_json

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("model")
        return d


@dataclass
class QueryCost:
    """What probing one document sends: queries, words of prompt, and the most completion tokens."""

    queries: int
    prompt_words: float
    completion_tokens: int
    #: prompt tokens that are not words of text (e.g. MBA's mask labels)
    extra_prompt_tokens: int = 0


def template_words(template: str) -> int:
    """Words of a prompt template without its {placeholders}."""
    import re

    return len(re.sub(r"\{[a-z_]+\}", " ", template).split())


@dataclass
class MethodResult:
    method: str
    doc_id: str
    score: float | None  # membership score in [0, 1]; None when inconclusive
    decision: bool | None  # True: member; None: inconclusive
    reason: str | None = None  # why inconclusive
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


class MembershipMethod:
    """Base class: one subclass per method, in its own module."""

    name: str = "method"
    #: bump when the requests a method sends change (stored answers are keyed by it)
    version: str = "1"
    requires_logprobs: bool = False
    #: the target's answers must carry the sources they cite (``Completion.sources``)
    requires_sources: bool = False
    #: fewest words a document needs for this method
    min_words: int = 1
    #: methods that send identical probes (S2MIA-T and S2MIA-M) name one shared
    #: scope, so a benchmark stores their target answers once and shadow
    #: preparation probes once for both; empty means the method's own name
    shared_probe_scope: str = ""
    #: whether ``use_collection`` is given the controls' texts beside the documents'. False for a method
    #: that sends collection texts inside other documents' questions (Cited sources' leads): a control
    #: the owner never published is then not sent, nor kept in the exports, as part of another's probe
    collection_takes_controls: bool = True
    #: bump when the method scores the same observations differently: a calibration saved (cached or
    #: shipped) under another revision is fitted again from its observations instead of being reused
    scoring_revision: str = ""

    @property
    def probe_scope(self) -> str:
        return self.shared_probe_scope or self.name

    def local_models(self) -> list[str]:
        """The local language models (registry names) this method loads to probe a document: its proxy.

        The audit loads them as a stage of their own before the shadow is
        prepared, so that a first run's de-quantizing shows as loading with a
        count, not as a probing stage stuck at 0 whose rate it then skews.
        """
        name = getattr(getattr(self, "config", None), "proxy_model", None)
        return [name] if isinstance(name, str) and name else []

    def probe(self, doc: Document, target: Target) -> Observation:  # pragma: no cover - interface
        raise NotImplementedError

    def query_cost(self, n_words: int) -> QueryCost | None:  # pragma: no cover - interface
        """What probing a document of ``n_words`` words sends; None when the method skips it.

        Counts follow ``probe`` exactly where they depend only on word counts;
        the estimate shown before an audit (``audit_core.estimate``) adds them up.
        """
        raise NotImplementedError

    def document_cost(self, doc: Document) -> QueryCost | None:
        """What probing ``doc`` sends: ``query_cost`` of its word count, unless what a method sends depends on
        the text itself and can be read off it cheaply (Extraction: one query per personal-data item)."""
        return self.query_cost(len(doc.text.split()))

    def probe_many(
        self, docs: Sequence[Document], target: Target, progress: Callable[[int], None] | None = None
    ) -> list[Observation]:
        out = []
        for d in docs:
            out.append(self.probe(d, target))
            if progress:
                progress(1)
        return out

    def use_collection(self, texts: Sequence[str]) -> None:
        """The texts audited together (the owner's documents and controls), given before any probe.

        Most methods judge each document alone and ignore them. A method whose
        evidence can come from phrases that the whole genre shares (Verbatim
        continuation) uses them to tell such phrases from the document's own
        words; it must score its shadow the same way, on the shadow's collection.
        """

    @contextmanager
    def probing_collection(self, texts: Sequence[str]) -> Iterator[None]:
        """Within the block, probes are sent as for a collection of ``texts`` (the shadow's own documents).

        A method whose probes draw on the documents audited together (Cited
        sources leads each question with a neighbouring document) must probe
        its shadow with the shadow's collection, never with the owner's; the
        collection an audit set with ``use_collection`` is back afterwards.
        Most methods' probes depend on the document alone: nothing to do.
        """
        yield

    def prepare(self, members: Sequence[Observation], nonmembers: Sequence[Observation]) -> Calibration:  # pragma: no cover
        raise NotImplementedError

    def restore(self, saved: dict, members: Sequence[Observation], nonmembers: Sequence[Observation]) -> Calibration:
        """The calibration of ``saved`` (a ``Calibration.to_json`` of these very observations), ready to score.

        The default calibrates again: for a threshold method that is cheap and
        needs nothing from the file. A method with an expensive, trained part
        (S-RAG) overrides this to fit only what cannot be stored as data.
        """
        return self.prepare(members, nonmembers)

    def score(self, obs: Observation, calibration: Calibration) -> MethodResult:  # pragma: no cover
        raise NotImplementedError


def send_all(
    target: Target,
    requests: Sequence[ChatRequest],
    obs: Observation,
    progress: Callable[[int], None] | None = None,
) -> list[Completion | TargetError]:
    """Send a method's requests as one batch and record every outcome in ``obs``.

    Batching lets in-process targets share computation and HTTP targets run
    concurrently; failures come back as TargetError objects, in order.
    """
    outcomes = target.complete_many(list(requests), progress)
    for req, out in zip(requests, outcomes):
        obs.add(req.to_json(), out)
    return outcomes


def takes_top_logprobs(fn) -> bool:
    """Whether a method's probe function accepts the target's ``top_logprobs`` limit (Min-k% does not)."""
    import inspect

    return "top_logprobs" in inspect.signature(fn).parameters


#: a shadow validation AUC below this is "about chance" (audit_core.report.auc_reading); the rule for
#: calibrations without out-of-fold evidence (audit_core.evidence.calibration.abstain_reason)
NO_SIGNAL_AUC = 0.6


def no_signal_reason(cal: Calibration | dict | None) -> str | None:
    """Why a method must abstain although it has a score (audit_core.evidence.calibration.abstain_reason).

    Its shadow validation showed no signal with confidence (the lower end of
    the out-of-fold AUC's 95% interval at or below 0.6), or the shadow has too
    few non-members to promise the chosen false-positive rate. Such a method
    says "inconclusive", and the audit sends none of its queries unless the
    user insists (``audit_core.audit.run_audit``). Takes a Calibration or its JSON.
    """
    if cal is None:
        return None
    if isinstance(cal, dict):
        cal = Calibration(method=cal.get("method", ""), shadow_auc=cal.get("shadow_auc"),
                          params=cal.get("params") or {}, fpr=cal.get("fpr"))
    from audit_core.evidence.calibration import abstain_reason

    return abstain_reason(cal)
