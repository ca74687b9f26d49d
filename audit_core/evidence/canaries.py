"""Canary kit: unique, natural-looking texts an owner embeds in what they publish.

Per-document membership inference cannot by itself prove use: its
false-positive rate depends on a counterfactual system nobody can observe
(Zhang, Das, Kamath, Tramer, SaTML 2025). Canaries can. Before publishing, the
owner generates 2n canaries from a secret seed; n of them, chosen at random by
the same seed, are embedded in the publications, the other n (their siblings)
are never shown to anyone. Later, an audit probes both sets the same way.

* If the target never ingested the canaries, the published ones and their
  siblings are exchangeable: same generator, independent draws, and which
  ones were published was decided at random. So the collection test of
  published against siblings (``evidence.collection``) has an exact p-value,
  and a per-canary call "member when its conformal p-value against the
  siblings is at most alpha" (``sibling_calls``) has a false-positive rate of
  at most alpha -- sound by construction, with no shadow involved.
* The seed never leaves the machine: the kit file holds it (written with
  owner-only permissions), every text is regenerated from it, and nothing
  here sends anything anywhere. Only the published canaries are meant to
  leave, inside the owner's own publications.

Texts are short stories of three sentences from templates and word lists,
drawn with a random generator keyed by HMAC-SHA256(seed, index): deterministic
for a seed, unrelated across seeds, and each carries an invented surname and
numbers, so a canary is unique and its words are unpredictable unless the
system has seen it (what S-RAG's hard-word probes and MBA's masks look for).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import json
import os
import random
import re
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from audit_core.documents import Document

_FIRST_F = ("Mireille", "Ingrid", "Oona", "Leontine", "Marisol", "Hedda", "Solveig", "Annika", "Ilse", "Renata",
            "Philippa", "Liesel", "Wilhelmina", "Ottilie", "Zofia")
_FIRST_M = ("Tobias", "Rafael", "Casimir", "Anselm", "Dorian", "Joaquim", "Cyprian", "Bertrand", "Matthias", "Emeric",
            "Gideon", "Octavio", "Ambrose", "Florian", "Lucian")
_SYL_A = ("Tov", "Ravel", "Brann", "Keld", "Mor", "Ash", "Dun", "Vell", "Orm", "Quist", "Hal", "Sten", "Fenn",
          "Corv", "Lund", "Mar", "Esk", "Wyn", "Tarr", "Beck")
_SYL_B = ("arek", "stok", "wick", "holm", "ender", "ery", "adine", "berg", "ovic", "mere", "sand", "ley", "ard",
          "otti", "ström", "ival", "augh", "ette", "inger", "oway")
_TOWN = ("Caldmoor", "Lindqvist Harbor", "East Wrenfield", "Port Aveline", "Haverstock", "Saltmarsh Cross",
         "Upper Dunmere", "Kestrel Bay", "Oakhollow", "Brindlemouth", "Marrowgate", "Fennick Falls", "Ashby Vale",
         "Greywater", "Thornbury Mill", "Colwen", "Redlake", "Hollin Ford", "Westmarch", "Pellham Quay")
_STREET = ("Juniper Lane", "Cobbler's Row", "Mill Street", "Quarry Road", "Lantern Walk", "Orchard Close",
           "Tannery Lane", "Bellfounder Street", "Heron Way", "Chapel Yard", "Ropewalk", "Saddler's Court")
_PLACE = ("bakery", "bicycle repair shop", "bookbinding studio", "tea room", "pottery workshop", "music school",
          "seed library", "clock repair shop", "framing gallery", "community darkroom", "violin workshop",
          "map shop", "cheese cellar", "weaving studio")
_OBJECT = ("copper kettles", "brass compasses", "hand-painted tiles", "glass fishing floats", "tin soldiers",
           "pressed ferns", "pocket watches", "wooden spoons", "enamel badges", "paper lanterns",
           "clay whistles", "silk bookmarks", "pewter thimbles", "ship bottles")
_KIN = ("grandfather", "grandmother", "aunt", "uncle", "mother", "father", "godmother", "older brother")
_JOB = ("ferryman", "lighthouse keeper", "beekeeper", "stonemason", "cartographer", "organ tuner", "blacksmith",
        "postmistress", "bell ringer", "harbor pilot", "schoolteacher", "bookseller")
_FOOD = ("cardamom buns", "plum dumplings", "rye crackers", "lemon tarts", "walnut bread", "ginger biscuits",
         "apricot turnovers", "sesame rolls", "honey cake", "fig pastries")
_DAY = ("Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays", "Saturdays", "Sundays")
_MONTH = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
_COLOR = ("green", "blue", "yellow", "red", "grey", "white", "orange", "violet")
_ANIMAL = ("a three-legged cat", "an old sheepdog", "a pair of canaries", "a tortoise", "a grey parrot",
           "a lop-eared rabbit", "two ferrets", "a very loud goose")

_OPENERS = (
    "Last {month}, {name} opened a small {place} on {street} in {town}.",
    "In {year}, {name} took over the {place} at number {num2} {street}, {town}.",
    "{name} has run the {place} on {street} in {town} since the spring of {year}.",
    "Everyone in {town} knows {name}, who keeps the {place} behind the {color} door on {street}.",
)
_MIDDLES = (
    "{pron} still keeps {num} {objects} in the back room, one for every year {poss} {kin} worked as a {job}.",
    "Above the counter hang {num} {objects} that {poss} {kin}, once a {job}, collected on the coast.",
    "The shelves hold {num} {objects}, a habit {pron_l} picked up from {poss} {kin}, who was a {job} for decades.",
    "{pron} inherited {num} {objects} from {poss} {kin}, a retired {job}, and refuses to sell a single one.",
)
_CLOSERS = (
    "Neighbours say the {food} sell out before {hour} on {day}.",
    "On {day} {animal} sleeps in the window while the {food} cool on the sill.",
    "Regulars come on {day} for the {food}, which {pron_l} bakes from a recipe dated {year2}.",
    "{animal_cap} guards the door, and the {food} are free for anyone who can name the {job}'s old boat.",
)


#: generator 2 (session 60): the same draws, written grammatically. Generator 1 wrote "a organ tuner",
#: "two ferrets sleeps" and "the honey cake sell out" in about 18% of its canaries, which a reader (or a filter)
#: can spot; its templates stay as they were, since a kit regenerates the canaries it published with them.
_MIDDLES_2 = (
    "{pron} still keeps {num} {objects} in the back room, one for every year {poss} {kin} worked as {a_job}.",
    "Above the counter hang {num} {objects} that {poss} {kin}, once {a_job}, collected on the coast.",
    "The shelves hold {num} {objects}, a habit {pron_l} picked up from {poss} {kin}, who was {a_job} for decades.",
    "{pron} inherited {num} {objects} from {poss} {kin}, a retired {job}, and refuses to sell a single one.",
)
_CLOSERS_2 = (
    "Neighbours say the {food} {food_sell} out before {hour} on {day}.",
    "On {day} {animal} {animal_sleep} in the window while the {food} {food_cool} on the sill.",
    "Regulars come on {day} for the {food}, which {pron_l} bakes from a recipe dated {year2}.",
    "{animal_cap} {animal_guard} the door, and the {food} {food_be} free for anyone who can name the {job}'s old "
    "boat.",
)
#: the generator new kits use; a kit names its own (``CanaryKit.generator``), and kits saved before there was
#: more than one were made by "1"
GENERATOR = "2"
GENERATORS = ("1", "2")
#: the word lists' singular nouns (every other food and animal is plural)
_SINGULAR_FOOD = {"honey cake"}
_PLURAL_ANIMAL = {"two ferrets"}


def _rng(seed: str, label: str) -> random.Random:
    digest = hmac.new(bytes.fromhex(seed), label.encode(), hashlib.sha256).digest()
    return random.Random(int.from_bytes(digest, "big"))


def canary_text(seed: str, index: int, generator: str = "1") -> str:
    """The canary number ``index`` of a seed (deterministic) as ``generator`` writes it (``GENERATORS``).

    Both generators draw the same words in the same order; "2" writes them grammatically."""
    if generator not in GENERATORS:
        raise ValueError(f"canary generator {generator!r} is not one this version knows ({', '.join(GENERATORS)})")
    r = _rng(seed, f"canary:{index}")
    she = r.random() < 0.5
    animal = r.choice(_ANIMAL)
    slots = {
        "name": f"{r.choice(_FIRST_F if she else _FIRST_M)} {r.choice(_SYL_A)}{r.choice(_SYL_B)}",
        "month": r.choice(_MONTH), "place": r.choice(_PLACE), "street": r.choice(_STREET),
        "town": r.choice(_TOWN), "year": r.randint(1978, 2019), "year2": r.randint(1890, 1965),
        "num": r.randint(11, 97), "num2": r.randint(2, 140), "color": r.choice(_COLOR), "objects": r.choice(_OBJECT),
        "kin": r.choice(_KIN), "job": r.choice(_JOB), "food": r.choice(_FOOD), "day": r.choice(_DAY),
        "hour": r.choice(("nine", "ten", "eleven", "noon")), "animal": animal,
        "animal_cap": animal[0].upper() + animal[1:],
        "pron": "She" if she else "He", "pron_l": "she" if she else "he", "poss": "her" if she else "his",
    }
    if generator == "1":
        parts = (r.choice(_OPENERS), r.choice(_MIDDLES), r.choice(_CLOSERS))
        return " ".join(p.format(**slots) for p in parts)
    one_food, many_animals = slots["food"] in _SINGULAR_FOOD, animal in _PLURAL_ANIMAL
    slots.update(a_job=("an " if slots["job"][0] in "aeiou" else "a ") + slots["job"],
                 food_sell="sells" if one_food else "sell", food_cool="cools" if one_food else "cool",
                 food_be="is" if one_food else "are", animal_sleep="sleep" if many_animals else "sleeps",
                 animal_guard="guard" if many_animals else "guards")
    parts = (r.choice(_OPENERS), r.choice(_MIDDLES_2), r.choice(_CLOSERS_2))
    return " ".join(p.format(**slots) for p in parts)


#: the fewest canaries a kit makes: with fewer, even every canary found gives little evidence (the best
#: p-value of n published against n siblings is 1 / C(2n, n): 0.17 at n = 2), and each canary is called
#: at 5% only from 19 siblings on
MIN_CANARIES = 10
#: the most: each canary is a document to publish and to audit with its sibling (2n texts, each probed); more
#: is no audit anyone runs, and 10^11 filled the memory before a line was written
MAX_CANARIES = 10_000


@dataclass(frozen=True)
class CanaryKit:
    """A seed and how many canaries it makes: ``n`` to publish and ``n`` never-published siblings."""

    seed: str  # 32 hex digits; secret, stays on this machine
    n: int
    created: str = ""
    #: which ``canary_text`` generator wrote its canaries: a kit regenerates them with it at audit time (a kit
    #: file without one was made by "1": ``from_json``)
    generator: str = GENERATOR

    def __post_init__(self) -> None:
        # exactly what new_kit makes: an empty or short seed lets anyone with this code regenerate the
        # canaries and which were published; another spelling of it would give the kit another id
        if not (isinstance(self.seed, str) and re.fullmatch(r"[0-9a-f]{32}", self.seed)):
            raise ValueError("a canary kit's seed is 32 lowercase hex digits")
        if isinstance(self.n, bool) or not isinstance(self.n, int) or not 1 <= self.n <= MAX_CANARIES:
            raise ValueError(f"a canary kit needs a whole number of canaries to publish, from one to "
                             f"{MAX_CANARIES:,}")
        if self.generator not in GENERATORS:
            raise ValueError(f"it was made by canary generator {self.generator!r}, which this version of the "
                             f"auditor does not have ({', '.join(GENERATORS)}); audit it with the version that made it")

    @property
    def check(self) -> str:
        """A keyed digest of (seed, n), saved with the kit: an edited ``n`` would silently move published
        canaries among the never-published controls, so a kit whose check does not match is refused."""
        return hmac.new(bytes.fromhex(self.seed), f"kit-check:{self.n}".encode(), hashlib.sha256).hexdigest()[:16]

    @property
    def kit_id(self) -> str:
        """A public name for the kit that reveals nothing about the seed."""
        return hashlib.sha256(("kit-id:" + self.seed).encode()).hexdigest()[:12]

    def published_indices(self) -> list[int]:
        """Which n of the 2n canaries are published: a random subset chosen by the seed."""
        idx = list(range(2 * self.n))
        _rng(self.seed, "assignment").shuffle(idx)
        return sorted(idx[: self.n])

    def _docs(self, indices: Sequence[int]) -> list[Document]:
        return [Document(f"canary-{self.kit_id}-{i:04d}", canary_text(self.seed, i, self.generator))
                for i in indices]

    def published(self) -> list[Document]:
        """The canaries to embed in publications."""
        return self._docs(self.published_indices())

    def siblings(self) -> list[Document]:
        """The never-published siblings: the audit's controls. Never publish these."""
        pub = set(self.published_indices())
        return self._docs([i for i in range(2 * self.n) if i not in pub])

    def published_digest(self) -> str:
        """SHA-256 of the published canaries' texts, saved with the kit: a change in how the code writes them
        would otherwise audit texts that were never published, and find nothing."""
        return hashlib.sha256("\n\x00".join(d.text for d in self.published()).encode()).hexdigest()

    def to_json(self) -> dict:
        return asdict(self) | {"check": self.check, "published_sha256": self.published_digest()}

    @classmethod
    def from_json(cls, d: dict) -> "CanaryKit":
        """A saved kit; one whose ``check`` does not match its seed and n was edited and is refused
        (kits saved before the check existed have none and are read as they are), and so is one whose
        canaries this code no longer writes as they were published (``published_digest``; kits saved
        before it are read as generator 1 made them)."""
        kit = cls(seed=d["seed"], n=d["n"], created=d.get("created", ""), generator=d.get("generator", "1"))
        if "check" in d and d["check"] != kit.check:
            raise ValueError("its seed or number of canaries was changed after it was made")
        if "published_sha256" in d and d["published_sha256"] != kit.published_digest():
            raise ValueError("this version of the auditor writes its canaries otherwise than the version that made "
                             "it, so it would audit texts that were never published; audit it with that version")
        return kit


