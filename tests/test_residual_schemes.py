"""CaiT Table 1's residual schemes: each one's identity claim at initialisation, its parameters,
and that a model built with it learns and runs as a trial (trials.models.residual)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from trials.models import RESIDUAL_SCHEMES, CaiTConfig, ModelConfigError, build_model
from trials.models.layers import LayerScale, ScalarBias
from trials.models.residual import fixup_branch_scale, t_fixup_scale
from trials.runner import run_trial

TINY = {"preset": "cait_tiny32", "embed_dim": 64, "num_heads": 2, "depth": 3, "ca_depth": 1}
DEIT = {**TINY, "ca_depth": 0, "cls_insert_layer": 0, "talking_heads": False}


def _model(scheme: str, base: dict = TINY, **changes) -> nn.Module:
    torch.manual_seed(0)
    return build_model({**base, "residual": scheme, **changes}).eval()


def _branch_norms(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if isinstance(m, nn.LayerNorm) and name != "norm"]


def _gains(model: nn.Module) -> list[LayerScale]:
    return [m for m in model.modules() if isinstance(m, LayerScale)]


def _blocks_are_identities(model: nn.Module) -> bool:
    x = torch.randn(2, model.config.num_patches + 1, model.config.embed_dim)
    cls, patches = x[:, :1], x[:, 1:]
    return all(torch.equal(block(x), x) for block in model.blocks) and all(
        torch.equal(block(cls, patches), cls) for block in model.ca_blocks
    )


@pytest.mark.parametrize("base", [TINY, DEIT], ids=["cait", "deit"])
@pytest.mark.parametrize("scheme", ["rezero", "skipinit"])
def test_rezero_and_skipinit_make_every_block_the_identity_at_step_0(scheme, base):
    model = _model(scheme, base)
    assert _branch_norms(model) == []  # normalisation removed
    gains = _gains(model)
    assert len(gains) == model.config.num_residual_branches
    assert all(g.gamma.shape == (1,) and g.gamma.item() == 0.0 for g in gains)
    assert _blocks_are_identities(model)


def test_skipinit_starts_at_a_small_constant_when_given_one():
    model = _model("skipinit", layer_scale=0.01)
    assert all(g.gamma.item() == pytest.approx(0.01) for g in _gains(model))
    assert not _blocks_are_identities(model)


@pytest.mark.parametrize("base", [TINY, DEIT], ids=["cait", "deit"])
def test_fixup_branches_output_zero_and_the_inner_layers_are_scaled_by_L_to_the_minus_half(base):
    model, plain = _model("fixup", base), _model("prenorm", base)
    assert _branch_norms(model) == []
    assert all(g.gamma.shape == (1,) and g.gamma.item() == 1.0 for g in _gains(model))  # the multiplier
    biases = [m for m in model.modules() if isinstance(m, ScalarBias)]
    assert len(biases) == 5 * len([*model.blocks, *model.ca_blocks])  # 2 per attention branch, 3 per FFN
    assert all(b.bias.item() == 0.0 for b in biases)
    x = torch.randn(2, model.config.num_patches + 1, model.config.embed_dim)
    for block in model.blocks:
        assert torch.equal(block.ls1(block.attn(block.bias1(block.norm1(x)))), torch.zeros_like(x))
        assert torch.equal(block.ls2(block.mlp(block.bias2(block.norm2(x)))), torch.zeros_like(x))
    assert _blocks_are_identities(model)
    assert torch.equal(model.head.weight, torch.zeros_like(model.head.weight))  # Fixup rule 1
    scale = fixup_branch_scale(model.config)
    assert scale == pytest.approx(model.config.num_residual_branches**-0.5)
    # Same seed, same draws: the layers in series on each branch (values, first FFN layer) are the
    # plain model's times L^(-1/2); queries and keys only set the attention weights and are not
    # scaled (both scaled would divide every attention logit by L).
    dim = model.config.embed_dim
    for mine, theirs in zip(model.blocks, plain.blocks, strict=True):
        torch.testing.assert_close(mine.attn.qkv.weight[2 * dim :], theirs.attn.qkv.weight[2 * dim :] * scale)
        torch.testing.assert_close(mine.attn.qkv.weight[: 2 * dim], theirs.attn.qkv.weight[: 2 * dim])
        torch.testing.assert_close(mine.mlp.fc1.weight, theirs.mlp.fc1.weight * scale)
    for mine, theirs in zip(model.ca_blocks, plain.ca_blocks, strict=True):
        torch.testing.assert_close(mine.attn.q.weight, theirs.attn.q.weight)
        torch.testing.assert_close(mine.attn.kv.weight[dim:], theirs.attn.kv.weight[dim:] * scale)


def test_t_fixup_removes_layernorm_and_scales_values_outputs_and_ffn_by_0_67_N_to_the_minus_quarter():
    base = {**TINY, "embed_dim": 128, "num_heads": 4}
    model = _model("t-fixup", base)
    assert _branch_norms(model) == [] and _gains(model) == []
    n, dim = model.config.depth + model.config.ca_depth, model.config.embed_dim
    scale = t_fixup_scale(model.config)
    assert scale == pytest.approx(0.67 * n**-0.25)

    def xavier_std(weight: torch.Tensor) -> float:
        return math.sqrt(2.0 / sum(weight.shape))

    square = math.sqrt(1.0 / dim)  # Xavier of one d x d projection, as the paper's separate Q, K, V are
    for block in model.blocks:
        qkv = block.attn.qkv.weight
        q_std, v_std = qkv[:dim].std().item(), qkv[2 * dim :].std().item()
        assert q_std == pytest.approx(square, rel=0.05)  # not the fused 3d x d matrix's (2/(4d))^1/2
        assert v_std == pytest.approx(scale * square, rel=0.05)  # values: scaled
        for linear in (block.attn.proj, block.mlp.fc1, block.mlp.fc2):
            assert linear.weight.std().item() == pytest.approx(scale * xavier_std(linear.weight), rel=0.05)
    assert model.pos_embed.std().item() == pytest.approx(dim**-0.5 * (9 * n) ** -0.25, rel=0.1)
    # The classification head is not the paper's: it keeps the baseline's initialisation.
    plain = _model("prenorm", base)
    torch.testing.assert_close(model.head.weight, plain.head.weight)


@pytest.mark.parametrize("scheme", ["rezero", "skipinit", "fixup", "t-fixup"])
def test_keep_norm_gives_the_schemes_that_drop_layernorm_caits_version_with_it(scheme):
    """CaiT's Table 1 ran ReZero, Fixup and T-Fixup with LayerNorm kept (section 3, Table A.1)."""
    from search_space.cost_model import estimate_params

    kept, original = _model(scheme, keep_norm=True), _model(scheme)
    assert len(_branch_norms(kept)) == kept.config.num_residual_branches and _branch_norms(original) == []
    assert [g.gamma.item() for g in _gains(kept)] == [g.gamma.item() for g in _gains(original)]  # same gains
    assert estimate_params(kept.config) == sum(p.numel() for p in kept.parameters())
    if scheme in ("rezero", "skipinit"):
        assert _blocks_are_identities(kept)  # alpha = 0: still the identity at step 0


