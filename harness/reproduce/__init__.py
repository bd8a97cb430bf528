"""``archsearch reproduce``: the papers' comparisons as ordinary studies (spec -> grid search -> store).

``coatnet-layouts``: ViT-REL, C-C-C-C, C-C-C-T, C-C-T-T, C-T-T-T matched in parameters (and, but for
ViT-REL, FLOPs), same data and budget, several seeds, under the paper's two protocols:

* generalisation: no augmentation, no regularisation; validation accuracy read at a training loss
  fixed in advance (eval mode, BatchNorm recalibrated, on log-loss);
* capacity: three times the data, no regularisation; compare the final training loss.

``cait-depth`` (depth x residual scheme on the DeiT baseline) and ``cait-class-attention`` (the SA/CA
split) run the same way. Each study's protocol is pre-registered (:class:`Protocol`) and printed
first in its summary; verdicts are one-sided tests on per-seed differences, Holm-corrected over the
study's claims (never hard-coded).

Parts: :mod:`.studies` (protocols, claims, scales, the grid specs), :mod:`.analysis` (metric,
failures, verdicts), :mod:`.summary` (Markdown and figures), :mod:`.planning` (``--plan``),
:mod:`.run` (run, then write).
"""

from harness.reproduce.analysis import StudyNumbers, VariantSummary, accuracy_at_level, summarize
from harness.reproduce.run import reproduce, reproduce_coatnet_layouts
from harness.reproduce.studies import (
    CAIT_SCALES,
    LAYOUTS,
    PAPER_CLAIMS,
    PAPER_RANKING,
    SCALES,
    Protocol,
    Run,
    cait_class_attention_spec,
    cait_depth_spec,
    coatnet_layouts_spec,
    default_seeds,
    plan,
)
from harness.reproduce.summary import markdown_summary

__all__ = [
    "CAIT_SCALES",
    "LAYOUTS",
    "PAPER_CLAIMS",
    "PAPER_RANKING",
    "SCALES",
    "Protocol",
    "Run",
    "StudyNumbers",
    "VariantSummary",
    "accuracy_at_level",
    "cait_class_attention_spec",
    "cait_depth_spec",
    "coatnet_layouts_spec",
    "default_seeds",
    "markdown_summary",
    "plan",
    "reproduce",
    "reproduce_coatnet_layouts",
    "summarize",
]
