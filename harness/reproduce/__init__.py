"""``archsearch reproduce``: the papers' comparisons as ordinary studies (spec -> grid search -> store).

``coatnet-layouts``: ViT-REL, C-C-C-C, C-C-C-T, C-C-T-T, C-T-T-T matched in parameters (and, but for
ViT-REL, FLOPs), same data and budget, several seeds, under the paper's two protocols:

* generalisation: no augmentation, no regularisation; validation accuracy read at a training loss
  fixed in advance (eval mode, BatchNorm recalibrated, on log-loss);
* capacity: three times the data, no regularisation; compare the final training loss.

``cait-depth`` (depth x residual scheme on the DeiT baseline), ``cait-class-attention`` (the SA/CA
split) and ``cait-residual-schemes`` (CaiT Table 1's columns) run the same way. Each study's protocol
is pre-registered (:class:`Protocol`) and printed first in its summary; each claim is a two-sided 5%
test (2.5% per direction) on per-seed differences, by the paired t-test and the sign-flip test,
Holm-corrected over the study's claims (never hard-coded).

Parts: :mod:`.studies` (protocols, claims, scales, the grid specs), :mod:`.registry` (the one
list of studies: name -> builder, scales, protocols; the recipe as it runs), :mod:`.analysis`
(runs table, metric, failures, verdicts), :mod:`.records` (the per-seed runs file and the verdicts
file beside each summary, and the verdicts recomputed from them), :mod:`.summary` (Markdown and
figures), :mod:`.planning` (``--plan``), :mod:`.run` (run or resume, then write).
"""

from typing import Any

from trials.lazy import lazy_import

# Names re-exported here, each from its module. The modules are bound with lazy_import (the one way a
# heavy import is deferred) and a name is looked up in its module on first use (PEP 562's module
# __getattr__ only forwards): the CLI reads the registry at start-up without importing pandas, scipy,
# matplotlib or torch.
_EXPORTS = {
    "PairOnTestSplit": "analysis",
    "StudyNumbers": "analysis",
    "VariantSummary": "analysis",
    "accuracy_at_level": "analysis",
    "pairs_on_test_split": "analysis",
    "summarize": "analysis",
    "summarize_runs": "analysis",
    "run_table": "analysis",
    "STUDIES": "registry",
    "plan": "registry",
    "recompute": "records",
    "recompute_test_pairs": "records",
    "seed_image_interval": "predictions",
    "finished_runs": "run",
    "running_sittings": "run",
    "reproduce": "run",
    "reproduce_coatnet_layouts": "run",
    "CAIT_SCALES": "studies",
    "LAYOUTS": "studies",
    "PAPER_CLAIMS": "studies",
    "PAPER_RANKING": "studies",
    "SCALES": "studies",
    "Protocol": "studies",
    "Run": "studies",
    "cait_class_attention_spec": "studies",
    "cait_depth_spec": "studies",
    "coatnet_layouts_spec": "studies",
    "default_seeds": "studies",
    "markdown_summary": "summary",
}
__all__ = sorted(_EXPORTS)
_MODULES = {
    "analysis": lazy_import("harness.reproduce.analysis"),
    "registry": lazy_import("harness.reproduce.registry"),
    "predictions": lazy_import("harness.reproduce.predictions"),
    "records": lazy_import("harness.reproduce.records"),
    "run": lazy_import("harness.reproduce.run"),
    "studies": lazy_import("harness.reproduce.studies"),
    "summary": lazy_import("harness.reproduce.summary"),
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_MODULES[_EXPORTS[name]], name)
