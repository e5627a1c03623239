"""An EfficientNet-EdgeTPU-like CNN: fused and depthwise inverted-bottleneck blocks in six stages.

The stage table is EfficientNet-EdgeTPU-L's (depth 1.4 and width 1.2 applied
to the EdgeTPU-S blocks): 27 blocks of 2, 3, 6, 7, 6 and 3, the first three
stages "fused" (a k x k expansion convolution, then a 1x1 projection), the
last three with a 1x1 expansion, a k x k depthwise convolution and a 1x1
projection. ReLU throughout, as the EdgeTPU models use. ``hidden`` is the
stem width (40 for L), other widths scale with it; ``seq`` is the image side;
other depths spread the blocks over the stages in proportion.

With ``exact`` (``SynthSpec.edgetpu_builder``) the blocks follow TensorFlow's
EdgeTPU builder where the first version approximated it: the three rules,
and the real profile's tensors that bear them out, are
docs/synthetic-profiles.md's ("Rules that follow the architecture").
"""

from __future__ import annotations

from popliner.synth.graph import GraphBuilder
from popliner.synth.models import HALF, Dims, add, bn_relu, classify, conv, stage_of

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
#: The first stage's nominal input filters at stem width 40 (``i24`` at width 1.2, rounded to 8).
_FIRST_INPUT_FILTERS = 32
#: Blocks per stage (L).
REPEATS = tuple(s[0] for s in STAGES)


