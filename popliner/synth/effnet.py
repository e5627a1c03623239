"""An EfficientNet-EdgeTPU-like CNN: fused and depthwise inverted-bottleneck blocks in six stages.

The stage table is EfficientNet-EdgeTPU-L's (depth 1.4 and width 1.2 applied
to the EdgeTPU-S blocks): 27 blocks of 2, 3, 6, 7, 6 and 3, the first three
stages "fused" (a k x k expansion convolution, then a 1x1 projection), the
last three with a 1x1 expansion, a k x k depthwise convolution and a 1x1
projection. ReLU throughout, as the EdgeTPU models use. ``hidden`` is the
stem width (40 for L), other widths scale with it; ``seq`` is the image side
(300 for L); other depths spread the blocks over the stages in proportion.
"""

from __future__ import annotations

from popliner.synth.graph import GradRule, GraphBuilder
from popliner.synth.models import HALF, Dims, _bn_relu, add, bias_add, conv, matmul

__all__ = ["efficientnet"]

#: Per stage: repeats (L), kernel, stride, expansion, output filters at stem width 40, fused.
STAGES: tuple[tuple[int, int, int, int, int, bool], ...] = (
    (2, 3, 1, 4, 32, True),
    (3, 3, 2, 8, 40, True),
    (6, 3, 2, 8, 56, True),
    (7, 5, 2, 8, 112, False),
    (6, 5, 1, 8, 176, False),
    (3, 5, 2, 8, 232, False),
)
_HEAD_FILTERS = 1280
_STEM_WIDTH = 40


def _stage_of(block: int, blocks: int) -> int:
    total = sum(s[0] for s in STAGES)
    pos = (block + 0.5) * total / blocks
    edge = 0
    for k, stage in enumerate(STAGES):
        edge += stage[0]
        if pos < edge:
            return k
    return len(STAGES) - 1


def _width(filters: int, stem: int) -> int:
    return max(8, int(filters * stem / _STEM_WIDTH + 4) // 8 * 8)


def efficientnet(g: GraphBuilder, d: Dims, blocks: int) -> tuple[int, int, int]:
    """The model; returns (logits, rows, classes) as the other families do."""
    b, stem_w = d.batch, d.hidden
    img = g.stream_in("image", b * 3 * d.seq * d.seq * HALF)
    stem = "efficientnet/stem"
    hw = max(1, d.seq // 2)
    k = g.weight(f"{stem}/conv2d/kernel", 3 * stem_w * 9 * HALF, stem)
    x = conv(g, f"{stem}/conv2d/Conv2D", stem, img, k, b * stem_w * hw * hw * HALF, 2.0 * b * hw * hw * 27 * stem_w)
    x = _bn_relu(g, f"{stem}/bn", stem, x, stem_w, b * hw * hw)
    channels = stem_w
    for i in range(blocks):
        s = _stage_of(i, blocks)
        first = i == 0 or _stage_of(i - 1, blocks) != s
        _, ksize, stride, expand, filters, fused = STAGES[s]
        x, channels, hw = _block(g, d, i, x, channels, _width(filters, stem_w), hw, ksize,
                                 stride if first else 1, expand, fused)
    head = "efficientnet/head"
    wide = _width(_HEAD_FILTERS, stem_w)
    k = g.weight(f"{head}/conv2d/kernel", channels * wide * HALF, head)
    x = conv(g, f"{head}/conv2d/Conv2D", head, x, k, b * wide * hw * hw * HALF, 2.0 * b * hw * hw * channels * wide)
    x = _bn_relu(g, f"{head}/bn", head, x, wide, b * hw * hw)
    pooled = g.op(f"{head}/AvgPool", "GlobalAveragePool", "avgpool", head, [x], [(":0", b * wide * HALF)],
                  g.tensors[x].nbytes, grads=(GradRule("/AveragePoolGrad", "AveragePoolGrad", "avgpool_grad", 0),))[0]
    w = g.weight(f"{head}/dense/kernel", wide * d.vocab * HALF, head)
    bias = g.weight(f"{head}/dense/bias", d.vocab * HALF, head)
    logits = matmul(g, f"{head}/dense/MatMul", head, pooled, w, b, wide, d.vocab)
    return bias_add(g, f"{head}/dense/BiasAdd", head, logits, bias), b, d.vocab


def _block(g: GraphBuilder, d: Dims, i: int, x: int, cin: int, out: int, hw: int, ksize: int, stride: int,
           expand: int, fused: bool) -> tuple[int, int, int]:
    p = f"efficientnet/blocks.{i}"
    b, mid = d.batch, cin * expand
    hw_out = max(1, hw // stride)

    def cv(name: str, y: int, ci: int, co: int, k: int, side: int, depthwise: bool = False) -> int:
        kernel = g.weight(f"{p}/{name}/kernel", (co if depthwise else ci * co) * k * k * HALF, p)
        flops = 2.0 * b * side * side * (1 if depthwise else ci) * co * k * k
        return conv(g, f"{p}/{name}/Conv2D", p, y, kernel, b * co * side * side * HALF, flops)

    if fused:
        y = cv("conv2d", x, cin, mid, ksize, hw_out)
        y = _bn_relu(g, f"{p}/bn", p, y, mid, b * hw_out * hw_out)
    else:
        y = cv("conv2d", x, cin, mid, 1, hw)
        y = _bn_relu(g, f"{p}/bn", p, y, mid, b * hw * hw)
        y = cv("depthwise_conv2d", y, mid, mid, ksize, hw_out, depthwise=True)
        y = _bn_relu(g, f"{p}/bn_1", p, y, mid, b * hw_out * hw_out)
    y = cv("conv2d_1", y, mid, out, 1, hw_out)
    y = _bn_relu(g, f"{p}/bn_2", p, y, out, b * hw_out * hw_out, relu=False)
    if stride == 1 and cin == out:
        y = add(g, f"{p}/add", p, y, x)
    return y, out, hw_out
