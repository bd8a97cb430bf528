"""The one registry of reproductions: study name -> its builder, scales and protocols.

The CLI's choices, ``--plan``, the runs and the tests all read :data:`STUDIES`, so a study is added
in one place. :func:`plan` builds a study's grid studies and fills each protocol's ``recipe`` from
the spec as it will run (the trial config's resolved training and data settings, defaults
included), so the recipe a summary prints is the one the runs used, never a restatement of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from trials.configio import ConfigError
from trials.lazy import lazy_import

if TYPE_CHECKING:
    from harness.reproduce.studies import Run

# Loaded when a study is built: the registry itself is read by the CLI at start-up (torch-free).
studies = lazy_import("harness.reproduce.studies")
sampling = lazy_import("search_space.sampling")
validation = lazy_import("search_space.validation")
trial_config = lazy_import("trials.config.trial_config")
SCALES = ("tiny", "cpu", "small", "paper")  # every study has each (a test builds every one)
# The user's cluster (issue 48): ImageFolder data at 160 px, a learning-rate pilot, seeds from a power
# calculation (harness.reproduce.cluster_scale); a scale of the studies that list it, as any other.
CLUSTER_SCALES = ("imagenet",)


@dataclass(frozen=True)
class Study:
    """A reproduction: how to build one of its grid studies, at which scales, under which protocols.

    ``builder`` names the study's definition in :mod:`harness.reproduce.studies` (one per study, the
    scale its first parameter), imported when a study is built (the registry itself is read by the
    CLI at start-up, before torch is loaded).
    """

    name: str
    # (scale, [protocol,] seeds, dataset, data_dir) -> Run; at the CLUSTER_SCALES also (pilot, only) -> ClusterRun
    builder: str
    protocols: tuple[str, ...] = ()  # several protocols (coatnet-layouts): one grid study each
    about: str = ""
    scales: tuple[str, ...] = SCALES
    cluster_protocols: tuple[str, ...] = ()  # the protocols a cluster scale runs (default: all)

    def build(self, *args: Any) -> Run:
        return getattr(studies, self.builder)(*args)

    def runs(
        self,
        scale: str,
        seeds: int,
        protocols: tuple[str, ...],
        dataset: str,
        data_dir: str | None,
        pilot: dict[str, dict[str, float]] | None = None,
        only: tuple[str, ...] = (),
    ):
        if scale not in self.scales:
            raise ValueError(f"unknown scale {scale!r} for {self.name}; use one of {', '.join(self.scales)}")
        if scale in CLUSTER_SCALES:
            if not self.protocols:
                if protocols:
                    raise ValueError(f"--protocol {protocols[0]}: {self.name} has one protocol; leave --protocol out")
                return [self.build(scale, seeds, dataset, data_dir, pilot, only)]
            chosen = protocols or self.cluster_protocols or self.protocols
            return [self.build(scale, p, seeds, dataset, data_dir, pilot, only) for p in chosen]
        if not self.protocols:
            if protocols:
                raise ValueError(
                    f"--protocol {protocols[0]}: {self.name} has one protocol, not several; leave --protocol out"
                )
            return [self.build(scale, seeds, dataset, data_dir)]
        for protocol in protocols:
            if protocol not in self.protocols:
                raise ValueError(f"unknown protocol {protocol!r}; use {' or '.join(self.protocols)}")
        return [self.build(scale, p, seeds, dataset, data_dir) for p in protocols or self.protocols]


STUDIES: dict[str, Study] = {
    study.name: study
    for study in (
        Study(
            "coatnet-layouts",
            "coatnet_layouts_run",
            ("generalisation", "capacity"),
            "CoAtNet Fig. 1: VIT-REL, C-C-C-C, C-C-C-T, C-C-T-T, C-T-T-T matched in size",
            scales=SCALES + CLUSTER_SCALES,
            cluster_protocols=("generalisation",),  # capacity needs JFT-300M-scale data
        ),
        Study(
            "cait-depth",
            "cait_depth_run",
            (),
            "CaiT Table 1's question: depth x residual scheme",
            scales=SCALES + CLUSTER_SCALES,
        ),
        Study(
            "cait-class-attention",
            "cait_class_attention_run",
            (),
            "CaiT Table 3: the SA/CA split",
            scales=SCALES + CLUSTER_SCALES,
        ),
        Study(
            "cait-residual-schemes",
            "cait_residual_schemes_run",
            (),
            "CaiT Table 1's columns at depth",
            scales=SCALES + CLUSTER_SCALES,
        ),
        # Controls pre-registered on 2026-11-27 (issue 48), each its own study on fresh seeds, so the
        # committed studies above keep their protocols, claims and verdicts exactly as run.
        Study(
            "cait-init-control",
            "cait_init_control_run",
            (),
            "cait-residual-schemes' control: LayerScale and prenorm with T-Fixup's Xavier init",
            scales=SCALES + CLUSTER_SCALES,
        ),
        Study(
            "cait-depth-rezero-ln",
            "cait_depth_rezero_ln_run",
            (),
            "cait-depth's ReZero claim with CaiT's ReZero (LayerNorm kept)",
            scales=SCALES + CLUSTER_SCALES,
        ),
        Study(
            "cait-class-attention-matched",
            "cait_class_attention_matched_run",
            (),
            "CaiT Table 3 at equal parameters: 4+2 vs 6+0",
            scales=SCALES + CLUSTER_SCALES,
        ),
        # Controls pre-registered on 2026-11-29 (issue 59), before any of their runs, on seeds from 2000.
        Study(
            "cait-class-attention-blocks",
            "cait_class_attention_blocks_run",
            (),
            "CaiT Table 3 at equal blocks and parameters: 8+0 vs 6+2",
            scales=SCALES + CLUSTER_SCALES,
        ),
        Study(
            "cait-width-init",
            "cait_width_init_run",
            (),
            "LayerScale vs T-Fixup+LN at the base init across widths 64, 192, 384",
            scales=SCALES + CLUSTER_SCALES,
        ),
    )
}
SCALE_NAMES = tuple(dict.fromkeys(scale for study in STUDIES.values() for scale in study.scales))
PROTOCOL_NAMES = tuple(dict.fromkeys(p for study in STUDIES.values() for p in study.protocols))


def plan(
    study: str,
    scale: str,
    seeds: int,
    protocols: tuple[str, ...],
    dataset: str,
    data_dir: str | None,
    only: tuple[str, ...] = (),
    pilot: dict[str, dict[str, float]] | None = None,
) -> list[Run]:
    """Every grid study a reproduction needs, with its pre-registered protocol and its recipe;
    ``only``: those variants alone (``--only``, :func:`harness.reproduce.studies.select_variants`).
    ``pilot``: at a cluster scale, each learning-rate pilot's choice (pilot study name -> variant ->
    lr, :func:`harness.reproduce.run.pilot_step`); without it, the plan's placeholder lr."""
    if study not in STUDIES:
        raise ValueError(f"unknown study {study!r}; use one of {', '.join(STUDIES)}")
    if scale in CLUSTER_SCALES:  # the definition selects ``only`` itself there (its grid has an lr per variant)
        runs = STUDIES[study].runs(scale, seeds, tuple(protocols), dataset, data_dir, pilot, tuple(only))
    else:
        runs = STUDIES[study].runs(scale, seeds, tuple(protocols), dataset, data_dir)
        runs = [studies.select_variants(run, tuple(only)) for run in runs]
    return [
        replace(
            run,
            protocol=replace(
                run.protocol, recipe=_recipe_or_none(run.spec), variants=tuple(run.spec.get("variants") or ())
            ),
        )
        for run in runs
    ]