def _width(filters: int, stem: int) -> int:
    return max(8, int(filters * stem / _STEM_WIDTH + 4) // 8 * 8)


def efficientnet(g: GraphBuilder, d: Dims, blocks: int, exact: bool = False,
                 cache: bool = False) -> tuple[int, int, int]:
    """The model; returns (logits, rows, classes) as the other families do; ``cache``: TensorFlow's shape cache."""
    b, stem_w = d.batch, d.hidden
    img = g.stream_in("image", b * 3 * d.seq * d.seq * HALF)
    stem = "efficientnet/stem"
    hw = max(1, d.seq // 2)
    k = g.weight(f"{stem}/conv2d/kernel", 3 * stem_w * 9 * HALF, stem)
    x = conv(g, f"{stem}/conv2d/Conv2D", stem, img, k, b * stem_w * hw * hw * HALF, 2.0 * b * hw * hw * 27 * stem_w,
             share=_cache_key(g, img, k, b * stem_w * hw * hw, False) if cache else None)
    x = bn_relu(g, f"{stem}/bn", stem, x, stem_w, b * hw * hw)
    channels = stem_w
    for i in range(blocks):
        s = stage_of(i, blocks, REPEATS)
        first = i == 0 or stage_of(i - 1, blocks, REPEATS) != s
        _, ksize, stride, expand, filters, fused = STAGES[s]
        # The EdgeTPU builder expands the first block's nominal input filters, not the stem's width.
        nominal = _width(_FIRST_INPUT_FILTERS, stem_w) if exact and i == 0 else channels
        x, channels, hw = _block(g, d, i, x, (channels, nominal * expand, _width(filters, stem_w)), hw, ksize,
                                 stride if first else 1, fused, exact, skip=not exact or s > 0, cache=cache)
    head = "efficientnet/head"
    wide = _width(_HEAD_FILTERS, stem_w)
    k = g.weight(f"{head}/conv2d/kernel", channels * wide * HALF, head)
    x = conv(g, f"{head}/conv2d/Conv2D", head, x, k, b * wide * hw * hw * HALF, 2.0 * b * hw * hw * channels * wide,
             share=_cache_key(g, x, k, b * wide * hw * hw, False) if cache else None)
    x = bn_relu(g, f"{head}/bn", head, x, wide, b * hw * hw)
    return classify(g, d, head, f"{head}/dense", x, wide)


def _cache_key(g: GraphBuilder, x: int, kernel: int, outputs: int, depthwise: bool) -> str:
    """TensorFlow's convolution cache key: the input's and the weights' signatures and the parameters.

    (Graphcore's TensorFlow, ``poplar/driver/conv_graph_caching.cc``: a cached convolution is a
    ``poputil::graphfn`` function that every convolution of the same key calls, its arguments copied in.)
    """
    return f"conv/{g.tensors[x].nbytes}/{g.tensors[kernel].nbytes}/{outputs}/{depthwise}"


#: Input channels one AMP pass of a convolution takes (a half-precision input-channel group).
AMP_INPUT_CHANNELS = 16
#: fp32 partial sums a tile holds when the planner splits a convolution's input channels over tiles (calibrated on
#: the whole model's variables; docs/synthetic-profiles.md).
PARTIALS_PER_TILE = 16384
FLOAT_BYTES = 4


def conv_partials(outputs: int, inputs_per_output: int, tiles: int, planned: float = 1.0) -> int:
    """Bytes of fp32 partial sums of a convolution with ``outputs`` output elements over ``inputs_per_output`` channels.

    The planner splits the input channels over ``split`` groups of tiles,
    each producing a full set of fp32 partials that a reduction then adds:
    ``outputs x split x 4`` bytes (a kernel's positions accumulate inside
    a vertex, on one tile). It splits as far as the AMP's groups of 16
    input channels allow, but no further than fills every tile with
    ``PARTIALS_PER_TILE`` partials; a small output over many input channels
    (a late 1x1 convolution) is split the most. ``planned`` multiplies the
    split where a calibrated preset knows the planner's own choice.
    """
    groups = max(1.0, inputs_per_output / AMP_INPUT_CHANNELS)
    split = min(groups, max(1.0, tiles * PARTIALS_PER_TILE / max(1, outputs)))
    return int(outputs * max(1.0, split * planned) * FLOAT_BYTES)


def _block(g: GraphBuilder, d: Dims, i: int, x: int, widths: tuple[int, int, int], hw: int, ksize: int,
           stride: int, fused: bool, exact: bool, skip: bool, cache: bool = False) -> tuple[int, int, int]:
    """One block; ``widths`` are (input, expanded, output) channels; ``skip``: a skip connection is allowed.

    With ``exact``, as TensorFlow's EdgeTPU builder makes it: a fused
    block's k x k expansion runs at stride 1 and its 1x1 projection carries
    the stride and convolutions hold their fp32 partials. Without it, the
    first rules (the bundled fixture's).
    """
    p = f"efficientnet/blocks.{i}"
    b, (cin, mid, out) = d.batch, widths
    hw_out = max(1, hw // stride)

    def cv(name: str, y: int, ci: int, co: int, k: int, side: int, depthwise: bool = False) -> int:
        kernel = g.weight(f"{p}/{name}/kernel", (co if depthwise else ci * co) * k * k * HALF, p)
        flops = 2.0 * b * side * side * (1 if depthwise else ci) * co * k * k
        outputs = b * co * side * side
        partials = conv_partials(outputs, 1 if depthwise else ci, g.tiles, g.plan_of(p).split) if exact else None
        key = _cache_key(g, y, kernel, outputs, depthwise) if cache else None
        return conv(g, f"{p}/{name}/Conv2D", p, y, kernel, outputs * HALF, flops, temp=partials, share=key)

    def bn(name: str, y: int, channels: int, pixels: int, relu: bool = True) -> int:
        # Not cached: in the real profile the (folded) batch norm is element-wise multiplies and adds
        # (``tpu_batch_normalization/batchnorm/mul_1``, ``add_1``), not a cached norm.
        return bn_relu(g, f"{p}/{name}", p, y, channels, pixels, relu=relu)

    # The expansion's shape recurs in the next stage's first block (same input, same width), whose cached body
    # it then is: its planner choices are left as generated; only its partials split is the group's.
    g.unplanned = True
    if fused:
        side = hw if exact else hw_out  # where the stride sits: the projection (exact) or the expansion
        y = cv("conv2d", x, cin, mid, ksize, side)
        y = bn("bn", y, mid, b * side * side)
        g.unplanned = False
    else:
        y = cv("conv2d", x, cin, mid, 1, hw)
        y = bn("bn", y, mid, b * hw * hw)
        g.unplanned = False
        y = cv("depthwise_conv2d", y, mid, mid, ksize, hw_out, depthwise=True)
        y = bn("bn_1", y, mid, b * hw_out * hw_out)
    y = cv("conv2d_1", y, mid, out, 1, hw_out)
    y = bn("bn_2", y, out, b * hw_out * hw_out, relu=False)
    if skip and stride == 1 and cin == out:
        y = add(g, f"{p}/add", p, y, x)
    return y, out, hw_out
