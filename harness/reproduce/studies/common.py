"""What every reproduction shares: the pre-registered :class:`Protocol`, the :class:`Run` a study
definition returns, the grid builder (:func:`grid_spec`), the study-name rule
(:func:`reproduction_study_name`), the data section, the parts of a grid, ``--only``'s subset
(:func:`select_variants`), and the constants of every study (seeds, margins, fresh seeds).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from trials.models import resolve_config

# Seeds per variant when --seeds is not given: cpu-scale studies at least 7. Verdicts rest on the
# paired t-test; the sign-flip p beside it cannot go below 1/2^n, and at 7 seeds its floor times
# Holm's five (1/128 x 5 = 0.039) clears a one-sided 5% but not the 2.5% per direction of the
# two-sided tests used here (that takes 8 seeds): it checks the t-test, it does not decide alone.
DEFAULT_SEEDS = {"tiny": 2, "cpu": 7, "small": 10, "paper": 3, "imagenet": 8}  # imagenet: the power calculation's
MARGIN = 1.0  # points of top-1 (or units of loss for the capacity protocol): '~' and '>=' margins
LARGE_MARGIN = 5.0  # points of top-1: what the paper's "much better" ('>>') needs here
DEFAULT_DATASET = "mnist5k"

# The controls pre-registered on 2026-11-27 (issue 48), after the committed runs' results (seeds 0-29) had
# been seen: their seeds start here, so no control shares a seed (a data split, an initial draw, a data
# order) with a run whose result was looked at. Each is its own study: its own claims, its own Holm
# family, its own store name, so the committed studies' protocols and verdicts stay exactly as run.
FRESH_SEEDS = 1000
PREREGISTERED_CONTROLS = "2026-11-27"
# Issue 59's controls, pre-registered on 2026-11-29 before any of their runs, on seeds no earlier run used.
SECOND_FRESH_SEEDS = 2000
PREREGISTERED_SECOND_CONTROLS = "2026-11-29"

# What makes a run a failure to learn (the CaiT depth study counts these, never averages them away).
FAILED_LOSS_FRACTION = 0.05  # final training loss within 5% of ln(classes): no better than guessing


@dataclass(frozen=True)
class Protocol:
    """What a study commits to before any result; printed at the top of its summary."""

    study: str  # the study's name in the store
    kind: str  # "generalisation", "capacity" or "accuracy"
    dataset: str
    image_size: int
    train_size: int | None
    epochs: int
    seeds: int
    lr: float
    metric: str  # how each run is scored, in words
    level: float | None  # generalisation: the training loss the accuracy is read at
    margin: float
    large_margin: float
    claims: tuple[tuple[str, str, str], ...]
    ranking: str  # the paper's ranking, for the reader
    notes: tuple[str, ...] = ()  # how the free choices were made
    failure_rule: str | None = None  # when a run counts as a failure to learn (cait-depth)
    gpus: float = 0.0
    more_seeds: dict[str, int] = field(default_factory=dict)  # variants run on more seeds than ``seeds``
    only: tuple[str, ...] = ()  # ``--only``: the variants this run has (empty: every variant)
    # The training recipe as it runs (every value a trial's config resolves to, defaults included):
    # filled from the study's spec by the registry (:mod:`harness.reproduce.registry`).
    recipe: dict[str, Any] = field(default_factory=dict)
    # Every variant the study runs (its spec's, after ``--only``): filled by the registry, and the only
    # names a runs file or the store's runs table may hold (empty: not known, nothing checked).
    variants: tuple[str, ...] = ()
    # The first seed: 0, or a fresh range no earlier run used (a control pre-registered after results of
    # the same variants were seen runs on seeds none of those runs had: ``FRESH_SEEDS``).
    first_seed: int = 0

    def seeds_of(self, variant: str) -> int:
        """How many seeds ``variant`` runs (seeds first_seed..first_seed+n-1)."""
        return self.more_seeds.get(variant, self.seeds)

    def seed_values(self, variant: str) -> range:
        """The seeds ``variant`` runs."""
        return range(self.first_seed, self.first_seed + self.seeds_of(variant))

    def fresh_seeds_text(self) -> str:
        """`` (seeds 1000-1006, fresh: ...)`` where the study starts past 0, else nothing."""
        if not self.first_seed:
            return ""
        last = self.first_seed + max([self.seeds, *self.more_seeds.values()]) - 1
        return f" (seeds {self.first_seed}-{last}, fresh: no committed run used them)"

    def seeds_text(self) -> str:
        """``7 seeds per variant`` or, with more for some, ``7-30 seeds per variant (CCTT, CTTT 30)``."""
        counts = [self.seeds_of(v) for v in self.only] if self.only else [self.seeds, *self.more_seeds.values()]
        low, high = min(counts), max(counts)
        if low == high:
            return f"{low} seeds per variant{self.fresh_seeds_text()}"
        more: dict[int, list[str]] = {}
        for variant, n in self.more_seeds.items():
            more.setdefault(n, []).append(variant)
        return f"{low}-{high} seeds per variant (" + "; ".join(f"{', '.join(v)} {n}" for n, v in more.items()) + ")"

    def more_seeds_note(self) -> str | None:
        """Why some variants run more seeds and what ``--seeds`` does to them (None: every variant runs
        ``seeds``). A pre-registered count is a floor: fewer seeds would run the claim it was
        computed for under-powered, and an inconclusive verdict there would read as evidence."""
        if not self.more_seeds:
            return None
        named = " and ".join(self.more_seeds)
        counts = "/".join(map(str, sorted(set(self.more_seeds.values()))))
        others = [v for v in (self.only or self.claim_variants()) if v not in self.more_seeds]
        rest = (
            f"--seeds sets the other variants' seeds ({self.seeds} here) and never lowers a pre-registered count"
            if others
            else "--seeds never lowers a pre-registered count"
        )
        leave_out = f"; --only {','.join(others)} runs the others without them" if others and not self.only else ""
        return (
            f"{named} {'runs' if len(self.more_seeds) == 1 else 'run'} {counts} seeds each, pre-registered for the "
            f"claims on them (the protocol's notes give the power calculation): {rest} (fewer would leave those "
            f"claims under-powered){leave_out}"
        )

    def claim_variants(self) -> list[str]:
        """Every variant the claims name, in the order they first appear."""
        return list(dict.fromkeys(v for claim in self.claims for v in claim_variants(claim)))

    @property
    def claims_run(self) -> tuple[tuple[str, str, str], ...]:
        """The claims whose both sides run (with ``--only``: those naming only variants it keeps)."""
        if not self.only:
            return self.claims
        return tuple(c for c in self.claims if set(claim_variants(c)) <= set(self.only))

    def selection_note(self) -> str | None:
        """What ``--only`` leaves out, in one line for the plan and the summary's deviations (None without it)."""
        if not self.only:
            return None
        run, left = self.claims_run, [c for c in self.claims if c not in self.claims_run]
        shown = "; ".join(" ".join(c) for c in run) or "none"
        return (
            f"--only {', '.join(self.only)}: these variants alone run; the verdicts cover the claims both of whose "
            f"sides ran ({shown}), the other {len(left)} of the {len(self.claims)} pre-registered are not "
            f"tested, and Holm's correction still counts all {len(self.claims)} (those not run at p = 1)"
        )

    @property
    def higher_is_better(self) -> bool:
        return self.kind != "capacity"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["claims"] = [" ".join(c) for c in self.claims]
        out["only"] = list(self.only)
        out["variants"] = list(self.variants)
        out["claims_run"] = [" ".join(c) for c in self.claims_run]
        return out

    def markdown(self) -> list[str]:
        """The pre-registration block: everything fixed before the runs."""
        claims = "; ".join(" ".join(c) for c in self.claims)
        lines = [
            "## Protocol (pre-registered: fixed in `harness/reproduce/studies.py` before any run)",
            "",
            f"- Data: `{self.dataset}` at {self.image_size} px, {self.train_size or 'all'} training images; "
            "validation held out per seed for every per-epoch number, the test split (where the dataset has "
            "one) evaluated once, at the end of each run.",
            f"- Budget: {self.epochs} epochs, learning rate {self.lr:g}; {self.seeds} seeds per variant"
            + self.fresh_seeds_text()
            + "".join(f", {variant} {n}" for variant, n in self.more_seeds.items())
            + ", every variant on the same seeds (same split and data order), so differences are paired by "
            "seed.",
            f"- Metric: {self.metric}.",
        ]
        if self.recipe:
            shown = ", ".join(f"{key} {value}" for key, value in self.recipe.items() if value is not None)
            lines.append(f"- Recipe (every value as the runs resolve it, defaults included): {shown}.")
        if self.level is not None:
            lines.append(
                f"- Comparison level: training loss {self.level:g}, measured in eval mode on the un-augmented "
                "training split after recalibrating BatchNorm, accuracy interpolated on log-loss between the "
                "epochs around it; a run that never reaches it is reported as such, never clamped."
            )
        if self.failure_rule:
            lines.append(f"- Failure to learn: {self.failure_rule}; counted per variant, compared by Fisher's "
                         "exact test, left out of the means.")  # fmt: skip
        lines += [
            f"- Claims (the family Holm's correction runs over): {claims}.",
            f"- Margins: `~` and `>=` +-{self.margin:g}, `>>` {self.large_margin:g}"
            + (" points of top-1." if self.higher_is_better else " (units of loss)."),
            *(f"- {note}" for note in self.notes),
        ]
        return lines


