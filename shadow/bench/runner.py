"""Running the benchmark: data split, shadow preparation per profile, probing every
(profile, defense, method, document) through the served target, one row each."""
from __future__ import annotations

import itertools
import json
import math
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from audit_core.audit import AuditConfig, probe_document, select_methods
from audit_core.documents import Document
from audit_core.estimate import method_estimate
from audit_core.methods import METHODS, create_method
from audit_core.methods.base import MethodResult, Observation
from audit_core.target.base import MAX_TOP_LOGPROBS, Capabilities
from shadow.bench.eta import RunEstimate
from shadow.demo import DEMO_MBA_ELICITATION
from shadow.prepare import ShadowConfig, prepare_shadow
from shadow.profiles import PROFILES, TargetProfile, get_profile, source_id
from shadow.rag import paraphrase_variant

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TARGET_CORPUS = ROOT.parent / "shared" / "data" / "genmedgpt5k.jsonl"
#: honest users' questions for Mirabel's benign false-positive rate (``benign_fpr``): MedQuAD's,
#: or the shipped auxiliary corpus's where ../shared is absent (its questions then quote stored records)
DEFAULT_BENIGN_CORPUS = ROOT.parent / "shared" / "data" / "medquad.jsonl"
#: the run folder's file of Mirabel's benign rate per profile (``benign_fpr``)
BENIGN_FILE = "benign_fpr.json"
#: the run folder's generation memo (``BenchConfig.reuse_generations``)
GENERATION_MEMO_FILE = "generations.sqlite"
ALL_METHODS = list(METHODS)
#: names ``--methods`` also takes for a set of methods. ``paper``: the membership benchmark as issues 6
#: and 18 first measured it (S-RAG, MBA and the four baselines the S-RAG paper compares, every defense);
#: ``text-only``: the methods added for targets without logprobs or behind Mirabel (issue 16)
METHOD_GROUPS: dict[str, list[str]] = {
    "all": ALL_METHODS,
    "paper": [n for n, s in METHODS.items() if s.role in ("primary", "second opinion", "baseline")],
    "text-only": [n for n, s in METHODS.items() if s.role == "text-only"],
}


def expand_methods(spec: str) -> list[str]:
    """Comma-separated method names and group names (``METHOD_GROUPS``) as method names, in registry order."""
    wanted: set[str] = set()
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        if part in METHOD_GROUPS:
            wanted.update(METHOD_GROUPS[part])
        elif part in METHODS:
            wanted.add(part)
        else:
            raise ValueError(f"unknown method or group {part!r}; methods: {', '.join(METHODS)}; "
                             f"groups: {', '.join(METHOD_GROUPS)}")
    if not wanted:
        raise ValueError("--methods names no method")
    return [m for m in ALL_METHODS if m in wanted]
ALL_DEFENSES = ["none", "prompt_modification", "paraphrase", "mirabel"]
ALL_PROFILES = list(PROFILES)


