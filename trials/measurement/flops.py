"""FLOP counting with fvcore on the real model, in the papers' convention (one multiply-add = one FLOP).

fvcore does not count ``aten::scaled_dot_product_attention`` (it would report attention as free)
nor ``aten::baddbmm`` (our talking-heads mix); we register handles for both. Element-wise ops
(activations, residual adds, pooling) are deliberately not counted, as in the papers and in
fvcore's defaults, and are listed explicitly so that any op left in ``unsupported`` is a
matmul-like op we forgot: the tests assert that list is empty for every model family.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field
from math import prod
from typing import Any

import torch
from torch import nn

from trials.devices.torch_internals import eager_view
from trials.lazy import lazy_import

fvcore_nn = lazy_import("fvcore.nn")  # fvcore: only when FLOPs are counted by tracing

# Element-wise and data-movement ops: zero FLOPs by convention (not "unsupported").
ELEMENTWISE_OPS = (
    "aten::add",
    "aten::add_",
    "aten::sub",
    "aten::mul",
    "aten::mul_",
    "aten::div",
    "aten::gelu",
    "aten::silu",
    "aten::sigmoid",
    "aten::tanh",
    "aten::softmax",
    "aten::mean",
    "aten::max_pool2d",
    "aten::avg_pool2d",
    "aten::rsub",
    "aten::neg",
    "aten::exp",
    "aten::dropout",
    "aten::feature_dropout",
    "aten::bernoulli_",
    "aten::div_",
    "aten::empty_like",
    "aten::new_empty",
)


def _shape(value: Any) -> list[int]:
    return list(value.type().sizes())


def sdpa_flop_handle(inputs: list[Any], outputs: list[Any]) -> int:
    """``scaled_dot_product_attention(q, k, v, ...)``: QK^T plus weights @ V, in multiply-adds."""
    q, k, v = (_shape(x) for x in inputs[:3])
    batch = prod(q[:-2])
    length, depth = q[-2], q[-1]
    keys, value_depth = k[-2], v[-1]
    return batch * length * keys * (depth + value_depth)


def baddbmm_flop_handle(inputs: list[Any], outputs: list[Any]) -> int:
    """``baddbmm(bias, a, b)`` with a (B, n, k), b (B, k, m): B*n*k*m multiply-adds."""
    a, b = _shape(inputs[1]), _shape(inputs[2])
    return a[0] * a[1] * a[2] * b[2]


@dataclass(frozen=True)
class FlopCount:
    total: int
    by_operator: dict[str, int]
    by_module: dict[str, int]
    unsupported: dict[str, int] = field(default_factory=dict)


def count_flops(model: nn.Module, inputs: torch.Tensor | tuple[torch.Tensor, ...]) -> FlopCount:
    """Count multiply-adds of one forward pass with fvcore (traced on ``inputs``).

    ``by_module`` holds the top-level children's totals; ``unsupported`` any op fvcore saw but
    did not count and that is not a known zero-FLOP element-wise op. A model whose blocks were
    compiled in place (regional compilation) is counted through its eager view
    (:func:`trials.devices.torch_internals.eager_view`): the same operations, and ``torch.jit.trace``, which
    fvcore traces with, refuses a compiled call.
    """
    with warnings.catch_warnings():  # fvcore's import warns about torch APIs it uses
        warnings.simplefilter("ignore", FutureWarning)
        flop_count_analysis = fvcore_nn.FlopCountAnalysis
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    was_training = model.training
    model.eval()
    try:
        with eager_view(model), torch.no_grad():
            analysis = flop_count_analysis(model, args)
            analysis.set_op_handle(
                "aten::scaled_dot_product_attention", sdpa_flop_handle, "aten::baddbmm", baddbmm_flop_handle
            )
            analysis.set_op_handle(**dict.fromkeys(ELEMENTWISE_OPS))
            analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
            total = int(analysis.total())
            by_operator = {op: int(n) for op, n in analysis.by_operator().items()}
            by_module = {name: int(n) for name, n in analysis.by_module().items() if name and "." not in name}
            unsupported = dict(Counter(analysis.unsupported_ops()))
    finally:
        model.train(was_training)
    return FlopCount(total=total, by_operator=by_operator, by_module=by_module, unsupported=unsupported)
