"""Command line for batch audits: python -m app.cli (or ./run cli).

    ./run cli audit --target demo --docs assets/sample_documents.csv
    ./run cli audit --target https://host/v1 --model my-model --docs my.csv   # methods: chosen for the target
    ./run cli audit --target https://host/v1 --model my-model --docs my.csv --method srag,mba
    ./run cli audit --target demo --docs my.csv --controls never_published.csv --fpr 0.01
    ./run cli audit --target-file my_api.yaml --allow-env MY_API_KEY --docs my.csv   # any HTTP API
    ./run cli prepare --method srag          # shadow preparation only (cached)
    ./run cli canaries make --kit my-kit.json --n 20 --out to_publish.txt
    ./run cli canaries audit --kit my-kit.json --target https://host/v1 --model my-model
    ./run cli canaries audit --kit my-kit.json --target-file my_api.yaml --allow-env MY_API_KEY

Every "member" call is made at a stated false-positive rate (--fpr, default
5%); controls (--controls: documents you never published, or a ``control``
column in --docs) add one collection-level test of all your documents.

The API key comes from the environment variable named by --api-key-env
(default OPENAI_API_KEY) and is sent only to the --target host (redirects are
not followed); it is never printed, stored or written into any output. A
target file names the variables it sends ($NAME in a header, api_key_env);
each is read only when --allow-env NAME allows it, since the file may come
from someone else and name any variable of this computer for a host of its
choosing (the app asks the same, one box per variable).

Every answer of an HTTP target is written to the store (--store, default the
app's: $RPA_AUDIT_DB or RPA_CACHE_DIR/audits.sqlite) as it arrives, so an
audit that was interrupted (kill -9, network loss) and is run again sends only
the requests that were never answered. The estimated cost is printed before
any query is sent; --estimate-only stops there.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import signal
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from audit_core.methods import AUTO, METHODS, method_label, methods_for_target, suggested_methods, \
    unchosen_chat_methods, unchosen_source_methods  # noqa: E402
from audit_core.row_reason import never_clears_notes, row_reason, silent_reasons  # noqa: E402
from audit_core.verdict import plain_reason  # noqa: E402


def _named(name: str) -> str:
    """A method's label with the name --method takes ("S-RAG (srag)"), where the user may act on it."""
    label = method_label(name)
    return label if label == name else f"{label} ({name})"


def _progress_bar():
    """A progress(stage, done, total) callback drawing one tqdm bar per stage.

    Done / total and the time left come from ``audit_core.progress`` (the
    app's bars use the same), measured from each stage's first report.
    """
    from tqdm import tqdm

    from audit_core.progress import ProgressClock

    clock = ProgressClock()
    if not sys.stderr.isatty():
        return _progress_lines(clock)
    bars: dict[str, tqdm] = {}

    def progress(stage: str, done: int, total: int) -> None:
        clock.update(stage, done, total)
        bar = bars.get(stage)
        if bar is None:
            bar = bars[stage] = tqdm(total=total, desc=stage, file=sys.stderr, leave=True)
        bar.total = total
        bar.n = done
        # done / total and time left from audit_core.progress, not tqdm's own rate
        bar.bar_format = "{desc}: {percentage:3.0f}%|{bar:20}| " + clock.describe(stage).replace("{", "{{").replace("}", "}}")
        bar.refresh()
        if done >= total:
            bar.close()

    return progress


#: seconds between two lines of the same stage where stderr is no terminal (a CI log, a file)
PLAIN_PROGRESS_S = 30.0


def _progress_lines(clock, every_s: float = PLAIN_PROGRESS_S):
    """The progress callback where stderr is no terminal: a line when a stage starts, one at most every
    ``every_s`` seconds while it runs, and one when it is done.

    tqdm redraws a bar with carriage returns, which a CI log or a file keeps: one audit of 20 documents left
    over 250 redraws on a few lines there, unreadable and mostly "about 0 s left"."""
    import time

    said: dict[str, float] = {}  # a running stage: when its last line was printed
    ended: set[str] = set()  # stages whose last line said "done"

    def progress(stage: str, done: int, total: int) -> None:
        clock.update(stage, done, total)
        finished = bool(total) and done >= total
        if finished and stage in ended:
            return
        now = time.monotonic()
        if finished or stage not in said or now - said[stage] >= every_s:
            print(f"{stage}: {clock.describe(stage)}", file=sys.stderr)
            said[stage] = now
        if finished:
            ended.add(stage)
            said.pop(stage)  # begun again, it is said again
        else:
            ended.discard(stage)

    return progress


def _load_docs(path: str, text_column: str | None, id_column: str | None, with_controls: bool = False):
    """Documents and row problems of a CSV/JSONL file; with ``with_controls``, also the rows whose
    ``control`` column is true (documents the owner declares never published), as a third value."""
    from audit_core.documents import (as_controls, documents_from_table, guess_id_column, guess_text_column,
                                      read_table_bytes, split_control_rows)

    table = read_table_bytes(Path(path).read_bytes(), path)
    df, ctl = split_control_rows(table) if with_controls else (table, None)
    sample = df if len(df) or ctl is None else ctl  # every row a control: guess the columns from those
    text_col = text_column or guess_text_column(sample)
    id_col = id_column if id_column is not None else guess_id_column(sample, text_col)
    batch = documents_from_table(df, text_col, id_col)
    for note in batch.notes:  # about the file as a whole (the encoding assumed, a quote never closed)
        print(f"note: {path}: {note}", file=sys.stderr)
    if not with_controls:
        return batch.documents, batch.problems()
    controls = as_controls(documents_from_table(ctl, text_col, id_col).documents) if ctl is not None and len(ctl) else []
    return batch.documents, batch.problems(), controls


def _open_store(args):
    """(the answer store, None), or (None, what is wrong) when it or the cache folder cannot be used: bad
    input, said before anything is sent (it was reported as a bug in the auditor, after the estimate)."""
    from audit_core.history import STORE_OPEN_ERRORS, store_open_problem
    from audit_core.store import Store

    problem = _cache_problem()
    if problem:
        return None, problem
    path = _store_path(args)
    try:
        return Store(path), None
    except STORE_OPEN_ERRORS as exc:  # the app says it in the same words, with its own way out
        return None, (f"{store_open_problem(path, exc)}; give --store (or RPA_AUDIT_DB) a new file name, or the "
                      "store file of an earlier audit")


def _cache_problem() -> str | None:
    """What is wrong with the cache folder (``RPA_CACHE_DIR``), or None: bad input for every command that
    writes there, said before it starts (``prepare`` called it a bug in the auditor)."""
    from audit_core.models import cache_dir, cache_warning

    try:
        folder = cache_dir(quiet=True)  # its warning is printed below, once
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable", str(folder))
    except OSError as exc:
        return (f"the cache folder {exc.filename or os.environ.get('RPA_CACHE_DIR')} cannot be used "
                f"({exc.strerror or exc}); set RPA_CACHE_DIR to a folder you can write")
    warning = cache_warning(folder)  # usable, but others can write what the audit trusts: said, not refused
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return None


def _store_path(args) -> str:
    """The SQLite store: --store, else the app's own (so the app's history lists CLI audits too)."""
    if args.store:
        return args.store
    env = os.environ.get("RPA_AUDIT_DB")
    if env:
        return env
    from audit_core.models import cache_dir

    return str(cache_dir() / "audits.sqlite")


#: why the estimate is a bound (the app's Run tab says the same beside Check calibration): it counts every chosen
#: method before the capability probe and the shadow have said which can decide on this target
UPPER_BOUND = ("every chosen method counted: one that cannot run on this target (the audit's capability probe finds "
               "out; 'check' asks it now) or whose shadow shows no signal (found once the shadow is prepared) sends "
               "none of its queries, and the audit's notes say which")