@dataclass
class BenchConfig:
    target_corpus: str = str(DEFAULT_TARGET_CORPUS)
    kb_size: int = 2000  # documents in the target's knowledge base
    #: the completion profile's generator (``--target-model``)
    target_generator: str = "gemma-3-270m"
    n_members: int = 50
    n_nonmembers: int = 50
    min_words: int = 20  # test documents shorter than this are not drawn
    seed: int = 0
    methods: list[str] = field(default_factory=lambda: list(ALL_METHODS))
    #: run order, cheapest first: paraphrasing makes the target rewrite every
    #: request with its generator (about 5 s each on 2 cores), so it goes last
    #: and an interrupted run already holds the other defenses' rows
    defenses: list[str] = field(default_factory=lambda: ["none", "prompt_modification", "mirabel", "paraphrase"])
    shadow: ShadowConfig = field(default_factory=ShadowConfig)
    out_dir: str = str(ROOT / "runs" / "bench")
    top_logprobs: int = MAX_TOP_LOGPROBS
    #: per-method configuration, as AuditConfig.method_params. The completion
    #: profile is the demo target's kind of system, so MBA asks it the same way
    #: there; a chat profile gets MBA's own default (the paper's single fill-in
    #: request) unless this sets it (``chat_method_params``).
    method_params: dict[str, dict] = field(default_factory=lambda: {"mba": {"elicitation": DEMO_MBA_ELICITATION}})
    chat_method_params: dict[str, dict] = field(default_factory=dict)
    #: defenses the auditor also simulates on its shadow: that defense's rows are
    #: scored with a shadow RAG running the same defense (an auditor who expects
    #: it). Empty: one undefended shadow calibrates every defense's rows.
    shadow_defenses: list[str] = field(default_factory=list)
    #: the model that rewrites queries under the target's paraphrasing defense
    #: (shadow.rag.RagConfig.paraphraser); None: ``shadow.rag.default_paraphraser`` of the target's
    #: generator (itself when it is an instruct model, else the packaged instruct model)
    paraphraser: str | None = None
    #: send and serve one request at a time (``shadow.bench.served.set_batching``): slower, and exactly the
    #: answers of runs before session 26; by default requests go 4 at a time and are answered together
    one_at_a_time: bool = False
    #: documents of one method probed at the same time (threads), so that the reference server decodes
    #: their requests together (``shadow.serve_batch``): a decoding step on a CPU costs about the same for
    #: one sequence as for several. 1: one document after another, as runs before session 36.
    #: ``one_at_a_time`` implies 1. Answers equal the one-document answers up to float rounding (on the
    #: 56 method-document pairs timed in BENCHMARKS.md, session 36, every score was the same); there
    #: the legs of the methods that generate took 0.59 of the time at 4 (S-RAG's one-token probes gain
    #: nothing), and 8 no less than 4 (measured while the client still held all documents to 4 requests
    #: in flight, session 38). The floor: a method with few queries per document gets more, below.
    documents_at_once: int = 4
    #: requests a leg keeps in flight: a method whose client sends r requests of a document at a time
    #: (its q queries per document, at most the client's 4) probes max(documents_at_once,
    #: requests_at_once // r) documents at once (``leg_documents_at_once``). Twice the server's batch of 16,
    #: so that a full batch waits while one is answered: with 16 in flight, S-RAG's fifth query of four
    #: documents came as a batch of 4 after each batch of 16, and under the paraphrasing defense a batch
    #: of 3-4 costs 6 s of rewriting against 9 s for 16. On a 20 + 20 slice under paraphrasing (session
    #: 40) S-RAG and MBA went from 34 server batches to 24 and from 382 s to 371 s: a small gain, since
    #: decoding beyond a batch of about 8 costs in proportion to the batch. Session 39 set 16 // q, which
    #: gave the one-query methods (S2MIA, RAG-MIA, Min-k%) 16 documents. 0: every method at
    #: ``documents_at_once``
    requests_at_once: int = 32
    #: reference servers that answer each defense side by side, the cores shared out among them
    #: (``shadow.bench.served.set_lanes``): documents take the servers in turn. On two cores a torch
    #: thread per server gets through more than one server with both: a decoding step with two threads
    #: takes 0.6-0.9 of one with one thread, and a paraphrasing slice of S-RAG and MBA took 270 s against
    #: 371 s (session 40). Each server holds its own models (about 3 GB resident). ``one_at_a_time`` and
    #: ``documents_at_once`` 1 imply 1
    server_lanes: int = 2
    #: the reference servers of the run keep their generations in the run folder and answer a prompt
    #: they have answered before from there (``shadow.generation_memo``): a defense leg that leaves a
    #: probe's prompt as it was (most of Mirabel's) costs no decoding. Answers are unchanged.
    reuse_generations: bool = True
    #: which section of BENCHMARKS.md the run's table goes to: "full", "quick", "zoo",
    #: or any other name for an experiment of one's own ("<mode> membership benchmark")
    mode: str = "full"
    #: target profiles (shadow.profiles) benchmarked, in order
    profiles: list[str] = field(default_factory=lambda: ["completion"])
    #: shadow members / non-members per class for chat-style profiles (None: the
    #: shadow config's). S-RAG's chat probes generate ``chat_max_tokens`` each
    #: instead of one teacher-forced token, so a chat shadow costs far more.
    chat_shadow_size: int | None = None
    #: honest questions sent through each Mirabel-defended profile's retrieval, to report the
    #: share the defense flags beside every AUC under it (issue 16: a defense that blocks 40% of
    #: honest users is not the defense that blocks 0.4%); 0: not measured
    benign_queries: int = 200
    #: JSON-lines corpus of "Question: ... ? Answer: ..." records (None: DEFAULT_BENIGN_CORPUS)
    benign_corpus: str | None = None

    @classmethod
    def quick(cls, **kw) -> "BenchConfig":
        base = dict(mode="quick", kb_size=300, n_members=10, n_nonmembers=10, defenses=["none"],
                    shadow=ShadowConfig(n_members=40, n_nonmembers=40, n_per_class_generative=15),
                    out_dir=str(ROOT / "runs" / "bench-quick"))
        base.update(kw)
        return cls(**base)


