"""``archsearch reproduce``: the papers' comparisons as ordinary studies (spec -> grid search -> store).

``coatnet-layouts``: ViT-REL, C-C-C-C, C-C-C-T, C-C-T-T, C-T-T-T at matched parameter counts,
same data and budget, several seeds, under the paper's two protocols:

* generalisation: no augmentation, no regularisation; compare evaluation accuracy at equal
  training loss (interpolated on each trial's learning curve at a loss every run reached);
* capacity: the largest data and longest budget of the scale; compare final training loss.

The summary states, for each ordering of the paper's Fig. 1, whether it holds here, from 95%
intervals over seeds (never hard-coded).

Parts: :mod:`.studies` (claims, scales, the grid specs), :mod:`.analysis` (metric, intervals,
verdicts), :mod:`.summary` (Markdown and figures), :mod:`.run` (run, then write).
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
    "markdown_summary",
    "plan",
    "reproduce",
    "reproduce_coatnet_layouts",
    "summarize",
]