@dataclass(frozen=True)
class Run:
    """One grid study a reproduction needs: its spec and its protocol.

    ``parts``: the specs actually run, when the grid is split into parts that each fit one sitting
    (each part its own grid study, named ``<name>-partK``, resumed or skipped on its own); empty:
    the spec itself is run. The summary pools every part's runs (paired by seed).
    """

    spec: dict[str, Any]
    protocol: Protocol
    variant_models: dict[str, Any] = field(default_factory=dict)  # variant -> resolved model config
    parts: tuple[dict[str, Any], ...] = ()

    @property
    def run_specs(self) -> tuple[dict[str, Any], ...]:
        """The grid studies to run, in order: the parts, or the whole spec."""
        return self.parts or (self.spec,)


def claim_variants(claim: tuple[str, str, str]) -> list[str]:
    """The variants a claim names: ``A > B`` two, an interaction ``A - B > C - D`` four."""
    a, _, b = claim
    return [part.strip() for side in (a, b) for part in side.split(" - ")]


MAX_NAME = 128  # a study name's longest (harness.search.cluster.ray_setup.STUDY_NAME_PATTERN)


def subset_name(name: str, variants: list[str]) -> str:
    """The grid study of ``name``'s ``variants`` alone: ``<name>-only-CCTT_CTTT`` (each variant's name
    with anything but letters, digits and '-' as '-'), or ``<name>-only-<hash>`` where that is too long
    for a study name. Its own name: it never mixes with the whole study's runs in a store, and its
    summary never overwrites the whole study's."""
    tag = "_".join(re.sub(r"[^A-Za-z0-9-]+", "-", v).strip("-") or "v" for v in variants)
    named = f"{name}-only-{tag}"
    if len(named) <= MAX_NAME:
        return named
    return f"{name}-only-{hashlib.sha256(chr(0).join(variants).encode()).hexdigest()[:12]}"


