"""One audit, end to end: capability probe, shadow preparation, probing the
target document by document, scoring, verdicts. The app and the CLI both call
``run_audit``; neither holds any logic of its own.
"""
from __future__ import annotations

import datetime as _dt
import threading
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

from audit_core.documents import Document
from audit_core.methods import create_method
from audit_core.methods.base import Calibration, MembershipMethod, MethodResult, Observation
from audit_core.target.base import Capabilities, Target
from audit_core.verdict import Verdict, VerdictConfig, decide
from shadow.prepare import Progress, ShadowConfig, prepare_shadow


@dataclass
class AuditConfig:
    methods: list[str] = field(default_factory=lambda: ["srag", "mba"])
    shadow: ShadowConfig = field(default_factory=ShadowConfig)
    #: per-method configuration overrides, e.g. {"srag": {"bins": 12}, "mba": {"n_masks": 10}}
    method_params: dict[str, dict] = field(default_factory=dict)
    verdict: VerdictConfig = field(default_factory=VerdictConfig)


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

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "created": self.created,
            "config": self.config,
            "capabilities": self.capabilities,
            "verdicts": [v.to_json() for v in self.verdicts],
            "results": {d: {m: r.to_json() for m, r in rs.items()} for d, rs in self.results.items()},
            "observations": {d: {m: o.to_json() for m, o in os_.items()} for d, os_ in self.observations.items()},
            "calibrations": {m: c.to_json() for m, c in self.calibrations.items()},
            "not_run": self.not_run,
            "account": self.account,
            "documents": [asdict(d) for d in self.documents],
            "cancelled": self.cancelled,
        }


def select_methods(cfg: AuditConfig, caps: Capabilities) -> tuple[list[MembershipMethod], dict[str, str]]:
    """The methods that can run on this target, and why the others cannot."""
    runnable, not_run = [], {}
    for name in cfg.methods:
        m = create_method(name, **cfg.method_params.get(name, {}))
        if m.requires_logprobs and not caps.logprobs:
            not_run[name] = "the target returns no logprobs, which this method needs"
        else:
            runnable.append(m)
    return runnable, not_run


def run_audit(
    docs: Sequence[Document],
    target: Target,
    cfg: AuditConfig | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    on_result: Callable[[str, str, Observation, MethodResult], None] | None = None,
    capabilities: Capabilities | None = None,
) -> AuditResult:
    """Audit ``docs`` against ``target``.

    ``cancel`` stops between documents and keeps everything answered so far;
    ``on_result`` is called as each (document, method) result arrives, so a
    caller can persist it immediately.
    """
    cfg = cfg or AuditConfig()
    caps = capabilities or target.capabilities()
    if not caps.reachable:
        from audit_core.target.base import Unreachable

        raise Unreachable(f"the target could not be used: {caps.detail}")
    methods, not_run = select_methods(cfg, caps)
    prep = prepare_shadow(methods, cfg.shadow, progress)
    top_k = min(caps.max_top_logprobs or 0, 20)

    results: dict[str, dict[str, MethodResult]] = {}
    observations: dict[str, dict[str, Observation]] = {}
    verdicts: list[Verdict] = []
    cancelled = False
    for i, doc in enumerate(docs):
        if cancel is not None and cancel.is_set():
            cancelled = True
            break
        if progress:
            progress("auditing documents", i, len(docs))
        results[doc.id], observations[doc.id] = {}, {}
        for m in methods:
            obs = m.probe(doc, target, top_logprobs=top_k) if m.requires_logprobs else m.probe(doc, target)
            res = m.score(obs, prep.calibrations[m.name])
            observations[doc.id][m.name], results[doc.id][m.name] = obs, res
            if on_result:
                on_result(doc.id, m.name, obs, res)
        for name, why in not_run.items():
            results[doc.id][name] = MethodResult(name, doc.id, None, None, reason=why)
        verdicts.append(decide(doc.id, list(results[doc.id].values()), cfg.verdict))
    if progress and not cancelled:
        progress("auditing documents", len(docs), len(docs))
    return AuditResult(
        target=target.name,
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        config={"methods": cfg.methods, "shadow": asdict(cfg.shadow), "method_params": cfg.method_params,
                "verdict": asdict(cfg.verdict)},
        capabilities=asdict(caps),
        verdicts=verdicts,
        results=results,
        observations=observations,
        calibrations=prep.calibrations,
        not_run=not_run,
        account=target.account.as_dict(),
        documents=[d for d in docs if d.id in results],
        cancelled=cancelled,
    )