# --------------------------------------------------------------------------- data


def split_target_corpus(cfg: BenchConfig) -> tuple[list[Document], list[Document], list[Document]]:
    """Knowledge base, member test documents (from it), non-member test documents (held out)."""
    from shadow.corpus import load_corpus

    docs = sorted(load_corpus(cfg.target_corpus), key=lambda d: d.id)
    rnd = random.Random(cfg.seed)
    rnd.shuffle(docs)
    kb = docs[: cfg.kb_size]
    held = docs[cfg.kb_size:]
    eligible_m = [d for d in kb if d.n_words >= cfg.min_words]
    eligible_n = [d for d in held if d.n_words >= cfg.min_words]
    members = rnd.sample(eligible_m, cfg.n_members)
    nonmembers = rnd.sample(eligible_n, cfg.n_nonmembers)
    return kb, members, nonmembers


# --------------------------------------------------------------------------- per-profile set-up


def profile_method_params(cfg: BenchConfig, prof: TargetProfile) -> dict[str, dict]:
    """Method parameters for a profile: the methods that read a chat target differently read it in its style."""
    from audit_core.methods import in_target_style

    base = cfg.method_params if prof.style == "completion" else cfg.chat_method_params
    return in_target_style(base, cfg.methods, prof.style)


def profile_shadow(cfg: BenchConfig, prof: TargetProfile) -> ShadowConfig:
    """The shadow mirrors the profile's interaction style and the request parameters of the target."""
    sh = replace(cfg.shadow, prompt_style=prof.style, top_logprobs=cfg.top_logprobs)
    if prof.style == "chat" and cfg.chat_shadow_size:
        n = cfg.chat_shadow_size
        sh = replace(sh, n_members=n, n_nonmembers=n, n_per_class_generative=min(n, sh.n_per_class_generative))
    return sh


def profile_capabilities(cfg: BenchConfig, prof: TargetProfile) -> Capabilities:
    """What the profile's endpoint offers (what the capability probe finds on it).

    The custom API cites its sources (``shadow.serve_custom``; its target file names them).
    """
    return Capabilities(True, prof.logprobs, cfg.top_logprobs if prof.logprobs else 0, prof.rag.generator,
                        sources=prof.api == "custom")


# --------------------------------------------------------------------------- running


#: the run folder's record of the draw its rows and stored answers belong to (``check_draw``)
DRAW_FILE = "draw.json"


def draw_manifest(cfg: BenchConfig, kb: list[Document], members: list[Document],
                  nonmembers: list[Document]) -> dict:
    """What identifies a run's draw: its settings and a hash of the knowledge base and of the test documents."""
    import hashlib

    def digest(docs: list[Document]) -> str:
        h = hashlib.sha256()
        for d in docs:
            h.update(d.id.encode() + b"\0" + d.text.encode() + b"\0")
        return h.hexdigest()[:20]

    return {"target_corpus": Path(cfg.target_corpus).name, "seed": cfg.seed, "kb_size": cfg.kb_size,
            "n_members": cfg.n_members, "n_nonmembers": cfg.n_nonmembers, "min_words": cfg.min_words,
            "knowledge_base": digest(kb), "test_documents": digest(sorted(members + nonmembers, key=lambda d: d.id))}


