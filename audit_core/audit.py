"""One audit, end to end: capability probe, shadow preparation, probing the
target document by document, scoring, verdicts. The app and the CLI both call
``run_audit``; neither holds any logic of its own.

The orchestration belongs to the auditing library, not to the simulated RAG
systems in ``shadow/``: the shadow preparation comes in as a function
(``prepare``, in practice ``shadow.prepare.prepare_shadow``) and the shadow's
configuration as an opaque object, so audit_core imports nothing from shadow/.
"""
from __future__ import annotations

import datetime as _dt
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any, Callable, Sequence

from audit_core.documents import Document
from audit_core.evidence.calibration import DEFAULT_FPR, with_fpr
from audit_core.evidence.statement import what_this_shows
from audit_core.methods import create_method
from audit_core.methods.base import (Calibration, MembershipMethod, MethodResult, Observation, no_signal_reason,
                                     takes_top_logprobs)
from audit_core.target.base import Capabilities, Target
from audit_core.verdict import (FOR_THE_AUDIT, Verdict, VerdictConfig, controls_lead, decide,
                                 decide_with_controls)

#: progress(stage, done, total)
Progress = Callable[[str, int, int], None]
#: prepare(methods, shadow_config, progress) -> an object with ``calibrations``
#: (method name -> Calibration): the shadow preparation (shadow.prepare.prepare_shadow)
Preparer = Callable[[Sequence[MembershipMethod], Any, "Progress | None"], Any]


@dataclass
class AuditConfig:
    methods: list[str] = field(default_factory=lambda: ["srag", "mba"])
    #: how the shadow RAG is built (a shadow.prepare.ShadowConfig); None: the preparer's default
    shadow: Any = None
    #: per-method configuration overrides, e.g. {"srag": {"bins": 12}, "mba": {"n_masks": 10}}
    method_params: dict[str, dict] = field(default_factory=dict)
    verdict: VerdictConfig = field(default_factory=VerdictConfig)
    #: methods probed even when their shadow calibration shows no signal (the user
    #: insisted); any other method without signal sends no query (``no_signal_reason``)
    run_without_signal: list[str] = field(default_factory=list)
    #: per-document false-positive rate (1%, 5% or 10%: audit_core.evidence.calibration.FPR_CHOICES)
    fpr: float = DEFAULT_FPR
    #: what the controls passed to run_audit are (audit_core.evidence.collection.CONTROL_KINDS)
    controls_kind: str = "declared"
    #: how the target's model answers: "completion" (continues the text) or "chat";
    #: None: as the capability probe found (``audit_core.target.style.resolve_style``).
    #: The shadow answers, and S-RAG reads, in this style (``with_target_style``).
    target_style: str | None = None
    #: where ``target_style`` came from, set by ``with_target_style``
    target_style_source: str = ""
    #: why ``methods`` are these, where the audit chose them (``methods.AUTO``); set by ``with_target_style``
    methods_source: str = ""


