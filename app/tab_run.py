"""Tab "2 Run": what will run and what it costs, the calibration check, the
explicit start, progress bars while it runs (see app/jobs.py for why a thread),
and the cancel.

A page reload starts a new session; the audit thread goes on. The Run tab
re-attaches to it through the app's job registry (``app.jobs.job_registry``):
the running audit's progress, Cancel and results as they come are back.
"""
from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass

import streamlit as st

from app.sidebar import ADVANCED_KEY, DEMO, PARAMS_KEY, Settings, build_target, connection_id
from audit_core.audit import AUDIT_STAGE, CAPABILITY_STAGE, CONTROLS_STAGE, TARGET_STAGES

#: seconds between redraws of a running job's progress (the fragment ``_live``). A redraw costs a few
#: milliseconds of the app's own work; the full garbage collection Streamlit ran after each one (0.6-0.7 s with
#: the models loaded) is turned off (``resources.no_full_gc_after_each_run``)
POLL_S = 1.0
#: prefix of the registry id of a calibration check (not an audit run)
CHECK_PREFIX = "calibration-"


class PageReruns:
    """When the running audit's view may rerun the whole page to show newly decided documents.

    Each rerun draws every tab, and the Results tab's table and plots grow with the verdicts: about a second a
    run with thousands of documents, taken from the interpreter that the audit's own thread needs. A page
    rerun after every decided document then kept the app busy for as long as a fast target took to answer.
    The first verdict is always shown at once; after it, a rerun waits until ``RATIO`` times the last page
    run's cost has passed since that run ended, so the page's redraws take at most about a quarter of the
    time (the progress bars redraw every ``POLL_S`` regardless: they cost milliseconds). State lives in the
    session (``state``): the page run's start, written by main.py, and what this class measured.
    """

    RATIO = 3.0
    START_KEY = "page_run_started"

    def __init__(self, state, clock=time.perf_counter) -> None:
        self._state, self._clock = state, clock

    @classmethod
    def page_starts(cls, state, clock=time.perf_counter) -> None:
        """Called at the top of every full page run (main.py): a fragment's own reruns do not pass there."""
        state[cls.START_KEY] = (clock(), state.get(cls.START_KEY, (0.0, 0))[1] + 1)

    def measure(self) -> None:
        """In the view's first run within a full page run: the page's cost so far (every tab drawn before it)."""
        started, run = self._state.get(self.START_KEY, (None, 0))
        if started is not None and self._state.get("page_run_measured") != run:
            now = self._clock()
            self._state["page_run_measured"] = run
            self._state["page_run_cost_s"], self._state["page_run_ended"] = now - started, now

    def due(self, decided: int) -> bool:
        """Rerun the page for ``decided`` documents now? Always for the first; later, once enough time passed."""
        if decided <= self._state.get("live_decided", 0):
            return False
        if not self._state.get("live_decided"):
            return True
        cost, ended = self._state.get("page_run_cost_s", 0.0), self._state.get("page_run_ended", -float("inf"))
        return self._clock() - ended >= self.RATIO * cost


def _estimate(settings: Settings, docs, controls=()) -> None:
    from audit_core.estimate import EstimateConfig, assumptions, controls_queries, estimate_audit, pace_note
    from audit_core.methods import LABELS

    st.markdown("**Estimated cost on the target**")
    ctx = st.number_input("Tokens of retrieved context the target adds to each prompt (if you know it)", 0, 200_000,
                          0, step=100, key="context_tokens",
                          help="A RAG target puts its retrieved documents into every prompt and bills them; "
                               "we cannot see them. 0 counts only the tokens we send.")
    params, styled = _styled_params(settings)
    ecfg = EstimateConfig(context_tokens_per_query=ctx)
    try:  # the methods that cannot run on the checked target are left out and named (est.not_run)
        est = estimate_audit(docs, settings.methods, params, ecfg, caps=_known_capabilities(settings))
    except ValueError as exc:
        st.error(f"A setting is not valid: {exc}")
        return
    rows = est.rows()
    for r in rows:
        r["method"] = LABELS.get(r["method"], r["method"])
    st.dataframe(rows, hide_index=True)
    cost = "queries cost nothing (it runs on this computer)" if settings.target_kind == DEMO else "queries are billed by the endpoint's provider"
    uncapped = _uncapped_answers(settings)
    st.caption(f"{est.queries} target queries in all; {cost}. Completion tokens are the most each answer may "
               f"use{uncapped}. Preparing the shadow RAG runs locally and is cached after the first run. Answers "
               "already received (an audit cancelled and started again) are not sent again. Counted for a target "
               f"that answers in {styled.target_style} style ({_style_source(settings, styled)})."
               + ("" if settings.target_kind == DEMO else " " + assumptions(ecfg, _max_retries(settings))))
    pace = _target_pace(settings)
    if pace:
        st.caption(pace_note(est.queries, pace))
    if est.not_run:
        st.caption("Not counted, they cannot run on this target (the connection check found it): " + "; ".join(
            f"{LABELS.get(m, m)} ({why})" for m, why in est.not_run.items()) + ".")
    if controls:
        most = controls_queries(controls, list(est.methods), params, ecfg)
        st.caption(f"The {len(controls)} controls add at most {most} "
                   "queries: they are probed with one method only, the one whose shadow gives the collection test "
                   "the most power, chosen during the audit.")