def select_variants(run: Run, only: tuple[str, ...]) -> Run:
    """``run`` with only the variants ``only`` names (``--only``): its own grid study
    (:func:`subset_name`), each variant on the seeds the protocol gives it, the protocol recording
    the selection (its claims stay the registered family: the verdicts cover those whose both sides
    run, Holm counts them all). A registered part of the grid is kept, under its own name, where the
    selection is a union of whole parts (``--only CCTT,CTTT`` at ``cpu``: the named pair's two parts,
    shared with the whole study's run); otherwise the selection runs as one grid study."""
    if not only:
        return run
    variants = run.spec["variants"]
    for name in only:
        if name not in variants:
            raise ValueError(
                f"--only {name}: {run.protocol.study} has no variant {name!r}; its variants: {', '.join(variants)}"
            )
    chosen = [v for v in variants if v in only]  # the registered order
    protocol = run.protocol
    more = {v: n for v, n in protocol.more_seeds.items() if v in chosen}
    name = subset_name(run.spec["name"], chosen)
    search = run.spec["search"]
    spec = grid_spec(
        name,
        family=run.spec["family"],
        base_model=run.spec["base_model"],
        data=run.spec["data"],
        training=run.spec["training"],
        variants={v: variants[v] for v in chosen},
        seeds=protocol.seeds,
        objectives=run.spec["objectives"],
        gpus=(search.get("resources") or {}).get("gpus", 0.0),
        more_seeds=more,
        first_seed=protocol.first_seed,
    )
    points = {(v, s) for v in chosen for s in protocol.seed_values(v)}
    parts = []
    for part in run.parts:
        part_variants = set(part["params"]["variant"]["choice"])
        if part_variants <= set(chosen):
            parts.append(part)
        elif part_variants & set(chosen):  # a part cut in two: the selection runs as one grid study
            parts = []
            break
    covered = [(v, s) for part in parts for v in part["params"]["variant"]["choice"]
               for s in part["params"]["seed"]["choice"]]  # fmt: skip
    if sorted(covered) != sorted(points):
        parts = []
    selected = replace(protocol, study=name, more_seeds=more, only=tuple(chosen))
    models = {v: m for v, m in run.variant_models.items() if v in chosen}
    return Run(spec, selected, models, tuple(parts))


def default_seeds(scale: str) -> int:
    """Seeds per variant at ``scale`` when none are asked for."""
    return DEFAULT_SEEDS.get(scale, 7)