@dataclass
class AuditResult:
    target: str
    created: str
    config: dict
    capabilities: dict
    verdicts: list[Verdict]
    results: dict[str, dict[str, MethodResult]]  # doc id -> method -> result
    observations: dict[str, dict[str, Observation]]
    calibrations: dict[str, Calibration]
    not_run: dict[str, str]  # method -> why it could not run on this target
    account: dict
    documents: list[Document]
    cancelled: bool = False
    #: run-level account of what went wrong (see ``failure_summary``); empty dict when built by hand
    failures: dict = field(default_factory=dict)
    #: stored answers used instead of sending: {"policy_days", "reused", "sent", "oldest_reused",
    #: "newest_reused"} (see ``freshness_of``); empty dict when built by hand
    freshness: dict = field(default_factory=dict)
    #: method -> why its shadow showed no signal (``no_signal_reason``); such a method
    #: never votes, and sends no query unless it is in ``run_without_signal``
    no_signal: dict = field(default_factory=dict)
    #: when the result was put together (``created`` is when the audit started)
    finished: str = ""
    #: the collection-level test (``collection_summary``); empty dict when built by hand
    collection: dict = field(default_factory=dict)
    #: the per-document false-positive rate the decisions were made at
    fpr: float | None = None

    def to_json(self, observations: bool = True) -> dict:
        """The result as plain data. ``observations=False`` leaves out the target's raw answers (most of a
        large result's size: about 20 KB per document of a text-only method, over 1 MB with a chat model's
        logprobs), for a view of the result so far that never reads them (the app's)."""
        return {
            "target": self.target,
            "created": self.created,
            "config": self.config,
            "capabilities": self.capabilities,
            "verdicts": [v.to_json() for v in self.verdicts],
            "results": {d: {m: r.to_json() for m, r in rs.items()} for d, rs in self.results.items()},
            "observations": {d: {m: o.to_json() for m, o in os_.items()} for d, os_ in self.observations.items()}
            if observations else {},
            "calibrations": {m: c.to_json() for m, c in self.calibrations.items()},
            "not_run": self.not_run,
            "account": self.account,
            "documents": [asdict(d) for d in self.documents],
            "cancelled": self.cancelled,
            "failures": self.failures,
            "freshness": self.freshness,
            "no_signal": self.no_signal,
            "finished": self.finished,
            "fpr": self.fpr,
            "method_power": method_power(self.calibrations),
            "collection": self.collection,
            "what_this_shows": what_this_shows(self.fpr, self.collection),
        }


def freshness_of(target: Target, probe: int = 0) -> dict:
    """The freshness account of a target: a caching target's own, else nothing was reused.

    ``probe`` is how many requests the capability probe sent (always asked anew,
    never stored): the report adds them to "sent", so that its count agrees with
    the account of queries the target received.
    """
    own = getattr(target, "freshness", None)
    if callable(own):
        return {**own(), "probe": probe}
    return {"policy_days": None, "reused": 0, "sent": max(0, target.account.as_dict().get("queries", 0) - probe),
            "oldest_reused": None, "newest_reused": None, "probe": probe}


def config_dict(cfg: AuditConfig) -> dict:
    """The audit configuration as plain data (what the store and the report keep; no credentials)."""
    shadow = asdict(cfg.shadow) if cfg.shadow is not None and is_dataclass(cfg.shadow) else cfg.shadow
    return {"methods": list(cfg.methods), "shadow": shadow, "method_params": cfg.method_params,
            "verdict": asdict(cfg.verdict), "run_without_signal": list(cfg.run_without_signal),
            "fpr": cfg.fpr, "controls_kind": cfg.controls_kind, "target_style": cfg.target_style,
            "target_style_source": cfg.target_style_source,
            # only where the audit chose the methods: an older run's configuration, compared to resume it, is the same
            **({"methods_source": cfg.methods_source} if cfg.methods_source else {})}


def with_target_style(cfg: AuditConfig, caps: Capabilities) -> AuditConfig:
    """A copy of ``cfg`` that reads the target in its style: the user's choice, else the probe's finding.

    The shadow RAG answers in that style (``shadow.prompt_style``: its
    generator's chat template, or plain text it continues) and the methods that
    treat the styles differently (``reads_target_style``: S-RAG with and without
    logprobs read the answers in it, Verbatim sends a chat target more probes)
    follow it, so the calibration is made on answers like the target's. An
    unknown style is read as chat (``style.resolve_style``). ``methods.AUTO``
    among the methods becomes the methods for what ``caps`` found
    (``methods.expand_auto``), and ``methods_source`` says why.
    """
    from dataclasses import replace

    from audit_core.methods import AUTO, auto_reason, expand_auto, in_target_style
    from audit_core.target.style import resolve_style

    style, source = resolve_style(cfg.target_style, caps.style, caps.style_detail)
    methods, chosen = list(cfg.methods), cfg.methods_source
    if AUTO in methods:
        methods = expand_auto(methods, caps.logprobs, caps.sources, style)
        chosen = auto_reason(caps.logprobs, caps.sources, style)
    params = in_target_style(cfg.method_params, methods, style)
    shadow = cfg.shadow
    if shadow is not None and hasattr(shadow, "prompt_style"):
        shadow = replace(shadow, prompt_style=style) if is_dataclass(shadow) else shadow
    return replace(cfg, methods=methods, shadow=shadow, method_params=params, target_style=style,
                   target_style_source=source, methods_source=chosen)