def _target_pace(settings: Settings) -> float | None:
    """The target's requests a minute: the endpoint's field, or a target file's own ``requests_per_minute``."""
    from app.target_file import HTTP_FILE, parsed_config

    if settings.target_kind == HTTP_FILE:
        return getattr(parsed_config(), "requests_per_minute", None)
    return settings.requests_per_minute


def _max_retries(settings: Settings) -> int:
    """Retries after a request's first try: a target file's own ``max_retries``, else the connectors' default."""
    from app.target_file import HTTP_FILE, parsed_config

    config = parsed_config() if settings.target_kind == HTTP_FILE else None
    return int(getattr(config, "max_retries", 5))


def _uncapped_answers(settings: Settings) -> str:
    """ "" where answers are capped; else why the completion tokens are not a bound (a target file whose body
    has no ``{{max_tokens}}``)."""
    from app.target_file import HTTP_FILE, parsed_config

    if settings.target_kind != HTTP_FILE:
        return ""
    config = parsed_config()
    if config is None or not hasattr(config, "caps_answers") or config.caps_answers():
        return ""
    return (" where the target takes a length limit: this target file's body has no {{max_tokens}}, so the "
            "service writes answers as long as it likes and they may cost far more")


def _style_source(settings: Settings, styled) -> str:
    """Where the estimate's style comes from, before any probe: the check's finding, the user's choice, the
    demo's own style, or (an endpoint not checked yet) the chat style as the upper bound."""
    if _known_capabilities(settings) is not None or styled.target_style_source == "chosen by the user":
        return styled.target_style_source
    if settings.target_kind == DEMO:
        return "the built-in demo target's style"
    return "not checked yet: the upper bound until Check connection finds the style"


def _styled_params(settings: Settings):
    """The methods' parameters in the style the audit will read the target in, and that styled config.

    A chat-style S-RAG probe asks for up to 96 tokens, a completion-style one
    for 1: the estimate counts the style found by the connection check, the
    user's choice, or for an endpoint not yet checked chat (the upper bound,
    and what an audit reads a target in when its style cannot be found).
    """
    from audit_core.audit import with_target_style
    from audit_core.target.base import Capabilities
    from shadow.demo import DEMO_STYLE

    caps = _known_capabilities(settings) or Capabilities(True, True, 20, style=DEMO_STYLE if
                                                         settings.target_kind == DEMO else None)
    styled = with_target_style(settings.audit_config(), caps)
    return styled.method_params, styled


def _known_capabilities(settings: Settings):
    """The connection check's finding for exactly these settings (URL, model, key, target file's content), or None:
    a finding for a target file since edited (a logprobs path removed) would send probes it cannot read."""
    from audit_core.target.base import Capabilities

    found = st.session_state.get("caps")
    if found and found.get("conn") == connection_id(settings) and "caps" in found:
        return Capabilities(**found["caps"])
    return None


