"""Model families: sizes against the papers, and behaviour (not only shapes)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from trials.measurement.flops import count_flops
from trials.models import PRESETS, build_model, count_parameters, preset_parameter_count
from trials.models.cait import ClassAttentionBlock
from trials.models.coatnet import RelativeAttention, relative_position_index
from trials.models.layers import DropPath, LayerScale, drop_path
from trials.models.paper_figures import PAPER_FIGURES

ROOT = Path(__file__).resolve().parents[1]

# timm's exact counts for the same architectures (a stricter cross-check than the rounded tables).
TIMM_PARAMS = {"cait_xxs24": 11_956_264, "cait_s24": 46_916_200, "coatnet_0": 25_036_820, "coatnet_1": 42_225_776}


@pytest.mark.parametrize("name", sorted(PAPER_FIGURES))
def test_parameter_counts_match_the_papers(name):
    """Within 1% of CaiT's and DeiT's tables (one decimal), 2% of CoAtNet's (whole millions)."""
    figures = PAPER_FIGURES[name]
    tolerance = 0.02 if name.startswith("coatnet") else 0.01
    assert preset_parameter_count(name) == pytest.approx(figures.params_m * 1e6, rel=tolerance)


@pytest.mark.parametrize(("name", "count"), TIMM_PARAMS.items())
def test_parameter_counts_equal_timm(name, count):
    assert preset_parameter_count(name) == count


def _layer_scales(model: nn.Module) -> list[LayerScale]:
    return [m for m in model.modules() if isinstance(m, LayerScale)]


@pytest.mark.parametrize(("depth", "expected"), [(6, 0.1), (18, 0.1), (24, 1e-5), (30, 1e-6)])
def test_layer_scale_paper_rule_sets_every_gain(depth, expected):
    with torch.device("meta"):
        model = build_model("cait_tiny32", depth=depth, layer_scale="paper")
    scales = _layer_scales(model)
    # Two per block, self-attention and class-attention blocks alike.
    assert len(scales) == 2 * (depth + 2)
    model = build_model("cait_tiny32", depth=depth, layer_scale="paper")
    for scale in _layer_scales(model):
        assert scale.gamma.shape == (96,)
        assert torch.all(scale.gamma == torch.tensor(expected, dtype=torch.float32))


def test_layer_scale_float_off_and_rezero():
    model = build_model("cait_tiny32", layer_scale=0.25)
    assert all(torch.all(s.gamma == 0.25) for s in _layer_scales(model))
    assert _layer_scales(build_model("cait_tiny32", layer_scale="off")) == []
    rezero = build_model("cait_tiny32", layer_scale="rezero").eval()
    scales = _layer_scales(rezero)
    assert scales and all(s.gamma.shape == (1,) and s.gamma.item() == 0.0 for s in scales)
    # A ReZero block starts as the identity.
    x = torch.randn(2, 64, 96)
    assert torch.equal(rezero.blocks[0](x), x)