def check_draw(out: Path, manifest: dict) -> None:
    """Record the draw of a new run folder; refuse to go on in a folder that holds another draw.

    A resumed run keeps the rows already scored and the answers already stored. In
    a folder of another draw (another seed, corpus, size) it kept the old knowledge
    base, served the old draw's answers and pooled both draws' documents in one AUC,
    with members that were not in the knowledge base being served (session 51).
    """
    f = out / DRAW_FILE
    if f.exists():
        old = json.loads(f.read_text())
        if old != manifest:
            diff = ", ".join(f"{k}: {old.get(k)!r} there, {v!r} now" for k, v in manifest.items() if old.get(k) != v)
            raise ValueError(f"{out} holds another draw's results ({diff}); give another --out, or the same "
                             "settings to resume it")
    elif (out / "scores.jsonl").exists() or any(out.glob("target_kb*.jsonl")):
        raise ValueError(f"{out} holds results of a run that did not record its draw (before session 51); "
                         "give another --out")
    else:
        f.write_text(json.dumps(manifest, indent=1))


def check_disjoint(shadow_docs: Sequence[Document], target_docs: Sequence[Document]) -> None:
    """Refuse a run whose shadow corpus shares a text with the target's knowledge base or test documents.

    The shadow is the auditor's public data; a text in both would let a calibration
    see a document it is then tested on. The shipped corpora share none
    (session 51: 0 texts of 487); this keeps a user's ``--aux-corpus`` to that.
    """
    def norm(t: str) -> str:
        return " ".join(t.split()).lower()

    target = {norm(d.text) for d in target_docs}
    shared = [d.id for d in shadow_docs if norm(d.text) in target]
    if shared:
        raise ValueError(f"the shadow corpus shares {len(shared)} text(s) with the target corpus (e.g. "
                         f"{', '.join(shared[:3])}); a benchmark's shadow must hold none of the target's documents")


def target_identity(cfg: BenchConfig, prof_name: str, prof: TargetProfile, defense: str,
                    kb_hash: str = "") -> str:
    """What the answers of one (profile, defense) target are stored under.

    The system, not its address: the server takes a new port every run, and a
    re-run must find the answers of the last one. Paraphrase rows also name
    who paraphrased when that is not the generator itself (named, or by
    ``shadow.rag.default_paraphraser``) and the rewrite check the served
    system runs (``RagConfig.paraphrase_min_similarity``, since session 42), so
    answers of one paraphrasing defense are never read as another's.
    """
    generator = cfg.target_generator if prof_name == "completion" else prof.rag.generator
    system = cfg.target_generator if prof_name == "completion" else f"profile {prof_name}"
    ident = f"reference RAG · {system} · {cfg.target_corpus} · kb {cfg.kb_size} · {defense}"
    if kb_hash:  # answers of one knowledge base are never read as another's (a store copied between draws)
        ident += f" · kb {kb_hash}"
    variant = paraphrase_variant(generator, cfg.paraphraser, prof.rag.paraphrase_min_similarity)
    if defense == "paraphrase" and variant:
        ident += f" ({variant})"
    return ident


def benign_fpr(cfg: BenchConfig, prof: TargetProfile, kb: list[Document]) -> dict:
    """Mirabel's false-positive rate on honest users' questions, on ``prof``'s knowledge base.

    Retrieval only (Mirabel decides before generation), on the same entries,
    embedder, top-k and significance as the served target; questions whose
    record is in the knowledge base are left out.
    """
    from shadow.defenses import benign_false_positive_rate, benign_questions
    from shadow.rag import RagSystem

    aux = ROOT / "assets" / "aux_medquad.jsonl"
    path = Path(cfg.benign_corpus) if cfg.benign_corpus else (
        DEFAULT_BENIGN_CORPUS if DEFAULT_BENIGN_CORPUS.exists() else aux)
    queries = benign_questions(str(path), cfg.benign_queries, seed=cfg.seed, exclude=[d.text for d in kb])
    if not queries:
        return {"flagged": None, "total": 0, "rate": None, "corpus": path.name,
                "reason": f"no question found in {path.name}"}
    res = benign_false_positive_rate(RagSystem(prof.knowledge_base(kb), prof.rag_config("mirabel")), queries)
    return {"flagged": res.flagged, "total": res.total, "rate": res.rate, "corpus": path.name, "reason": None}