def new_kit(n: int = 20) -> CanaryKit:
    """A fresh kit with a random 128-bit seed."""
    return CanaryKit(secrets.token_hex(16), n, _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))


def save_kit(kit: CanaryKit, path: str | Path) -> Path:
    """Write the kit (its seed) readable by its owner only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(kit.to_json(), fh)
    os.chmod(path, 0o600)
    return path


def load_kit(path: str | Path) -> CanaryKit:
    try:
        return CanaryKit.from_json(json.loads(Path(path).read_text()))
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not a canary kit file ({e.__class__.__name__})") from None
    except ValueError as e:
        raise ValueError(f"{path} is not a usable canary kit: {e}") from None


def kits_dir() -> Path:
    """Where the app keeps kits: inside the project's local cache, never uploaded."""
    from audit_core.models import cache_dir

    d = cache_dir() / "canaries"
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    return d


def sibling_calls(canary_scores: Sequence[float | None], sibling_scores: Sequence[float | None],
                  fpr: float) -> list[tuple[float | None, bool | None]]:
    """Per published canary: (conformal p-value against the siblings, member at ``fpr``).

    ``None`` for a canary without a score. With fewer than 1/fpr - 1
    scored siblings no canary can be called at that rate (decision None).
    """
    from audit_core.evidence.calibration import conformal_p_value, is_score, min_nonmembers

    sib = np.asarray([float(s) for s in sibling_scores if is_score(s)], dtype=float)
    out: list[tuple[float | None, bool | None]] = []
    for s in canary_scores:
        if not is_score(s):
            out.append((None, None))
            continue
        p = conformal_p_value(float(s), sib)
        out.append((p, bool(p <= fpr) if len(sib) >= min_nonmembers(fpr) else None))
    return out


def document_calls(ids: Sequence[str], scores: Sequence[float | None], control_scores: Sequence[float | None],
                   fpr: float) -> dict:
    """The per-document block of an audit's collection result: each document's p-value against the
    controls, and how many are called members at ``fpr`` (None when the controls are too few for a call)."""
    calls = sibling_calls(scores, control_scores, fpr)
    decided = [c for _, c in calls if c is not None]
    return {"fpr": fpr, "document_p_values": {i: p for i, (p, _) in zip(ids, calls)},
            "called_members": sum(decided) if decided else None}