def _print_estimate(docs, cfg, is_demo: bool, controls=(), generated: bool = False,
                    file_config=None, pace: float | None = None) -> None:
    """The cost of the audit on the target, before anything is sent (every query is paid).

    Counted in the style the audit will read the target in: the demo's, the
    user's ``--target-style``, or for an endpoint not yet checked chat, the
    upper bound (a chat target gets longer S-RAG probes and more Verbatim
    probes) and what an audit reads a target in when its style cannot be found.
    The controls are probed with one method only: the dearest is counted for
    them, apart from the documents (as the app does). ``pace``: the target's
    requests a minute, which make the least time the queries can take.
    """
    from audit_core.audit import with_target_style
    from audit_core.estimate import assumptions, controls_queries, estimate_audit, pace_note
    from audit_core.target.base import Capabilities
    from shadow.demo import DEMO_STYLE

    if is_demo or AUTO not in cfg.methods:
        styled = with_target_style(cfg, Capabilities(True, True, 20, style=DEMO_STYLE if is_demo else None))
        est, outcomes = estimate_audit(docs, styled.methods, styled.method_params), []
    else:
        styled, est, outcomes = _auto_outcomes(docs, cfg)
    paid = "free: the demo runs on this computer" if is_demo else "billed by the endpoint's provider"
    chosen = (f"; --method {AUTO}: the methods are chosen once the target's capability probe has answered, and the "
              "dearest choice is counted") if outcomes else ""
    print(f"estimated cost: {est.queries} target queries for {len(docs)} documents, about "
          f"{est.prompt_tokens} prompt tokens + at most {est.completion_tokens} completion tokens "
          f"({paid}; counted for a target that answers in {styled.target_style} style{chosen})", file=sys.stderr)
    if outcomes:
        print("  by what the probe finds: " + "; ".join(outcomes), file=sys.stderr)
    for m in est.methods.values():
        skipped = f", {m.skipped_documents} documents it skips" if m.skipped_documents else ""
        note = f" ({m.note})" if m.note else ""
        print(f"  {_named(m.method)}: {m.queries} queries{skipped}{note}", file=sys.stderr)
    print(f"  {UPPER_BOUND}", file=sys.stderr)
    if controls:
        made = " to be rewritten from the documents (one local rewrite each, nothing sent)" if generated else ""
        print(f"  + at most {controls_queries(list(controls), styled.methods, styled.method_params)} queries for "
              f"the {len(controls)} controls{made}: they are probed with one method only, chosen during the audit",
              file=sys.stderr)
    if pace:
        print(f"  {pace_note(est.queries, pace)}", file=sys.stderr)
    if file_config is not None and hasattr(file_config, "caps_answers") and not file_config.caps_answers():
        print("  the target file's body has no {{max_tokens}}: the service writes answers as long as it likes, "
              "so the completion tokens are no bound", file=sys.stderr)
    if not is_demo:  # the demo bills nothing: what a provider's bill may add is for real targets
        retries = getattr(file_config, "max_retries", 5)
        print("  " + assumptions(max_retries=retries), file=sys.stderr)


def _auto_outcomes(docs, cfg):
    """For ``--method auto`` before the probe: the dearest choice of methods (its configuration and estimate)
    and, for each thing the probe may find, the methods chosen and their queries."""
    from audit_core.audit import with_target_style
    from audit_core.estimate import estimate_audit
    from audit_core.target.base import Capabilities

    dearest, outcomes = None, []
    for sources in (False, True):
        for logprobs in (True, False):
            for style in ("completion", "chat"):
                styled = with_target_style(cfg, Capabilities(True, logprobs, 20 if logprobs else 0, style=style,
                                                             sources=sources))
                est = estimate_audit(docs, styled.methods, styled.method_params)
                if dearest is None or est.queries > dearest[1].queries:
                    dearest = (styled, est)
                if not sources:
                    kind = f"{'logprobs' if logprobs else 'text only'}, {style} style"
                    outcomes.append(f"{kind}: {', '.join(method_label(m) for m in styled.methods)} "
                                    f"({est.queries} queries)")
    outcomes.append("a target that lists its sources: "
                    + ", ".join(method_label(m) for m in unchosen_source_methods([])) + " besides")
    return dearest[0], dearest[1], outcomes


def method_hints(chosen: list[str], caps, style: str | None, some_cannot_run: bool) -> list[str]:
    """What to add to --method for the target the capability probe found: the methods for a target without
    logprobs (when a chosen one cannot run), for one that answers like a chat model, for one that cites sources."""
    hints, text_only = [], []
    if not caps.logprobs and some_cannot_run:
        text_only = suggested_methods(False, caps.sources, style)
        hints.append(f"for a target without logprobs, --method {','.join(text_only)}")
    chat = unchosen_chat_methods(chosen) if style == "chat" else []
    if chat and not set(chat) <= set(text_only):
        hints.append("on a target that answers like a chat model, S-RAG and MBA usually find no signal on their "
                     f"shadow and abstain; add --method {','.join(chat)}")
    unused = unchosen_source_methods(chosen) if caps.sources else []
    if unused:
        hints.append(f"this target lists the sources of its answers; add --method {','.join(unused)} to read them")
    return hints


def _print_capabilities(cfg, caps, out) -> None:
    """What the capability probe found and what follows for the chosen methods: which can run and why the others
    cannot, the style the target is read in, and what to add to --method (``method_hints``). Said by ``audit``
    before it sends a document's query, and by ``check`` alone."""
    from audit_core.audit import select_methods, with_target_style

    styled = with_target_style(cfg, caps)
    can, cannot = select_methods(styled, caps)
    if styled.methods_source:
        print(f"methods: {', '.join(_named(m) for m in styled.methods)} ({styled.methods_source})", file=out)
    runnable = ", ".join(_named(m.name) for m in can) or "none"
    print(f"target: {caps.detail or 'reachable'}; can run: {runnable}", file=out)
    for name, why in cannot.items():
        print(f"  {_named(name)}: {why}", file=out)
    print(f"target style: {styled.target_style} ({styled.target_style_source}); the shadow answers, "
          "and S-RAG reads, in this style", file=out)
    for hint in method_hints(styled.methods, caps, styled.target_style, bool(cannot)):
        print(f"  hint: {hint}", file=out)


def nothing_decided_note(result: dict) -> str | None:
    """The line before the verdicts when no chosen method could decide anything (``nothing_could_decide``)."""
    from audit_core.report import nothing_could_decide

    add = nothing_could_decide(result)
    if add is None:
        return None
    advice = f"; on this chat-style target run --method {','.join(add)}" if add else "; the notes above say why"
    return f"note: none of the chosen methods could decide anything on this target{advice}"


#: scalar evidence fields shown per method by ``--evidence`` (the JSON of --out holds them all)
_EVIDENCE_FIELDS = 8


def _short(value, width: int = 60) -> str:
    """A scalar evidence value in a few characters: numbers to 3 significant digits, text cut at ``width``."""
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, float):
        return format(value, ".3g")
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[:width - 1] + "…"


def evidence_lines(results: dict) -> list[str]:
    """The --evidence lines of one document: S-RAG's probed words and MBA's accuracy where they have them,
    and for every other method (and those two when they lack them) its score, its decision or why it has
    none, and its evidence's scalar fields, briefly (the words of the app's and the PDF's line for it)."""
    from audit_core.report import evidence_scalars, result_line

    lines = []
    for name, res in results.items():
        ev = res.evidence or {}
        if name == "srag" and ev.get("words"):
            words = ", ".join(f"{w['word']}={'fail' if w['prob'] is None else format(w['prob'], '.2f')}"
                              for w in ev["words"])
            lines.append(f"S-RAG probed words: {words}")
            continue
        if name == "mba" and ev.get("accuracy") is not None:
            lines.append(f"MBA accuracy: {ev['accuracy']:.2f}")
            continue
        as_json = res.to_json()
        scalars = evidence_scalars(as_json)
        shown = ", ".join(f"{k}={_short(val)}" for k, val in scalars[:_EVIDENCE_FIELDS])
        more = f", +{len(scalars) - _EVIDENCE_FIELDS} more in --out" if len(scalars) > _EVIDENCE_FIELDS else ""
        lines.append(f"{method_label(name)}: {_short(result_line(as_json), 160)}" + (f"; {shown}{more}" if shown else ""))
    return lines


