"""Retrieval only, behind Mirabel: which probes keep the quoted member in the model's context?

No language model runs here: embeddings and Mirabel's test only, so a wording
can be checked on a whole knowledge base in a minute before a study with the
model (``verbatim_topic_study.py``). On shadow data or corpora that are no
target's, never on a test draw. Three checks (BENCHMARKS.md, sessions 23 and 28):

``replay``: the stored probes of a ``verbatim_topic_study.py --out`` file sent
again to the padded chat-style shadow's retrieval, with and without the
MedQuAD records whose question a decoy probe asks (Mirabel hides only the top
match of a flagged query, so such a record could shield the member); prints
how often the member is kept and what the query's top match is.

``leads``: plain quote, two shipped decoy questions, or the beginnings of
other documents of the audited collection before the quote, on the padded
shadow and on a 2,000-item AG News knowledge base (another genre).

``cited``: Cited sources' questions (a document's two halves), alone or led by
words of another document of the collection (a random one or the most similar
one, 10 to 40 words), with and without Mirabel, on the same two corpora: how
often either question keeps the document among the k passages, which is all
that method reads.

``cited-lexical``: the caveat of ``cited``: there the target retrieved with the
very embedder that picks each document's neighbour. Here the target retrieves
by TF-IDF cosine (words and word pairs, fitted on its knowledge base), a
lexical measure unlike the method's dense one, while the method's own
questions (``CitedSourcesMethod.questions``, neighbour by the shipped
embedder) are sent; beside it, the same questions against the dense retriever.

    RPA_CACHE_DIR=<cache> .venv/bin/python scripts/mirabel_retrieval_check.py replay runs/decoy-mirabel.json quote_decoy
    RPA_CACHE_DIR=<cache> .venv/bin/python scripts/mirabel_retrieval_check.py leads
    RPA_CACHE_DIR=<cache> .venv/bin/python scripts/mirabel_retrieval_check.py cited
    RPA_CACHE_DIR=<cache> .venv/bin/python scripts/mirabel_retrieval_check.py cited-lexical --lead-words 20,40,80,200
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared" / "data"
K = 4  # the chat profile's retrieved documents


def padded_shadow():
    from scripts.srag_chat_repeat_study import padded_chat_shadow
    from shadow.prepare import ShadowConfig

    cfg = ShadowConfig(prompt_style="chat", probe_retrieval="per_request", defense="mirabel")
    rag, kb, outside, extra = padded_chat_shadow(cfg, 1750, str(SHARED / "medquad.jsonl"))
    ids, mat = rag._kb_embeddings()
    return list(ids), np.asarray(mat), list(kb), list(outside), list(extra)


def kept(mat: np.ndarray, ids: list[str], doc_id: str, emb: np.ndarray, mask=None) -> tuple[bool, bool, str]:
    """(member kept among the k the model gets, query flagged, id of the query's top match)."""
    sel = np.ones(len(ids), bool) if mask is None else mask
    return kept_by_similarity(np.asarray(mat[sel] @ emb).ravel(), [i for i, m in zip(ids, sel) if m], doc_id)


def kept_by_similarity(s: np.ndarray, sid: list[str], doc_id: str) -> tuple[bool, bool, str]:
    """``kept`` for a query's cosine similarity to every document of the knowledge base, however measured."""
    from shadow.defenses import MirabelDefense

    ranked = [(sid[j], 2.0 - 2.0 * float(s[j])) for j in np.argsort(-s)[:K + 1]]  # squared L2 of unit vectors
    given, decision, _ = MirabelDefense().apply(s, sid, ranked, K)
    return doc_id in {i for i, _ in given}, decision.flagged, ranked[0][0]


def _key(t: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", t.lower()).strip()


def replay(path: str, wording: str) -> None:
    from shadow.rag import _encode

    ids, mat, kb, _, extra = padded_shadow()
    text_of = {d.id: d.text for d in kb + extra}
    by_question: dict[str, set[str]] = {}
    for i in ids:
        m = re.match(r"\s*Question:\s*(.+?\?)", text_of[i], re.S)
        if m:
            by_question.setdefault(_key(m.group(1)), set()).add(i)
    rows = [r for r in json.loads(Path(path).read_text())[wording] if r["label"] == 1]
    embs = _encode("all-minilm-l6-v2", [r["prompt"] for r in rows])
    n_rec = full = without = 0
    tops = {"member": 0, "a decoy's record": 0, "another document": 0}
    for r, e in zip(rows, embs):
        lead = r["prompt"].split(" Also, I read a message")[0] if " Also, I read a message" in r["prompt"] else ""
        recs = set().union(*[by_question.get(_key(q.strip() + "?"), set()) for q in lead.split("?") if q.strip()])
        n_rec += bool(recs)
        k_full, _, top = kept(mat, ids, r["id"], e)
        k_wo, _, _ = kept(mat, ids, r["id"], e, np.array([i not in recs for i in ids]))
        full += k_full
        without += k_wo
        tops["member" if top == r["id"] else "a decoy's record" if top in recs else "another document"] += 1
    print(f"{wording}: {len(rows)} members; a decoy question's own record in the knowledge base for {n_rec}; "
          f"member kept {full} (without those records {without}); the query's top match: {tops}")


def on_both_corpora(study) -> None:
    """``study(name, embeddings, ids, members, non-members, texts)`` on the padded shadow and on 2,000 AG News
    items (``texts``: the knowledge base's texts, in the order of ``ids``)."""
    from shadow.corpus import load_corpus
    from shadow.rag import _encode

    ids, mat, kb, outside, extra = padded_shadow()
    text_of = {d.id: d.text for d in kb + extra}
    r = random.Random(4242)
    study("padded shadow", mat, ids, r.sample([d for d in kb if d.n_words >= 24], 60),
          r.sample([d for d in outside if d.n_words >= 24], 60), [text_of[i] for i in ids])
    docs = [d for d in load_corpus(str(SHARED / "agnews.jsonl")) if d.n_words >= 24]
    r = random.Random(4242)
    r.shuffle(docs)
    base, held = docs[:2000], docs[2000:]
    study("AG News", _encode("all-minilm-l6-v2", [d.text for d in base]), [d.id for d in base],
          r.sample(base, 60), r.sample(held, 60), [d.text for d in base])


def leads() -> None:
    from audit_core.methods.baseline_common import split_at
    from audit_core.methods.verbatim import TEMPLATES, load_decoys
    from shadow.rag import _encode

    decoys = load_decoys(None, 2)  # the shipped questions, two per probe

    def study(name: str, mat, ids, members, nonmembers, _texts) -> None:
        coll = members + nonmembers  # the collection audited together: the auditor knows no labels

        def others(d, m, words):
            pool = [x for x in coll if x.id != d.id]
            return " ".join(" ".join(random.Random(f"{d.id}{j}").choice(pool).text.split()[:words]) for j in range(m))

        def quote(d, lead=""):
            first = split_at(d.text, 0.5, 12).first
            if lead:
                return TEMPLATES["quote_decoy"].format(decoys=lead, query=first)
            return TEMPLATES["quote"].format(query=first)

        variants = {
            "quote": quote,
            "2 shipped questions + quote": lambda d: quote(d, " ".join(random.Random(d.id).sample(decoys, 2))),
            "2 other documents (20 words) + quote": lambda d: quote(d, others(d, 2, 20)),
            "2 other documents (40 words) + quote": lambda d: quote(d, others(d, 2, 40)),
        }
        for v, fn in variants.items():
            embs = _encode("all-minilm-l6-v2", [fn(d) for d in members])
            res = [kept(mat, ids, d.id, e) for d, e in zip(members, embs)]
            n = len(res)
            print(f"{name}: {v}: member kept {sum(r[0] for r in res) / n:.2f}, "
                  f"flagged {sum(r[1] for r in res) / n:.2f}, "
                  f"own document the top match {sum(r[2] == d.id for r, d in zip(res, members)) / n:.2f}", flush=True)

    on_both_corpora(study)


def cited() -> None:
    """Cited sources' two questions (a document's halves), with and without leading documents, by Mirabel.

    What matters to Cited sources is only whether either question keeps the document among the
    k passages (and so the citations); the model's answer is not read.
    """
    from audit_core.methods.baseline_common import split_at
    from shadow.rag import _encode

    def study(name: str, mat, ids, members, nonmembers, _texts) -> None:
        coll = members + nonmembers

        def others(d, m, words):
            pool = [x for x in coll if x.id != d.id]
            return " ".join(" ".join(random.Random(f"{d.id}{j}").choice(pool).text.split()[:words]) for j in range(m))

        cemb = _encode("all-minilm-l6-v2", [d.text for d in coll])
        near = {}
        for i, d in enumerate(coll):
            sims = cemb @ cemb[i]
            sims[i] = -9
            near[d.id] = coll[int(np.argmax(sims))]

        def lead_of(d, kind, m, w):
            if kind == "near":
                return " ".join(near[d.id].text.split()[:w])
            return others(d, m, w) if m else ""

        variants = {"halves": ("rand", 0, 0), "1 other (10 words) + half": ("rand", 1, 10),
                    "1 other (20 words) + half": ("rand", 1, 20), "1 other (40 words) + half": ("rand", 1, 40),
                    "nearest other (20 words) + half": ("near", 1, 20),
                    "nearest other (40 words) + half": ("near", 1, 40)}
        hits = {}
        for v, (kind, m, w) in variants.items():
            qs = []
            for d in members:
                h = split_at(d.text, 0.5, 8)
                lead = lead_of(d, kind, m, w)
                qs += [f"{lead} {h.first}".strip(), f"{lead} {h.second}".strip()]
            embs = _encode("all-minilm-l6-v2", qs)
            out = {}
            for label, mirabel in (("no defense", False), ("Mirabel", True)):
                per, either, rows = 0, 0, []
                for i, d in enumerate(members):
                    ks = []
                    for e in embs[2 * i: 2 * i + 2]:
                        if mirabel:
                            ks.append(kept(mat, ids, d.id, e)[0])
                        else:
                            s = mat @ e
                            ks.append(d.id in {ids[j] for j in np.argsort(-s)[:K]})
                    per += sum(ks)
                    either += any(ks)
                    rows.append(any(ks))
                out[label] = (per / (2 * len(members)), either / len(members))
                hits[(v, label)] = rows
            print(f"{name}: {v}: " + "; ".join(f"{k}: per question {a:.2f}, either {b:.2f}" for k, (a, b) in out.items()),
                  flush=True)
        for v in list(variants)[1:]:
            both = [a or b for a, b in zip(hits[("halves", "Mirabel")], hits[(v, "Mirabel")])]
            print(f"{name}: halves and ({v}), four questions, Mirabel: either {sum(both) / len(both):.2f}")

    on_both_corpora(study)


def cited_lexical(lead_word_counts: Sequence[int] = (20, 80)) -> None:
    """The method's own questions against a TF-IDF retriever, with and without Mirabel (``cited-lexical``),
    for each of ``lead_word_counts`` (the method's ``lead_words``)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    from audit_core.methods.cited_sources import CitedSourcesConfig, CitedSourcesMethod
    from shadow.rag import _encode

    def study(name: str, mat, ids, members, nonmembers, texts) -> None:
        tfidf = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit(texts)
        kb_lex = tfidf.transform(texts)
        for (lead_words, retriever) in itertools.product(lead_word_counts, ("dense (the method's embedder)", "TF-IDF")):
            method = CitedSourcesMethod(CitedSourcesConfig(lead_words=lead_words))
            method.use_collection([d.text for d in members + nonmembers])
            asked = [method.questions(d.text) for d in members]
            counts = {}
            for label, mirabel in (("no defense", False), ("Mirabel", True)):
                for kind, pick in (("the halves alone", slice(0, 2)), ("led by the neighbour", slice(2, 4)),
                                   ("all four", slice(0, 4))):
                    either = 0
                    for d, q in zip(members, asked):
                        qs = q["queries"][pick]
                        if not qs:
                            continue
                        if retriever == "TF-IDF":
                            sims = (kb_lex @ tfidf.transform(qs).T).toarray().T
                        else:
                            sims = _encode("all-minilm-l6-v2", qs) @ mat.T
                        hit = False
                        for s in sims:
                            if mirabel:
                                hit |= kept_by_similarity(s, ids, d.id)[0]
                            else:
                                hit |= d.id in {ids[j] for j in np.argsort(-s)[:K]}
                        either += hit
                    counts[(label, kind)] = either / len(members)
            print(f"{name}, lead_words {lead_words}, {retriever}: " + "; ".join(f"{lab} / {kind}: {v:.2f}" for (lab, kind), v in counts.items()),
                  flush=True)

    on_both_corpora(study)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("replay", help="stored decoy probes against the padded shadow's retrieval")
    rp.add_argument("study_json")
    rp.add_argument("wording")
    sub.add_parser("leads", help="what goes before the quote, on the padded shadow and on AG News")
    sub.add_parser("cited", help="Cited sources' two questions, with and without leading documents")
    lx = sub.add_parser("cited-lexical", help="Cited sources' questions against a TF-IDF retriever")
    lx.add_argument("--lead-words", default="20,80",
                    help="comma-separated values of the method's lead_words (default: its former and its current default)")
    args = ap.parse_args(argv)
    if args.cmd == "replay":
        replay(args.study_json, args.wording)
    elif args.cmd == "cited":
        cited()
    elif args.cmd == "cited-lexical":
        cited_lexical([int(w) for w in args.lead_words.split(",")])
    else:
        leads()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