def _recipe_or_none(spec: dict[str, Any]) -> dict[str, Any]:
    """The recipe, or none for a spec that does not load: the run (and ``--plan``) refuses such a
    spec with its own checks, in their order (the study name first)."""
    try:
        return recipe(spec)
    except ConfigError:
        return {}


def recipe(spec: dict[str, Any]) -> dict[str, Any]:
    """The training recipe the study's trials run with: every value resolved as a trial resolves
    it (defaults included), from the spec's first grid point."""
    parsed = validation.load_spec(spec, check_paths=False)
    config = trial_config.load_trial_config(sampling.build_trial_config(parsed, sampling.grid_points(parsed)[0]))
    training, data = config.training, config.data
    augment = data.augment
    on = [
        name
        for name, active in (
            ("random crop", augment.random_crop),
            ("horizontal flip", augment.hflip),
            (f"RandAugment {augment.randaugment}", augment.randaugment is not None),
            (f"MixUp {augment.mixup_alpha:g}", augment.mixup_alpha > 0),
            (f"CutMix {augment.cutmix_alpha:g}", augment.cutmix_alpha > 0),
        )
        if active
    ]
    train_images = data.train_size if data.name in ("synthetic", "mnist5k") else None
    return {
        "lr": training.lr,
        "min_lr": training.min_lr,
        "schedule": "AdamW, linear warm-up then cosine decay to min_lr",
        "warmup_epochs": training.warmup_epochs if training.warmup_steps is None else None,
        "warmup_steps": training.warmup_steps,
        "weight_decay": training.weight_decay,
        "label_smoothing": training.label_smoothing,
        "grad_clip": training.grad_clip,
        "epochs": training.epochs,
        "batch_size": data.batch_size,
        "augmentation": ", ".join(on) or "none",
        "train_images": train_images,
        "image_size": data.resolved_image_size,
        "drop_path_rate": getattr(config.model, "drop_path_rate", None),
    }
