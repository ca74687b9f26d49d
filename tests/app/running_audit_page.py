"""The app's page with an audit already running (for tests/app/test_browser.py): ``streamlit run`` this file.

A job that never ends is entered in the app's job registry, as an audit started from another page would
be, with its first document decided; then the app's own main.py runs. A page opened now finds that audit,
and its first run ends in a rerun (the Run tab follows each decided document), which is where a widget's
value can be lost.
"""
from __future__ import annotations

import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.jobs import AuditJob, job_registry  # noqa: E402
from audit_core.audit import AUDIT_STAGE  # noqa: E402

if not job_registry().running():
    job = AuditJob("run-browser-running", 20)
    job.thread = threading.Thread(target=threading.Event().wait, daemon=True)
    job.thread.start()
    job.progress(AUDIT_STAGE, 1, 20)
    job.note_partial({"verdicts": [{"doc_id": "d0", "verdict": "member", "reason": "", "results": {}}]})
    job_registry().add(job)

MAIN = ROOT / "app" / "main.py"
exec(compile(MAIN.read_text(), str(MAIN), "exec"))