def test_keep_norm_on_a_scheme_that_keeps_layernorm_is_a_one_line_error():
    with pytest.raises(ModelConfigError, match="keeps its LayerNorm already") as error:
        CaiTConfig(residual="layerscale", keep_norm=True)
    assert error.value.field == "CaiTConfig.keep_norm"


@pytest.mark.parametrize(("scheme", "per_channel"), [("layerscale", True), ("scalar", False)])
def test_layerscale_and_scalar_keep_layernorm_and_scale_each_branch_by_eps(scheme, per_channel):
    model = _model(scheme, layer_scale=0.02)
    assert len(_branch_norms(model)) == model.config.num_residual_branches
    for gain in _gains(model):
        assert gain.gamma.shape == ((model.config.embed_dim,) if per_channel else (1,))
        assert torch.all(gain.gamma == torch.tensor(0.02))
    block = model.blocks[0]
    x = torch.randn(2, model.config.num_patches, model.config.embed_dim)
    branch = block.attn(block.norm1(x))
    torch.testing.assert_close(block.ls1(branch), 0.02 * branch)


def test_prenorm_is_the_deit_baseline_with_layernorm_and_no_gain():
    model = _model("prenorm", layer_scale="paper")  # layer_scale is not read by prenorm
    assert len(_branch_norms(model)) == model.config.num_residual_branches
    assert _gains(model) == []


def test_unset_residual_follows_layer_scale_as_before():
    assert CaiTConfig(layer_scale="paper").residual_scheme == "layerscale"
    assert CaiTConfig(layer_scale="off").residual_scheme == "prenorm"
    assert CaiTConfig(layer_scale="rezero").residual_gain() == ("scalar", 0.0)
    assert CaiTConfig(layer_scale="rezero").branch_norm


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"residual": "layerscale", "layer_scale": "off"}, "needs a per-channel eps"),
        ({"residual": "layerscale", "layer_scale": "rezero"}, "needs a per-channel eps"),
        ({"residual": "scalar", "layer_scale": "off"}, "needs its eps"),
        ({"residual": "post-norm"}, "must be one of prenorm, rezero, skipinit, fixup, t-fixup, scalar, layerscale"),
    ],
)
def test_combinations_that_make_no_sense_are_one_line_errors(changes, fragment):
    with pytest.raises(ModelConfigError) as error:
        CaiTConfig(**changes)
    assert fragment in str(error.value) and "\n" not in str(error.value)
    assert error.value.field in ("CaiTConfig.layer_scale", "CaiTConfig.residual")


@pytest.mark.parametrize("scheme", RESIDUAL_SCHEMES)
def test_every_scheme_learns_a_batch(scheme):
    """A short run learns: 40 AdamW steps on one fixed batch take the loss well below ln(4)."""
    torch.manual_seed(0)
    model = build_model({**DEIT, "residual": scheme, "num_classes": 4, "layer_scale": 0.1})
    images, labels = torch.randn(16, 3, 32, 32), torch.arange(16) % 4
    optimiser = torch.optim.AdamW(model.parameters(), lr=2e-3)
    losses = []
    for _ in range(40):
        loss = nn.functional.cross_entropy(model(images), labels)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * math.log(4), (scheme, losses[0], losses[-1])


@pytest.mark.parametrize("scheme", RESIDUAL_SCHEMES)
def test_one_trial_of_every_scheme_completes_on_cpu(scheme):
    result = run_trial(
        {
            "model": {"family": "cait", **DEIT, "residual": scheme},
            "data": {"name": "synthetic", "num_classes": 4, "train_size": 128, "val_size": 64, "batch_size": 32},
            "training": {"epochs": 1, "lr": 1e-3, "warmup_epochs": 0},
            "measure": {"batch_size": 2, "repeats": 1, "warmup": 0, "latency": False},
            "seed": 0,
        }
    )
    assert result.status == "completed", result.error
    assert result.config["model"]["residual"] == scheme
    model = build_model({**DEIT, "residual": scheme, "num_classes": 4})
    assert result.cost.params == sum(p.numel() for p in model.parameters())
