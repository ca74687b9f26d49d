"""Tab "2 Run": what will run and what it costs, the explicit start, progress
bars while it runs (see app/jobs.py for why a thread), and the cancel."""
from __future__ import annotations

import time

import streamlit as st

from app.sidebar import DEMO, Settings, build_target

AUDIT_STAGE = "auditing documents"
POLL_S = 0.5


def _estimate(settings: Settings, docs) -> None:
    from audit_core.estimate import EstimateConfig, estimate_audit

    st.markdown("**Estimated cost on the target**")
    ctx = st.number_input("Tokens of retrieved context the target adds to each prompt (if you know it)", 0, 200_000,
                          0, step=100, key="context_tokens",
                          help="A RAG target puts its retrieved documents into every prompt and bills them; "
                               "we cannot see them. 0 counts only the tokens we send.")
    try:
        est = estimate_audit(docs, settings.methods, settings.method_params, EstimateConfig(context_tokens_per_query=ctx))
    except ValueError as exc:
        st.error(f"A setting is not valid: {exc}")
        return
    from audit_core.methods import LABELS

    rows = est.rows()
    for r in rows:
        r["method"] = LABELS.get(r["method"], r["method"])
    st.dataframe(rows, hide_index=True)
    cost = "queries cost nothing (it runs on this computer)" if settings.target_kind == DEMO else "queries are billed by the endpoint's provider"
    st.caption(f"{est.queries} target queries in all; {cost}. Token counts are estimates from word counts; "
               "completion tokens are the most each answer may use. Preparing the shadow RAG runs locally and "
               "is cached after the first run.")


def _known_capabilities(settings: Settings):
    from audit_core.target.base import Capabilities

    found = st.session_state.get("caps")
    if found and found.get("target") == settings.target_label and "caps" in found:
        return Capabilities(**found["caps"])
    return None


def _start(settings: Settings, docs) -> None:
    from app.jobs import start_job
    from app.resources import demo_lock, get_store, plain_error
    from audit_core import history
    from audit_core.target.base import QueryAccount
    from audit_core.target.caching import CachingTarget
    from audit_core.audit import run_audit
    from shadow.prepare import prepare_shadow

    store = get_store()
    try:
        target = build_target(settings)
        cfg = settings.audit_config()
    except Exception as exc:  # plain words, never a stack trace or a key
        st.error(plain_error(exc))
        return
    is_demo = settings.target_kind == DEMO
    lock = demo_lock() if is_demo else None
    if lock is not None and not lock.acquire(blocking=False):
        st.error("The demo target is busy with another audit; try again when it has finished.")
        return
    caps = _known_capabilities(settings)
    # the same audit run again after a cancel or failure resumes its run (and reuses its answers)
    run_id, _ = history.resume_or_start_run(store, docs, target.name, settings.config_dict())

    def work(job) -> dict:
        try:
            if is_demo:
                # the shared in-process demo answers for free; a fresh account makes the
                # result's query count this audit's alone (the lock keeps audits apart)
                target.account = QueryAccount()
                probed = target
            else:
                # paid answers are stored as they arrive: a cancelled or failed audit
                # run again sends only what was never answered
                probed = CachingTarget(target, store, run_id=run_id, reuse_days=settings.reuse_days)
            record = history.result_recorder(store, run_id)

            def on_result(doc_id, method, obs, res) -> None:
                record(doc_id, method, obs, res)
                job.note_result(doc_id, method)

            result = run_audit(docs, probed, cfg, prepare_shadow, progress=job.progress, cancel=job.cancel,
                               on_result=on_result, capabilities=caps).to_json()
            history.save_audit(store, run_id, result)
            return result
        finally:
            if lock is not None:
                lock.release()

    def on_error(exc: BaseException) -> str:
        message = plain_error(exc)
        history.mark_failed(store, run_id, message)
        return message

    st.session_state["job"] = start_job(run_id, len(docs), work, on_error)
    st.session_state.pop("run_message", None)
    st.rerun()


def _draw(job) -> None:
    stages, answered = job.snapshot()
    prep = {s: v for s, v in stages.items() if s != AUDIT_STAGE}
    st.markdown("**Shadow preparation**")
    if not prep:
        st.caption("Loading the models and the cached shadow calibration..." if AUDIT_STAGE not in stages
                   else "Loaded from the cache.")
    for stage, (done, total) in prep.items():
        st.progress(min(1.0, done / total) if total else 1.0, text=f"{stage}: {done} / {total}")
    st.markdown("**Audit of your documents**")
    done, total = stages.get(AUDIT_STAGE, (0, job.n_documents))
    st.progress(min(1.0, done / total) if total else 1.0, text=f"documents: {done} / {total}")
    if answered:
        last = {}
        for doc_id, method in answered:
            last.setdefault(doc_id, []).append(method)
        st.caption("Answered: " + "; ".join(f"{d} ({', '.join(ms)})" for d, ms in last.items()))
    st.caption(f"Running for {time.time() - job.started:.0f} s.")


def _poll(job) -> None:
    """Redraw progress until the job ends, then hand its result to the Results tab."""
    st.subheader("Audit in progress")
    if st.button("Cancel (keeps what was already answered)", key="cancel_audit"):
        job.cancel.set()
    if job.cancel.is_set():
        st.warning("Cancelling: the document in progress is finished first (shadow preparation, if running, "
                   "completes and stays cached).")
    box = st.empty()
    while job.running:
        with box.container():
            _draw(job)
        time.sleep(POLL_S)
    st.session_state.pop("job", None)
    if job.error is not None:
        st.session_state["run_message"] = ("error", job.error)
    else:
        from audit_core.history import verdict_counts

        st.session_state["result"] = job.result
        st.session_state["result_run_id"] = job.run_id
        counts = verdict_counts(job.result)
        summary = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no document audited"
        status = "cancelled" if job.result.get("cancelled") else "finished"
        st.session_state["run_message"] = ("success", f"Audit {status}: {summary}. See tab 3 Results.")
    st.rerun()


def render_run_tab(settings: Settings) -> None:
    job = st.session_state.get("job")
    if job is not None:
        _poll(job)
        return
    message = st.session_state.get("run_message")
    if message:
        (st.error if message[0] == "error" else st.success)(message[1])
    from audit_core.methods import LABELS

    docs = st.session_state.get("documents") or []
    st.markdown(f"**Documents:** {len(docs)} · **Target:** {settings.target_label} · **Methods:** "
                + (", ".join(LABELS[m] for m in settings.methods) or "none"))
    s = settings.shadow
    st.caption(f"Shadow RAG: {s.n_members} members + {s.n_nonmembers} non-members "
               f"({s.n_per_class_generative} per class for MBA / S2MIA), k = {s.top_k_docs} retrieved documents.")
    if not docs:
        st.info("Add your documents in tab 1 first.")
    if not settings.methods:
        st.warning("Choose at least one method in the sidebar.")
    if settings.target_kind != DEMO and not (settings.base_url.strip() and settings.model.strip()):
        st.warning("Enter the endpoint's base URL and model in the sidebar.")
    caps = _known_capabilities(settings)
    if caps is None:
        st.caption("Tip: 'Check connection' in the sidebar tells which methods this target supports.")
    if docs and settings.methods:
        _estimate(settings, docs)
    ready = bool(docs and settings.methods)
    if st.button("Start audit", type="primary", disabled=not ready, key="start_audit"):
        _start(settings, docs)