def _config_key(settings: Settings) -> str:
    """What a calibration check belongs to: the target and the audit configuration."""
    blob = json.dumps([settings.target_label, settings.config_dict()], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _insisted(settings: Settings) -> list[str]:
    """Methods without signal the user ticked "run anyway" for."""
    check = st.session_state.get("calibration_check") or {}
    if check.get("key") != _config_key(settings):
        return []
    return [m for m in check.get("no_signal", {}) if st.session_state.get(f"insist_{m}")]


# --------------------------------------------------------------------------- starting work


def _open_target(settings: Settings, store, target, run_id: str):
    """The target audit ``run_id`` probes: every answer stored as it arrives (the demo's too), so
    an audit cancelled or stopped and started again (the same run, resumed) sends only what was
    never answered."""
    from audit_core.target.base import QueryAccount
    from audit_core.target.caching import CachingTarget

    if settings.target_kind == DEMO:
        # the shared in-process demo: a fresh account makes the query count this audit's alone
        # (the demo lock keeps audits apart)
        target.account = QueryAccount()
    return CachingTarget(target, store, run_id=run_id, reuse_days=settings.reuse_days)


def _start(settings: Settings, docs, controls=()) -> None:
    from app.jobs import job_registry, start_job
    from app.resources import StoreUnavailable, demo_lock, get_store, plain_error
    from audit_core import history
    from audit_core.audit import run_audit
    from shadow.prepare import prepare_shadow

    try:
        store = get_store()
    except StoreUnavailable as exc:  # the file broke since the tab was drawn with Start enabled
        st.error(str(exc))
        return
    is_demo = settings.target_kind == DEMO
    lock = demo_lock() if is_demo else None
    if lock is not None and not lock.acquire(blocking=False):
        st.error("The demo target is busy with another audit; try again when it has finished.")
        return
    # The demo lock passes to the job's thread, which releases it when the audit ends. Until then it is
    # released here on every way out: an error, and also the page being rerun or closed meanwhile
    # (Streamlit's RerunException / StopException are BaseExceptions, so `except Exception` misses them,
    # and loading the demo target can take minutes): else the demo stayed 'busy' until a restart.
    handed_over = False
    try:
        try:
            target = build_target(settings)
            cfg = settings.audit_config()
            cfg.run_without_signal = _insisted(settings)
            from app.tab_documents import CONTROLS_KIND

            cfg.controls_kind = st.session_state.get(CONTROLS_KIND) or "declared"  # a canary kit's siblings
            config = settings.config_dict()
            config["run_without_signal"] = list(cfg.run_without_signal)
            config["controls_kind"] = cfg.controls_kind
            if controls:  # other controls are another audit (the run a re-run resumes must match them)
                config["controls"] = [[c.id, c.content_hash()] for c in controls]
            # the same audit run again after a cancel or failure resumes its run (and reuses its answers)
            run_id, resumed = history.resume_or_start_run(store, docs, target.name, config)
            probed = _open_target(settings, store, target, run_id)
        except Exception as exc:  # plain words, never a stack trace or a key
            st.error(plain_error(exc))
            return
        caps = _known_capabilities(settings)

        def work(job) -> dict:
            try:
                record = history.result_recorder(store, run_id)

                def on_result(doc_id, method, obs, res) -> None:
                    record(doc_id, method, obs, res)
                    job.note_result(doc_id, method)

                result = run_audit(docs, probed, cfg, prepare_shadow, progress=job.progress, cancel=job.cancel,
                                   on_result=on_result, capabilities=caps, controls=list(controls),
                                   on_document=lambda r: job.note_partial(r.to_json(observations=False))).to_json()
                return history.save_audit(store, run_id, result, resumed)
            finally:
                if lock is not None:
                    lock.release()

        def on_error(exc: BaseException) -> str:
            from audit_core.audit import Cancelled

            message = str(exc) if isinstance(exc, Cancelled) else plain_error(exc)
            history.mark_failed(store, run_id, message, cancelled=isinstance(exc, Cancelled))
            return message

        job = start_job(run_id, len(docs), work, on_error, registry=job_registry(), settings=settings.summary())
        handed_over = True
    finally:
        if lock is not None and not handed_over:
            lock.release()
    _attach(job)
    st.session_state.pop("run_message", None)
    st.rerun()


def _check_calibration(settings: Settings) -> None:
    """Prepare the shadow (cached) in the background and tell which methods show no signal."""
    from app.jobs import job_registry, start_job
    from app.resources import plain_error
    from audit_core.audit import calibrate
    from audit_core.target.base import Capabilities
    from shadow.demo import DEMO_STYLE
    from shadow.prepare import prepare_shadow

    cfg = settings.audit_config()
    key = _config_key(settings)
    # without a connection check, assume logprobs: a method the target cannot serve is dropped at the start;
    # the demo's style is known, an endpoint's unknown style is read as chat (audit.with_target_style)
    caps = _known_capabilities(settings) or Capabilities(True, True, 20, style=DEMO_STYLE if
                                                         settings.target_kind == DEMO else None)

    def work(job) -> dict:
        cal = calibrate(cfg, caps, prepare_shadow, job.progress, cancel=job.cancel)
        return {"check": True, "key": key, "no_signal": cal.no_signal,
                "auc": {m: c.shadow_auc for m, c in cal.calibrations.items()}}

    def on_error(exc: BaseException) -> str:
        from audit_core.audit import Cancelled

        # a cancelled check is what the user asked for, not "an unexpected error (Cancelled)"
        return ("calibration check cancelled; the shadow's steps it finished stay cached, and nothing was sent "
                "to the target") if isinstance(exc, Cancelled) else plain_error(exc)

    _attach(start_job(CHECK_PREFIX + uuid.uuid4().hex, 0, work, on_error, registry=job_registry(),
                      settings=settings.summary()))
    st.rerun()


# --------------------------------------------------------------------------- a running job


def _attach(job) -> None:
    """Follow ``job`` in this session, and in the page's address so that a reload finds it again."""
    st.session_state["job_run_id"] = job.run_id
    st.session_state["live_decided"] = 0
    st.query_params["run"] = job.run_id


def attached_job():
    """The job this page follows: its own, the one in the page's address, or any running audit."""
    from app.jobs import job_registry

    reg = job_registry()
    job = reg.get(st.session_state.get("job_run_id")) or reg.get(st.query_params.get("run"))
    if job is None:
        running = reg.running()
        job = running[0] if running else None
    if job is None or (not job.running and st.session_state.get("job_seen") == job.token):
        return None
    st.session_state["job_run_id"] = job.run_id  # found by the address or the registry: follow it to the end
    return job


#: stage names as the Run tab's bars and the banner above the tabs show them
_SHOWN_STAGES = {AUDIT_STAGE: "documents", CONTROLS_STAGE: "controls"}


def stage_lines(job) -> list[tuple[str, float, str]]:
    """(stage, fraction done, "documents: 12 / 60 · about 3 min left") for each stage so far, as shown.

    The one computation of done / total and time left while a job runs: the Run tab's bars and the banner
    above the tabs are drawn from one call of it per redraw (``RunProgress``), so they cannot disagree. Time
    left is read from the job's clock at the moment of the call, so two calls a moment apart may differ.
    """
    out = []
    for stage, (done, total) in job.stages_now().items():
        frac = min(1.0, done / total) if total else 1.0
        name = _SHOWN_STAGES.get(stage, stage)
        out.append((stage, frac, f"{name}: {job.clock.describe(stage)}"))
    return out


@dataclass(frozen=True)
class RunProgress:
    """One reading of a running job's progress, drawn in both places that show it (Run tab and banner)."""

    lines: list[tuple[str, float, str]]

    def line(self, stage: str) -> tuple[str, float, str] | None:
        return next((x for x in self.lines if x[0] == stage), None)

    @property
    def headline(self) -> str:
        """What runs now, with its time left, word for word as the Run tab's bar of that stage says it."""
        now = stage_now([stage for stage, _, _ in self.lines])
        if now is not None:
            return self.line(now)[2]
        prep = [text for stage, _, text in self.lines if not _of_the_audit(stage)]
        return f"preparing the shadow; {prep[-1]}" if prep else "preparing the shadow"


def stage_now(stages: list[str]) -> str | None:
    """The stage of the audit that runs now, of ``stages`` in the order they began: the controls, else the
    documents; None while the shadow is prepared. The one choice behind the banner (``RunProgress.headline``)
    and the History notice (``count_line``)."""
    return next((stage for stage in (CONTROLS_STAGE, AUDIT_STAGE) if stage in stages), None)


def run_progress(job) -> RunProgress:
    return RunProgress(stage_lines(job))


def count_line(job) -> str:
    """What runs now, done / total only (no time left): for the History tab's notice, drawn once per page run
    and so not kept up to date as the Run tab's fragment and the banner are (a time left there went stale)."""
    stages = job.stages_now()
    now = stage_now(list(stages))
    if now is None:
        return "preparing the shadow"
    done, total = stages[now]
    return f"{_SHOWN_STAGES.get(now, now)}: {done} / {total}"


#: the most documents the Run tab names under "Answered": a long audit's whole list was rebuilt and sent to the
#: browser on every redraw, once a second
ANSWERED_SHOWN = 5


def _of_the_audit(stage: str) -> bool:
    """A stage drawn under "Audit of your documents": the target's stages (a document's local work, such as
    MBA's masks, is part of its count), not the shadow preparation's."""
    return stage in TARGET_STAGES


def _draw(job, view: RunProgress) -> None:
    lines = view.lines
    stages = {s for s, _, _ in lines}
    prep = [x for x in lines if not _of_the_audit(x[0])]
    st.markdown("**Shadow preparation** (local, sends nothing to the target)")
    if not prep:
        st.caption("Starting..." if AUDIT_STAGE not in stages else "Loaded from the cache.")
    for _, frac, text in prep:
        st.progress(frac, text=text)
    if job.run_id.startswith(CHECK_PREFIX):
        st.caption(f"Running for {time.time() - job.started:.0f} s.")
        return
    st.markdown("**Audit of your documents** (queries to the target)")
    asked = view.line(CAPABILITY_STAGE)
    if asked is not None and asked[1] < 1:
        st.progress(asked[1], text=asked[2])
    audit = view.line(AUDIT_STAGE)
    if audit is None:
        st.progress(0.0, text=f"documents: 0 / {job.n_documents} · waiting for the shadow preparation")
    else:
        st.progress(audit[1], text=audit[2])
    controls = view.line(CONTROLS_STAGE)
    if controls is not None:
        st.progress(controls[1], text=controls[2])
    partial = job.partial or {}
    for m, why in (partial.get("no_signal") or {}).items():
        st.warning(f"{_label(m)}: {why}.")
    n_answered, tail = job.answered_tail(ANSWERED_SHOWN * 20)  # enough pairs for the last few documents
    if n_answered:
        last: dict[str, list[str]] = {}
        for doc_id, method in tail:
            last.setdefault(doc_id, []).append(_label(method))
        shown = list(last.items())[-ANSWERED_SHOWN:]
        st.caption(f"Results so far: {n_answered} (one per document and method); the last: "
                   + "; ".join(f"{d} ({', '.join(ms)})" for d, ms in shown))
    st.caption(f"Running for {time.time() - job.started:.0f} s. Verdicts appear in tab 3 Results as each "
               "document is done.")


def _label(m: str) -> str:
    from audit_core.methods import method_label

    return method_label(m)


def _finish(job) -> None:
    """Hand a finished job's outcome to this session, once."""
    st.session_state["job_seen"] = job.token
    st.session_state.pop("job_run_id", None)
    if "run" in st.query_params:
        del st.query_params["run"]
    if job.error is not None:
        if job.error_kind == "Cancelled":  # during the shadow preparation: what the user asked for
            st.session_state["run_message"] = ("info", job.error[:1].upper() + job.error[1:] + ".")
        else:
            st.session_state["run_message"] = ("error", job.error)
        if not job.run_id.startswith(CHECK_PREFIX):  # tab 3 must not go on showing an earlier audit as this one's
            st.session_state.pop("result", None)
            st.session_state.pop("result_run_id", None)
        return
    if job.run_id.startswith(CHECK_PREFIX):
        st.session_state["calibration_check"] = job.result
        return
    from audit_core.history import run_status, verdict_counts

    st.session_state["result"] = job.result
    st.session_state["result_run_id"] = job.run_id
    counts = verdict_counts(job.result)
    summary = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no document audited"
    status = run_status(job.result)
    if status == "stopped":
        st.session_state["run_message"] = ("error", f"Audit stopped: {job.result['failures']['stopped']}. "
                                                    f"{summary}. See tab 3 Results.")
        return
    st.session_state["run_message"] = ("success", f"Audit {status}: {summary}. See tab 3 Results.")


def banner_text(job, view: RunProgress) -> str:
    """The line above the tabs while a job runs: a reloaded page opens on tab 1, so it says what runs and where
    its progress is. Its stage and time left are ``view.headline``, the same reading as the Run tab's bars."""
    if job.run_id.startswith(CHECK_PREFIX):
        return "The shadow calibration is being prepared: tab 2 Run shows its progress."
    return (f"An audit is running ({view.headline}): tab 2 Run has its progress and Cancel; tab 3 Results "
            "fills in as documents are done.")


@st.fragment(run_every=POLL_S)
def _live(banner=None) -> None:
    """Progress and Cancel of the attached job, redrawn every ``POLL_S`` without rerunning the page.

    ``banner`` is the container above the tabs (app/main.py): the fragment redraws the banner there from the
    same reading of the job's progress (``run_progress``) as the bars here, so both say the same time left,
    and both are kept up to date (a banner drawn by the page run went stale between documents). The
    fragment writes to the banner on every run, as Streamlit asks of a fragment that fills an outside
    container.

    The page reruns (``st.rerun``) when a document is decided, so the Results tab fills in while the audit
    runs (paced by the page's own cost once the first verdict is shown: ``PageReruns``), and once more when
    the job ends. Each redraw is cheap (stage counts, the last few answered
    documents, copied under the job's lock and drawn after it is released): nothing here reads the partial
    result's documents, renders a table or holds a lock the audit thread waits for while drawing.
    """
    slot = banner.empty() if banner is not None else None
    job = attached_job()
    if job is None:
        st.rerun()
        return
    view = run_progress(job)
    if slot is not None and job.running:
        slot.info(banner_text(job, view))
    check = job.run_id.startswith(CHECK_PREFIX)
    label = "Cancel" if check else "Cancel (keeps what was already answered)"
    if job.running and st.button(label, key="cancel_audit"):
        job.cancel.set()
    if job.cancel.is_set():
        st.warning("Cancelling: the shadow preparation stops at its next step (what it finished stays cached); "
                   "an audit's document in progress is finished first. Starting the same audit again resumes it "
                   "and re-uses every answer already received.")
    if not job.running:
        _finish(job)
        st.rerun()
    _draw(job, view)
    reruns = PageReruns(st.session_state)
    reruns.measure()
    decided = len((job.partial or {}).get("verdicts") or [])
    if reruns.due(decided):
        st.session_state["live_decided"] = decided
        st.rerun()


def running_notice() -> None:
    """For other tabs (History): the running audit's progress and a Cancel, after a reload too."""
    from app.jobs import job_registry

    for job in job_registry().running():
        if job.run_id.startswith(CHECK_PREFIX):
            continue
        st.info(f"An audit is running ({count_line(job)}); tab 2 Run shows its progress and time left.")
        if not job.cancel.is_set() and st.button("Cancel the running audit", key=f"history_cancel_{job.run_id}"):
            job.cancel.set()
            st.rerun()


def running_settings_note(settings: Settings | None) -> None:
    """In the sidebar: where the running audit's settings differ from those shown, listed.

    A page reloaded while an audit runs draws the sidebar with its defaults (a new session has none of the
    old one's choices), and a user may also change the sidebar while an audit runs. The sidebar is not set to
    the running audit's settings: its widgets stay what the user sees and chose, a key or a target file cannot
    be restored anyway, and settings that change by themselves surprise more than a note. The note names each
    setting of the running audit that differs, so it is clear that the audit goes on with them and that the
    sidebar is for the next audit.
    """
    job = attached_job()
    if job is None or not job.running or not job.settings:
        return
    now = settings.summary() if settings is not None else {}
    differ = {k: v for k, v in job.settings.items() if now.get(k) != v}
    if "methods" in differ:  # other methods have other parameters: no news
        differ.pop(PARAMS_KEY, None)
    if not differ:
        return
    what = "calibration check" if job.run_id.startswith(CHECK_PREFIX) else "audit"
    items = [f"{k}: {v}" for k, v in differ.items() if k not in (ADVANCED_KEY, PARAMS_KEY)]
    if ADVANCED_KEY in differ or PARAMS_KEY in differ:
        items.append("other advanced parameters")
    st.info(f"The running {what} uses other settings than those below ({'; '.join(items)}). It goes on with "
            f"them; the settings below are for your next {what}.")


def _poll(job, banner=None) -> None:
    st.subheader("Preparing the shadow calibration" if job.run_id.startswith(CHECK_PREFIX) else "Audit in progress")
    _live(banner)


# --------------------------------------------------------------------------- the tab


def _calibration_section(settings: Settings) -> None:
    check = st.session_state.get("calibration_check") or {}
    if check.get("key") != _config_key(settings):
        st.caption("A method whose shadow calibration shows no signal sends none of its queries. "
                   "'Check calibration' prepares the shadow first (locally; cached for the audit) and tells "
                   "you before any query is sent.")
        if st.button("Check calibration", key="check_calibration", disabled=not settings.methods):
            _check_calibration(settings)
        return
    st.markdown("**Shadow calibration** (validation AUC on held-out shadow documents; 0.5 = chance)")
    for m, auc in (check.get("auc") or {}).items():
        why = (check.get("no_signal") or {}).get(m)
        shown = "n/a" if auc is None else f"{auc:.2f}"
        if why is None:
            st.caption(f"{_label(m)}: AUC {shown}: it will run.")
            continue
        st.warning(f"{_label(m)}: {why}. None of its queries will be sent, and it will not vote.")
        st.checkbox(f"Run {_label(m)} anyway (its queries are sent and its result shown, but it does not vote)",
                    key=f"insist_{m}")


def _corpus_limit_note(shadow) -> None:
    """Says where the auxiliary corpus holds too few texts for the shadow size asked for: the shadow is cut to
    what it holds (a custom 2000 + 2000 ran on 600 + 600 of the shipped corpus while this tab said 2000)."""
    from shadow.corpus import CorpusError
    from shadow.prepare import corpus_allows

    try:
        most_in, most_out = corpus_allows(shadow)
    except (CorpusError, OSError):  # the sidebar already says what is wrong with the corpus
        return
    if shadow.n_members > most_in or shadow.n_nonmembers > most_out:
        st.warning(f"The auxiliary corpus gives at most {most_in} members + {most_out} non-members (half of its "
                   f"texts go into the shadow RAG), so the shadow uses {min(shadow.n_members, most_in)} + "
                   f"{min(shadow.n_nonmembers, most_out)}. Upload a larger public corpus for the size you chose.")


def _shadow_caption(settings: Settings) -> str:
    """The shadow's sizes for the methods chosen, as ``shadow.prepare.shadow_sizes`` gives each: a size per
    class for the generative methods was said even when none of them was chosen, and named only MBA and
    S2MIA while the text-only methods are prepared on it too."""
    from shadow.prepare import shadow_sizes

    s = settings.shadow
    by_size: dict[tuple[int, int], list[str]] = {}
    for m in settings.methods:
        by_size.setdefault(shadow_sizes(m, s), []).append(_label(m))
    if len(by_size) > 1:
        sizes = "; ".join(f"{n_in} members + {n_out} non-members for {', '.join(ms)}"
                          for (n_in, n_out), ms in by_size.items())
    else:
        n_in, n_out = next(iter(by_size), (s.n_members, s.n_nonmembers))
        sizes = f"{n_in} members + {n_out} non-members"
    return f"Shadow RAG: {sizes}, k = {s.top_k_docs} retrieved documents."


def render_run_tab(settings: Settings | None, banner=None) -> None:
    """The Run tab. ``banner`` is the container above the tabs where a running job's line is redrawn with its
    progress (``_live``); a running job is shown even when the sidebar's settings cannot be read."""
    job = attached_job()
    if job is not None:
        _poll(job, banner)
        return
    if settings is None:
        st.error("The audit cannot start until the sidebar's settings can be read (see the message there).")
        return
    message = st.session_state.get("run_message")
    if message:
        {"error": st.error, "info": st.info}.get(message[0], st.success)(message[1])
    docs = st.session_state.get("documents") or []
    controls = st.session_state.get("controls") or []
    st.markdown(f"**Documents:** {len(docs)} · **Controls:** {len(controls) or 'none'} · "
                f"**Target:** {settings.target_shown} · **Methods:** "
                + (", ".join(_label(m) for m in settings.methods) or "none"))
    st.caption(_shadow_caption(settings))
    _corpus_limit_note(settings.shadow)
    if not docs:
        st.info("Add your documents in tab 1 first.")
    if not settings.methods:
        st.warning("Choose at least one method in the sidebar.")
    if settings.missing_target:
        st.warning(settings.missing_target)
    from app.resources import store_problem

    unusable_store = store_problem()  # every audit is recorded there as it runs: none can start without it
    if unusable_store:
        st.error(unusable_store)
    caps = _known_capabilities(settings)
    if caps is None:
        st.caption("Tip: 'Check connection' in the sidebar tells which methods this target supports.")
    if docs and settings.methods:
        _estimate(settings, docs, controls)
    if settings.methods:
        _calibration_section(settings)
    ready = bool(docs and settings.methods and not settings.missing_target and not unusable_store)
    if st.button("Start audit", type="primary", disabled=not ready, key="start_audit"):
        _start(settings, docs, controls)
