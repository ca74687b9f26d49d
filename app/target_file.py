"""Sidebar part for the third target kind: any HTTP API, described by a target file.

The file (uploaded or pasted) is parsed and validated by the library's target
registry; errors are shown in its words. A file names environment variables
for its secrets, never the secrets: each one is sent only after the user of
this app either types its value (kept in this browser session's memory) or
ticks a box that names the variable and the host it goes to. An unticked box
means the variable is never read, whatever the file says, so a file from
someone else cannot send this computer's keys to a host of their choice.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, fields, replace

import streamlit as st

from app.consent import bind_to_origin, dropped_message
from audit_core.target import TARGET_TYPES, TargetFileError, create_target, parse_target_file, target_file_text
from audit_core.target.base import consent_host, display_url

#: the sidebar's name for this kind of target: the registry's label
HTTP_FILE = TARGET_TYPES["http"].label
_PARSED = "target_file_parsed"

_EXAMPLE = """type: http
url: https://rag.example.com/ask
headers:
  X-Api-Key: $MY_RAG_KEY
body:
  question: "{{prompt}}"
answer_path: $.answer"""


#: a connection check's limits, so that a wrong URL is reported in seconds: each applies only to a type whose
#: config has the field (the registry promises a ``url`` or ``base_url`` and ``env_vars()``, nothing more)
CHECK_LIMITS: dict[str, float] = {"timeout_s": 10.0, "max_retries": 1}


def with_check_limits(config):
    """``config`` with the connection check's shorter limits on the numeric fields it has; all else as it was."""
    have = {f.name: getattr(config, f.name) for f in fields(config)}
    return replace(config, **{k: min(limit, have[k]) for k, limit in CHECK_LIMITS.items()
                              if isinstance(have.get(k), (int, float)) and not isinstance(have[k], bool)})


def _url(config) -> str:
    return getattr(config, "url", None) or getattr(config, "base_url", "")


#: the uploaded target file (name, bytes), kept while another kind of target is chosen
_KEPT_UPLOAD = "_target_file_upload_kept"
#: the session-state prefixes of the secrets a target file names (typed values, allowed variables)
SECRET_PREFIXES = ("tf_secret_", "tf_env_")


def _forget_secrets() -> None:
    """Drops every secret typed or allowed for a target file: none may wait in the session for the next file."""
    for key in [k for k in st.session_state if str(k).startswith(SECRET_PREFIXES)]:
        del st.session_state[key]


def _kept_upload() -> tuple[str, bytes] | None:
    """The target file: the uploader's, or the one uploaded before a switch to another target kind
    (``persist.kept_upload``: the demo and back lost the file while its typed secret stayed)."""
    from app.persist import kept_upload

    return kept_upload("Target file (YAML or JSON)", "target_file_upload", _KEPT_UPLOAD, "target_file_forget",
                       ["yaml", "yml", "json"],
                       "Describes the API: url, headers (secrets as $VARIABLE), a body template with {{prompt}}, "
                       "and a JSONPath to the answer (or response_json: false for a service that answers in plain "
                       "text). See README 'Auditing any HTTP API'.")


