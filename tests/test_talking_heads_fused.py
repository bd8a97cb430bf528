"""Talking heads computed two ways (issue 47): ``talking_heads_impl`` "explicit" vs "fused".

The fused path folds the pre-softmax head mix into the queries so that fused attention (SDPA)
applies (maths in ``SelfAttention._fused_talking_heads``). It must be the explicit path's function
with the explicit path's parameters:

* fp32: outputs, input gradients and every parameter gradient equal to 1e-5 (float reordering only);
  the pre-softmax bias cancels in the softmax, so its gradient is zero on both paths, and present.
* bf16 autocast: within 3% of the output's largest magnitude of the fp32 explicit path, the tolerance
  the bf16 softmax test uses (bf16 keeps 8 mantissa bits, ~0.4% per rounding, a few roundings deep).
* state_dicts are key for key the same, so weights trained one way load the other way;
* FLOPs count the explicit path (the architecture's cost) whichever implementation is chosen;
* ``"auto"`` is the explicit path on a CPU; a bad value is an error naming the key.
"""

from __future__ import annotations

import copy

import pytest
import torch

from search_space.cost_model import estimate_cost
from trials.measurement.flops import count_flops
from trials.models import ModelConfigError, build_model, resolve_config
from trials.models.cait import SelfAttention

ATOL = 1e-5
BF16_RELATIVE = 0.03


def _pair(dim: int = 32, heads: int = 4, seed: int = 0) -> tuple[SelfAttention, SelfAttention]:
    """An explicit and a fused attention with the same, deliberately non-trivial, head mixing."""
    torch.manual_seed(seed)
    explicit = SelfAttention(dim, heads, qkv_bias=True, talking_heads=True)
    with torch.no_grad():  # trunc_normal(0.02) mixing and zero biases would hide a wrong index or sign
        for mix in (explicit.mix_logits, explicit.mix_weights):
            mix.weight.normal_()
            mix.bias.normal_()
    fused = copy.deepcopy(explicit)
    fused.impl = "fused"
    return explicit, fused


def _forward_backward(module: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor):
    x = x.clone().requires_grad_()
    module.zero_grad(set_to_none=True)
    out = module(x)
    out.backward(grad)
    return out.detach(), x.grad, {name: p.grad for name, p in module.named_parameters()}


@pytest.mark.parametrize(("dim", "heads", "tokens"), [(32, 4, 9), (24, 3, 17), (16, 1, 5), (32, 8, 1)])
def test_fused_equals_explicit_in_fp32_forward_and_gradients(dim, heads, tokens):
    explicit, fused = _pair(dim, heads)
    x = torch.randn(2, tokens, dim)
    grad = torch.randn(2, tokens, dim)
    out_e, dx_e, grads_e = _forward_backward(explicit, x, grad)
    out_f, dx_f, grads_f = _forward_backward(fused, x, grad)
    torch.testing.assert_close(out_f, out_e, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(dx_f, dx_e, atol=ATOL, rtol=1e-5)
    assert grads_f.keys() == grads_e.keys()
    for name, g in grads_e.items():
        assert grads_f[name] is not None, name  # every parameter in the graph (DDP, weight decay)
        torch.testing.assert_close(grads_f[name], g, atol=ATOL * max(1.0, g.abs().max().item()), rtol=1e-5)
    # b1 is constant over each head's logits: the softmax removes it, on both paths
    assert grads_f["mix_logits.bias"].abs().max() == 0
    assert grads_e["mix_logits.bias"].abs().max() <= ATOL


def test_under_bf16_autocast_fused_stays_within_bf16_tolerance_of_fp32():
    explicit, fused = _pair(seed=1)
    x = torch.randn(2, 17, 32)
    exact = explicit(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast = fused(x)
        explicit_bf16 = explicit(x)
    assert fast.dtype == torch.bfloat16
    scale = exact.abs().max()
    assert (fast.float() - exact).abs().max() <= BF16_RELATIVE * scale
    assert (fast.float() - explicit_bf16.float()).abs().max() <= BF16_RELATIVE * scale


def test_weights_are_interchangeable_between_implementations():
    torch.manual_seed(0)
    config = resolve_config("cait_tiny32").replace(depth=2, ca_depth=1)
    explicit = build_model(config).eval()
    fused = build_model(config.replace(talking_heads_impl="fused")).eval()
    assert [block.attn.impl for block in fused.blocks] == ["fused", "fused"]
    with torch.no_grad():  # the init's gentle mixing (std 0.02, zero biases) would hide a wrong index
        for name, p in explicit.named_parameters():
            if ".mix_" in name:
                p.normal_()
    state = explicit.state_dict()
    assert {k: v.shape for k, v in fused.state_dict().items()} == {k: v.shape for k, v in state.items()}
    fused.load_state_dict(state, strict=True)
    images = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(fused(images), explicit(images), atol=ATOL, rtol=1e-5)
    explicit.load_state_dict(fused.state_dict(), strict=True)  # and back


def test_auto_is_the_explicit_path_on_a_cpu():
    explicit, auto = _pair(seed=2)
    auto.impl = "auto"
    x = torch.randn(2, 9, 32)
    assert torch.equal(auto(x), explicit(x))


def test_flops_count_the_explicit_path_whichever_implementation_runs():
    config = resolve_config("cait_tiny32").replace(depth=2, ca_depth=1)
    images = torch.randn(1, 3, 32, 32)
    explicit = count_flops(build_model(config), images)
    fused = count_flops(build_model(config.replace(talking_heads_impl="fused")), images)
    assert fused.unsupported == {}
    assert fused.by_operator == explicit.by_operator
    assert fused.total == explicit.total == estimate_cost(config.replace(talking_heads_impl="fused")).flops


@pytest.mark.parametrize("bad", ["Fused", "flash", None, 1])
def test_a_bad_implementation_is_an_error_naming_the_key(bad):
    with pytest.raises(ModelConfigError) as excinfo:
        resolve_config("cait_tiny32").replace(talking_heads_impl=bad)
    assert excinfo.value.field == "CaiTConfig.talking_heads_impl"
    assert "explicit" in str(excinfo.value) and "fused" in str(excinfo.value)


@pytest.mark.slow
def test_regional_compile_runs_the_fused_path_whole_and_matches_eager():
    """What a trial runs: each block compiled alone. The fused path must compile without a graph
    break (``torch.jit.is_tracing`` is a constant to dynamo) and give the explicit path's numbers."""
    from torch._dynamo.utils import counters

    from trials.models.regions import compile_regions

    torch.manual_seed(0)
    config = resolve_config("cait_tiny32").replace(depth=2, ca_depth=1, talking_heads_impl="fused")
    fused = build_model(config).train()
    explicit = build_model(config.replace(talking_heads_impl="explicit")).train()
    explicit.load_state_dict(fused.state_dict())
    torch.compiler.reset()
    counters.clear()
    compile_regions(fused, backend="aot_eager")
    images = torch.randn(2, 3, 32, 32)
    out = fused(images)
    out.square().sum().backward()
    reference = explicit(images)
    reference.square().sum().backward()
    assert not counters["graph_break"], dict(counters["graph_break"])
    torch.testing.assert_close(out, reference, atol=ATOL, rtol=1e-5)
    qkv = "blocks.0.attn.qkv.weight"
    grads = {n: p.grad for n, p in explicit.named_parameters()}
    torch.testing.assert_close(dict(fused.named_parameters())[qkv].grad, grads[qkv], atol=ATOL, rtol=1e-4)
    torch.compiler.reset()
