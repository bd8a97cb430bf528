"""FLOPs counted by fvcore on the real models: the papers' tables, and no uncounted matmul-like op."""

from __future__ import annotations

import pytest
import torch

from trials.measurement.flops import count_flops
from trials.models import build_model
from trials.models.paper_figures import paper_gflops


@pytest.mark.slow
@pytest.mark.parametrize(("name", "gflops"), paper_gflops().items())
def test_paper_presets_flops_within_2_percent(name, gflops):
    result = count_flops(build_model(name), torch.randn(1, 3, 224, 224))
    assert result.unsupported == {}
    assert result.total == pytest.approx(gflops * 1e9, rel=0.02)


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("cait_tiny32", {}),
        ("cait_tiny32", {"talking_heads": False, "layer_scale": "rezero"}),
        ("deit_tiny32", {}),
        *[("coatnet_tiny32", {"layout": layout}) for layout in ("CCCC", "CCCT", "CCTT", "CTTT", "TTTT", "VIT-REL")],
        ("coatnet_tiny32", {"mbconv_downsample": "depthwise"}),
    ],
)
def test_no_unsupported_ops_and_attention_is_counted(name, overrides):
    result = count_flops(build_model(name, **overrides), torch.randn(1, 3, 32, 32))
    assert result.unsupported == {}, result.unsupported
    if "CCCC" not in overrides.values():
        assert result.by_operator.get("scaled_dot_product_attention", 0) > 0


def test_attention_flops_match_the_formula():
    """SDPA handle: QK^T and AV, one multiply-add per FLOP: 2 * heads * N^2 * head_dim."""
    model = build_model("deit_tiny32", depth=1)
    result = count_flops(model, torch.randn(1, 3, 32, 32))
    tokens, dim = 65, 96
    assert result.by_operator["scaled_dot_product_attention"] == 2 * tokens * tokens * dim


def test_flops_scale_with_batch_size():
    model = build_model("coatnet_tiny32")
    one = count_flops(model, torch.randn(1, 3, 32, 32)).total
    assert count_flops(model, torch.randn(3, 3, 32, 32)).total == 3 * one