def target_file_section() -> tuple[str, str]:
    """Upload or paste a target file; returns (url, label) of a valid one, else ("", "").

    An uploaded file wins over the paste box, which is then disabled and says so:
    a pasted file that was silently ignored sent the audit to the uploaded one's host.
    """
    upload = _kept_upload()
    pasted = st.text_area("…or paste it here", key="target_file_text", height=180, placeholder=_EXAMPLE,
                          disabled=upload is not None)
    if upload is not None and pasted.strip():
        st.info(f"The uploaded {upload[0]} is used; the pasted target file below it is not. Remove the upload "
                "to use the pasted one.")
    st.session_state[_PARSED] = None
    try:
        text = target_file_text(upload[1], f"the file {upload[0]}") if upload is not None else pasted
        if not text.strip():
            _forget_secrets()  # no file, no secret: a value typed for a removed file is not kept for the next
            st.caption("No target file yet. assets/targets/http_custom.yaml is an example.")
            return "", ""
        spec, config = parse_target_file(text)
    except TargetFileError as exc:
        st.error(f"The target file cannot be used: {exc}")
        return "", ""
    st.session_state[_PARSED] = (spec.name, config)
    url = _url(config)
    host = consent_host(url) or url
    st.caption(f"{spec.label}: {display_url(url)} · can return {spec.returns}.")
    names = list(config.env_vars())
    # every secret of every file seen in this session: one given for an older file's host must not wait
    # in the session for a later file that names the same variable
    held = [k for k in list(st.session_state) if str(k).startswith(SECRET_PREFIXES)]
    secrets = {k: ("" if k.startswith("tf_secret_") else False) for k in held}
    secrets |= {f"tf_secret_{v}": "" for v in names} | {f"tf_env_{v}": False for v in names}
    before = bind_to_origin(st.session_state, "target_file", url, secrets)
    if before:
        st.warning(dropped_message(before, url, ["the values typed and the environment variables allowed"]))
    for var in names:
        st.text_input(f"Value of ${var}", key=f"tf_secret_{var}", type="password",
                      help=f"Sent only to {host}; kept in this browser session's memory, never stored.")
        if not st.session_state.get(f"tf_secret_{var}"):
            is_set = "it is set" if os.environ.get(var) else "it is not set"
            st.checkbox(f"Or send this computer's ${var} environment variable to {host} ({is_set})",
                        key=f"tf_env_{var}")
    label = getattr(config, "name", "") or getattr(config, "model", "") or spec.name
    return url, label


def file_target_digest() -> str:
    """A hash of everything that makes the current file's target what it is: the whole file as parsed and
    each secret's source and value (hashed, in memory only). A connection check's result belongs to it,
    so it goes stale when the body, a path or a secret changes, not only the URL."""
    parsed = st.session_state.get(_PARSED)
    if not parsed:
        return ""
    kind, config = parsed
    parts = [kind, json.dumps(asdict(config), sort_keys=True, default=str)]
    for var in config.env_vars():
        typed = (st.session_state.get(f"tf_secret_{var}") or "").strip()
        allowed = bool(st.session_state.get(f"tf_env_{var}"))
        value = _secret_value(var)
        parts.append(f"{var}|{bool(typed)}|{allowed}|{hashlib.sha256(value.encode()).hexdigest()}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def parsed_config():
    """The configuration of the target file in the sidebar, or None while there is no valid one."""
    parsed = st.session_state.get(_PARSED)
    return parsed[1] if parsed else None


def _secret_value(var: str) -> str:
    """The value the user agreed to send for ``$var``: the typed one, else this computer's where its box is
    ticked, else "" (the environment is never read unasked)."""
    typed = (st.session_state.get(f"tf_secret_{var}") or "").strip()
    if typed:
        return typed
    return os.environ.get(var, "") if st.session_state.get(f"tf_env_{var}") else ""


def missing_secret() -> str | None:
    """What to do about the first variable of the current target file that has no value to send, or None.

    Asked before Start and Check connection (``Settings.target_problem``): a
    file whose secret is missing could only fail once the audit had started.
    """
    parsed = st.session_state.get(_PARSED)
    if not parsed:
        return None
    config = parsed[1]
    host = consent_host(_url(config))
    for var in config.env_vars():
        if not _secret_value(var):
            return (f"The target file sends ${var} to {host}: type its value in the sidebar, or tick the box "
                    f"that allows this computer's ${var}" + ("" if os.environ.get(var) else " (it is not set here)")
                    + ".")
    return None


def build_file_target(for_check: bool = False):
    """The target of the current target file, with only the secrets the user agreed to send (``for_check``:
    with the connection check's short limits, ``with_check_limits``)."""
    parsed = st.session_state.get(_PARSED)
    if not parsed:
        raise ValueError("upload or paste a valid target file first")
    missing = missing_secret()
    if missing:
        raise ValueError(missing[0].lower() + missing[1:].rstrip("."))
    kind, config = parsed
    env = {var: _secret_value(var) for var in config.env_vars()}
    if for_check:
        config = with_check_limits(config)
    return create_target(TARGET_TYPES[kind], config, env)