def _print_failures(failures: dict) -> None:
    """The run-level failure summary: what failed, how often, and whether the audit stopped."""
    if not failures:
        return
    errs = failures.get("target_errors") or {}
    if errs:
        shown = "; ".join(f"{plain_reason(reason)} ({n} call{'s' if n != 1 else ''})" for reason, n in errs.items())
        print(f"target errors: {shown} ({failures.get('retries', 0)} retries); the documents concerned are "
              "inconclusive, never scored", file=sys.stderr)
    undecided = failures.get("documents_without_decision") or []
    if undecided:
        print(f"documents without a decision: {len(undecided)} of {failures.get('documents_audited', 0)}",
              file=sys.stderr)
    if failures.get("stopped"):
        print(f"error: the audit stopped: {failures['stopped']}; fix it and run the same command again "
              "(answered requests are not sent again)", file=sys.stderr)


def _file_host(config) -> str:
    """The host a target file's requests (and secrets) go to, as the user reads it."""
    from audit_core.target.base import consent_host

    url = getattr(config, "url", None) or config.base_url
    return consent_host(url)


def _not_allowed(args, config) -> str | None:
    """The refusal of a target file that names environment variables --allow-env did not allow, or None.

    A target file may come from someone else: ``headers: {X-Trace-Id: $AWS_SECRET_ACCESS_KEY}`` would send
    that secret to the file's host. Only the variables the user names on the command line are read (the
    app's one box per variable), and the message names them and the host without reading any of them.
    """
    allowed = set(getattr(args, "allow_env", None) or [])
    refused = [v for v in config.env_vars() if v not in allowed]
    if not refused:
        return None
    named = ", ".join(f"${v}" for v in refused)
    flags = " ".join(f"--allow-env {v}" for v in refused)
    return (f"the target file {Path(args.target_file).name} sends {named} from this computer's environment to "
            f"{_file_host(config)}; nothing is read or sent without your consent. If you trust that host with "
            f"{'it' if len(refused) == 1 else 'them'}, run again with {flags}")


def _target(args):
    """The target the command line names; for a target file, built with the allowed variables only."""
    if getattr(args, "target_file", None):
        from audit_core.target import create_target, load_target_file

        spec, config = load_target_file(args.target_file)
        refused = _not_allowed(args, config)
        if refused:  # said by _target_problem before the estimate; kept here so no caller can skip it
            raise ValueError(refused)
        host = _file_host(config)
        for var in config.env_vars():
            print(f"secret: ${var} from the environment (--allow-env), sent to {host} only", file=sys.stderr)
        environ = {v: os.environ[v] for v in config.env_vars() if v in os.environ}
        if getattr(args, "requests_per_minute", None) and _takes_pace(config):
            config = dataclasses.replace(config, requests_per_minute=args.requests_per_minute)
        return create_target(spec, config, environ)
    if args.target == "demo":
        from shadow.demo import demo_target

        return demo_target(args.demo_defense)
    from audit_core.target.base import consent_host
    from audit_core.target.openai_compat import OpenAITarget

    # read for the host named on this command line only; the connector never reads it by itself
    key = os.environ.get(args.api_key_env) or None
    host = consent_host(args.target)
    from audit_core.target.http_client import is_loopback

    plain = " over plain http: anyone on the way can read it" if urlsplit(args.target).scheme == "http" and \
        not is_loopback(args.target) else ""
    print(f"API key: from ${args.api_key_env}, sent to {host} only{plain}" if key else
          f"API key: none (${args.api_key_env} is not set); requests go to {host} without one", file=sys.stderr)
    return OpenAITarget(base_url=args.target, model=args.model, api_key=key,
                        requests_per_minute=getattr(args, "requests_per_minute", None))


def _env_name(value: str) -> str:
    """--api-key-env takes a variable's name; a value that is not one (often the key itself) is refused unrepeated."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise argparse.ArgumentTypeError("it takes the name of an environment variable (letters, digits and _), "
                                         "not the key itself; the value given is not repeated here")
    return value


def _output_clash(args) -> str | None:
    """An output path that is also an input or another output: writing it would destroy that file (a kit's
    seed has no other copy), so it is refused before anything is sent."""
    outs = [(f, getattr(args, a, None)) for f, a in (("--out", "out"), ("--junit", "junit"), ("--store", "store"))]
    ins = [(f, getattr(args, a, None)) for f, a in (("--docs", "docs"), ("--controls", "controls"), ("--kit", "kit"),
                                                     ("--decoy-questions", "decoy_questions"),
                                                     ("--aux-corpus", "aux_corpus"),
                                                     ("--target-file", "target_file"))]
    seen: dict[Path, str] = {}
    for flag, path in ins + outs:
        if not path:
            continue
        real = Path(path).expanduser().resolve()
        if real in seen and (flag, path) in outs:
            return f"{flag} {path} is the same file as {seen[real]}; writing it would destroy that file"
        seen.setdefault(real, flag)
    return None


def _takes_pace(config) -> bool:
    """Whether a target type's configuration has a pace (the registry does not promise one)."""
    return any(f.name == "requests_per_minute" for f in dataclasses.fields(config))


def _checked_target_arguments(args):
    """The target file's configuration (None without --target-file) and what is wrong with the target arguments
    (a file that cannot be read or used, a variable not allowed or unset, a bad URL), or None: bad input, said
    before the estimate and before anything is sent."""
    if not getattr(args, "target_file", None):
        return None, _target_problem(args)
    from audit_core.target import TargetFileError, load_target_file

    try:
        config = load_target_file(args.target_file)[1]
    except TargetFileError as exc:
        return None, str(exc)
    return config, _target_problem(args)


def _target_problem(args) -> str | None:
    """What is wrong with the target arguments, found before the estimate and before anything is sent."""
    if getattr(args, "target_file", None):
        from audit_core.target import load_target_file

        spec, config = load_target_file(args.target_file)  # a bad file was reported already
        if getattr(args, "requests_per_minute", None) and not _takes_pace(config):
            return (f"--requests-per-minute: a target file of type {spec.name} has no pace to set (its requests go "
                    "as fast as the target answers)")
        unused = [v for v in dict.fromkeys(args.allow_env or []) if v not in config.env_vars()]
        if unused:
            print(f"note: --allow-env {' '.join(unused)}: the target file does not read "
                  f"{', '.join('$' + v for v in unused)}; nothing more is sent", file=sys.stderr)
        refused = _not_allowed(args, config)
        if refused:
            if args.estimate_only:  # nothing is sent: the estimate stands, the audit would stop here
                print(f"note: {refused}", file=sys.stderr)
                return None
            return refused
        unset = [v for v in config.env_vars() if not os.environ.get(v)]
        if not unset:
            return _unsendable_key(config.env_vars())
        said = f"the target file sends ${', $'.join(unset)}, which is not set in this environment"
        if args.estimate_only:  # nothing is sent: the estimate stands, the audit would stop here
            print(f"note: {said}; set it before the audit", file=sys.stderr)
            return None
        return f"{said}; set it (export NAME=...) and run again"
    if getattr(args, "allow_env", None):
        return ("--allow-env is for a target file's variables (--target-file); with --target the key is read "
                "from the variable --api-key-env names")
    if args.target == "demo":
        if getattr(args, "requests_per_minute", None):
            return ("--requests-per-minute paces a remote target; the demo answers on this computer and needs "
                    "no pace")
        return None
    from audit_core.target.base import check_service_url

    try:
        check_service_url(args.target, "--target")
    except ValueError as exc:
        return str(exc) + (" (or 'demo' for the built-in target)" if "with a host" in str(exc) else "")
    if not args.model:
        return "--model is required with an endpoint URL (the model name the endpoint serves)"
    return _unsendable_key([args.api_key_env])