def read_benign(folder: Path) -> dict:
    """profile -> ``benign_fpr`` result stored in a run folder ({} when none was measured)."""
    f = Path(folder) / BENIGN_FILE
    return json.loads(f.read_text()) if f.exists() else {}


def _row_profile(r: dict) -> str:
    return r.get("profile") or "completion"  # rows of runs before profiles existed


def shadow_entry(prof_name: str | None, method: str, defense: str | None = None) -> str:
    """The name results.json gives a shadow: bare for the completion profile (as before profiles), else profile:method."""
    name = method if prof_name in (None, "completion") else f"{prof_name}:{method}"
    return name if defense is None else f"{name}@{defense}"


def _done_keys(scores_file: Path) -> set[tuple[str, str, str, str]]:
    """(profile, defense, method, document) already scored; a row whose target calls failed is done
    again (answered requests come back from the store, only the failed ones are re-sent)."""
    done = set()
    if scores_file.exists():
        for line in scores_file.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                if not r.get("failed"):
                    done.add((_row_profile(r), r["defense"], r["method"], r["doc_id"]))
    return done


def retrieval_hit(obs: Observation, doc_id: str) -> float | None:
    """Share of a document's probes for which the target retrieved that document (or one of its chunks).

    The reference server reports what it retrieved in a vendor field of each
    response (see shadow.serve); a real target never does. S-RAG's
    continuation check repeats its last probe's query and is no probe: it is
    left out, or that probe's retrieval would count twice.
    """
    check = (obs.data.get("continuation_check") or {}).get("index")
    hits = total = 0
    for j, r in enumerate(obs.responses):
        if j == check:
            continue
        if not r or not r.get("raw"):
            continue
        ids = _retrieved_ids(r["raw"])
        if ids is None:
            continue
        total += 1
        hits += doc_id in {source_id(i) for i in ids}
    return None if total == 0 else hits / total


def _retrieved_ids(raw: dict) -> list[str] | None:
    info = raw.get("rpa_retrieval") or raw.get("rpa") or {}
    ids = info.get("doc_ids") or info.get("retrieved_ids") or info.get("ids")
    return list(ids) if ids is not None else None


class TqdmProgress:
    """progress(stage, done, total) as one tqdm bar per stage: done / total and time left."""

    def __init__(self, log=print):
        self.bar = None
        self.stage = None
        self.log = log

    def __call__(self, stage: str, done: int, total: int) -> None:
        from tqdm import tqdm

        if stage != self.stage:
            self.close()
            self.stage = stage
            self.bar = tqdm(total=total, desc=f"  {stage}", unit="doc", file=sys.stderr, mininterval=5)
        self.bar.total = total  # a stage may learn its size as it goes (S-RAG's calibration: 0 / 1, then its fits)
        self.bar.n = done
        self.bar.refresh()
        if done >= total:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar, self.stage = None, None


def _cannot_run_row(prof: str, defense: str, method: str, d: Document, label: int, reason: str) -> dict:
    return {"profile": prof, "defense": defense, "method": method, "doc_id": d.id, "label": label,
            "score": None, "decision": None, "reason": reason, "cannot_run": True, "queries": 0, "failed": 0,
            "prompt_tokens": 0, "completion_tokens": 0, "auditor_cpu_s": 0.0, "sent_queries": 0,
            "retrieval_hit": None, "shadow_defense": None, "evidence": {}}


def documents_at_once(cfg: BenchConfig) -> int:
    """How many documents of one method are probed at the same time (``BenchConfig.documents_at_once``)."""
    if cfg.documents_at_once < 1:
        raise ValueError("documents_at_once must be at least 1")
    return 1 if cfg.one_at_a_time else cfg.documents_at_once