def test_rezero_proper_has_no_branch_layernorm_and_starts_as_the_identity():
    """``residual: rezero`` (Bachlechner et al. 2020): x + alpha * F(x), no LayerNorm, alpha = 0 at init."""
    model = build_model("cait_tiny32", residual="rezero", layer_scale="paper").eval()
    norms = [name for name, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms == ["norm"]  # only the final norm before the head
    scales = _layer_scales(model)
    assert len(scales) == 2 * (model.config.depth + model.config.ca_depth)
    assert all(s.gamma.shape == (1,) and s.gamma.item() == 0.0 for s in scales)  # layer_scale is unused
    x = torch.randn(2, 64, 96)
    assert torch.equal(model.blocks[0](x), x)
    prenorm = build_model("cait_tiny32", layer_scale="rezero")
    assert len([m for m in prenorm.modules() if isinstance(m, torch.nn.LayerNorm)]) > 1


def test_class_attention_updates_only_the_class_token():
    model = build_model("cait_tiny32").eval()
    block: ClassAttentionBlock = model.ca_blocks[0]
    cls, patches = torch.randn(2, 1, 96), torch.randn(2, 64, 96)
    patches_before = patches.clone()
    new_cls = block(cls, patches)
    assert new_cls.shape == (2, 1, 96)
    assert torch.equal(patches, patches_before)
    # The patch tokens leaving the model are the self-attention stage's output, normalised:
    # nothing in the class-attention stage writes to them.
    captured = {}
    model.blocks[-1].register_forward_hook(lambda mod, inp, out: captured.setdefault("sa_out", out))
    features = model.forward_features(torch.randn(2, 3, 32, 32))
    assert torch.allclose(features[:, 1:], model.norm(captured["sa_out"]), atol=1e-6)
    # And the class token does depend on the patches (it attends to them).
    moved = block(cls, patches + torch.randn_like(patches))
    assert not torch.allclose(moved, new_cls)


def _block_flops(block: nn.Module, num_tokens: int) -> int:
    if isinstance(block, ClassAttentionBlock):
        return count_flops(block, (torch.randn(1, 1, 96), torch.randn(1, num_tokens, 96))).total
    return count_flops(block, torch.randn(1, num_tokens, 96)).total


def test_class_attention_cost_is_linear_in_patches_and_self_attention_is_not():
    model = build_model("cait_tiny32")
    sizes = [16, 32, 48, 64]
    ca = [_block_flops(model.ca_blocks[0], n) for n in sizes]
    sa = [_block_flops(model.blocks[0], n) for n in sizes]
    ca_steps = {b - a for a, b in itertools.pairwise(ca)}
    sa_steps = [b - a for a, b in itertools.pairwise(sa)]
    assert len(ca_steps) == 1 and ca_steps.pop() > 0  # equal increments: linear in N
    assert sa_steps[0] < sa_steps[1] < sa_steps[2]  # growing increments: quadratic in N
    # The class token's FFN runs once, independent of N; patch FFNs are not recomputed.
    assert ca[-1] < sa[-1] / 4


def test_talking_heads_change_exactly_the_head_mixing_parameters():
    on = dict(build_model("cait_tiny32", talking_heads=True).named_parameters())
    off = dict(build_model("cait_tiny32", talking_heads=False).named_parameters())
    extra = set(on) - set(off)
    assert set(off) <= set(on)
    heads, depth = 3, 6
    expected = {
        f"blocks.{i}.attn.{m}.{p}"
        for i in range(depth)
        for m in ("mix_logits", "mix_weights")
        for p in ("weight", "bias")
    }
    assert extra == expected
    assert sum(on[n].numel() for n in extra) == depth * 2 * (heads * heads + heads)
    for name in off:
        assert on[name].shape == off[name].shape


def test_talking_heads_match_explicit_head_mixing():
    """The batched head mix equals an einsum over heads (the paper's definition)."""
    attn = build_model("cait_tiny32").blocks[0].attn
    with torch.no_grad():
        attn.mix_logits.weight.normal_()
        attn.mix_weights.weight.normal_()
    x = torch.randn(2, 10, 96)
    q, k, v = attn.qkv(x).view(2, 10, 3, 3, 32).permute(2, 0, 3, 1, 4)
    logits = torch.einsum("bhnd,bhmd->bhnm", q * attn.scale, k)
    logits = torch.einsum("gh,bhnm->bgnm", attn.mix_logits.weight, logits) + attn.mix_logits.bias.view(1, 3, 1, 1)
    weights = torch.einsum("gh,bhnm->bgnm", attn.mix_weights.weight, logits.softmax(-1))
    weights = weights + attn.mix_weights.bias.view(1, 3, 1, 1)
    expected = attn.proj((weights @ v).transpose(1, 2).reshape(2, 10, 96))
    assert torch.allclose(attn(x), expected, atol=1e-5)


def test_class_token_insertion_layer():
    """DeiT-style models carry the class token through the blocks from ``cls_insert_layer`` on."""
    model = build_model("cait_tiny32", cls_insert_layer=2, ca_depth=0).eval()
    lengths = []
    for block in model.blocks:
        block.register_forward_hook(lambda mod, inp, out: lengths.append(inp[0].shape[1]))
    model(torch.randn(1, 3, 32, 32))
    assert lengths == [64, 64, 65, 65, 65, 65]
    deit = build_model("deit_tiny32")
    assert len(deit.ca_blocks) == 0 and _layer_scales(deit) == []
    assert not any("mix_" in name for name, _ in deit.named_parameters())


def test_stochastic_depth_rates_follow_the_schedule():
    uniform = build_model("cait_tiny32", drop_path_rate=0.2)
    assert [b.drop_path.rate for b in uniform.blocks] == [0.2] * 6
    assert all(not hasattr(b, "drop_path") for b in uniform.ca_blocks)  # none in class attention
    linear = build_model("coatnet_tiny32", drop_path_rate=0.4)
    rates = [getattr(b.drop_path, "rate", 0.0) for b in [*linear.conv_stages, *linear.transformer_blocks]]
    assert rates == pytest.approx([0.4 * i / 5 for i in range(6)])  # 1+2+2+1 blocks in S1..S4


def test_drop_path_drops_whole_samples_in_training_and_keeps_the_mean():
    layer = DropPath(0.25)
    x = torch.ones(4000, 3, 2)
    torch.manual_seed(0)
    y = layer(x)
    per_sample = y.flatten(1)
    # each sample is either dropped whole (0) or kept and scaled by 1 / (1 - rate), never mixed
    assert per_sample.unique().tolist() == pytest.approx([0.0, 4 / 3])
    assert (per_sample == per_sample[:, :1]).all()
    assert (per_sample[:, 0] == 0).float().mean().item() == pytest.approx(0.25, abs=0.03)
    assert y.mean().item() == pytest.approx(1.0, abs=0.05)
    assert torch.equal(layer.eval()(x), x)  # inference: the identity
    assert torch.equal(DropPath(1.0)(x), torch.zeros_like(x))  # everything dropped, no division by zero
    assert isinstance(drop_path(0.0), nn.Identity) and "rate=0.25" in repr(layer)


def test_building_a_model_with_stochastic_depth_imports_no_torchvision():
    """torchvision.ops imports torch._dynamo: seconds on every Ray worker's first trial."""
    code = (
        "import sys; from trials.models.build import build_model; "
        "build_model('cait_tiny32', drop_path_rate=0.2); build_model('coatnet_tiny32', drop_path_rate=0.2); "
        "print(sorted(m for m in sys.modules if m.startswith(('torchvision', 'torch._dynamo'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


LAYOUTS = ["CCCC", "CCCT", "CCTT", "CTTT", "TTTT", "VIT-REL"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_coatnet_layout_trains_a_step_at_32(layout):
    model = build_model("coatnet_tiny32", layout=layout, drop_path_rate=0.1)
    images, labels = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    loss = nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_coatnet_layout_runs_forward_backward_at_224(layout):
    model = build_model("coatnet_0", layout=layout, depths=(2, 1, 1, 1, 1), dims=(16, 32, 32, 64, 64), num_classes=5)
    out = model(torch.randn(1, 3, 224, 224))
    out.sum().backward()
    assert out.shape == (1, 5)
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", ["cait_tiny32", "deit_tiny32"])
def test_cait_family_forward_backward_at_32_and_224(name):
    for size, patch in ((32, 4), (224, 16)):
        model = build_model(name, image_size=size, patch_size=patch, depth=2, drop_path_rate=0.1)
        out = model(torch.randn(2, 3, size, size))
        out.sum().backward()
        assert out.shape == (2, 10)
        assert all(p.grad is not None for p in model.parameters())


def test_relative_bias_tables_follow_the_stage_resolution():
    def tables(model):
        return [m.relative_bias.shape for m in model.modules() if isinstance(m, RelativeAttention)]

    with torch.device("meta"):
        at224 = build_model("coatnet_0")
        at32 = build_model("coatnet_tiny32")
        vit = build_model("coatnet_0", layout="VIT-REL", depths=(2, 1, 1, 1, 1))
    # CoAtNet-0 at 224: S3 is 14x14 with 384/32 heads, S4 7x7 with 768/32 heads.
    assert tables(at224) == [(12, 27 * 27)] * 5 + [(24, 13 * 13)] * 2
    # At 32: S3 is 2x2 (its first block pools 4x4 -> 2x2), S4 1x1.
    assert tables(at32) == [(4, 9)] * 2 + [(6, 1)]
    assert tables(vit) == [(12, 27 * 27)] * 4


def test_relative_position_index_depends_only_on_the_offset():
    side = 4
    index = relative_position_index(side)
    coords = [(i, j) for i in range(side) for j in range(side)]
    seen: dict[tuple[int, int], int] = {}
    for a, (ya, xa) in enumerate(coords):
        for b, (yb, xb) in enumerate(coords):
            offset = (ya - yb, xa - xb)
            assert seen.setdefault(offset, int(index[a, b])) == int(index[a, b])
    assert len(seen) == (2 * side - 1) ** 2 == len(set(seen.values()))


def test_relative_bias_enters_the_attention_logits():
    attn = RelativeAttention(in_dim=32, dim=32, head_size=32, side=2)
    x = torch.randn(1, 4, 32)
    base = attn(x)
    with torch.no_grad():
        attn.relative_bias[0, 4] += 50.0  # offset (0, 0): every query now attends to itself
    _q, _k, v = attn.qkv(x).view(1, 4, 3, 1, 32).permute(2, 0, 3, 1, 4)
    assert not torch.allclose(attn(x), base)
    assert torch.allclose(attn(x), attn.proj(v.transpose(1, 2).reshape(1, 4, 32)), atol=1e-4)


def test_coatnet_downsampling_layout_and_flops():
    """Strides: S0 2, then each stage halves; the paper's stride-in-expand MBConv is cheaper."""
    model = build_model("coatnet_0").eval()
    shapes = []
    for block in model.conv_stages:
        block.register_forward_hook(lambda mod, inp, out: shapes.append(tuple(out.shape[1:])))
    with torch.no_grad():
        model(torch.randn(1, 3, 224, 224))
    assert shapes == [(96, 56, 56)] * 2 + [(192, 28, 28)] * 3
    expand = count_flops(build_model("coatnet_0"), torch.randn(1, 3, 224, 224)).total
    depthwise = count_flops(build_model("coatnet_0", mbconv_downsample="depthwise"), torch.randn(1, 3, 224, 224)).total
    assert expand < depthwise


@pytest.mark.slow
@pytest.mark.parametrize(("name", "overrides"), [("cait_tiny32", {"depth": 3}), ("coatnet_tiny32", {})])
def test_a_small_model_learns_a_small_task(name, overrides):
    """Loss falls well below its start on a learnable task: which quadrant holds a bright square."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 4, (64,), generator=generator)
    images = 0.3 * torch.randn(64, 3, 32, 32, generator=generator)
    for i, label in enumerate(labels.tolist()):
        y, x = divmod(label, 2)
        images[i, :, 16 * y + 4 : 16 * y + 12, 16 * x + 4 : 16 * x + 12] += 2.0
    model = build_model(name, num_classes=4, **overrides)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    losses = []
    for _ in range(40):
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0], losses


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_builds_with_its_config(name):
    with torch.device("meta"):
        model = build_model(name)
    assert model.config == PRESETS[name]
    assert count_parameters(model) > 0