def method_power(calibrations: dict[str, Calibration]) -> dict[str, dict]:
    """What each method's decisions are worth: its FPR, shadow power at it, shadow AUC and whether it decides.

    ``power`` is the share of shadow members (out of fold) called members at
    ``fpr``; ``cleared`` the share of shadow non-members it may call "not
    found" (at most ``miss_rate`` of its members score that low; None when it
    can clear nothing); ``decides`` is False when the method abstains (``reason``).
    """
    from audit_core.evidence.calibration import abstain_reason, clearance_of, clearing_withheld, power_at

    out = {}
    for name, cal in calibrations.items():
        ev = (cal.params or {}).get("evidence") or {}
        why = abstain_reason(cal)
        clear = clearance_of(cal) or {}
        out[name] = {"fpr": cal.fpr, "power": power_at(cal), "cleared": clear.get("cleared_share"),
                     "miss_rate": clear.get("max_miss_rate"), "shadow_auc": cal.shadow_auc,
                     "shadow_auc_ci": ev.get("auc_ci"), "decides": why is None, "reason": why,
                     "never_clears": clearing_withheld(name) is not None,
                     # why it can clear nothing where that is not its members' scores: too few shadow members
                     "clear_reason": clear.get("reason")}
    return out


def collection_summary(
    docs: Sequence[Document],
    results: dict[str, dict[str, MethodResult]],
    controls: Sequence[Document],
    control_results: dict[str, MethodResult],
    method: str | None,
    calibrations: dict[str, Calibration],
    cfg: AuditConfig,
) -> dict:
    """The collection-level test as JSON (``evidence.collection``), or why there is none."""
    from audit_core.evidence.canaries import document_calls
    from audit_core.evidence.collection import collection_test, raw_score

    probed = [c for c in controls if c.id in control_results]
    if not probed or method is None:
        why = ("no controls were given: add documents you never published (or canary siblings) to test the "
               "collection as a whole" if not controls else
               "no method ran, so there is nothing to compare" if method is None else
               "the audit stopped before the controls were probed")
        return {"p_value": None, "statistic": None, "effect_size": None, "n_documents": len(results),
                "n_controls": len(controls), "power": None, "controls_kind": cfg.controls_kind if controls else None,
                "method": method, "note": why}
    ev = (calibrations[method].params or {}).get("evidence") or {}
    doc_scores = [raw_score(results.get(d.id, {}).get(method)) for d in docs if d.id in results]
    controls = probed
    ctl_scores = [raw_score(control_results.get(c.id)) for c in controls]
    res = collection_test(doc_scores, ctl_scores, method=method, controls_kind=cfg.controls_kind,
                          member_raw=ev.get("member_raw", ()), nonmember_raw=ev.get("nonmember_raw", ()),
                          platt=ev.get("platt"))
    out = res.to_json()
    # per document against the controls themselves: a conformal p-value whose false-positive rate holds
    # on the owner's own kind of text (not the shadow's) when the controls are exchangeable with the
    # documents; None where a document has no score, or the controls are too few for the rate
    out |= document_calls([d.id for d in docs if d.id in results], doc_scores, ctl_scores, cfg.fpr)
    out["control_scores"] = {c.id: raw_score(control_results.get(c.id)) for c in controls}
    return out


#: the stage during which the methods load their local models (de-quantizing them the first time)
LOADING_STAGE = "loading the methods' models"
#: the stages that send queries to the target (the others run on this machine)
CAPABILITY_STAGE = "asking the target what it supports"
AUDIT_STAGE = "auditing documents"
CONTROLS_STAGE = "auditing controls"
TARGET_STAGES = (CAPABILITY_STAGE, AUDIT_STAGE, CONTROLS_STAGE)