def leg_documents_at_once(cfg: BenchConfig, m, docs: Sequence[Document]) -> int:
    """Documents of method ``m`` probed at the same time in one leg (``BenchConfig.requests_at_once``).

    The queries per document are the method's own estimate (``query_cost``, as the audit's cost
    estimate uses), averaged over the leg's documents and rounded up; the client sends at most
    ``served.BATCHED[0]`` of one document's at a time. Each server lane gets as many.
    """
    from shadow.bench.served import BATCHED

    base = documents_at_once(cfg)
    if base == 1 or cfg.requests_at_once <= 0 or not docs:
        return base
    costs = [c.queries for c in (m.query_cost(len(d.text.split())) for d in docs) if c is not None and c.queries > 0]
    per_doc = math.ceil(sum(costs) / len(costs)) if costs else 1
    in_flight = min(per_doc, BATCHED[0])
    return min(len(docs), server_lanes(cfg) * max(base, cfg.requests_at_once // in_flight))


def server_lanes(cfg: BenchConfig) -> int:
    """Servers answering each defense side by side (``BenchConfig.server_lanes``)."""
    if cfg.server_lanes < 1:
        raise ValueError("server_lanes must be at least 1")
    return 1 if documents_at_once(cfg) == 1 else cfg.server_lanes


def probe_leg(m, docs: list[Document], new_target, calibration, top_k: int, at_once: int, bar,
              scores_file: Path, where: dict) -> None:
    """Probe and score ``docs`` with method ``m``, ``at_once`` documents at a time, one row each.

    Every document gets its own caching view (``new_target()``: same store and
    answers, its own counters), so ``sent_queries`` is that document's own even
    when documents run side by side. ``auditor_cpu_s`` is the process's CPU time
    while the document was probed when one document runs at a time; side by
    side it is the probing thread's own CPU time (``time.thread_time``), which
    leaves out the torch and HTTP worker threads it started (the leg's process
    CPU time is in ``timings.per_leg``). Rows are appended as documents finish.
    """
    import threading
    from concurrent.futures import ThreadPoolExecutor

    lock, score_lock = threading.Lock(), threading.Lock()
    clock = time.process_time if at_once == 1 else time.thread_time

    def one(d: Document) -> None:
        target = new_target()
        c0 = clock()
        obs = probe_document(m, d, target, top_k)
        with score_lock:  # probes overlap; scoring (a fitted classifier, the embedder) goes one at a time
            res = m.score(obs, calibration)
        cpu = clock() - c0
        p_tok, c_tok = obs.tokens_used()
        row = {
            "profile": where["profile"], "defense": where["defense"], "method": m.name, "doc_id": d.id,
            "label": where["labels"][d.id], "score": res.score, "decision": res.decision,
            "reason": res.reason, "queries": obs.queries, "failed": obs.failed,
            "prompt_tokens": p_tok, "completion_tokens": c_tok, "auditor_cpu_s": cpu,
            "sent_queries": target.stats.sent,
            "retrieval_hit": retrieval_hit(obs, d.id),
            "shadow_defense": where["shadow_defense"],
            "evidence": _small_evidence(res),
        }
        with lock:
            with open(scores_file, "a") as fh:
                fh.write(json.dumps(row) + "\n")
            bar.update(1)

    if at_once == 1:
        for d in docs:
            one(d)
        return
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        for fut in [pool.submit(one, d) for d in docs]:
            fut.result()  # the first failure stops the leg, as a failure did one by one


def run_bench(cfg: BenchConfig, log=print) -> dict:
    from tqdm import tqdm

    import shadow.bench.served as served
    from audit_core.store import Store
    from audit_core.target.caching import CacheStats, CachingTarget
    from shadow.bench.report import finish
    from shadow.corpus import write_jsonl

    at_once = documents_at_once(cfg)
    # the connector's bound on requests in flight allows the most documents a leg may probe at once
    served.set_batching(cfg.one_at_a_time, at_once if at_once == 1 else max(at_once, cfg.requests_at_once))
    lanes = server_lanes(cfg)
    served.set_lanes(lanes)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    memo = out / GENERATION_MEMO_FILE if cfg.reuse_generations else None
    t_start = time.time()
    kb, members, nonmembers = split_target_corpus(cfg)
    check_disjoint(cfg.shadow.corpus_docs(), kb + nonmembers)
    draw = draw_manifest(cfg, kb, members, nonmembers)
    check_draw(out, draw)
    labels = {d.id: 1 for d in members} | {d.id: 0 for d in nonmembers}
    test_docs = members + nonmembers
    random.Random(cfg.seed + 7).shuffle(test_docs)
    scores_file = out / "scores.jsonl"
    done = _done_keys(scores_file)
    keys = [(p, defense, m, d.id) for p in cfg.profiles for defense in cfg.defenses for m in cfg.methods
            for d in test_docs]
    timings: dict[str, Any] = {"shadow_preparation_s": 0.0, "per_defense_s": {}, "per_leg": {},
                               "documents_at_once": at_once, "rows_total": len(keys),
                               "rows_from_earlier_runs": sum(k in done for k in keys)}
    info: dict[str, Any] = {}
    progress = TqdmProgress(log)
    eta = RunEstimate(Counter(k[:3] for k in keys if k not in done))
    store = None
    for prof_name in cfg.profiles:
        prof = get_profile(prof_name)
        params = profile_method_params(cfg, prof)
        caps = profile_capabilities(cfg, prof)
        methods, not_run = select_methods(AuditConfig(methods=list(cfg.methods), method_params=params), caps)
        unserved = served.cannot_serve(prof)
        if unserved:
            not_run |= {m.name: unserved for m in methods}
            methods = []
        for name in not_run:
            eta.drop(prof_name, name)
        with open(scores_file, "a") as fh:  # rows of methods that cannot run here: the reason, never a number
            for name, why in not_run.items():
                for defense in cfg.defenses:
                    for d in test_docs:
                        if (prof_name, defense, name, d.id) not in done:
                            fh.write(json.dumps(_cannot_run_row(prof_name, defense, name, d, labels[d.id], why)) + "\n")
        if not methods:
            log(f"[{prof_name}] nothing can run: " + "; ".join(f"{m}: {w}" for m, w in not_run.items()))
            continue
        for m in methods:  # the documents an owner would audit together: members and non-members alike
            m.use_collection([d.text for d in test_docs])
            cost = method_estimate(m.name, [m.query_cost(d.n_words) for d in test_docs])
            probed = len(test_docs) - cost.skipped_documents
            if probed:
                eta.weigh(prof_name, m.name, cost.queries / probed, cost.completion_tokens / probed)
        shadow_cfg = profile_shadow(cfg, prof)
        log(f"[{prof_name}] shadow preparation ({shadow_cfg.prompt_style} style) for "
            f"{', '.join(m.name for m in methods)} ...")
        t0 = time.time()
        prep = prepare_shadow(methods, shadow_cfg, progress=progress)
        preps = {d: prep for d in cfg.defenses}
        for d in cfg.shadow_defenses:
            if d in preps and d != "none":
                log(f"[{prof_name}] shadow preparation with the '{d}' defense simulated ...")
                preps[d] = prepare_shadow(methods, replace(shadow_cfg, defense=d), progress=progress)
        progress.close()
        timings["shadow_preparation_s"] += time.time() - t0
        for d, p in [(None, prep)] + [(d, p) for d, p in preps.items() if p is not prep]:
            for m, c in p.calibrations.items():
                info[shadow_entry(prof_name, m, d)] = {"shadow_auc": c.shadow_auc, "threshold": c.threshold,
                             "mirror": (c.params or {}).get("mirror"), "key": p.keys.get(m)}

        kb_file = out / f"target_kb-{prof_name}.jsonl"
        if prof_name == "completion":
            kb_file = out / "target_kb.jsonl"  # the name runs before profiles used
        if not kb_file.exists():
            write_jsonl(kb, kb_file)  # the server chunks it itself when the profile chunks
        store = store or Store(out / "responses.sqlite")
        for defense in cfg.defenses:
            todo = [(m, d) for m in methods for d in test_docs if (prof_name, defense, m.name, d.id) not in done]
            if not todo:
                log(f"[{prof_name} / {defense}] all results present")
                continue
            t_def = time.time()
            if defense == "mirabel" and cfg.benign_queries > 0:
                benign = read_benign(out)
                if prof_name not in benign:
                    log(f"[{prof_name} / mirabel] {cfg.benign_queries} honest questions through the defense ...")
                    benign[prof_name] = benign_fpr(cfg, prof, kb)
                    (out / BENIGN_FILE).write_text(json.dumps(benign, indent=1))
            dflt = None if defense == "none" else defense
            log_file = out / (f"server-{defense}.log" if prof_name == "completion" else f"server-{prof_name}-{defense}.log")
            if prof_name == "completion" and cfg.target_generator != prof.rag.generator:
                def serve(lane_log: Path):
                    return served.LazyServedTarget(kb_file, cfg.target_generator, dflt, lane_log,
                                                   paraphraser=cfg.paraphraser, memo=memo)
            else:
                def serve(lane_log: Path):
                    return served.served_target(prof, kb_file, dflt, lane_log, cfg.paraphraser, memo)
            # the same system served once per lane, each lane a share of the cores
            https = [serve(log_file if lane == 0 else log_file.with_name(f"{log_file.stem}-lane{lane + 1}.log"))
                     for lane in range(lanes)]
            for h in https[1:]:
                h.after = https[0]

            def started_s() -> float:
                return sum(getattr(h, "start_s", 0.0) for h in https)

            try:
                identity = target_identity(cfg, prof_name, prof, defense, draw["knowledge_base"])
                cachings = [CachingTarget(h, store, identity=identity) for h in https]
                for m in methods:
                    docs = [d for mm, d in todo if mm is m]
                    if not docs:
                        continue
                    t_leg, c_leg, s_leg = time.time(), time.process_time(), started_s()
                    leg_at_once = leg_documents_at_once(cfg, m, docs)
                    bar = tqdm(total=len(docs), desc=f"[{prof_name} / {defense}] {m.name}", unit="doc",
                               file=sys.stderr)
                    turn = itertools.count()  # documents take the lanes in turn
                    probe_leg(m, docs, lambda m=m, turn=turn: cachings[next(turn) % lanes].for_method(
                                  m.probe_scope, m.version, CacheStats()),
                              preps[defense].calibrations[m.name], caps.max_top_logprobs,
                              leg_at_once, bar, scores_file,
                              {"profile": prof_name, "defense": defense, "labels": labels,
                               "shadow_defense": defense if defense in cfg.shadow_defenses else None})
                    bar.close()
                    wall, started = time.time() - t_leg, started_s() - s_leg
                    timings["per_leg"][f"{prof_name}/{defense}/{m.name}"] = {
                        "wall_s": wall, "auditor_cpu_s": time.process_time() - c_leg,
                        "documents": len(docs), "server_start_s": started, "documents_at_once": leg_at_once}
                    # the server's start (indexing the knowledge base, loading models) is paid once per defense
                    eta.finished((prof_name, defense, m.name), len(docs), wall - started)
                    log(eta.line())
            finally:
                for h in https:
                    h.stop()
            timings["per_defense_s"][defense if prof_name == "completion" else f"{prof_name}/{defense}"] = \
                time.time() - t_def
    timings["wall_s"] = time.time() - t_start
    if memo is not None and memo.exists():
        from shadow.generation_memo import GenerationMemo

        kept, reused = GenerationMemo(memo).counts()
        timings["generation_memo"] = {"generations_kept": kept, "answers_reused": reused}
    return finish(cfg, prep_info=info, timings=timings)


def _small_evidence(res: MethodResult) -> dict:
    """What a row keeps of a result's evidence: the per-probe readings, what the verdict rules read
    (``member_p_value`` for rule R6), and which scorer S-RAG's shadow chose."""
    ev = res.evidence or {}
    keep = {}
    if "words" in ev:
        keep["probs"] = [w.get("prob") for w in ev["words"]]
        keep["aligned"] = [w.get("aligned") for w in ev["words"]]
    for k in ("raw_score", "accuracy", "similarity", "answer", "p_yes", "member_p_value", "scorer", "reproduced_share",
              "similarity_to_remainder"):
        if k in ev:
            keep[k] = ev[k]
    return keep
