"""MBA's mask planning of the owner's documents (run locally before the first document is probed) is drawn
under "Audit of your documents", above the documents bar, which waits for it; it had been drawn among the
shadow preparation's bars while the documents bar said "waiting for the shadow preparation"."""
from __future__ import annotations

from app.jobs import job_registry
from audit_core.audit import AUDIT_STAGE, PLANNING_SUFFIX
from tests.app.test_running_job_view import _app, running  # noqa: F401  (the fixture)

PLANNING = f"MBA: planning the masks with the proxy model{PLANNING_SUFFIX}"


def test_the_owners_mask_planning_is_drawn_with_the_audit_and_the_documents_bar_waits_for_it(running):  # noqa: F811
    job = running()
    job.progress("MBA: calibrating", 1, 1)
    job.progress(PLANNING, 0, 20)
    job.progress(PLANNING, 4, 20)
    job_registry().add(job)
    at = _app()
    at.run()
    assert not at.exception
    texts = [p.proto.text for p in at.get("progress")]
    plan = next(i for i, t in enumerate(texts) if t.startswith(PLANNING))
    docs = next(i for i, t in enumerate(texts) if t.startswith("documents: 0 / 20"))
    assert texts.index(next(t for t in texts if t.startswith("MBA: calibrating"))) < plan < docs
    assert "waiting for the masks to be planned" in texts[docs] and "nothing sent" in texts[plan]
    assert any(m.value.startswith("**Audit of your documents**") for m in at.markdown)
    banner = next(i.value for i in at.info if i.value.startswith("An audit is running"))
    assert PLANNING in banner  # what runs now, not "preparing the shadow"


def test_once_documents_are_audited_the_bar_is_theirs(running):  # noqa: F811
    job = running()
    job.progress(PLANNING, 20, 20)
    job.progress(AUDIT_STAGE, 3, 20)
    job_registry().add(job)
    at = _app()
    at.run()
    texts = [p.proto.text for p in at.get("progress")]
    assert any(t.startswith("documents: 3 / 20") for t in texts) and not any("waiting for" in t for t in texts)


def test_the_history_notice_names_the_same_stage_as_the_banner(running):  # noqa: F811
    from app.tab_run import count_line, run_progress

    job = running()
    job.progress("MBA: calibrating", 1, 1)
    job.progress(PLANNING, 4, 20)
    assert count_line(job) == f"{PLANNING}: 4 / 20"
    assert run_progress(job).headline.startswith(f"{PLANNING}: 4 / 20")
    job.progress(AUDIT_STAGE, 2, 20)
    assert count_line(job) == "documents: 2 / 20" and run_progress(job).headline.startswith("documents: 2 / 20")