class _Snapshots:
    """When to hand the result so far to ``run_audit``'s ``on_document``: after every document while a
    snapshot is cheap, else at most a tenth of the time.

    A snapshot is the whole result so far, and its consumer (the app) serialises it: both grow with the
    documents done, so a snapshot after each of 4,000 documents cost about 2 hours in all against minutes of
    probing (measured with an instant target; session 55). A snapshot that took under ``CHEAP_S``
    is sent after every document (a collection of hundreds); a dearer one waits until ``RATIO`` times its
    cost has passed since the last, so snapshots take at most about 1 / (1 + ``RATIO``) of the audit.
    """

    CHEAP_S = 0.05
    RATIO = 10.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last_end = -float("inf")
        self._last_cost = 0.0

    def due(self) -> bool:
        return self._last_cost < self.CHEAP_S or self._clock() - self._last_end >= self.RATIO * self._last_cost

    def send(self, on_document: Callable[["AuditResult"], None], build: Callable[[], "AuditResult"]) -> None:
        start = self._clock()
        on_document(build())
        self._last_end = self._clock()
        self._last_cost = self._last_end - start


def cannot_run(requires_logprobs: bool, requires_sources: bool, caps: Capabilities) -> str | None:
    """Why a method with these needs cannot run on a target with ``caps``, or None: the one rule the audit
    (``select_methods``) and the cost estimate (``estimate.will_not_run``) both apply."""
    if requires_logprobs and not caps.logprobs:
        return "no logprobs (the target returns text only; this method reads token probabilities)"
    if requires_sources and not caps.sources:
        return ("the target's answers carry no sources (this method reads the passages a service cites; a "
                "target file names them with sources_path)")
    return None


def select_methods(cfg: AuditConfig, caps: Capabilities) -> tuple[list[MembershipMethod], dict[str, str]]:
    """The methods that can run on this target, and why the others cannot."""
    runnable, not_run = [], {}
    for name in cfg.methods:
        m = create_method(name, **cfg.method_params.get(name, {}))
        why = cannot_run(m.requires_logprobs, m.requires_sources, caps)
        if why:
            not_run[name] = why
            continue
        mc = getattr(m, "config", None)
        if not caps.logprobs and getattr(mc, "use_logprobs", False):
            # a method that reads logprobs when it can (RAG-MIA, perturbation) asks a text-only
            # target without them: no refused request per document, and its shadow is probed
            # the same way (the preparation key includes the flag)
            mc.use_logprobs = False
        reads_logprobs = m.requires_logprobs or getattr(mc, "use_logprobs", False)
        if reads_logprobs and caps.max_top_logprobs and hasattr(mc, "top_logprobs"):
            # the shadow is probed with the target's cap (so RAG-MIA's and DCMI's P(yes) sum the same
            # alternatives on both): the preparation key includes it
            mc.top_logprobs = min(mc.top_logprobs, caps.max_top_logprobs)
        runnable.append(m)
    return runnable, not_run


def load_local_models(methods: Sequence[MembershipMethod], progress: Progress | None = None) -> None:
    """Load every local model the methods probe with (``MembershipMethod.local_models``), one count per model.

    Loaded once per process (``models.load_causal_lm`` keeps them); the first
    time on a machine this de-quantizes the packaged weights, the longest wait
    of a first audit after the shadow, so it is a stage with done / total.
    """
    from audit_core.models import load_causal_lm
    from audit_core.progress import steps_of

    names = list(dict.fromkeys(n for m in methods for n in m.local_models()))
    for i, name in enumerate(names):
        if progress:
            progress(LOADING_STAGE, i, len(names))
        # the first load on a machine de-quantizes the packaged weights: a stage of its own, counted in tensors
        with steps_of(None if progress is None else
                      lambda done, total, name=name: progress(dequantizing_stage(name), done, total)):
            load_causal_lm(name)
    if progress and names:
        progress(LOADING_STAGE, len(names), len(names))


def dequantizing_stage(model: str) -> str:
    """The stage of a model's first load on this machine (``models._gguf_parsed_once`` counts its tensors)."""
    return f"de-quantizing {model} (first start on this computer only)"


#: target errors after which sending more requests cannot help: the audit stops
#: (answers already stored are kept; re-running with a fixed key or model resumes)
FATAL_TARGET_ERRORS = ("authentication_failed", "unknown_model")


def _error_code(error: str) -> str:
    """The reason code of an ``Observation.errors`` entry ("reason: message")."""
    return error.split(":", 1)[0].strip() or "target_error"


