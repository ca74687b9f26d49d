"""Canaries tab: make a canary kit before publishing, and get the files to audit it later.

Thin: the kit, its texts and its files come from audit_core.evidence.canaries.
Kits are kept in the project's local cache (owner-only permissions); the seed
is never shown, uploaded or written anywhere else.
"""
from __future__ import annotations

import json

import streamlit as st


def _jsonl(docs) -> bytes:
    return "".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in docs).encode()


def render_canaries_tab() -> None:
    from audit_core.evidence.canaries import MIN_CANARIES, kits_dir, load_kit, new_kit, save_kit

    st.subheader("Canaries: evidence you can prepare before you publish")
    st.write(
        "A canary is a short, natural-looking text that exists nowhere else. Publish some canaries inside your "
        "posts or pages; keep their never-published siblings (made from the same secret seed) to yourself. "
        "If a RAG system later answers as if it knew your published canaries better than their siblings, that "
        "is evidence it ingested your publications, with a false-positive rate that holds by construction: "
        "which canaries were published was decided at random."
    )
    n = st.number_input("Canaries to publish", MIN_CANARIES, 200, 20, step=10, key="canary_n",
                        help="As many siblings stay unpublished. 20 or more lets a 5% false-positive rate be used.")
    if st.button("Make a new canary kit", key="canary_make"):
        kit = new_kit(int(n))
        save_kit(kit, kits_dir() / f"{kit.kit_id}.json")
        st.session_state["canary_kit"] = kit.kit_id
        st.session_state["canary_choice"] = kit.kit_id  # the keyed selectbox keeps its own choice otherwise
        st.success(f"Kit {kit.kit_id} saved on this computer. Its seed never leaves it.")

    kits = sorted(p.stem for p in kits_dir().glob("*.json"))
    if not kits:
        st.caption("No kit yet.")
        return
    current = st.session_state.get("canary_kit")
    chosen = st.selectbox("Kit", kits, index=kits.index(current) if current in kits else 0, key="canary_choice")
    try:
        kit = load_kit(kits_dir() / f"{chosen}.json")
    except ValueError as exc:
        st.error(str(exc))
        return
    published = kit.published()
    st.markdown(f"**To publish** ({len(published)} canaries): embed each one, unchanged, in something you publish.")
    st.text_area("Canaries to publish", "\n\n".join(d.text for d in published), height=220, key=f"pub_{chosen}")
    c1, c2 = st.columns(2)
    c1.download_button("Canaries to publish (.txt)", "\n\n".join(d.text for d in published).encode(),
                       file_name=f"canaries-{chosen}-publish.txt", key=f"dl_pub_{chosen}")
    c2.download_button("Audit files: canaries (.jsonl)", _jsonl(published),
                       file_name=f"canaries-{chosen}-documents.jsonl", key=f"dl_docs_{chosen}")
    st.markdown(
        "**To audit later**: in tab 1 choose *A canary kit* and this kit, then run the audit in tab 2. It probes "
        "the published canaries and their siblings the same way and tests one against the other. From the "
        "command line:\n\n"
        f"`./run cli canaries audit --kit {kits_dir() / (chosen + '.json')} --target URL --model MODEL`"
    )
    st.caption("Never publish the siblings: they are the controls. They are regenerated from the seed at "
               "audit time and are not shown here.")
