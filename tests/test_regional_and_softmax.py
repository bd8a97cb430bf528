"""Talking heads' softmax in the logits' dtype, and regional compilation (issue 47).

* Under bf16 autocast the talking-heads softmax runs in bf16 (autocast would upcast it to fp32) and
  the block's output stays within bf16's resolution of the fp32-softmax path; in fp32 the two paths
  are bit for bit the same computation.
* ``compile_regions`` compiles every repeated block and nothing else; a depth-3 model compiles one
  training graph for its self-attention blocks (shared, not one per block), recompiles nothing over
  further steps, and a deeper model of the same width adds no new graph.
"""

from __future__ import annotations

import pytest
import torch

from trials.models import build_model, resolve_config
from trials.models.cait import SelfAttention
from trials.models.regions import compile_regions, regions


def _attention(seed: int = 0) -> SelfAttention:
    torch.manual_seed(seed)
    return SelfAttention(dim=32, num_heads=4, qkv_bias=True, talking_heads=True).eval()


def _softmax_dtypes(device: str) -> tuple[list[torch.dtype], torch.Tensor, torch.Tensor, torch.Tensor]:
    attention = _attention().to(device)
    x = torch.randn(2, 17, 32, device=device)
    seen: list[torch.dtype] = []
    hook = attention.mix_weights.register_forward_pre_hook(lambda _m, inputs: seen.append(inputs[0].dtype))
    with torch.autocast(device, dtype=torch.bfloat16):
        fast = attention(x).float()
        attention.softmax_in_input_dtype = False
        upcast = attention(x).float()
    hook.remove()
    return seen, fast, upcast, attention(x)  # the last: fp32 throughout, no autocast


def test_softmax_follows_the_logits_dtype_under_autocast_and_stays_close_to_fp32():
    seen, fast, upcast, exact = _softmax_dtypes("cpu")
    assert seen[0] == torch.bfloat16  # CPU autocast has no fp32 rule for softmax: both paths bf16 here
    scale = exact.abs().max()
    assert (fast - exact).abs().max() <= 0.03 * scale  # bf16 has 8 bits of mantissa: ~0.4% per op
    assert (fast - upcast).abs().max() <= 0.03 * scale


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")
def test_on_cuda_autocast_would_upcast_the_softmax_and_the_flag_keeps_it_bf16():
    seen, fast, _upcast, exact = _softmax_dtypes("cuda")
    assert seen == [torch.bfloat16, torch.float32]
    assert (fast - exact).abs().max() <= 0.03 * exact.abs().max()


def test_in_fp32_both_softmax_paths_are_the_same_computation():
    attention = _attention(1)
    x = torch.randn(2, 9, 32)
    fast = attention(x)
    attention.softmax_in_input_dtype = False
    assert torch.equal(fast, attention(x))


def test_regions_are_the_repeated_blocks():
    cait = build_model(resolve_config("cait_tiny32").replace(depth=3, ca_depth=2))
    assert [type(m).__name__ for m in regions(cait)] == ["SelfAttentionBlock"] * 3 + ["ClassAttentionBlock"] * 2
    coatnet = build_model(resolve_config("coatnet_tiny32"))
    names = {type(m).__name__ for m in regions(coatnet)}
    assert names <= {"MBConvBlock", "TransformerBlock"} and names


@pytest.mark.slow
def test_regional_compile_shares_one_graph_across_blocks_and_depths():
    from torch._dynamo.utils import counters

    def train_graphs(depth: int) -> tuple[int, int]:
        torch.manual_seed(0)
        config = resolve_config("cait_tiny32").replace(depth=depth, ca_depth=1, drop_path_rate=0.0)
        model = build_model(config).train()
        assert compile_regions(model, backend="aot_eager") == depth + 1
        images, labels = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
        before = counters["stats"]["unique_graphs"]
        for step in range(3):
            torch.nn.functional.cross_entropy(model(images), labels).backward()
            if step == 0:
                after_first = counters["stats"]["unique_graphs"]
        return after_first - before, counters["stats"]["unique_graphs"] - after_first

    torch.compiler.reset()
    first, later = train_graphs(3)
    assert first == 2  # one self-attention block graph for all three blocks, one class-attention graph
    assert later == 0  # no recompiles over further steps
    deeper_first, deeper_later = train_graphs(6)  # same width, twice the depth: the same two graphs
    assert deeper_first == 0 and deeper_later == 0
    torch.compiler.reset()