def _unsendable_key(names) -> str | None:
    """A named variable whose value cannot be a key (a space, a line break, a non-ASCII letter): bad input,
    said before the estimate and without the value."""
    from audit_core.target.openai_compat import header_safe

    bad = [n for n in names if os.environ.get(n, "").strip() and not header_safe(os.environ[n].strip())]
    if not bad:
        return None
    return (f"${bad[0]} has characters no key has (a space, a line break or a non-ASCII letter); set it again, "
            "copied from the provider")


def _print_freshness(freshness: dict) -> None:
    """How many stored answers were used instead of sending, and when they were received (the report's sentence)."""
    from audit_core.report import freshness_sentence

    if freshness:
        print(freshness_sentence({"freshness": freshness}), file=sys.stderr)


def _audit_config(args):
    from audit_core.audit import AuditConfig
    from audit_core.verdict import VerdictConfig
    from shadow.prepare import ShadowConfig

    shadow = ShadowConfig(n_members=args.shadow_size, n_nonmembers=args.shadow_size,
                          n_per_class_generative=min(args.shadow_size, args.shadow_size_generative))
    if args.aux_corpus:
        if not Path(args.aux_corpus).is_file():
            raise ValueError(f"--aux-corpus {args.aux_corpus}: no such file")
        shadow.aux_corpus = args.aux_corpus
        _check_aux_corpus(shadow, args.fpr)
    from shadow.prepare import corpus_allows

    most_in, most_out = corpus_allows(shadow)
    if args.shadow_size > min(most_in, most_out):  # cut by prepare_shadow: say so rather than claim the size
        print(f"note: --shadow-size {args.shadow_size}: the auxiliary corpus gives at most {most_in} members + "
              f"{most_out} non-members (half of its texts go into the shadow RAG); the shadow uses "
              f"{min(args.shadow_size, most_in)} + {min(args.shadow_size, most_out)}", file=sys.stderr)
    params: dict[str, dict] = {}
    if args.bins is not None:
        params.setdefault("srag", {})["bins"] = args.bins
    if args.segment_factor is not None:
        params.setdefault("srag", {})["segment_factor"] = args.segment_factor
    if args.masks is not None:
        params.setdefault("mba", {})["n_masks"] = args.masks
    from shadow.demo import mba_elicitation_for

    params.setdefault("mba", {})["elicitation"] = (
        args.mba_elicitation or mba_elicitation_for(getattr(args, "target", None) == "demo"))
    if getattr(args, "verbatim_decoys", False):
        from audit_core.methods.verbatim import decoy_probe_params

        params.setdefault("verbatim", {}).update(decoy_probe_params(args.decoy_questions))
    elif getattr(args, "decoy_questions", None):
        raise ValueError("--decoy-questions is used only with --verbatim-decoys")
    insist = [m for m in (getattr(args, "run_without_signal", None) or "").split(",") if m]
    unknown = [m for m in insist if m not in METHODS]
    if unknown:  # cmd_audit reports it as a plain 'error: ...'
        raise ValueError(f"unknown method(s) in --run-without-signal: {', '.join(unknown)}; "
                         f"choose from {', '.join(METHODS)}")
    # "srag, mba" as a person types it: the names without their spaces
    methods = [m.strip() for m in args.method.split(",") if m.strip()]
    # the shadow answers, and S-RAG reads, in the target's style: this one, or the capability probe's finding
    return AuditConfig(methods=methods, shadow=shadow, method_params=params, run_without_signal=insist,
                       fpr=args.fpr, target_style=getattr(args, "target_style", None),
                       verdict=VerdictConfig(retrieval_as_sent=_retrieval_as_sent(args)))


def _check_aux_corpus(shadow, fpr: float) -> None:
    """A corpus the shadow cannot be built from is bad input, said before anything is sent (it surfaced
    only after the target had been probed). Raises ValueError (a CorpusError is one) with what is wrong."""
    from audit_core.evidence.calibration import min_nonmembers

    try:
        docs = shadow.corpus_docs()
    except OSError as exc:
        raise ValueError(f"--aux-corpus {shadow.aux_corpus}: {exc.strerror or exc}") from None
    need = 2 * min_nonmembers(fpr)  # half of it outside the shadow's knowledge base: below that none decides
    if len(docs) < need:
        raise ValueError(f"--aux-corpus {shadow.aux_corpus}: {len(docs)} usable text(s); at a {fpr:.0%} false-"
                         f"positive rate the shadow RAG needs at least {need} (half in its knowledge base, half "
                         "outside it)")


def _retrieval_as_sent(args) -> bool:
    """Whether "not found" may stand (``VerdictConfig.retrieval_as_sent``): known for the demo target,
    the user's statement (``--retrieval-as-sent``) for any other."""
    from shadow.defenses import retrieval_as_sent

    stated = bool(getattr(args, "retrieval_as_sent", False))
    if getattr(args, "target", None) != "demo":
        return stated
    known = retrieval_as_sent(getattr(args, "demo_defense", None))
    if stated and not known:
        raise ValueError(f"--retrieval-as-sent: the demo target with --demo-defense {args.demo_defense} changes "
                         "what its retriever sees, so it does not retrieve with queries as sent")
    return known


def withheld_note(verdicts) -> str | None:
    """What the owner can do about documents left "not cleared" by verdict rule R5, or None."""
    withheld = sum(v.rule == "R5" for v in verdicts)
    if not withheld:
        return None
    return (f"note: {withheld} document(s) not cleared: the target is not known to retrieve with queries as sent. "
            "If its operator states it, run again with --retrieval-as-sent --reuse-days 1 (this audit's answers "
            "are reused instead of being sent again)")


def _print_collection(collection: dict) -> None:
    """The collection-level line first: what the owner's documents together show."""
    from audit_core.evidence.statement import collection_note, collection_sentence

    line = collection_sentence(collection)
    if line:
        print(line[0].lower() + line[1:])
        note = collection_note(collection)
        if note:
            print(f"  about this test: {note}", file=sys.stderr)


def _print_power(method_power: dict, fpr: float) -> None:
    from audit_core.report import cleared_text

    for name, mp in method_power.items():
        if mp.get("decides"):
            pw = "n/a" if mp.get("power") is None else f"{mp['power']:.2f}"
            print(f"{method_label(name)}: decides at a {fpr:.0%} false-positive rate; shadow power (TPR) {pw}; "
                  f"\"not found\" for shadow non-members: {cleared_text(mp, 'under the table')}", file=sys.stderr)
        else:
            print(f"{method_label(name)}: abstains: {plain_reason(mp.get('reason'))}", file=sys.stderr)


