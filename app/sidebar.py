"""Sidebar: which target to audit, the connection check, and the audit settings.

Only widgets and their translation into the library's configuration objects
live here; what a method needs and which can run is asked of the library.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, field

import streamlit as st

from app.consent import bind_to_origin, dropped_message
from app.target_file import HTTP_FILE  # the third target kind: any HTTP API, from a target file
from audit_core.target import TARGET_TYPES
from audit_core.target.base import MIN_SECRET_CHARS, consent_host
from audit_core.target.http_client import MAX_REQUESTS_PER_MINUTE

DEMO = "Demo target (built-in, no key)"
#: the openai type entered in fields of the sidebar (URL, model, key) instead of a target file
ENDPOINT = TARGET_TYPES["openai"].label
#: the sidebar's kinds of target: the built-in demo, the openai type by hand, and a target file, which is how
#: every registered type reaches the app (``TARGET_TYPES``, read from the file's ``type``): a new type needs no
#: entry here
TARGET_KINDS = (DEMO, ENDPOINT, HTTP_FILE)

#: ``Settings.summary``'s entries for the rest of the configuration and for the methods' parameters (digests,
#: never shown): the methods' parameters differ whenever the methods do, so they count only between the same
#: methods
ADVANCED_KEY = "advanced"
PARAMS_KEY = "method parameters"


def _digest(data: dict) -> str:
    """A short fingerprint of plain configuration data, for telling two configurations apart."""
    import json

    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]

#: shadow documents per class, and per class for the methods that decode whole answers (MBA, S2MIA, the
#: text-only methods: ``shadow.prepare.shadow_sizes``)
AUDIT_SIZES = {
    "quick": (60, 60, 30),
    "standard": (200, 200, 60),  # the default 200 + 200 (ShadowConfig's defaults)
}
CUSTOM = "custom"


@dataclass
class Settings:
    """Everything chosen in the sidebar except the API key (read only when a target is built)."""

    target_kind: str
    base_url: str
    model: str
    methods: list[str]
    shadow: object  # shadow.prepare.ShadowConfig
    method_params: dict[str, dict] = field(default_factory=dict)
    fpr: float = 0.05  # per-document false-positive rate (audit_core.evidence.calibration.FPR_CHOICES)
    #: reuse answers other audits received within this many days; None: this audit's own only
    reuse_days: int | None = None
    #: how the target's model answers ("completion" or "chat"); None: as the capability probe finds
    target_style: str | None = None
    #: the operator states the endpoint retrieves with queries as sent (``VerdictConfig.retrieval_as_sent``);
    #: the demo target (no retrieval defense) is known to, whatever this says
    retrieval_as_sent: bool = False
    #: an endpoint's pace, requests a minute (``http_client.Pacer``); None: as fast as it answers. A target
    #: file sets its own (``requests_per_minute``); the demo has none
    requests_per_minute: float | None = None

    @property
    def target_problem(self) -> str | None:
        """What the user must still enter or fix before this target can be asked anything, or None.

        Said before Check connection or Start, in the library's own words (the URL's
        check, the target file's variables): the audit would only fail on it later.
        """
        if self.target_kind == ENDPOINT:
            if not (self.base_url.strip() and self.model.strip()):
                return "Enter the endpoint's base URL and model in the sidebar."
            return url_problem(self.base_url.strip(), "Base URL")
        if self.target_kind == HTTP_FILE:
            if not self.base_url.strip():
                return "Upload or paste a valid target file in the sidebar."
            from app.target_file import missing_secret

            return missing_secret()
        return None

    @property
    def missing_target(self) -> str | None:
        """What keeps the audit from starting (the Run tab disables Start on it): the target's problem, or an
        auxiliary corpus that gives the shadow RAG no member or no non-member."""
        return self.target_problem or corpus_problem(self.shadow)

    @property
    def target_label(self) -> str:
        """The target's identity in this session's memory (a check's result belongs to it); never shown."""
        return "demo" if self.target_kind == DEMO else f"{self.base_url.rstrip('/')} · {self.model}"

    @property
    def target_shown(self) -> str:
        """The target as the page names it: no query string or credentials of the URL."""
        from audit_core.target.base import display_url

        from audit_core.report import scrub_text

        if self.target_kind == DEMO:
            return "demo"
        return scrub_text(f"{display_url(self.base_url.strip().rstrip('/'))} · {self.model}")

    def audit_config(self):
        from audit_core.audit import AuditConfig
        from audit_core.verdict import VerdictConfig

        return AuditConfig(methods=list(self.methods), shadow=self.shadow, method_params=self.method_params,
                           fpr=self.fpr, target_style=self.target_style,
                           verdict=VerdictConfig(retrieval_as_sent=self.retrieval_as_sent or self.target_kind == DEMO))

    def config_dict(self) -> dict:
        """The audit configuration as plain data, as the store keeps it (no key)."""
        from audit_core.audit import config_dict

        return config_dict(self.audit_config())

    def summary(self) -> dict[str, str]:
        """The settings as a person reads them, setting -> value: what a running audit was started with
        (``AuditJob.settings``), compared with the sidebar's after a page reload (``tab_run.running_settings_note``).
        Whatever else of the configuration differs is one entry, ``ADVANCED_KEY``, holding a digest."""
        from audit_core.methods import method_label

        s = self.shadow
        shown = {
            "target": self.target_shown,
            "methods": ", ".join(method_label(m) for m in self.methods) or "none",
            "shadow RAG": f"{s.n_members} + {s.n_nonmembers} documents ({s.n_per_class_generative} per class for "
                          "the methods that decode whole answers)",
            "false-positive rate": f"{self.fpr:.0%}",
            "answer style": TARGET_STYLES.get(self.target_style, str(self.target_style)),
        }
        config = self.config_dict()
        rest = {k: v for k, v in config.items() if k not in ("methods", "fpr", "target_style", "method_params")}
        rest["retrieval_as_sent"], rest["reuse_days"] = self.retrieval_as_sent, self.reuse_days
        shown[ADVANCED_KEY] = _digest(rest)
        shown[PARAMS_KEY] = _digest(config.get("method_params") or {})
        return shown


def _looks_like_a_key(value: str) -> bool:
    """A value no address looks like but a key does: one word of letters and digits, no dot or slash.

    A key pasted into the URL field by mistake (one field up) must not come
    back in the message that refuses it; ``scrub_text`` knows only the keys
    with a known prefix, and many services' keys (32 hex digits) have none.
    """
    return (len(value) >= MIN_SECRET_CHARS and not any(c in value for c in "./:@ ")
            and any(c.isdigit() for c in value) and any(c.isalpha() for c in value))


def url_problem(url: str, field: str) -> str | None:
    """Why ``url`` cannot be a service's address (``check_service_url``'s words), or None; a key in it is not
    repeated."""
    from audit_core.report import REDACTED, scrub_text
    from audit_core.target.base import check_service_url

    try:
        check_service_url(url, field)
    except ValueError as exc:
        said = str(exc).replace(url, REDACTED) if _looks_like_a_key(url) else str(exc)
        return scrub_text(said).rstrip(".") + "."
    return None


def corpus_problem(shadow) -> str | None:
    """Why the auxiliary corpus cannot make a shadow RAG, or None: half its usable texts go into the shadow's
    knowledge base and the rest stay out (``shadow.prepare.corpus_allows``), so it needs one of each at least."""
    from shadow.corpus import CorpusError
    from shadow.prepare import corpus_allows

    try:
        most_in, most_out = corpus_allows(shadow)
    except (CorpusError, OSError) as exc:
        return f"The auxiliary corpus cannot be read ({exc}). Choose the shipped corpus or upload another."
    if most_in and most_out:
        return None
    limit = f" of at most {shadow.max_doc_words} words" if shadow.max_doc_words else ""
    return (f"The auxiliary corpus gives {most_in + most_out} usable text(s){limit}: the shadow RAG needs at least "
            "one text in its knowledge base and one kept out (and many more for a method to decide). Upload a "
            "public corpus with more texts, or choose the shipped corpus.")


def build_target(settings: Settings, for_check: bool = False):
    """The target object: the shared demo RAG, or a new connector for the endpoint.

    A connection check gets short timeouts and a single retry so that a wrong
    URL is reported in seconds; an audit gets the connector's full retry policy.
    """
    if settings.target_kind == DEMO:
        from app.resources import get_demo_target

        return get_demo_target()
    if settings.target_kind == HTTP_FILE:
        from app.target_file import build_file_target

        return build_file_target(for_check)
    from audit_core.target.openai_compat import OpenAITarget

    key = chosen_api_key()
    pace = settings.requests_per_minute
    if for_check:
        return OpenAITarget(settings.base_url.strip(), settings.model.strip(), key, timeout_s=10.0,
                            max_retries=1, max_total_wait_s=5.0, requests_per_minute=pace)
    return OpenAITarget(settings.base_url.strip(), settings.model.strip(), key, requests_per_minute=pace)


#: the environment variable whose key the user may choose, by name, for the endpoint
ENV_KEY = "OPENAI_API_KEY"
#: session-state slot of the typed key: a plain value, not the widget's own state, which
#: Streamlit drops whenever the widget is not drawn (the demo target is chosen, for instance)
_TYPED_KEY = "_api_key_typed"


def _remember_key() -> None:
    """on_change of the key field: runs with the new value as soon as the field loses focus (Tab)."""
    st.session_state[_TYPED_KEY] = st.session_state.get("api_key", "")


def chosen_api_key() -> str | None:
    """The key for the endpoint: the typed one, else the environment's when its box is ticked, else none.

    The environment key is never a silent fallback: the base URL may be one a
    visitor typed, and the operator's key must go only where it was chosen for.
    """
    typed = (st.session_state.get(_TYPED_KEY) or "").strip()  # a pasted key often brings a space or newline
    if typed:
        return typed
    if st.session_state.get("use_env_key"):
        return os.environ.get(ENV_KEY) or None
    return None


def _host(base_url: str) -> str:
    from urllib.parse import urlsplit

    try:
        urlsplit(base_url.strip())
    except ValueError:
        return "(not a valid URL)"
    return consent_host(base_url) or "(no host yet)"


#: Streamlit (1.67) commits a text field's value when it loses focus, unless focus moves to an element
#: inside the field: the password field's "Show password" button is one, and the next Tab in the
#: sidebar sends none either. So a key typed and left with Tab never reached the app ("No key"),
#: found in a real browser (tests/app/test_browser.py). Without that button, Tab leaves the field
#: and the key is committed. Scoped to the secret fields by their keys (Streamlit's st-key-<key> class).
_NO_PASSWORD_TOGGLE = """<style>
.st-key-api_key [data-testid="stTextInputRootElement"] button,
div[class*="st-key-tf_secret_"] [data-testid="stTextInputRootElement"] button { display: none; }
</style>"""


def hide_password_toggles() -> None:
    """Drop the show-password button of the key fields, so that Tab commits a typed key (see above)."""
    st.html(_NO_PASSWORD_TOGGLE)


def _key_section(base_url: str) -> None:
    before = bind_to_origin(st.session_state, "endpoint", base_url,
                            {"api_key": "", _TYPED_KEY: "", "use_env_key": False})
    if before:
        st.warning(dropped_message(before, base_url, [f"the key typed or the {ENV_KEY} allowed"]))
    typed = st.text_input("API key", key="api_key", type="password", on_change=_remember_key,
                          help="Kept in this browser session's memory only; never stored or written to any file.")
    st.session_state[_TYPED_KEY] = typed  # the value drawn now, even if no on_change ran
    host = _host(base_url)
    if typed:
        st.caption(f"The key you entered will be sent to **{host}** only.")
        return
    env_set = bool(os.environ.get(ENV_KEY))
    use_env = st.checkbox(f"Use the key in the {ENV_KEY} environment variable", key="use_env_key",
                          disabled=not env_set,
                          help="The key of the computer running this app. Tick it only for a host you trust "
                               "with that key." if env_set else f"{ENV_KEY} is not set on the computer running "
                                                               "this app.")
    if use_env and env_set:
        st.caption(f"The key in {ENV_KEY} will be sent to **{host}** only (redirects are not followed).")
    else:
        st.caption("No key: requests are sent without one (enough for a local server that needs none).")


def _pace_field() -> float | None:
    """The endpoint's pace from its field (0: none)."""
    rpm = st.number_input("Requests per minute (0: no limit)", min_value=0.0, max_value=MAX_REQUESTS_PER_MINUTE,
                          step=1.0, key="requests_per_minute", format="%g",
                          help="For a service with a quota or a fair-use rule: the audit sends at most this many "
                               "requests a minute, every try counted, instead of spending its retries on "
                               "'too many requests'. The estimate says how long that makes the audit.")
    return float(rpm) if rpm else None


def _target_section() -> tuple[str, str, str]:
    st.header("Target")
    kind = st.radio("RAG system to audit", list(TARGET_KINDS), key="target_kind",
                    help="The demo target is a reference RAG over the shipped demo knowledge base; "
                         "it runs inside the app. An endpoint is someone else's RAG behind an OpenAI-compatible API. "
                         "A target file describes any other HTTP API (URL, headers, body template, JSONPath); its "
                         "type is one of: " + ", ".join(TARGET_TYPES) + ".")
    base_url = model = ""
    if kind in (ENDPOINT, HTTP_FILE):
        hide_password_toggles()
    if kind == HTTP_FILE:
        from app.target_file import target_file_section

        base_url, model = target_file_section()
    if kind == ENDPOINT:
        base_url = st.text_input("Base URL", key="base_url", placeholder="https://api.example.com/v1")
        model = st.text_input("Model", key="model", placeholder="the model name the endpoint serves")
        _key_section(base_url)
    return kind, base_url, model


def _operator_statement(kind: str, url: str) -> bool:
    """The operator's statement that lets "not found" stand for an endpoint (``VerdictConfig.retrieval_as_sent``);
    the demo target needs none (``Settings.audit_config``).

    It is one operator's word about one service: like a key, it is bound to the
    origin and the kind of target it was given for, and reset when either changes.
    """
    if kind == DEMO:
        return False
    before = bind_to_origin(st.session_state, "statement", url, {"retrieval_as_sent": False})
    if st.session_state.get("_statement_kind") not in (None, kind):
        if st.session_state.get("retrieval_as_sent"):
            before = before or "the previous target"
        st.session_state["retrieval_as_sent"] = False
    st.session_state["_statement_kind"] = kind
    if before:
        st.info(f"The operator's statement below was given for {before}; it does not carry over to another "
                "service. Tick it again if this service's operator states it.")
    return st.checkbox(
        "The operator states this service retrieves with each question exactly as sent", key="retrieval_as_sent",
        help="No query rewriting or expansion and no defense that withholds documents. A service that changes what "
             "its retriever sees can hide a document it holds from every probe, so without this statement no "
             "document is called 'not found': such documents are 'inconclusive (not cleared)'.")


def connection_id(settings: Settings) -> str:
    """What a connection check's message is about: target, model and key (hashed, in memory only).

    A message shown for other settings is stale: it disappears as soon as the
    URL, the model or the key changes, and for a target file as soon as
    anything in the file or any of its secrets changes.
    """
    if settings.target_kind == HTTP_FILE:
        from app.target_file import file_target_digest

        return f"{settings.target_label}|{file_target_digest()}"
    key = chosen_api_key() if settings.target_kind == ENDPOINT else None
    digest = hashlib.sha256((key or "").encode()).hexdigest()[:16]
    return f"{settings.target_label}|{digest}"


def _connection_check(settings: Settings) -> None:
    from audit_core.audit import AuditConfig, select_methods
    from audit_core.methods import LABELS, METHODS, suggested_methods, unchosen_chat_methods, unchosen_source_methods
    from audit_core.target.style import resolve_style

    from audit_core.report import scrub_text

    if st.button("Check connection", key="check_connection"):
        if settings.target_problem:
            st.error(settings.target_problem)
        else:
            from app.resources import plain_error

            try:
                with st.spinner("Asking the target what it supports..."):
                    caps = build_target(settings, for_check=True).capabilities()
                st.session_state["caps"] = {"target": settings.target_label, "conn": connection_id(settings),
                                            "caps": asdict(caps)}
            except Exception as exc:  # shown in plain words; a key typed into the URL is not repeated
                st.session_state["caps"] = {"target": settings.target_label, "conn": connection_id(settings),
                                            "error": scrub_text(plain_error(exc))}
    found = st.session_state.get("caps")
    if not found or found.get("conn") != connection_id(settings):
        return
    if "error" in found:
        st.error(found["error"])
        return
    from audit_core.target.base import Capabilities

    caps = Capabilities(**found["caps"])
    if not caps.reachable:
        st.error(scrub_text(f"The target did not answer: {caps.detail}"))
        return
    _, not_run = select_methods(AuditConfig(methods=list(METHODS)), caps)
    can = [LABELS[m] for m in METHODS if m not in not_run]
    if caps.logprobs:
        st.success(f"Connected{' to ' + caps.model if caps.model else ''}: {caps.detail}. "
                   f"Methods that can run: {', '.join(can)}.")
    else:
        st.warning(f"Connected, but the target returns no token probabilities ({caps.detail}). "
                   f"Methods that can run: {', '.join(can)}. "
                   "Not possible here: " + _not_possible(not_run) + ".")
    style, _ = resolve_style(settings.target_style, caps.style, caps.style_detail)
    if not caps.logprobs:
        text_only = suggested_methods(logprobs=False, sources=caps.sources, style=style)
        if sorted(settings.methods) != sorted(text_only):
            kind = "text-only chat targets" if style == "chat" else "text-only targets"
            st.button(f"Use the methods for {kind}: " + ", ".join(LABELS[m] for m in text_only),
                      key="use_text_only_methods", on_click=set_methods, args=(text_only,),
                      help="Methods that need no token probabilities; S-RAG cannot run on this target."
                           + (" MBA is left out: on chat models its shadows find no signal and it abstains."
                              if style == "chat" else ""))
    for_chat = unchosen_chat_methods(settings.methods) if style == "chat" and caps.logprobs else []
    if for_chat:  # without logprobs the text-only button above already offers them
        st.button("This target answers like a chat model: add " + ", ".join(LABELS[m] for m in for_chat),
                  key="add_chat_methods", on_click=set_methods, args=(list(settings.methods) + for_chat,),
                  help="On chat models S-RAG and MBA usually find no signal on their shadow and abstain; "
                       + " ".join(METHODS[m].description for m in for_chat))
    reading_sources = unchosen_source_methods(settings.methods) if caps.sources else []
    if reading_sources:
        st.button("This target lists the sources of its answers: add " + ", ".join(LABELS[m] for m in reading_sources),
                  key="add_source_methods", on_click=set_methods, args=(list(settings.methods) + reading_sources,),
                  help=" ".join(METHODS[m].description for m in reading_sources))
    _style_note(settings, caps)


def _style_note(settings: Settings, caps) -> None:
    """How the audit will read the target: the style found, or the user's choice beside it."""
    from audit_core.target.style import resolve_style

    style, source = resolve_style(settings.target_style, caps.style, caps.style_detail)
    if settings.target_style is not None and caps.style not in (None, settings.target_style):
        st.warning(f"You chose to read the target as a {style} model, but the capability probe found a "
                   f"{caps.style} model ({caps.style_detail}). The shadow RAG answers in the style you chose.")
    else:
        st.caption(f"Answer style: {style} ({source}). The shadow RAG answers, and S-RAG reads, in this style.")


def _not_possible(not_run: dict[str, str]) -> str:
    """The methods that cannot run on the target, those with one reason named together before it: "S-RAG (no
    logprobs (the target returns text only; ...)); Min-k% Prob (no logprobs (...))" said the same twice, in
    parentheses within parentheses."""
    from audit_core.methods import LABELS
    from audit_core.verdict import plain_reason

    by_reason: dict[str, list[str]] = {}
    for m, why in not_run.items():
        by_reason.setdefault(plain_reason(why), []).append(LABELS.get(m, m))
    return "; ".join(f"{' and '.join(names)}: {why}" for why, names in by_reason.items())


def set_methods(names: list[str]) -> None:
    """Button callback (the sidebar's offers and the Results tab's): runs before the rerun, so it may set the
    Methods widget's value."""
    st.session_state["methods"] = list(names)


def _aux_corpus() -> str:
    """Path of the auxiliary (public) corpus the shadow RAG is built from."""
    from shadow.prepare import DEFAULT_AUX_CORPUS

    choice = st.radio("Auxiliary corpus (public texts for the shadow RAG)",
                      ["Shipped corpus (MedQuAD answers)", "Upload a public corpus"], key="aux_choice",
                      help="Public texts of the same kind as yours. Half go into a shadow RAG we build, half stay out; "
                           "the methods learn from how that shadow answers.")
    if choice.startswith("Shipped"):
        return str(DEFAULT_AUX_CORPUS)
    from app.persist import kept_upload

    # kept through a switch to the shipped corpus and back, as the documents' file is (a review, session 61)
    up = kept_upload("Public corpus (JSONL with a 'text' field, or CSV with a 'text' column)", "aux_upload",
                     "_aux_upload_kept", "aux_upload_forget", ["jsonl", "csv"],
                     "Public texts of the same kind as yours, with their licence allowing this use.")
    if up is None:
        st.caption("No file yet: the shipped corpus is used.")
        return str(DEFAULT_AUX_CORPUS)
    from audit_core.io import write_private_bytes
    from audit_core.models import cache_dir

    name, data = up
    suffix = ".csv" if name.lower().endswith(".csv") else ".jsonl"
    path = cache_dir() / "uploads" / (hashlib.sha256(data).hexdigest()[:20] + suffix)
    if not path.exists():  # the folder is made 0700 on the way
        write_private_bytes(path, data, follow_links=False)  # 0600, the cache's own file: a link there is replaced
    from shadow.corpus import CorpusError, load_corpus
    from shadow.prepare import ShadowConfig

    try:  # read now, so that a file without texts is said here and not when the audit starts
        n = len(load_corpus(path))
    except CorpusError as exc:
        named = str(exc).replace(str(path), name)  # the user's file name, not the cache's copy of it
        st.error(f"This corpus cannot be used: {named}. The shipped corpus is used instead.")
        return str(DEFAULT_AUX_CORPUS)
    problem = corpus_problem(ShadowConfig(aux_corpus=str(path)))
    if problem:  # Start stays disabled on it (``Settings.missing_target``)
        st.error(f"{n} public texts read. {problem}")
    else:
        st.caption(f"{n} public texts read.")
    return str(path)


def _shadow_sizes() -> tuple[int, int, int]:
    size = st.radio("Audit size", ["quick", "standard", CUSTOM], key="audit_size", horizontal=True,
                    help="Shadow documents probed to calibrate the methods: quick = 60 members + 60 non-members "
                         "(a first try), standard = 200 + 200 (the papers' setting). Runs on your machine, "
                         "costs no target query; cached after the first run.")
    if size != CUSTOM:
        return AUDIT_SIZES[size]
    c1, c2 = st.columns(2)
    # kept while another size hides them (``persist.KEPT``): the defaults go into the session state, not the widgets
    for key, default in (("n_members", 60), ("n_nonmembers", 60), ("n_generative", 30)):
        st.session_state.setdefault(key, default)
    n_m = c1.number_input("Shadow members", 4, 2000, step=10, key="n_members")
    n_n = c2.number_input("Shadow non-members", 4, 2000, step=10, key="n_nonmembers")
    n_g = st.number_input("Per class for the methods that decode whole answers (MBA, S2MIA, the text-only ones)",
                          4, 2000, step=10, key="n_generative")
    return int(n_m), int(n_n), int(n_g)


#: the target-style choices of the sidebar: None lets the capability probe find it
TARGET_STYLES = {None: "find out (capability probe)",
                 "completion": "completion: continues the text (a base model)",
                 "chat": "chat: an instruct model (may restate the text first)"}


def _advanced(kind: str) -> tuple[dict[str, dict], int, str | None]:
    from audit_core.methods.mba_masks import ELICITATIONS
    from shadow.demo import mba_elicitation_for

    with st.expander("Advanced parameters (papers' defaults)"):
        bins = st.number_input("m: S-RAG histogram intervals", 5, 20, 10, key="bins",
                               help="Intervals of [0, 1] for the probability histogram (S-RAG paper: 10).")
        top_k = st.number_input("k: documents the shadow RAG retrieves per query", 1, 20, 4, key="top_k_docs",
                                help="S-RAG's setup retrieves k = 4 documents.")
        masks = st.number_input("M: MBA masks per document", 5, 20, 10, key="n_masks",
                                help="Words hidden per document (MBA paper: 5-20, 10 by default).")
        gamma = st.number_input("γ: MBA share of masks to guess right", 0.05, 1.0, 0.5, step=0.05, key="gamma",
                                help="The paper's fixed threshold (about 0.5), kept for the record: decisions use "
                                     "a threshold set on the shadow for the chosen false-positive rate.")
        # the default goes into the session state, so the choice is kept while hidden (``persist.KEPT``)
        elicitation_key = f"elicitation_{'demo' if kind == DEMO else 'endpoint'}"
        st.session_state.setdefault(elicitation_key, mba_elicitation_for(kind == DEMO))
        elicitation = st.selectbox(
            "MBA: how to ask for the hidden words", ELICITATIONS, key=elicitation_key,
            format_func=lambda e: {"fill_in": "fill in the blanks (one request, the paper's)",
                                   "continue": "continue the text before each blank (M requests)"}[e],
            help="Chat models fill in a text with blanks. Small completion-style models, like the demo "
                 "target's, copy the blanks back instead but continue text they retrieved.")
        style = st.selectbox(
            "How the target's model answers", list(TARGET_STYLES), format_func=TARGET_STYLES.get,
            key="target_style",
            help="S-RAG reads the word the target writes next. A base model continues the text at once; a chat "
                 "model often restates it first, so its answer is aligned with your text. The shadow RAG answers "
                 "in the same style. By default a few short requests find out which it is (shown by Check "
                 "connection); when they cannot tell, the target is read as a chat model.")
        decoys = st.checkbox(
            "Verbatim continuation: honest questions before each quote", key="verbatim_decoys",
            help="Three quote requests, each after two honest medical questions, instead of the usual probes: for "
                 "a target that may hide the document a query looks like a copy of (the Mirabel defense). Not the "
                 "default: it helped on a shadow of medical questions, not on the benchmark's target of patient "
                 "dialogues (BENCHMARKS.md). The command line takes questions of your own domain "
                 "(--decoy-questions).")
    params = {"srag": {"bins": int(bins)},
              "mba": {"n_masks": int(masks), "gamma": float(gamma), "elicitation": elicitation}}
    if decoys:
        from audit_core.methods.verbatim import decoy_probe_params

        params["verbatim"] = decoy_probe_params()
    return params, int(top_k), style


def _reuse_days() -> int | None:
    """The freshness policy: by default an audit asks the target again (only its own answers are reused)."""
    reuse = st.checkbox("Reuse answers received within N days", key="reuse_answers",
                        help="Off (the default): every audit asks the target again, so a takedown since the last "
                             "audit shows. On: answers another audit of this endpoint (with the same key) received "
                             "within N days are reused instead of paid for again; the report says how many and "
                             "from when. A cancelled audit run again always reuses its own answers.")
    if not reuse:
        return None
    st.session_state.setdefault("reuse_days", 7)  # its default, set here: the value is kept (app.persist.KEPT)
    return int(st.number_input("N (days)", 0, 3650, step=1, key="reuse_days"))


def _warn_too_few_nonmembers(methods, shadow, fpr: float) -> None:
    """Said before Start: a method whose shadow has too few non-members for the rate will not decide."""
    from audit_core.evidence.calibration import min_nonmembers
    from audit_core.methods import LABELS
    from shadow.prepare import shadow_sizes

    need = min_nonmembers(fpr)
    short = [LABELS[m] for m in methods if shadow_sizes(m, shadow)[1] < need]
    if short:
        st.warning(f"At {fpr:.0%} a method needs at least {need} shadow non-members to decide; with these shadow "
                   f"sizes {', '.join(short)} will abstain. Choose a larger shadow size or a higher rate.")


def render_sidebar() -> Settings:
    """Draw the sidebar and return the chosen settings."""
    from audit_core.methods import LABELS, METHODS, suggested_methods
    from shadow.prepare import ShadowConfig

    with st.sidebar:
        kind, base_url, model = _target_section()
        pace = _pace_field() if kind == ENDPOINT else None
        as_sent = _operator_statement(kind, base_url)
        st.header("Settings")
        # The suggestion is set in the session state before the widget exists, never as its default: with
        # "default unless the key is there", a page opened while an audit ran came up with no method at all
        # (its first run ends in a rerun that drops the widget's value and keeps its key; seen in Chromium),
        # and the offer buttons set the choice the same way (Streamlit warns of a widget given both).
        if "methods" not in st.session_state:
            st.session_state["methods"] = suggested_methods(logprobs=True)
        methods = st.multiselect("Methods", list(METHODS), key="methods",
                                 format_func=lambda m: LABELS[m],
                                 help="S-RAG and MBA are the audit's methods; the others are published baselines.")
        aux = _aux_corpus()
        n_m, n_n, n_g = _shadow_sizes()
        from audit_core.evidence.calibration import DEFAULT_FPR, FPR_CHOICES

        fpr = st.radio("False-positive rate", FPR_CHOICES, index=FPR_CHOICES.index(DEFAULT_FPR), key="fpr",
                       horizontal=True, format_func=lambda f: f"{f:.0%}",
                       help="At most this share of documents that are NOT in the target's knowledge base may be "
                            "called members (set on the shadow RAG). Lower means fewer false accusations and "
                            "less power; 1% needs a standard-size shadow (99 non-members at least).")
        params, top_k, style = _advanced(kind)
        shadow = ShadowConfig(aux_corpus=aux, n_members=n_m, n_nonmembers=n_n, n_per_class_generative=n_g,
                              top_k_docs=top_k)
        _warn_too_few_nonmembers(methods, shadow, float(fpr))
        settings = Settings(kind, base_url, model, list(methods), shadow,
                            {m: p for m, p in params.items() if m in methods},
                            reuse_days=_reuse_days() if kind == ENDPOINT else None, fpr=float(fpr),
                            target_style=style, retrieval_as_sent=as_sent, requests_per_minute=pace)
        st.header("Connection")
        _connection_check(settings)
    return settings