def reproduction_study_name(prefix: str, scale: str, dataset: str) -> str:
    """A reproduction's study name: its prefix, the scale, and the dataset unless synthetic (every scale's rule)."""
    return f"{prefix}-{scale}" + ("" if dataset == "synthetic" else f"-{dataset}")


def data_section(
    dataset: str, data_dir: str | None, settings: dict[str, Any], *, train_size: int | None, image_size: int | None
) -> dict[str, Any]:
    """The spec's ``data`` section: sizes for synthetic and mnist5k, digits' own batch size, no augmentation."""
    data: dict[str, Any] = {"name": dataset, "batch_size": settings.get("batch_size", 64)}
    if data_dir:
        data["data_dir"] = data_dir
    if image_size is not None:
        data["image_size"] = image_size
    if dataset == "synthetic" and train_size:
        data.update(num_classes=10, train_size=train_size, val_size=settings["val_size"])
    if dataset == "mnist5k" and train_size:
        data["train_size"] = train_size
    if dataset == "digits":
        data["batch_size"] = 32  # 1,437 training images
    data["augment"] = {"random_crop": False, "hflip": False}  # digits are not mirror-symmetric; no regularisation
    return data


def grid_parts(
    whole: dict[str, Any], parts: tuple[tuple[tuple[str, ...], range], ...], expected: set[tuple[str, int]]
) -> tuple[dict[str, Any], ...]:
    """The whole grid's parts, each a plain grid study of some variants x some seeds; together they
    must be exactly the whole grid's points (checked: a part may not add or drop a run)."""
    specs, covered = [], []
    for index, (variants, seeds) in enumerate(parts, start=1):
        spec = {**whole, "name": f"{whole['name']}-part{index}"}
        spec["params"] = {"variant": {"choice": list(variants)}, "seed": {"choice": list(seeds)}}
        spec["search"] = {k: v for k, v in whole["search"].items() if k != "grid"}
        spec["search"]["n_trials"] = len(variants) * len(seeds)
        specs.append(spec)
        covered += [(v, s) for v in variants for s in seeds]
    if len(covered) != len(set(covered)) or set(covered) != expected:
        raise ValueError(f"the parts of {whole['name']} do not cover its grid exactly once")
    return tuple(specs)


def grid_spec(
    name: str,
    *,
    family: str,
    base_model: dict[str, Any] | str,
    data: dict[str, Any],
    training: dict[str, Any],
    variants: dict[str, dict[str, Any]],
    seeds: int,
    objectives: dict[str, str],
    gpus: float = 0.0,
    more_seeds: dict[str, int] | None = None,
    first_seed: int = 0,
) -> dict[str, Any]:
    """A reproduction as an ordinary grid study: every variant x every seed, two at a time.

    ``more_seeds``: variants run on more seeds than the rest (seeds 0..N-1, so the first ``seeds``
    stay paired with every other variant): the grid is then a union of two sub-grids. ``first_seed``:
    the seeds start there instead of 0 (fresh seeds, ``FRESH_SEEDS``).
    """
    more = {v: n for v, n in (more_seeds or {}).items() if n > seeds}
    unknown = sorted(set(more) - set(variants))
    if unknown:
        raise ValueError(f"more seeds for {', '.join(unknown)}, which the study has no variant of")
    runs = len(variants) * seeds + sum(n - seeds for n in more.values())
    search: dict[str, Any] = {"sampler": "grid", "n_trials": runs, "concurrency": 2, "seed": 0}
    if more:
        rest = [v for v in variants if v not in more]
        search["grid"] = ([{"variant": rest, "seed": list(range(first_seed, first_seed + seeds))}] if rest else []) + [
            {"variant": [v], "seed": list(range(first_seed, first_seed + n))} for v, n in more.items()
        ]
    if gpus:
        search["resources"] = {"cpus": 1, "gpus": gpus}
    return {
        "name": name,
        "family": family,
        "base_model": base_model,
        "data": data,
        "training": training,
        "measure": {"latency": False, "repeats": 2, "batch_size": 32},
        "variants": variants,
        "params": {
            "variant": {"choice": list(variants)},
            "seed": {"choice": list(range(first_seed, first_seed + max([seeds, *more.values()])))},
        },
        "objectives": objectives,
        "search": search,
    }


def variant_config(run: Run, name: str) -> Any:
    """A variant's model config as its trials build it: its matched model, or the base model with the
    variant's values and the data's image size (``--plan`` and the cluster scale's cost read it)."""
    if name in run.variant_models:
        return run.variant_models[name]
    base = run.spec["base_model"]
    base = {"preset": base} if isinstance(base, str) else dict(base)
    image_size = run.spec["data"].get("image_size")
    overrides = {**run.spec["variants"][name], **({"image_size": image_size} if image_size else {})}
    return resolve_config({**base, **overrides})
