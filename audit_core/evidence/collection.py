"""The collection-level test: are the owner's documents, together, more member-like than controls?

An owner usually asks about a collection ("were my posts used?"), and that
question has far more power than any single document (dataset inference,
Maini et al. 2024): small per-document shifts add up over many documents.

**The pre-registered statistic (one per run).** A one-sided two-sample
permutation test of "the owner's documents score higher than the controls"
(``top_weighted_test``) on the raw score of ONE method, chosen before any
audited score is seen by ``choose_method``: among the methods that ran on
this target and whose shadow validation passed the abstain rule, the one
whose shadow scores promise this test the most power for a quarter-member
collection of the given size (ties: the verdict's order, S-RAG, MBA, then the
baselines), else the first that ran. It is never the smallest p-value over
methods (that would inflate false positives by the number of methods).

The statistic is the sum, over the owner's documents, of
``log(1 - s + s * LR(x))``, where LR is the likelihood ratio member /
non-member of the score x as the method's shadow estimated it (the odds of
its Platt fit on out-of-fold shadow scores, over the shadow's prior odds) and s =
``MIXTURE_SHARE`` = 1/4 (``mixture_weights``). That is the log-likelihood
ratio of "a quarter of these documents are members" against "none are"; by
the Neyman-Pearson lemma, among permutation tests it is the most powerful
against that alternative when the shadow's LR is the target's. A RAG often
holds only part of a collection, and a quarter is the case the project's
evidence target names. Where the shadow's fit does not increase with the
score (a method without signal) the weights fall back to Savage (exponential)
scores, a rank statistic that also weighs the top of the ranking most.

Why a permutation test: its p-value is exact (all assignments, or a Monte
Carlo permutation p-value) whatever the scores' distribution and whether or
not the shadow's LR is right; a wrong LR costs power, never validity. Why
the LR rather than ranks alone: ranks throw away how far above the controls
a document scores. On the completion profile's held-out S-RAG scores
(BENCHMARKS.md, evidence) the power for 5 members among 20 documents against
20 controls went from 0.61-0.62 with Savage scores to 0.95 (quick shadow's
LR) and 0.99 (standard shadow's) on one draw (seed 3), and from 0.56 to 0.79
and 0.71 on a fresh draw (seed 4), the false-positive rate within 5% +-
a simulation's scatter throughout; with binormal scores at separation d = 3.1
(AUC 0.986) from 0.62 to 0.86, the true LR being known there. MBA, which
``choose_method`` picks on completion targets, reached 0.93 and 0.99 on the
same two draws (Savage 0.63 and 0.66). The reported effect size is the
Mann-Whitney U / (n m) (``u_test``): the probability that a random document
outscores a random control plus half the probability of a tie, 0.5 under the
null (MBA's accuracies tie often, so "outscores" alone would overstate it).

**Validity** needs only that, if none of the documents is in the target, the
documents' and controls' scores are exchangeable, which is what the controls
are for. Texts and probes are the other half of it: the chosen method asks
about each document before any other method does (``run_audit``), as it asks
about each control, so a target that caches or remembers what it was just
asked treats both alike. What is not alike is time: the controls are asked
after the documents, so a target that changes during the audit (a model or
knowledge base updated, a throttle that degrades its answers, a service that
learns from the queries it gets) can move them apart; the result states the
assumption. Controls, in order of strength (``CONTROL_KINDS``):

1. ``declared``: documents the owner declares were never published (a second
   upload, or a ``control`` column); as strong as that declaration.
2. ``canaries``: the canary audit (``evidence.canaries``): the published
   canaries against their never-published siblings from the same seed. Which
   sibling was published was decided at random, so exchangeability holds by
   construction and the p-value is exact (Zhang et al., SaTML 2025).
3. ``generated``: rewrites of the owner's own documents by a local model; they
   cannot be in the target, but a rewrite is not exchangeable with its
   original (style, length, wording), so this test carries that bias, which
   BENCHMARKS.md measures (``scripts/bench_generated_controls.py``) and the
   note states (``GENERATED_CONTROLS_BIAS``).

**Power** is what the test could detect at this size: the share of simulated
collections of the same n and m, drawn from the method's out-of-fold shadow
scores (documents from shadow members, controls from shadow non-members),
that reach p <= alpha -- for a collection of members, and for one in which a
quarter of the documents are members. Where the latter is below 0.9, the
result also says how many controls would raise it to 0.9 (``controls_for_power``):
controls are what an owner can add.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from audit_core.evidence.calibration import platt_log_odds

#: how strong each kind of control is, strongest first (module docstring)
CONTROL_KINDS: dict[str, str] = {
    "declared": "documents you declared were never published",
    "canaries": "never-published canary siblings from the same seed (random assignment: exact by construction)",
    "generated": "rewrites of your documents by a local model (weaker: a rewrite differs in style from its original)",
}
#: what BENCHMARKS.md measured of generated controls' bias (evidence section, session 14), said with every such test
GENERATED_CONTROLS_BIAS = (
    "measured bias of rewritten controls: on two benchmark draws (completion target, S-RAG), collections of "
    "20 documents that were NOT in the target, tested against their own rewrites, came out at p <= 0.05 in "
    "1.8% and 12.5% of cases, against the 5% a sound test allows; read a p-value near 0.05 from these "
    "controls as weak, and prefer never-published documents or canaries"
)
#: significance level of the collection test
ALPHA = 0.05
#: simulated collections per power estimate, and permutations per simulated test
N_SIM = 400
POWER_PERMUTATIONS = 999
#: the power a quarter-member collection should be found with; multiples of the owner's control count tried
TARGET_POWER = 0.9
CONTROL_MULTIPLES = (2, 3, 5)
#: the share of members the statistic is most powerful against (module docstring)
MIXTURE_SHARE = 0.25
#: bound on the Platt log-odds, so that one extreme score cannot overflow the weights
MAX_LOG_ODDS = 50.0


@dataclass
class CollectionResult:
    p_value: float | None
    statistic: float | None  # sum of the documents' weights (top_weighted_test; ``weights`` says which)
    effect_size: float | None  # U / (n m): P(a document outscores a control) + P(a tie) / 2
    n_documents: int
    n_controls: int
    power: float | None  # at alpha, if every document were a member
    controls_kind: str
    method: str | None
    note: str
    alpha: float = ALPHA
    power_quarter_members: float | None = None
    #: controls that would find a quarter-member collection with TARGET_POWER, and that power
    #: (None: already enough, or not reached at CONTROL_MULTIPLES times the controls given)
    controls_needed: int | None = None
    controls_needed_power: float | None = None
    #: "likelihood ratio" (the shadow's Platt fit) or "savage" (ranks: the fit does not increase with the score)
    weights: str = "savage"

    def to_json(self) -> dict:
        return asdict(self)


def _finite(xs: Sequence[float | None]) -> np.ndarray:
    from audit_core.evidence.calibration import is_score

    return np.asarray([float(x) for x in xs if is_score(x)], dtype=float)


#: permutations for a Monte Carlo p-value (p = (1 + #as extreme) / (R + 1) is valid for any R)
N_PERMUTATIONS = 9999
#: up to this many document/control assignments the p-value enumerates them all (exact)
EXACT_LIMIT = 20000


def u_test(documents: Sequence[float], controls: Sequence[float], seed: int = 0) -> tuple[float, float]:
    """One-sided Mann-Whitney U (documents greater): (U, p), valid in finite samples.

    Without ties the p-value is the exact null distribution of U; with ties
    (MBA's accuracies, saturated probabilities) a seeded permutation test of U.
    No normal approximation: at 20 against 20 it rejected a true null slightly
    more often than 5% in our simulation.
    """
    from scipy.stats import PermutationMethod, mannwhitneyu

    d, c = np.asarray(documents, dtype=float), np.asarray(controls, dtype=float)
    tied = len(np.unique(np.concatenate([d, c]))) < len(d) + len(c)
    how = PermutationMethod(n_resamples=N_PERMUTATIONS, rng=np.random.default_rng(seed)) if tied else "exact"
    res = mannwhitneyu(d, c, alternative="greater", method=how)
    return float(res.statistic), float(res.pvalue)


def u_statistic(documents: Sequence[float], controls: Sequence[float]) -> float:
    """Mann-Whitney's U of the documents over the controls (ties count a half), without a p-value: the
    collection test reports U / (n m) as its effect size. (``u_test``'s permutation p-value, which the test
    never read, held 9,999 resamples of N scores at once: 3 GB at 4,000 documents, session 55.)"""
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(np.asarray(documents, dtype=float), np.asarray(controls, dtype=float),
                              alternative="greater", method="asymptotic").statistic)


def savage_scores(pooled: np.ndarray) -> np.ndarray:
    """Exponential (Savage) scores of a pooled sample: the rank-r value from the top weighs sum_{j>=r} 1/j.

    The highest value gets 1 + 1/2 + ... + 1/N, the lowest 1/N; their mean is 1.
    Tied values share the mean of their scores.
    """
    from scipy.stats import rankdata

    N = len(pooled)
    by_rank = np.cumsum(1.0 / np.arange(N, 0, -1))  # ascending rank 1..N -> sum_{j=N-r+1}^{N} 1/j
    ordinal = rankdata(pooled, method="ordinal").astype(int)
    a = by_rank[ordinal - 1]
    _, groups = np.unique(pooled, return_inverse=True)
    means = np.bincount(groups, weights=a) / np.bincount(groups)
    return means[groups]


def weights_kind(platt: dict[str, float] | None) -> str:
    """"likelihood ratio" where the Platt fit makes a higher score more member-like, else "savage" (ranks)."""
    a, b = (float(platt.get(k, 0.0)) for k in ("a", "b")) if platt else (0.0, 0.0)
    increasing = math.isfinite(a) and a > 0 and math.isfinite(b)  # an infinite slope weighs with NaN
    return "likelihood ratio" if increasing else "savage"


def mixture_weights(pooled: np.ndarray, platt: dict[str, float], share: float = MIXTURE_SHARE) -> np.ndarray:
    """log(1 - share + share * LR(x)) per score, LR = the Platt fit's odds over the shadow's prior odds.

    Summed over the owner's documents this is the log-likelihood ratio of "a
    ``share`` of them are members" against "none are"; it is bounded below
    by log(1 - share), so a low-scoring document costs little, and grows
    like log LR for a clearly member-like one. The fit's odds are a posterior
    under the shadow's own member share (``fit_platt``'s ``prior_log_odds``,
    absent from fits stored before it: prior odds 1, a balanced shadow); a
    shadow that kept 40 usable members of 50 beside 50 non-members would
    otherwise weigh every document as if its LR were 0.8 times what it is.
    """
    z = platt_log_odds(pooled, platt) - float(platt.get("prior_log_odds", 0.0))
    z = np.clip(z, -MAX_LOG_ODDS, MAX_LOG_ODDS)
    return np.log1p(share * np.expm1(z))


def statistic_weights(pooled: np.ndarray, platt: dict[str, float] | None) -> tuple[np.ndarray, str]:
    """The pre-registered statistic's weights of a pooled sample, and which kind they are."""
    kind = weights_kind(platt)
    return (mixture_weights(pooled, platt) if kind == "likelihood ratio" else savage_scores(pooled)), kind