def probe_document(m: MembershipMethod, doc: Document, target: Target, top_k: int) -> Observation:
    """Probe one document; the target's top_logprobs limit goes only to probes that take it."""
    if m.requires_logprobs and takes_top_logprobs(m.probe):
        return m.probe(doc, target, top_logprobs=top_k)
    return m.probe(doc, target)


def _fatal_error(observations: dict[str, Observation]) -> str | None:
    """The first error of this document's probes that makes every further request futile."""
    for obs in observations.values():
        for err in obs.errors:
            if err and _error_code(err) in FATAL_TARGET_ERRORS:
                return err
    return None


def failure_summary(
    results: dict[str, dict[str, MethodResult]],
    observations: dict[str, dict[str, Observation]],
    account: dict,
    n_documents: int,
    stopped: str | None = None,
) -> dict:
    """What went wrong in a run, in one place: the numbers a user checks first.

    ``target_errors`` counts failed target calls by reason code (as the
    observations recorded them, one per call after the connector's retries);
    ``inconclusive`` lists each (document, method) without a decision and why;
    ``documents_without_decision`` are the documents no method could decide.
    """
    target_errors: Counter[str] = Counter()
    for per_doc in observations.values():
        for obs in per_doc.values():
            target_errors.update(_error_code(e) for e in obs.errors if e)
    inconclusive = {d: {m: r.reason or "no decision" for m, r in rs.items() if r.decision is None}
                    for d, rs in results.items()}
    inconclusive = {d: ms for d, ms in inconclusive.items() if ms}
    undecided = [d for d, rs in results.items() if rs and all(r.decision is None for r in rs.values())]
    return {
        "documents": n_documents,
        "documents_audited": len(results),
        "documents_without_decision": undecided,
        "inconclusive": inconclusive,
        "target_errors": dict(sorted(target_errors.items())),
        "failed_queries": account.get("failures", 0),
        "retries": account.get("retries", 0),
        "stopped": stopped,
    }


@dataclass
class Calibrated:
    """The methods of an audit after shadow preparation, before any target query."""

    methods: list[MembershipMethod]
    not_run: dict[str, str]  # method -> why it cannot run on this target
    calibrations: dict[str, Calibration]
    no_signal: dict[str, str]  # method -> why its shadow shows no signal
    #: the audit's configuration in the target's style (``with_target_style``)
    config: AuditConfig | None = None


class Cancelled(Exception):
    """The user cancelled while the shadow was being prepared: nothing had been sent to the target yet."""


def _cancellable(progress: Progress | None, cancel: threading.Event | None) -> Progress | None:
    """``progress`` that raises ``Cancelled`` at its next tick once ``cancel`` is set.

    The shadow preparation reports progress after each probe and each batch of
    documents embedded, so a cancel there lands within seconds instead of after
    minutes of probing that the user no longer wants.
    """
    if cancel is None:
        return progress

    def tick(stage: str, done: int, total: int) -> None:
        if cancel.is_set():
            raise Cancelled("cancelled while the shadow was being prepared; nothing was sent to the target")
        if progress:
            progress(stage, done, total)

    return tick


def calibrate(cfg: AuditConfig, caps: Capabilities, prepare: Preparer, progress: Progress | None = None,
              cancel: threading.Event | None = None) -> Calibrated:
    """Prepare the shadow for the methods that can run on ``caps`` (cached), sending nothing to the target.

    The app calls this before the audit so that a method without signal is
    announced before any query is spent; ``run_audit`` calls it again, which
    the preparer's cache makes cheap. The shadow mirrors the target's style
    (``with_target_style``); ``Calibrated.config`` is the configuration used.
    ``cancel`` set meanwhile raises ``Cancelled`` (what was prepared and cached stays).
    """
    progress = _cancellable(progress, cancel)
    cfg = with_target_style(cfg, caps)
    methods, not_run = select_methods(cfg, caps)
    load_local_models(methods, progress)
    prep = prepare(methods, cfg.shadow, progress)
    # every method decides at the audit's false-positive rate; one that cannot (no signal, or a shadow
    # too small for that rate) is "no signal" here
    cals = {name: with_fpr(c, cfg.fpr) for name, c in prep.calibrations.items()}
    no_signal = {m.name: why for m in methods if (why := no_signal_reason(cals.get(m.name)))}
    return Calibrated(methods, not_run, cals, no_signal, cfg)


