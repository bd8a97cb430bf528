"""The reproductions' studies, pre-registered: each one's protocol is fixed here, before any result.

One module per reproduction, each exporting one definition, ``<study>_run(scale, ...) -> Run``, built
from the public grid builder (:func:`~.common.grid_spec`); the scale (tiny, cpu, small, paper and,
where the registry lists it, imagenet) is a parameter of that definition:

* :mod:`.coatnet_layouts`: CoAtNet Fig. 1 (ViT-REL, C-C-C-C, C-C-C-T, C-C-T-T, C-T-T-T under the
  generalisation and capacity protocols);
* :mod:`.cait_depth`: CaiT Table 1's question (depth x residual scheme on the DeiT baseline);
* :mod:`.cait_class_attention`: the SA/CA split (Table 3);
* :mod:`.cait_residual_schemes`: Table 1's columns at depth;
* issue 48's controls, pre-registered 2026-11-27 on fresh seeds: :mod:`.cait_init_control`,
  :mod:`.cait_depth_rezero_ln`, :mod:`.cait_class_attention_matched`; issue 59's
  :mod:`.cait_class_attention_blocks`, :mod:`.cait_width_init`.

Each is an ordinary grid study over variants x seeds, so it runs, resumes and is stored like any
search. A :class:`Protocol` (:mod:`.common`, with :class:`Run`, the grid builder, the study-name rule
and ``--only``'s subset) says what the study commits to (data, resolution, budget, seeds, the
comparison level, claims and margins, the family Holm corrects over, and how the free choices were
made); the summary prints it first. :mod:`.cait_common` holds what the CaiT studies share.
"""

from __future__ import annotations

from typing import Any

from .cait_class_attention import cait_class_attention_run
from .cait_class_attention_blocks import cait_class_attention_blocks_run
from .cait_class_attention_matched import cait_class_attention_matched_run
from .cait_common import ADJUSTED_DROP_PATH, CAIT_SCALES, RENORMALISED_SCHEMES, TABLE_1_SCHEMES
from .cait_depth import cait_depth_run
from .cait_depth_rezero_ln import cait_depth_rezero_ln_run
from .cait_init_control import cait_init_control_run
from .cait_residual_schemes import cait_residual_schemes_run
from .cait_width_init import cait_width_init_run
from .coatnet_layouts import LAYOUTS, PAPER_CLAIMS, PAPER_RANKING, SCALES, coatnet_layouts_run
from .common import (
    DEFAULT_DATASET,
    DEFAULT_SEEDS,
    FAILED_LOSS_FRACTION,
    FRESH_SEEDS,
    LARGE_MARGIN,
    MARGIN,
    MAX_NAME,
    PREREGISTERED_CONTROLS,
    Protocol,
    Run,
    claim_variants,
    data_section,
    default_seeds,
    grid_parts,
    grid_spec,
    reproduction_study_name,
    select_variants,
    subset_name,
    variant_config,
)

__all__ = [
    "ADJUSTED_DROP_PATH",
    "CAIT_SCALES",
    "DEFAULT_DATASET",
    "DEFAULT_SEEDS",
    "FAILED_LOSS_FRACTION",
    "FRESH_SEEDS",
    "LARGE_MARGIN",
    "LAYOUTS",
    "MARGIN",
    "MAX_NAME",
    "PAPER_CLAIMS",
    "PAPER_RANKING",
    "PREREGISTERED_CONTROLS",
    "RENORMALISED_SCHEMES",
    "SCALES",
    "TABLE_1_SCHEMES",
    "Protocol",
    "Run",
    "cait_class_attention_blocks_run",
    "cait_class_attention_matched_run",
    "cait_class_attention_run",
    "cait_class_attention_spec",
    "cait_depth_rezero_ln_run",
    "cait_depth_run",
    "cait_depth_spec",
    "cait_init_control_run",
    "cait_residual_schemes_run",
    "cait_width_init_run",
    "claim_variants",
    "coatnet_layouts_run",
    "coatnet_layouts_spec",
    "data_section",
    "default_seeds",
    "grid_parts",
    "grid_spec",
    "reproduction_study_name",
    "select_variants",
    "subset_name",
    "variant_config",
]


# The (spec, claims, ranking) views of three definitions, as harness.reproduce exports them.
def coatnet_layouts_spec(
    scale: str, protocol: str, seeds: int, dataset: str = DEFAULT_DATASET, data_dir: str | None = None
) -> dict[str, Any]:
    """The grid-search spec of one protocol of the layout study (see :func:`coatnet_layouts_run`)."""
    return coatnet_layouts_run(scale, protocol, seeds, dataset, data_dir).spec


def cait_depth_spec(scale: str, seeds: int, dataset: str = DEFAULT_DATASET, data_dir: str | None = None):
    """(spec, claims, paper ranking) of the depth study (see :func:`cait_depth_run`)."""
    run = cait_depth_run(scale, seeds, dataset, data_dir)
    return run.spec, list(run.protocol.claims), run.protocol.ranking


def cait_class_attention_spec(scale: str, seeds: int, dataset: str = DEFAULT_DATASET, data_dir: str | None = None):
    """(spec, claims, paper ranking) of the SA/CA split study (see :func:`cait_class_attention_run`)."""
    run = cait_class_attention_run(scale, seeds, dataset, data_dir)
    return run.spec, list(run.protocol.claims), run.protocol.ranking