#: random numbers drawn at a time by the permutation test (``top_weighted_test``): 16 MB
PERMUTATION_BLOCK = 2_000_000


def top_weighted_test(documents: Sequence[float], controls: Sequence[float], seed: int = 0,
                      n_permutations: int | None = None,
                      platt: dict[str, float] | None = None) -> tuple[float, float]:
    """One-sided permutation test of the documents' summed weights (``statistic_weights``): (statistic, p).

    The p-value is exact (all assignments) when there are at most
    ``EXACT_LIMIT`` of them, else a seeded Monte Carlo permutation p-value
    (1 + #as large) / (R + 1), valid for any R. Tied scores get equal
    weights (mid-scores for Savage's).
    """
    from itertools import combinations
    from math import comb

    d, c = np.asarray(documents, dtype=float), np.asarray(controls, dtype=float)
    n, N = len(d), len(d) + len(c)
    a, _ = statistic_weights(np.concatenate([d, c]), platt)
    t = float(a[:n].sum())
    tol = 1e-9 * max(1.0, abs(t))
    if comb(N, n) <= EXACT_LIMIT and n_permutations is None:
        sums = np.array([a[list(ix)].sum() for ix in combinations(range(N), n)])
        return t, float(np.mean(sums >= t - tol))
    rng = np.random.default_rng(seed)
    R = n_permutations or N_PERMUTATIONS
    # in blocks of permutations: all R at once held R x N random numbers, their argsort and the gathered weights
    # (3.3 GB at 4,000 documents and 50 controls, session 55); the generator draws the same stream either way
    # A permutation's documents are the n smallest of N random keys. Only which n count, not their order: a
    # partition finds them in linear time where a sort took N log N (4,000 documents: 9 ms against 61 ms for 999
    # permutations), and on the smaller side (the m largest keys, the documents' sum being the total less
    # theirs) only m weights a permutation are gathered. The same keys give the same sets, so the same p-value.
    block, hits, total = max(1, PERMUTATION_BLOCK // N), 0, float(a.sum())
    for start in range(0, R, block):
        keys = rng.random((min(block, R - start), N))
        if n <= N - n:
            sums = a[np.argpartition(keys, n - 1, axis=1)[:, :n]].sum(axis=1)
        else:
            sums = total - a[np.argpartition(keys, n, axis=1)[:, n:]].sum(axis=1)
        hits += int(np.sum(sums >= t - tol))
    return t, float((1 + hits) / (R + 1))


#: the Platt fit under which a calibrated probability's log-odds weigh as its raw score did (a = 1, b = 0)
LOG_ODDS = {"a": 1.0, "b": 0.0}


def log_odds(probabilities: Sequence[float]) -> list[float]:
    """Calibrated probabilities -> the log-odds a * raw + b their shadow's Platt fit gave them.

    Benchmarks store each document's calibrated probability sigma(a * raw + b);
    weighed with ``LOG_ODDS``, its logit gives the test the same weights as the
    raw score with (a, b), without knowing which calibration it came from.
    """
    from scipy.special import logit

    return [float(logit(min(max(float(p), 1e-15), 1 - 1e-15))) for p in probabilities]


def simulated_power(member_raw: Sequence[float], nonmember_raw: Sequence[float], n: int, m: int,
                    member_share: float = 1.0, alpha: float = ALPHA, n_sim: int = N_SIM, seed: int = 0,
                    platt: dict[str, float] | None = None) -> float | None:
    """Share of simulated collections (n documents, m controls) the pre-registered test finds at p <= alpha.

    Documents are drawn from shadow member scores (a ``member_share`` of
    them; the rest from non-member scores), controls from non-member scores,
    with replacement; each collection goes through ``top_weighted_test``
    itself, with the same ``platt`` fit (and ``POWER_PERMUTATIONS``
    permutations, enough to tell p <= 0.05). Where there are no more
    assignments than that, every one is counted, as the test itself counts
    them: a Monte Carlo p-value of 3 documents against 3 controls, whose exact
    smallest p is 1/20, misses 0.05 half the time.
    """
    mem, non = _finite(member_raw), _finite(nonmember_raw)
    if n < 1 or m < 1 or len(mem) == 0 or len(non) == 0:
        return None
    permutations = None if math.comb(n + m, n) <= POWER_PERMUTATIONS + 1 else POWER_PERMUTATIONS
    rng = np.random.default_rng(seed)
    k = min(n, max(1, math.ceil(member_share * n - 1e-9)))  # "a quarter" of 2 is 1 member, not round()'s 0
    hits = 0
    for i in range(n_sim):
        docs = np.concatenate([rng.choice(mem, size=k), rng.choice(non, size=n - k)])
        ctl = rng.choice(non, size=m)
        hits += top_weighted_test(docs, ctl, seed=i, n_permutations=permutations, platt=platt)[1] <= alpha
    return hits / n_sim


def controls_for_power(member_raw: Sequence[float], nonmember_raw: Sequence[float], n: int, m: int,
                       share: float = 0.25, target: float = TARGET_POWER, alpha: float = ALPHA,
                       n_sim: int = N_SIM, seed: int = 0,
                       platt: dict[str, float] | None = None) -> tuple[int, float] | None:
    """The fewest controls among ``CONTROL_MULTIPLES`` x ``m`` with simulated power >= ``target``, and that power.

    None when none of them reaches it (the method's signal, not the controls, is then what limits the test).
    The largest is tried first, so a weak method costs one simulation.
    """
    most = CONTROL_MULTIPLES[-1] * m
    top = simulated_power(member_raw, nonmember_raw, n, most, share, alpha, n_sim, seed, platt)
    if top is None or top < target:
        return None
    for k in CONTROL_MULTIPLES[:-1]:
        power = simulated_power(member_raw, nonmember_raw, n, k * m, share, alpha, n_sim, seed, platt)
        if power >= target:
            return k * m, power
    return most, top


def collection_test(
    documents: Sequence[float | None],
    controls: Sequence[float | None],
    *,
    method: str | None,
    controls_kind: str,
    member_raw: Sequence[float] = (),
    nonmember_raw: Sequence[float] = (),
    platt: dict[str, float] | None = None,
    alpha: float = ALPHA,
    seed: int = 0,
    note: str = "",
) -> CollectionResult:
    """The owner's documents' scores against the controls' scores (module docstring).

    ``None`` scores (inconclusive documents) are left out and counted in the note.
    ``member_raw``, ``nonmember_raw`` and ``platt`` are the method's
    out-of-fold shadow scores and the Platt fit on them (its calibration's
    evidence): the fit gives the statistic its weights, the scores its power.
    """
    if controls_kind not in CONTROL_KINDS:
        raise ValueError(f"unknown kind of controls '{controls_kind}'; one of {', '.join(CONTROL_KINDS)}")
    d, c = _finite(documents), _finite(controls)
    dropped = (len(documents) - len(d)) + (len(controls) - len(c))
    weights = weights_kind(platt)
    from audit_core.methods import LABELS

    shown = LABELS.get(method, method)  # the note is read by the owner: "S-RAG", not "srag"
    notes = [(f"one-sided permutation test of the log-likelihood ratio of a {MIXTURE_SHARE:.0%}-member collection "
              f"(member odds of {shown}'s score from its shadow)" if weights != "savage" else
              f"one-sided Savage (top-weighted rank) permutation test on {shown}'s score (its shadow gives no "
              f"increasing member odds)") + f"; controls: {CONTROL_KINDS[controls_kind]}"]
    if controls_kind == "generated":
        notes.append(GENERATED_CONTROLS_BIAS)
    if dropped:
        notes.append(f"{dropped} inconclusive document(s) or control(s) left out")
    if note:
        notes.append(note)
    if len(d) < 2 or len(c) < 2:
        notes.append("too few scored documents or controls for a test (2 of each at least)")
        return CollectionResult(None, None, None, len(d), len(c), None, controls_kind, method, "; ".join(notes), alpha,
                                weights=weights)
    u = u_statistic(d, c)
    t, p = top_weighted_test(d, c, seed, platt=platt)
    power = simulated_power(member_raw, nonmember_raw, len(d), len(c), 1.0, alpha, seed=seed, platt=platt)
    quarter = simulated_power(member_raw, nonmember_raw, len(d), len(c), 0.25, alpha, seed=seed, platt=platt)
    needed = None
    if power is not None:
        notes.append(f"power at p <= {alpha:g} from the shadow's out-of-fold scores: {power:.2f} if every document "
                     f"were a member, {quarter:.2f} if a quarter were")
        if quarter < TARGET_POWER:
            needed = controls_for_power(member_raw, nonmember_raw, len(d), len(c), 0.25, TARGET_POWER, alpha,
                                        seed=seed, platt=platt)
            notes.append(f"with about {needed[0]} controls it would find a quarter-member collection with power "
                         f"{needed[1]:.2f}" if needed else
                         f"even {CONTROL_MULTIPLES[-1] * len(c)} controls would not find a quarter-member collection "
                         f"with power {TARGET_POWER:g}: the method's separation on the shadow limits it")
    return CollectionResult(p, t, u / (len(d) * len(c)), len(d), len(c), power, controls_kind, method,
                            "; ".join(notes), alpha, quarter, *(needed or (None, None)), weights=weights)


def choose_method(ran: Sequence[str], calibrations: dict, order: Sequence[str], n_documents: int = 20,
                  n_controls: int = 20) -> str | None:
    """The pre-registered method: the one whose shadow promises the test the most power, else the first that ran.

    Among the methods that ran and whose shadow showed signal, the one with
    the highest simulated power (``simulated_power`` from its out-of-fold
    shadow scores and Platt fit) for a quarter-member collection of this many
    documents and controls; ties go to the earlier in ``order``. Without any
    method with signal, the first that ran in ``order``. Depends on the
    shadows, on which methods the target allows and on how many documents and
    controls there are, never on an audited document's score. Without
    controls there is no test to give power to: the first that ran with
    signal, without the simulations (400 tests of N + 1 scores each: 32 s
    for 4,000 documents, session 55).
    """
    candidates = [m for m in order if m in ran] + [m for m in ran if m not in order]
    evidence = {m: (getattr(calibrations.get(m), "params", None) or {}).get("evidence") or {} for m in candidates}
    if n_controls <= 0:
        return next((m for m in candidates if evidence[m].get("signal")), candidates[0] if candidates else None)
    best, best_power = None, -1.0
    for m in candidates:
        ev = evidence[m]
        if not ev.get("signal"):
            continue
        power = simulated_power(ev.get("member_raw", ()), ev.get("nonmember_raw", ()), max(n_documents, 1),
                                max(n_controls, 1), 0.25, platt=ev.get("platt"))
        if (power or 0.0) > best_power:
            best, best_power = m, power or 0.0
    if best is not None:
        return best
    return candidates[0] if candidates else None


def raw_score(result) -> float | None:
    """The raw score a method decided from (its calibrated probability when no raw one was kept); None where
    there is none or it is not a finite number (a NaN sorts anywhere and would be counted as scored)."""
    if result is None or result.score is None:
        return None
    from audit_core.evidence.calibration import is_score

    raw = (result.evidence or {}).get("raw_score", result.score)
    return float(raw) if is_score(raw) else None