def run_audit(
    docs: Sequence[Document],
    target: Target,
    cfg: AuditConfig | None = None,
    prepare: Preparer | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    on_result: Callable[[str, str, Observation, MethodResult], None] | None = None,
    capabilities: Capabilities | None = None,
    on_document: Callable[["AuditResult"], None] | None = None,
    controls: Sequence[Document] = (),
) -> AuditResult:
    """Audit ``docs`` against ``target``.

    ``cancel`` stops between documents and keeps everything answered so far (set during the shadow
    preparation, before any document query, it raises ``Cancelled``);
    ``on_result`` is called as each (document, method) result arrives, so a
    caller can persist it immediately. A failed target call makes that
    document's method inconclusive with the reason; a rejected key or an
    unknown model (``FATAL_TARGET_ERRORS``) also stops the audit after that
    document, since every further request would fail the same way.
    ``result.failures`` sums up what went wrong (``failure_summary``).
    ``prepare`` calibrates the methods on a shadow RAG (shadow.prepare.prepare_shadow).
    A method whose shadow shows no signal (``no_signal_reason``) sends no
    query unless ``cfg.run_without_signal`` names it, and never votes.
    ``on_document`` receives the result so far after each document, so a
    caller can show verdicts as they come (once snapshots grow dear, at most
    a tenth of the time: ``_Snapshots``; always after the first document and
    after the last one before the controls). Every method decides at
    ``cfg.fpr``. ``controls`` (of kind ``cfg.controls_kind``) are probed
    after the documents with the one pre-registered method
    (``evidence.collection.choose_method``), and ``result.collection`` holds
    the collection-level test.
    """
    if prepare is None:
        raise ValueError("run_audit needs a shadow preparation function (shadow.prepare.prepare_shadow)")
    ids = [d.id for d in [*docs, *controls]]
    if len(set(ids)) < len(ids):  # results are kept by id: a repeated one would count one score twice
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"documents and controls need distinct ids; repeated: {', '.join(twice[:5])}")
    cfg = cfg or AuditConfig()
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")  # the start, preparation included
    if capabilities is None and progress:
        progress(CAPABILITY_STAGE, 0, 1)
    caps = capabilities or target.capabilities()
    # all this target has sent so far is the capability probe (here or by the caller that passed ``capabilities``)
    probe_sent = target.account.queries
    if capabilities is None and progress:
        progress(CAPABILITY_STAGE, 1, 1)
    if not caps.reachable:
        from audit_core.target.base import Unreachable

        raise Unreachable(f"the target could not be used: {caps.detail}")
    cal = calibrate(cfg, caps, prepare, progress, cancel)
    cfg = cal.config
    not_run, no_signal = cal.not_run, cal.no_signal
    methods = [m for m in cal.methods if m.name not in no_signal or m.name in cfg.run_without_signal]
    skipped = {name: f"{why}; none of its queries were sent"
               for name, why in no_signal.items() if name not in cfg.run_without_signal}
    top_k = min(caps.max_top_logprobs or 0, 20)
    for m in methods:
        m.use_collection([d.text for d in [*docs, *(controls if m.collection_takes_controls else ())]])

    from audit_core.evidence.collection import choose_method

    # With controls, the collection test's method is chosen before any document is probed (it depends on the
    # shadows and the counts only) and probes each document first, before the other methods' queries about it:
    # the controls get that method's queries alone, so a target that remembers or caches what it was just asked
    # (an answer cache keyed by meaning, a session) treats a document's and a control's probes alike.
    coll_method = choose_method([m.name for m in methods], cal.calibrations, cfg.verdict.order(), len(docs),
                                len(controls)) if controls else None
    probe_order = sorted(methods, key=lambda m: m.name != coll_method)
    results: dict[str, dict[str, MethodResult]] = {}
    observations: dict[str, dict[str, Observation]] = {}
    verdicts: list[Verdict] = []
    cancelled = False
    stopped: str | None = None
    snapshots = _Snapshots()
    for i, doc in enumerate(docs):
        if cancel is not None and cancel.is_set():
            cancelled = True
            break
        if progress:
            progress(AUDIT_STAGE, i, len(docs))
        got: dict[str, tuple[Observation, MethodResult]] = {}
        for m in probe_order:
            obs = probe_document(m, doc, target, top_k)
            res = m.score(obs, cal.calibrations[m.name])
            got[m.name] = obs, res
            if on_result:
                on_result(doc.id, m.name, obs, res)
        observations[doc.id] = {m.name: got[m.name][0] for m in methods}  # in the methods' own order
        results[doc.id] = {m.name: got[m.name][1] for m in methods}
        for name, why in {**not_run, **skipped}.items():
            results[doc.id][name] = MethodResult(name, doc.id, None, None, reason=why, evidence={FOR_THE_AUDIT: True})
        verdicts.append(decide(doc.id, list(results[doc.id].values()), cfg.verdict))
        fatal = _fatal_error(observations[doc.id])
        if fatal is not None and i + 1 < len(docs):
            stopped = f"{fatal} -- {len(docs) - i - 1} document(s) not audited"
        # the last document's verdict comes with the final result, unless controls are probed first
        if on_document is not None and stopped is None and (i + 1 < len(docs) or controls) \
                and (i == 0 or i + 1 == len(docs) or snapshots.due()):
            snapshots.send(on_document, lambda: _result(target, created, cfg, caps, verdicts, results, observations,
                                                        cal, docs, cancelled, stopped, probe=probe_sent))
        if stopped is not None:
            break
    if progress and not cancelled and stopped is None:
        progress(AUDIT_STAGE, len(docs), len(docs))
    if not controls:
        coll_method = choose_method([m.name for m in methods], cal.calibrations, cfg.verdict.order(), len(results),
                                    0)
    control_results: dict[str, MethodResult] = {}
    if controls and coll_method is not None and not cancelled and stopped is None:
        m = next(x for x in methods if x.name == coll_method)
        for j, c in enumerate(controls):
            if cancel is not None and cancel.is_set():
                cancelled = True
                break
            if progress:
                progress(CONTROLS_STAGE, j, len(controls))
            control_results[c.id] = m.score(probe_document(m, c, target, top_k), cal.calibrations[m.name])
        if progress and not cancelled:
            progress(CONTROLS_STAGE, len(controls), len(controls))
    audited = [d for d in docs if d.id in results]
    collection = collection_summary(audited, results, list(controls), control_results, coll_method,
                                    cal.calibrations, cfg)
    # R0 of the verdict rules: with controls drawn like the documents, each document's call against them leads
    collection["leads_verdicts"] = controls_lead(collection)
    if collection["leads_verdicts"]:
        verdicts = [decide_with_controls(v.doc_id, list(results[v.doc_id].values()), collection, cfg.verdict)
                    for v in verdicts]
    return _result(target, created, cfg, caps, verdicts, results, observations, cal, docs, cancelled, stopped,
                   collection, probe=probe_sent)


def _result(target: Target, created: str, cfg: AuditConfig, caps: Capabilities, verdicts: list[Verdict],
            results: dict, observations: dict, cal: Calibrated, docs: Sequence[Document], cancelled: bool,
            stopped: str | None, collection: dict | None = None, probe: int = 0) -> AuditResult:
    """The audit result as it stands (copies of the growing containers, so a caller may keep it)."""
    return AuditResult(
        target=target.name,
        created=created,
        config=config_dict(cfg),
        capabilities=asdict(caps),
        verdicts=list(verdicts),
        results=dict(results),
        observations=dict(observations),
        calibrations=cal.calibrations,
        not_run=cal.not_run,
        account=target.account.as_dict(),
        documents=[d for d in docs if d.id in results],
        cancelled=cancelled,
        failures=failure_summary(results, observations, target.account.as_dict(), len(docs), stopped),
        freshness=freshness_of(target, probe),
        no_signal=cal.no_signal,
        finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        collection=collection or {},
        fpr=cfg.fpr,
    )
