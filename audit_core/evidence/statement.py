"""What an audit can and cannot show, in plain words, for the report and the JSON export."""
from __future__ import annotations


def what_this_shows(fpr: float | None, collection: dict | None) -> str:
    """The plain statement that goes with every result (the report shows it, the JSON keeps it)."""
    from audit_core.evidence.calibration import CLEAR_RULE

    rate = f"{fpr:.0%}" if fpr else "a stated rate"
    miss = f"{CLEAR_RULE.max_miss_rate:.0%}"
    parts = [
        f"Each 'member' call is made so that, among documents that are NOT in the target's knowledge base, "
        f"at most {rate} would be called members. That rate is set on a shadow RAG we built, so it holds for "
        "the target only as far as the target's answers to documents it does not hold resemble the shadow's; "
        "the benchmark measures how far that goes.",
        "'Not found' is not 'not used': a system can hold a document and still not retrieve it for our probes. "
        "A method's power is the share of the shadow's members it finds at that rate; a member it does not find "
        "is called 'not found' only where at most " f"{miss} of the shadow's members, counted with the document "
        "itself, score as low, and is otherwise "
        "inconclusive ('not cleared').",
        "Membership inference cannot by itself prove that a system used a document; it gives evidence whose "
        "false-positive rate is stated. The strongest evidence is a test of your whole collection against "
        "controls that were never published: canary siblings, for which the false-positive rate holds by "
        "construction (which canaries were published was decided at random), or documents you kept back, for "
        "which it holds as far as they resemble the documents you published. Either holds as long as the "
        "system does not change while it is audited (the controls are asked after your documents), and what "
        "it shows is that the system saw your publications: in its knowledge base, or in its model's training.",
    ]
    if collection and collection.get("leads_verdicts"):
        held = ("holds by construction on your own kind of text, since which canaries were published was decided "
                "at random" if collection.get("controls_kind") == "canaries" else
                "holds on your own kind of text as far as your controls are drawn like your documents and were "
                "truly never published")
        parts.insert(1, "In this audit your never-published controls set that rate instead of the shadow: each "
                        f"document's call against them leads its verdict, and there the rate {held}.")
    if collection and collection.get("p_value") is not None:
        parts.append(f"Your collection: p = {collection['p_value']:.2g} from {collection.get('n_documents')} "
                     f"documents against {collection.get('n_controls')} controls ({collection.get('controls_kind')}).")
    return " ".join(parts)


def power_phrase(collection: dict) -> str:
    """The test's power in words, "" where it is unknown.

    Both figures: the power if every document were a member reads as clearance
    beside a large p-value, while a collection of which only a quarter is held
    is found far less often, and that is the case an owner most often has.
    """
    full, quarter = collection.get("power"), collection.get("power_quarter_members")
    if full is None:
        return ""
    at = f"at p <= {collection.get('alpha', 0.05):g}"
    if quarter is None:
        return f"power {full:.2f} {at} if every document were a member"
    return f"power {at}: {full:.2f} if every document were a member, {quarter:.2f} if a quarter were"


def collection_sentence(collection: dict | None) -> str | None:
    """The collection-level conclusion in one line, shown before anything else (app, CLI); None without a test.

    "Your collection: member evidence p = 0.003, from 20 documents against 20
    controls (declared, S-RAG; effect size 0.81; power at p <= 0.05: 0.99 if every document were a member,
    0.62 if a quarter were)".
    Without a p-value the line says why there is none (the test's note).
    """
    if not collection:
        return None
    n, m = collection.get("n_documents", 0), collection.get("n_controls", 0)
    if collection.get("p_value") is None:
        note = collection.get("note") or "no controls were probed"
        return f"Your collection: no collection-level test ({note})."
    from audit_core.methods import LABELS

    method = collection.get("method")
    pw = power_phrase(collection)
    pw = f"; {pw}" if pw else ""
    eff = collection.get("effect_size")
    es = "" if eff is None else f"; effect size {eff:.2f}"
    return (f"Your collection: member evidence p = {collection['p_value']:.2g}, from {n} documents against {m} "
            f"controls ({collection.get('controls_kind')}, {LABELS.get(method, method)}{es}{pw})."
            + per_document_sentence(collection))


def collection_note(collection: dict | None) -> str | None:
    """The test's note (its power, the controls it would take, the bias of rewritten controls) to show under
    ``collection_sentence``, or None where there is none or the sentence already says it (without a p-value
    the sentence is the note: printed again, "no controls were given ..." came twice)."""
    note = (collection or {}).get("note")
    if not note or note in (collection_sentence(collection) or ""):
        return None
    return str(note)


def per_document_sentence(collection: dict) -> str:
    """Each document against the controls alone (``audit.collection_summary``), as a clause; "" without p-values.

    A document is called a member when its conformal p-value against the
    controls is at most the audit's rate. With controls drawn like the
    documents (kept back, or canary siblings) the rate holds by construction
    on the owner's own kind of text, where the shadow's thresholds hold only
    as far as the shadow resembles the target; rewritten controls carry the
    bias the collection note states.
    """
    from audit_core.evidence.calibration import min_nonmembers

    pv = [p for p in (collection.get("document_p_values") or {}).values() if p is not None]
    if not pv:
        return ""
    fpr = collection.get("fpr") or 0.05
    called = collection.get("called_members")
    if called is None:
        return (f" No document can be called a member against the controls alone at {fpr:.0%}: that needs at "
                f"least {min_nonmembers(fpr)} scored controls.")
    kind = collection.get("controls_kind")
    basis = {"canaries": "a rate that holds by construction: which canaries were published was decided at random",
             "generated": "rewritten controls are biased, as the note says",
             }.get(kind, "a rate that holds as far as the controls are drawn like the documents")
    leads = ("; these calls lead the verdicts, and another method's call on its own shadow decides only a "
             "document the controls' method could not score" if collection.get("leads_verdicts") else "")
    return (f" Against the controls alone, {called} of {len(pv)} documents are called members at {fpr:.0%} "
            f"(each one's p-value against the controls; {basis}{leads}).")