def cmd_audit(args) -> int:
    from audit_core.documents import DocumentInputError, as_controls, controls_apart, controls_apart_note

    try:
        docs, problems, controls = _load_docs(args.docs, args.text_column, args.id_column, with_controls=True)
        if args.controls:
            more, more_problems = _load_docs(args.controls, args.text_column, args.id_column)
            controls += as_controls(more)
            problems += more_problems
    except DocumentInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # "[Errno 2] No such file or directory: 'x.csv'" said which file, not in words
        print(f"error: cannot read {exc.filename or args.docs}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"skipped row {p.row}: {p.message}", file=sys.stderr)
    controls, same, repeated = controls_apart(controls, docs)
    if same or repeated:
        print(f"note: {controls_apart_note(same, repeated)}", file=sys.stderr)
    if not docs:
        print("error: no usable documents", file=sys.stderr)
        return 2
    if getattr(args, "fail_on", None) == "collection" and not controls and not args.generate_controls:
        print("error: --fail-on collection gates on the collection-level test, which needs controls: documents "
              "you never published (--controls FILE, or a 'control' column in --docs), or --generate-controls; "
              "nothing was sent", file=sys.stderr)
        return 2
    return _audit(args, docs, controls, "declared", generate_controls=bool(args.generate_controls and not controls))


@contextlib.contextmanager
def _first_ctrl_c_stops_between_documents():
    """An Event the first Ctrl-C sets: the audit stops after the document in progress and returns what it found,
    so its verdicts, reports, JUnit file and --fail-on gate still come (a Ctrl-C had discarded a member finding
    already made). The second Ctrl-C stops at once, as before."""
    cancel = threading.Event()
    # signals reach the main thread only; a process started to ignore Ctrl-C (nohup, a background job) keeps to it
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield cancel
        return

    def first(signum, frame):
        cancel.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("\nstopping after the document in progress (Ctrl-C again to stop at once) ...", file=sys.stderr)

    before = signal.signal(signal.SIGINT, first)
    try:
        yield cancel
    finally:
        signal.signal(signal.SIGINT, before)


def _generated_controls(docs) -> list:
    """Controls rewritten from the documents by a local model, with a progress bar (minutes on 2 cores)."""
    from audit_core.evidence.controls import generate_controls

    print(f"rewriting {len(docs)} documents with a local model as controls (the weakest kind: "
          "a rewrite differs in style from its original)", file=sys.stderr)
    from audit_core.documents import controls_apart, controls_apart_note

    progress = _progress_bar()
    made = generate_controls(docs, progress=lambda done, total: progress("rewriting controls", done, total))
    controls, same, repeated = controls_apart(made, docs)  # a rewrite that echoed its original is no control
    if same or repeated:
        print(f"note: {controls_apart_note(same, repeated)}", file=sys.stderr)
    return controls


def _audit(args, docs, controls, controls_kind: str, generate_controls: bool = False) -> int:
    """The audit: every check of the arguments first (nothing is sent or computed before they pass), then the
    estimate, then, unless ``--estimate-only``, the controls to generate and the audit itself."""
    from audit_core.models import ModelNotAvailableError
    from audit_core.target.base import TargetError
    from audit_core.audit import Cancelled, config_dict, run_audit
    from shadow.prepare import prepare_shadow

    file_config, problem = _checked_target_arguments(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        cfg = _audit_config(args)
        cfg.controls_kind = "generated" if generate_controls else controls_kind
        # controls to be generated: one rewrite per document, of about its length
        counted = list(docs) if generate_controls else list(controls)
        _print_estimate(list(docs), cfg, args.target == "demo", counted, generate_controls, file_config,
                        getattr(args, "requests_per_minute", None) or getattr(file_config, "requests_per_minute", None))
    except ValueError as exc:  # unknown method, parameter out of range
        print(f"error: {exc}", file=sys.stderr)
        return 2
    clash = _output_clash(args)
    if clash:
        print(f"error: {clash}", file=sys.stderr)
        return 2
    for flag, path in (("--out", args.out), ("--junit", getattr(args, "junit", None))):
        if path and not Path(path).resolve().parent.is_dir():
            # said before anything is sent: a path found wrong after an hour of probing loses that hour's output
            print(f"error: {flag} {path}: the folder {Path(path).resolve().parent} does not exist", file=sys.stderr)
            return 2
        if path and Path(path).is_dir():
            print(f"error: {flag} {path} is a folder; give a file name", file=sys.stderr)
            return 2
        if path and not os.access(Path(path).resolve().parent, os.W_OK | os.X_OK):
            print(f"error: {flag} {path}: the folder {Path(path).resolve().parent} is not writable", file=sys.stderr)
            return 2
    if getattr(args, "report_dir", None):
        # the folder is made after the audit: the nearest part of its path that exists must be a folder
        existing = next(q for q in [Path(args.report_dir).resolve(), *Path(args.report_dir).resolve().parents]
                        if q.exists())
        if not existing.is_dir():
            where = "is a file" if existing == Path(args.report_dir).resolve() else f"is inside the file {existing}"
            print(f"error: --report-dir {args.report_dir} {where}; give a folder", file=sys.stderr)
            return 2
        if not os.access(existing, os.W_OK | os.X_OK):
            print(f"error: --report-dir {args.report_dir}: the folder {existing} is not writable", file=sys.stderr)
            return 2
    if getattr(args, "store", None) and Path(args.store).is_dir():
        print(f"error: --store {args.store} is a folder; give the file name of the answer store", file=sys.stderr)
        return 2
    if args.estimate_only:
        return 0
    store, problem = _open_store(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    run_id = None
    resumed = False
    try:
        target = _target(args)
        from audit_core import history
        from audit_core.target.caching import CachingTarget

        # every answer is stored as it arrives, the demo's too; the same audit run again after a
        # cancel, failure or kill resumes its run and sends only what was never answered
        run_id, resumed = history.resume_or_start_run(store, docs, target.name, config_dict(cfg))
        if resumed:
            print(f"resuming the unfinished audit {run_id[:8]}: its answers are not sent again", file=sys.stderr)
        target = CachingTarget(target, store, run_id=run_id, reuse_days=getattr(args, "reuse_days", None))
        on_result = history.result_recorder(store, run_id)
        _say_probe_pace(args, file_config)
        caps = target.capabilities()
        if caps.reachable:
            _print_capabilities(cfg, caps, sys.stderr)
            if generate_controls:  # minutes of local rewriting: only once the target is known to answer
                controls = _generated_controls(docs)
        with _first_ctrl_c_stops_between_documents() as cancel:
            result = run_audit(docs, target, cfg, prepare_shadow, progress=_progress_bar(), on_result=on_result,
                               controls=controls, capabilities=caps, cancel=cancel)
    except Cancelled as exc:  # Ctrl-C while the shadow was being prepared: nothing was sent
        history.mark_failed(store, run_id, str(exc), cancelled=True)
        store.close()
        print(f"\nerror: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        if store is not None:
            store.close()
        print("\nerror: the audit was interrupted; run the same command again to go on (answered requests are "
              "not sent again)", file=sys.stderr)
        return 3
    except (TargetError, ModelNotAvailableError, ValueError) as exc:
        if run_id is not None:
            history.mark_failed(store, run_id, str(exc))
        if store is not None:
            store.close()
        print(f"error: {exc}", file=sys.stderr)
        return 3
    saved = result.to_json()
    if run_id is not None:
        saved = history.save_audit(store, run_id, saved, resumed)
    if result.cancelled:
        print(f"note: the audit was interrupted after {len(result.verdicts)} of {len(docs)} document(s); what it "
              "found so far follows, and the same command run again goes on (answered requests are not sent "
              "again)", file=sys.stderr)
    for name, why in result.not_run.items():
        print(f"note: {method_label(name)} not run: {why}", file=sys.stderr)
    for name, why in result.no_signal.items():
        sent = "its queries were sent (--run-without-signal) but it does not vote" if name in cfg.run_without_signal \
            else "none of its queries were sent (--run-without-signal to send them anyway)"
        print(f"note: {method_label(name)}: {why}; {sent}", file=sys.stderr)
    note = nothing_decided_note(saved)
    if note:
        print(note, file=sys.stderr)
    _print_collection(result.collection)
    _print_power(result.to_json()["method_power"], cfg.fpr)
    silent = silent_reasons(saved)
    for v in result.verdicts:
        score = "   -  " if v.score is None else f"{v.score:6.3f}"
        print(f"{v.doc_id:>16}  {v.verdict:<13} {score}  {row_reason(v, silent)}")
        if args.evidence:
            for line in evidence_lines(result.results[v.doc_id]):
                print(f"{'':>16}  {line}")
    from audit_core.report import never_clears_lines

    notes = never_clears_notes(result.verdicts)  # and those the power lines above refer to ("under the table")
    for note in notes + [line for line in never_clears_lines(saved) if line not in notes]:
        print(f"note: {note}", file=sys.stderr)
    note = withheld_note(result.verdicts)
    if note:
        print(note, file=sys.stderr)
    for name, cal in result.calibrations.items():
        if cal.shadow_auc is not None:
            print(f"shadow validation AUC of {method_label(name)}: {cal.shadow_auc:.3f}", file=sys.stderr)
    acc = result.account
    cached = f", answered from the store: {target.cache_hits}" if store is not None else ""
    from audit_core.report import tokens_text

    print(f"target queries: {acc['queries']} (failed {acc['failures']}){cached}, tokens: {tokens_text(acc)}",
          file=sys.stderr)
    _print_freshness(result.freshness)
    _print_failures(result.failures)
    written = True
    try:
        if args.out:
            from audit_core.io import write_private_bytes
            from audit_core.report import results_json  # the export the app offers: scrubbed of secrets

            # unredacted (every document's text): readable by its owner only, whatever the umask
            write_private_bytes(args.out, results_json(saved))
            print(f"results written to {args.out}", file=sys.stderr)
        if args.report_dir:
            paths, pdf_problem = _write_report(saved, Path(args.report_dir), redact=not args.no_redact)
            for path in paths:
                print(f"report written: {path}", file=sys.stderr)
            if pdf_problem:  # a bug in the auditor, not the disk's: the other exports are written, the run goes on
                print(f"error: the PDF report could not be made ({pdf_problem}); this is a bug in the auditor. The "
                      "JSON and CSV written beside it hold the same results", file=sys.stderr)
                written = False
    except OSError as exc:  # the verdicts above and the store keep the audit; only the file is missing
        print(f"error: an output could not be written: {exc.strerror or exc} ({exc.filename}); the audit is saved "
              "in the store (the app's History shows it), and the same command with --reuse-days 1 writes the "
              "outputs again from its answers", file=sys.stderr)
        written = False
    if store is not None:
        store.close()
    code = _ci_outputs(args, saved, written)  # a stopped audit's findings and JUnit report count too
    if (result.failures.get("stopped") or result.cancelled) and code != GATE_FAILED:
        return 3
    return code


def _ci_outputs(args, saved: dict, written: bool = True) -> int:
    """--junit and --fail-on: the report and exit status a scheduled job reads (``audit_core.ci_gate``).

    A finding ``--fail-on`` names exits 1 even when an output file could not be
    written: a job that watches a service must not read a member call as a disk
    problem. Without such a finding, a missing output exits 3 (the run did not
    do all it was asked), never 0 and never 2, which says "nothing was sent".
    """
    from audit_core.ci_gate import gate_failures, junit_xml
    from audit_core.io import write_private_bytes

    if getattr(args, "junit", None):
        try:
            # readable by its owner only, as every other output: it names the documents and what was found
            write_private_bytes(args.junit, junit_xml(saved))
            print(f"JUnit report written to {args.junit}", file=sys.stderr)
        except OSError as exc:  # the verdicts above and the store keep the audit; only this file is missing
            print(f"error: the JUnit report could not be written to {args.junit}: {exc.strerror or exc}",
                  file=sys.stderr)
            written = False
    causes = gate_failures(saved, args.fail_on) if getattr(args, "fail_on", None) else []
    for cause in causes:
        print(f"gate (--fail-on {args.fail_on}): {cause}", file=sys.stderr)
    if causes:
        return GATE_FAILED
    return 0 if written else 3


def _write_report(result: dict, folder: Path, redact: bool) -> tuple[list[Path], str | None]:
    """The PDF, JSON, CSV and scores CSV exports the app offers, named ``audit-<date>-<target>.<ext>``; the files
    written, and why the PDF could not be made (None when it was).

    Meant to be shared, so texts are redacted (hash and first words) unless
    --no-redact; the PDF records the SHA-256 of the JSON written beside it.
    The JSON and the CSVs are written first: the PDF is the most fragile of
    them (a row taller than a page raised reportlab's LayoutError), and its
    failure, not an OSError, had crashed the CLI with no export written and the
    --fail-on gate skipped.
    """
    from audit_core import report
    from audit_core.io import write_private_bytes
    from audit_core.plots import document_ids

    folder.mkdir(parents=True, exist_ok=True)

    def write(ext: str, data: bytes) -> Path:
        # 0600 like --out: with --no-redact they hold the documents whole, and under a umask of 022
        # write_bytes left them readable by every user of the computer
        return write_private_bytes(folder / report.export_name(result, ext), data)

    view = report.export_view(result, redact) if redact else None  # one walk of the result for all four
    paths = [write("json", report.results_json(result, redact=redact, view=view)),
             write("csv", report.results_csv(result, redact=redact, view=view).encode("utf-8")),
             write(report.SCORES_EXT, report.scores_csv(result, redact=redact, view=view).encode("utf-8"))]
    # the PDF lays out every document's evidence and figures: minutes for a large audit, so it has its bar
    bar, total = _progress_bar(), len(document_ids(result))
    done = 0

    def laid_out(n: int) -> None:
        nonlocal done
        done += n
        bar("writing the PDF report", done, total)

    try:
        pdf = report.pdf_report(result, progress=laid_out if total else None, redact=redact, view=view)
    except Exception as exc:  # noqa: BLE001 -- said in one line by the caller, never as a traceback
        detail = report.scrub_text((str(exc).splitlines() or [""])[0][:200])  # a message may quote a URL
        return paths, type(exc).__name__ + (f": {detail}" if detail else "")
    paths.append(write("pdf", pdf))
    return paths, None


def _say_probe_pace(args, file_config=None) -> None:
    """At a slow pace the capability probe's few queries take minutes with nothing on screen: say how long."""
    from audit_core.estimate import capability_probe
    from audit_core.progress import format_duration

    pace = getattr(args, "requests_per_minute", None) or getattr(file_config, "requests_per_minute", None)
    if pace:
        n = capability_probe()[0]
        print(f"the target's pace is {pace:g} requests a minute: the capability probe's {n} queries take up to "
              f"{format_duration((n - 1) * 60 / pace)}", file=sys.stderr)


def cmd_check(args) -> int:
    """What the target supports, before any document is sent: the app's *Check connection* for the command line.

    The capability probe's few short queries (is it reachable, does it return logprobs and how many
    alternatives, does it answer like a chat model, does it list sources) and, for the chosen --method, which
    can run there and why the others cannot, with what to add. Nothing is stored and no document is read, so
    an owner can choose the methods (and see the estimate with ``audit --estimate-only``) knowing what will run.
    """
    from audit_core.target.base import TargetError

    file_config, problem = _checked_target_arguments(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from audit_core.methods import method_spec

    try:
        cfg = _audit_config(args)
        for name in cfg.methods:
            if name != AUTO:  # chosen once the probe has answered
                method_spec(name)
    except ValueError as exc:  # unknown method, parameter out of range
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("asking the target what it supports (a few short queries; no document is sent)...", file=sys.stderr)
    _say_probe_pace(args, file_config)
    try:
        caps = _target(args).capabilities()
    except (TargetError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    if not caps.reachable:
        print(f"error: the target did not answer: {caps.detail}", file=sys.stderr)
        return 3
    model = f" ({caps.model})" if caps.model else ""
    print(f"reachable{model}; logprobs: {'yes' if caps.logprobs else 'no (text only)'}; "
          f"sources listed with its answers: {'yes' if caps.sources else 'no'}")
    _print_capabilities(cfg, caps, sys.stdout)
    return 0


def cmd_prepare(args) -> int:
    from audit_core.audit import load_local_models, select_methods, with_target_style
    from shadow.prepare import prepare_shadow
    from audit_core.target.base import Capabilities

    from audit_core.models import ModelNotAvailableError

    problem = _cache_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    # no target is asked: the shadow answers in --target-style, else in completion style
    caps = Capabilities(True, True, 20, style="completion", style_detail="'prepare' asks no target")
    try:
        cfg = with_target_style(_audit_config(args), caps)
        bar = _progress_bar()
        methods, _ = select_methods(cfg, caps)
    except ValueError as exc:  # unknown method, parameter out of range, missing corpus
        print(f"\nerror: {exc}", file=sys.stderr)
        return 2
    try:
        load_local_models(methods, bar)
        prep = prepare_shadow(methods, cfg.shadow, progress=bar, force=args.force)
    except (ValueError, ModelNotAvailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    for name, cal in prep.calibrations.items():
        src = "cache" if prep.from_cache[name] else "fresh"
        auc = "n/a" if cal.shadow_auc is None else f"{cal.shadow_auc:.3f}"
        print(f"{_named(name)}: shadow validation AUC {auc}, {prep.seconds[name]:.1f} s ({src})")
    return 0


def cmd_canaries_make(args) -> int:
    from audit_core.evidence.canaries import new_kit, save_kit

    if Path(args.kit).exists() and not args.force:
        print(f"error: {args.kit} exists; a kit's seed is its only copy (use --force to replace it)", file=sys.stderr)
        return 2
    if args.out:  # checked before the kit is made: a kit left behind by a failed run blocks the next one
        out = Path(args.out).resolve()
        if out == Path(args.kit).resolve():
            print("error: --out is the kit file itself; the canaries would overwrite the seed", file=sys.stderr)
            return 2
        if out.exists() and not args.force:
            print(f"error: {args.out} exists (use --force to replace it)", file=sys.stderr)
            return 2
        if not out.parent.is_dir():
            print(f"error: --out {args.out}: the folder {out.parent} does not exist", file=sys.stderr)
            return 2
    kit = new_kit(args.n)
    text = "\n\n".join(d.text for d in kit.published())
    # the kit first: canaries whose seed was never saved could be published and never audited. It is written
    # beside the kit file and put in its place only once the canaries are out, so that a failure leaves no new
    # kit to block the next run and, under --force, the old kit (its seed is its only copy) where it was
    kit_path = Path(args.kit)
    pending = kit_path.with_name(f".{kit_path.name}.{os.getpid()}.new")
    try:
        save_kit(kit, pending)
    except OSError as exc:
        with contextlib.suppress(OSError):  # under a path that is no folder, unlinking fails as saving did
            pending.unlink(missing_ok=True)
        print(f"error: the kit file {args.kit} could not be written: {exc.strerror or exc}; nothing was written",
              file=sys.stderr)
        return 2
    if args.out:
        try:
            Path(args.out).write_text(text + "\n")
        except OSError as exc:
            pending.unlink(missing_ok=True)
            kept = " (the kit that was there is unchanged)" if kit_path.exists() else ""
            print(f"error: {args.out} could not be written: {exc.strerror or exc}; the new kit was not kept{kept}",
                  file=sys.stderr)
            return 2
    try:
        os.replace(pending, kit_path)
    except OSError as exc:
        print(f"error: the kit could not be put in place as {args.kit}: {exc.strerror or exc}; it is in {pending} "
              "(rename it yourself before publishing any canary)", file=sys.stderr)
        return 2
    if not args.out:
        print(text)
    print(f"kit {kit.kit_id}: {kit.n} canaries to publish{' written to ' + args.out if args.out else ' above'}; "
          f"their {kit.n} never-published siblings are regenerated from {args.kit} at audit time. Keep that file "
          "private: it holds the seed, and never leaves this computer.", file=sys.stderr)
    return 0


def cmd_canaries_audit(args) -> int:
    from audit_core.evidence.canaries import load_kit

    try:
        kit = load_kit(args.kit)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return _audit(args, kit.published(), kit.siblings(), "canaries")


def _at_least(least: int, unit: str = "", most: int | None = None):
    """An argparse type: a whole number (of ``unit``) that is ``least`` or more (and ``most`` or less)."""
    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number{unit}") from None
        if n < least:
            raise argparse.ArgumentTypeError(f"it must be {least} or more")
        if most is not None and n > most:
            raise argparse.ArgumentTypeError(f"it must be {most} or less")
        return n
    return parse


def _pace(value: str) -> float:
    """An argparse type: a target's requests a minute (``http_client.check_pace``)."""
    from audit_core.target.http_client import check_pace

    try:
        pace = float(value)
        check_pace(pace)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("requests_per_minute", "it")
                                         if "requests_per_minute" in str(exc) else f"{value!r} is not a number") \
            from None
    return pace


#: sizes, bins, masks, canaries
_positive = _at_least(1)
#: --reuse-days
_days = _at_least(0, " of days")


#: exit status when --fail-on finds what it fails on (2: bad input, 3: the audit failed or stopped)
GATE_FAILED = 1


def ci_flags(p: argparse.ArgumentParser) -> None:
    """--junit and --fail-on, for an audit run on a schedule (a CI job watching a service)."""
    from audit_core.ci_gate import FAIL_ON

    p.add_argument("--junit", metavar="FILE",
                   help="also write the verdicts as a JUnit XML report (one test case per document, one for the "
                        "collection test; a member is a failure, inconclusive is skipped; no document text)")
    p.add_argument("--fail-on", choices=FAIL_ON,
                   help=f"exit with status {GATE_FAILED} when any document is called a member or the collection "
                        "test finds member evidence ('member'), or also when any document is inconclusive "
                        "('inconclusive'), or only when the collection test finds member evidence or could not "
                        "be made ('collection': needs controls; its false-alarm rate is the test's 5%% for the "
                        "whole audit, where 'member' calls each document at --fpr, so on a service that holds "
                        "none of 20 documents it fails up to 64%% of runs at 5%%); default: the status says only "
                        "whether the audit ran")


def target_flags(p: argparse.ArgumentParser) -> None:
    """Where an audit sends its queries: --target (the demo or an OpenAI-compatible URL) or --target-file (any
    HTTP API), with the key's variable and the variables a target file may read. Shared by ``audit`` and
    ``canaries audit``, which build the target with the same code (``_target``)."""
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", help="'demo' or an OpenAI-compatible base URL")
    where.add_argument("--target-file", help="a target file (YAML/JSON) describing any HTTP API: see "
                                             "assets/targets/http_custom.yaml and README 'Auditing any HTTP API'")
    p.add_argument("--model", help="model name at the endpoint")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", type=_env_name,
                   help="with --target: the environment variable holding the API key, sent to that host only")
    p.add_argument("--allow-env", action="append", type=_env_name, metavar="NAME",
                   help="with --target-file: allow the file to send this environment variable to its host "
                        "(repeat for each $NAME it names); a variable not allowed is never read, and the audit "
                        "is refused before anything is sent")
    p.add_argument("--requests-per-minute", type=_pace, metavar="N",
                   help="send at most N requests a minute to the target, every try counted (for a service with a "
                        "quota; replaces a target file's requests_per_minute); default: as fast as it answers")
    p.add_argument("--demo-defense", choices=["prompt_modification", "paraphrase", "mirabel"])


def retrieval_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--retrieval-as-sent", action="store_true",
                   help="the target's operator states that it retrieves with each query exactly as sent and "
                        "withholds nothing it retrieves (no query rewriting, no detect-and-hide defense). Only "
                        "then can a document be called 'not found'; without it such documents are inconclusive, "
                        "'not cleared' (rule R5 in audit_core/verdict.py). Known for the demo target")


def main(argv: list[str] | None = None) -> int:
    from audit_core.evidence.canaries import MAX_CANARIES, MIN_CANARIES

    ap = argparse.ArgumentParser(
        prog="rpa", description="RAG Provenance Auditor command line",
        epilog="exit status: 0 the command ran; 1 --fail-on found what it names; 2 bad input, nothing was sent; "
               "3 the audit failed, stopped or was interrupted, 'check' found the target not answering, or an "
               "output could not be written")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--method", default=AUTO,
                       help=f"comma-separated, from: {', '.join(METHODS)}; '{AUTO}' (the default): the methods for "
                            "what the target's capability probe finds (with logprobs, a base model: "
                            f"{','.join(methods_for_target(True, style='completion'))}; with logprobs, a chat model: "
                            f"{','.join(methods_for_target(True, style='chat'))}; text only, a chat model: "
                            f"{','.join(methods_for_target(False, style='chat'))}; text only, a base model: "
                            f"{','.join(methods_for_target(False, style='completion'))}; and "
                            f"{','.join(unchosen_source_methods([]))} for a target that lists its sources)")
        p.add_argument("--aux-corpus", help="public auxiliary corpus (JSONL/CSV) for the shadow RAG")
        p.add_argument("--shadow-size", type=_positive, default=200, help="shadow members (= non-members) per method")
        p.add_argument("--shadow-size-generative", type=_positive, default=60, help="shadow size for MBA / S2MIA")
        p.add_argument("--bins", type=_positive, help="S-RAG histogram intervals m (default 10)")
        p.add_argument("--segment-factor", type=_positive, help="S-RAG segment factor k (default 10)")
        p.add_argument("--masks", type=_positive, help="MBA masks M (default 10)")
        p.add_argument("--target-style", choices=["completion", "chat"],
                       help="how the target's model answers: 'completion' (continues the text, a base model) or "
                            "'chat' (an instruct model, which may restate the text first); the shadow mirrors it. "
                            "Default: as the capability probe finds (a few short requests; chat when it cannot tell)")
        p.add_argument("--fpr", type=float, default=0.05, choices=[0.01, 0.05, 0.1],
                       help="false-positive rate of every per-document member call (default 0.05); the "
                            "collection-level test keeps its 5%% level and prints its p-value")
        p.add_argument("--mba-elicitation", choices=["fill_in", "continue"],
                       help="how MBA asks for hidden words: 'fill_in' (one cloze request, the paper's; default for "
                            "endpoints) or 'continue' (one request per mask; default for the demo target)")
        p.add_argument("--verbatim-decoys", action="store_true",
                       help="Verbatim continuation: three quote requests, each after two honest questions, instead "
                            "of its usual probes -- for a target that may hide the document a query looks like a "
                            "copy of (the Mirabel defense); not the default: it helped on a shadow, not yet on a target "
                            "(BENCHMARKS.md, session 22)")
        p.add_argument("--decoy-questions", metavar="FILE",
                       help="with --verbatim-decoys: honest questions of your documents' domain, one per line "
                            "(default: the shipped MedQuAD questions)")

    a = sub.add_parser("audit", help="audit documents against a target")
    target_flags(a)
    retrieval_flag(a)
    a.add_argument("--docs", required=True, help="CSV (or JSONL) of your documents")
    a.add_argument("--text-column", help="the column (or JSONL field) holding the texts (default: guessed, "
                                         "the one with the longest cells)")
    a.add_argument("--id-column", help="the column naming the documents (default: an 'id'-like column, else "
                                       "doc-<row>)")
    a.add_argument("--evidence", action="store_true", help="print the evidence under each verdict")
    a.add_argument("--out", help="write the full results as JSON (unredacted, for yourself)")
    a.add_argument("--report-dir", help="write the PDF report, JSON and CSV to share, named audit-<date>-<target>.*")
    a.add_argument("--no-redact", action="store_true",
                   help="keep document texts in the --report-dir exports (by default they are redacted to a "
                        "SHA-256 and the first words)")
    a.add_argument("--store", help="SQLite store of answers and runs (default: $RPA_AUDIT_DB or "
                                   "RPA_CACHE_DIR/audits.sqlite, the app's)")
    a.add_argument("--estimate-only", action="store_true", help="print the estimated cost and stop")
    a.add_argument("--controls", metavar="FILE",
                   help="CSV/JSONL of documents you never published: the collection-level test's controls "
                        "(or mark such rows with a 'control' column in --docs)")
    a.add_argument("--generate-controls", action="store_true",
                   help="without controls: rewrite your documents with a local model as (weaker) controls")
    a.add_argument("--run-without-signal", metavar="METHODS",
                   help="send these methods' queries even when their shadow shows no signal (they still do not "
                        "vote); by default such a method sends nothing")
    a.add_argument("--reuse-days", type=_days, default=None, metavar="N",
                   help="also reuse answers other audits of this target (same key) received within the last N "
                        "days; default: none, every audit asks again (an interrupted audit run again still "
                        "reuses its own answers)")
    ci_flags(a)
    common(a)
    a.set_defaults(func=cmd_audit)

    c = sub.add_parser("canaries", help="canary kit: make canaries to publish, later audit them")
    csub = c.add_subparsers(dest="canaries_cmd", required=True)
    cm = csub.add_parser("make", help="make a kit: canaries to publish and a private seed file")
    cm.add_argument("--kit", required=True, help="where to write the kit (keep it private: it holds the seed)")
    cm.add_argument("--n", type=_at_least(MIN_CANARIES, most=MAX_CANARIES), default=20,
                    help=f"canaries to publish, {MIN_CANARIES} to {MAX_CANARIES} (as many siblings stay unpublished; "
                         "20 or more let each canary be called at a 5%% false-positive rate)")
    cm.add_argument("--out", help="write the canaries to publish here (default: print them)")
    cm.add_argument("--force", action="store_true", help="replace an existing kit file")
    cm.set_defaults(func=cmd_canaries_make)
    ca = csub.add_parser("audit", help="audit a kit's published canaries against their never-published siblings")
    ca.add_argument("--kit", required=True)
    target_flags(ca)
    retrieval_flag(ca)
    ca.add_argument("--evidence", action="store_true")
    ca.add_argument("--out")
    ca.add_argument("--report-dir", help="write the shareable PDF/JSON/CSV here")
    ca.add_argument("--no-redact", action="store_true")
    ca.add_argument("--store")
    ca.add_argument("--estimate-only", action="store_true")
    ci_flags(ca)
    common(ca)
    ca.set_defaults(func=cmd_canaries_audit)

    k = sub.add_parser("check", help="ask the target what it supports and which of --method can run there "
                                     "(a few short queries; no document is sent)")
    target_flags(k)
    common(k)
    k.set_defaults(func=cmd_check, estimate_only=False)

    p = sub.add_parser("prepare", help="prepare (and cache) the shadow RAG calibration")
    p.add_argument("--force", action="store_true", help="prepare again even when a cached preparation exists")
    common(p)
    p.set_defaults(func=cmd_prepare)

    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:  # the audit loop handles its own; this is prepare, control generation, and the rest
        print("\nerror: interrupted; run the same command again to go on (prepared methods and received answers "
              "are kept)", file=sys.stderr)
        return 3
    except Exception as exc:  # noqa: BLE001 -- a crash must not exit 1, which --fail-on reserves for a finding
        from audit_core.report import scrub_text

        print(f"error: unexpected failure ({type(exc).__name__}: {scrub_text(str(exc))}); this is a bug in the "
              "auditor, please report it with the command you ran. Answers received so far are kept in the "
              "store, and the same command resumes without sending them again.", file=sys.stderr)
        return 3


if __name__ == "__main__":
    raise SystemExit(main())
