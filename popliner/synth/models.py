"""Model builders: BERT-like encoders, GPT-like decoders, ResNet-like CNNs.

Each builder declares the forward graph on a :class:`GraphBuilder`; in
training mode it then adds a loss and calls ``backward``. Operation names
are docs/synthetic-profiles.md's ("Names"): the default layer regex finds
one layer number per block.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

from popliner.synth.graph import GradRule, GraphBuilder

__all__ = ["bert", "gpt", "loss_and_backward", "resnet"]

HALF = 2
FLOAT = 4
INT = 4


@dataclass(frozen=True)
class Dims:
    batch: int
    seq: int
    hidden: int
    heads: int
    vocab: int
    training: bool
    #: A recomputation checkpoint after every layer (``SynthSpec.checkpoints``).
    checkpoints: bool = False

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    @property
    def act(self) -> int:
        """Bytes of one [tokens, hidden] half activation."""
        return self.tokens * self.hidden * HALF

    @property
    def scores(self) -> int:
        """Bytes of one [batch, heads, seq, seq] half attention tensor."""
        return self.batch * self.heads * self.seq * self.seq * HALF


# -- operation helpers: each declares one forward op and its gradient rules ---------


#: Dense layers whose output or weight exceeds this are serialised (PopART's
#: serialised matmul): one body called once per slice, up to 8 slices.
SERIALISE_BYTES = 2 << 20


def serial_factor(nbytes: int) -> int:
    return int(min(8, max(1, round(nbytes / SERIALISE_BYTES))))


def matmul(g: GraphBuilder, name: str, group: str, a: int, b: int, m: int, k: int, n: int,
           share: str | None = None) -> int:
    """A dense layer ``[m, k] x [k, n]``; large ones are serialised into several calls."""
    calls = serial_factor(max(m * n, k * n) * HALF)
    lhs = GradRule("_grad/MatMulLhsGrad", "MatMulLhsGrad", "matmul", 0, ("i1",), share=True, calls=calls)
    rhs = GradRule("_grad/MatMulRhsGrad", "MatMulRhsGrad", "matmul_rhs_grad", 1, ("i0",), calls=calls)
    return g.op(name, "MatMul", "matmul", group, [a, b], [(":0", m * n * HALF)], 2.0 * m * k * n,
                grads=(lhs, rhs), share=share, calls=calls)[0]


def dense(g: GraphBuilder, name: str, group: str, x: int, rows: int, k: int, n: int) -> int:
    """The dense layer ``name`` (``[rows, k] x [k, n]`` plus a bias): its kernel and bias made first."""
    w, b = g.weight(f"{name}/kernel", k * n * HALF, group), g.weight(f"{name}/bias", n * HALF, group)
    return bias_add(g, f"{name}/BiasAdd", group, matmul(g, f"{name}/MatMul", group, x, w, rows, k, n), b)


def bias_add(g: GraphBuilder, name: str, group: str, x: int, bias: int) -> int:
    nbytes = g.tensors[x].nbytes
    rules = (GradRule("", "Identity", "identity", 0), GradRule("_grad/BiasGrad", "ReduceSum", "bias_grad", 1))
    return g.op(name, "Add", "bias_add", group, [x, bias], [(":0", nbytes)], 2 * nbytes, grads=rules)[0]


def add(g: GraphBuilder, name: str, group: str, a: int, b: int, broadcast: bool = False) -> int:
    """Residual add; with ``broadcast`` ``b`` is smaller and its gradient is a reduction."""
    nbytes = g.tensors[a].nbytes
    rule_b = GradRule("_grad/ReduceGrad", "ReduceSum", "bias_grad", 1) if broadcast else GradRule(
        "", "Identity", "identity", 1)
    return g.op(name, "Add", "add", group, [a, b], [(":0", nbytes)], 3 * nbytes,
                grads=(GradRule("", "Identity", "identity", 0), rule_b))[0]


def unary(g: GraphBuilder, name: str, op_type: str, kind: str, group: str, x: int, grad: GradRule | None) -> int:
    nbytes = g.tensors[x].nbytes
    rules = (grad,) if grad else ()
    return g.op(name, op_type, kind, group, [x], [(":0", nbytes)], 2 * nbytes, grads=rules)[0]


def checkpoint(g: GraphBuilder, d: Dims, scope: str, x: int) -> int:
    """The layer's output through a recomputation checkpoint (with ``d.checkpoints``; else ``x`` itself).

    PopTorch's ``recomputationCheckpoint`` becomes PopART's ``checkpointOutput``:
    an ``Identity`` named ``Checkpoint`` in the layer's scope, a copy of the
    tensor whose gradient passes straight through.
    """
    if not d.checkpoints:
        return x
    nbytes = g.tensors[x].nbytes
    return g.op(f"{scope}/Checkpoint", "Identity", "checkpoint", scope, [x], [(":0", nbytes)], nbytes,
                grads=(GradRule("", "Identity", "identity", 0),))[0]


def dropout(g: GraphBuilder, name: str, group: str, x: int, share: str | None = None) -> int:
    nbytes = g.tensors[x].nbytes
    rule = GradRule("/DropoutGrad", "DropoutGrad", "dropout_grad", 0, ("o1",))
    # The mask (one byte per element) stays live until the backward pass reads it.
    return g.op(name, "Dropout", "dropout", group, [x], [(":0", nbytes), ("/mask", nbytes // HALF)], 3 * nbytes,
                grads=(rule,), share=share)[0]


def norm(g: GraphBuilder, name: str, op_type: str, group: str, x: int, gamma: int, beta: int, rows: int,
         share: str | None = None, extra: tuple[int, ...] = ()) -> int:
    """LayerNorm / BatchNorm: outputs the result and the saved mean and inverse std dev."""
    nbytes = g.tensors[x].nbytes
    kind = "layernorm" if op_type == "LayerNorm" else "batchnorm"
    saved = ("i0", "i1", "o1", "o2")
    rules = (
        GradRule(f"/{op_type}Grad", f"{op_type}Grad", f"{kind}_grad", 0, saved, share=True),
        GradRule(f"/{op_type}Grad/ScaleGrad", "ReduceSum", "bias_grad", 1, ("i0", "o1", "o2"), work=0.5),
        GradRule(f"/{op_type}Grad/BiasGrad", "ReduceSum", "bias_grad", 2, (), work=0.3),
    )
    outs = [(":0", nbytes), ("/mean", rows * FLOAT), ("/invStdDev", rows * FLOAT)]
    return g.op(name, op_type, kind, group, [x, gamma, beta, *extra], outs, 5 * nbytes, grads=rules,
                share=share)[0]


def layer_norm(g: GraphBuilder, d: Dims, scope: str, group: str, x: int, rows: int, share: str | None = None,
               weights: str | None = None) -> int:
    """``{scope}/LayerNorm`` of ``x``; its gamma and beta, made first, under ``weights`` (default: its own name)."""
    w = f"{scope}/LayerNorm" if weights is None else weights
    gamma, beta = g.weight(f"{w}/gamma", d.hidden * HALF, group), g.weight(f"{w}/beta", d.hidden * HALF, group)
    return norm(g, f"{scope}/LayerNorm", "LayerNorm", group, x, gamma, beta, rows, share=share)


def gather(g: GraphBuilder, name: str, group: str, table: int, ids: int, out_bytes: int) -> int:
    rule = GradRule("/GatherGrad", "GatherGrad", "gather_grad", 0, ("i1",), work=2.0)
    return g.op(name, "Gather", "gather", group, [table, ids], [(":0", out_bytes)], 2 * out_bytes, grads=(rule,))[0]


def conv(g: GraphBuilder, name: str, group: str, x: int, kernel: int, out_bytes: int, flops: float,
         temp: int | None = None, share: str | None = None) -> int:
    rules = (GradRule("_grad/ConvDataGrad", "ConvDataGrad", "conv_data_grad", 0, ("i1",)),
             GradRule("_grad/ConvWeightsGrad", "ConvWeightsGrad", "conv_weight_grad", 1, ("i0",)))
    return g.op(name, "Conv", "conv", group, [x, kernel], [(":0", out_bytes)], flops, grads=rules, temp=temp,
                share=share)[0]


def loss_and_backward(g: GraphBuilder, logits: int, rows: int, classes: int) -> None:
    labels = g.stream_in("labels", rows * INT)
    seed = g.const("lossScaling_FLOAT16", HALF)
    g.phase = "loss"
    rule = GradRule("_grad", "SoftmaxCrossEntropyGrad", "loss_grad", 0, ("i0", "i1"))
    (loss,) = g.op("Loss/SoftmaxCrossEntropy", "SoftmaxCrossEntropy", "loss", "Loss", [logits, labels],
                   [(":0", FLOAT)], 6.0 * rows * classes * FLOAT, grads=(rule,))
    g.backward(loss, seed)


# -- BERT-like encoder --------------------------------------------------------------


def bert(g: GraphBuilder, d: Dims, layers: int, head_kind: str, reference: bool,
         tied: bool = True) -> tuple[int, int, int]:
    x, mask, word = _bert_embeddings(g, d, reference)
    for i in range(layers):
        x = _bert_layer(g, d, i, x, mask)
    if head_kind == "mlm":
        return _bert_mlm_head(g, d, x, word, tied)
    head = "bert/squad"
    w = g.weight(f"{head}/dense/kernel", d.hidden * 2 * HALF, head)
    b = g.weight(f"{head}/dense/bias", 2 * HALF, head)
    logits = matmul(g, f"{head}/dense/MatMul", head, x, w, d.tokens, d.hidden, 2)
    if reference:
        # The reference SQuAD head reads the encoder's output through Reshapes (views, no program)
        # whose names carry no layer.
        g.ops[g.tensors[logits].producer].shown_inputs[x] = "bert/encoder/Reshape:0"
    logits = bias_add(g, f"{head}/dense/BiasAdd", head, logits, b)
    if reference:
        # [batch, seq, 2] -> [2, batch, seq], then unstacked into start and end logits.
        logits = unary(g, f"{head}/transpose", "Transpose", "transpose", head, logits,
                       GradRule("/TransposeGrad", "Transpose", "transpose", 0))
    return logits, 2 * d.batch, d.seq


def masked_tokens(seq: int) -> int:
    """Masked positions per sequence in pretraining: 15% of the tokens, rounded up (20 at 128)."""
    return max(1, -(-15 * seq // 100))


def _bert_mlm_head(g: GraphBuilder, d: Dims, x: int, word: int, tied: bool) -> tuple[int, int, int]:
    """The masked-LM head of pretraining: only the masked positions are gathered and classified, over
    the whole vocabulary, by a decoder tied to the word embedding (untied: a decoder weight of its own);
    the next-sentence head is left out."""
    h = "bert/cls/predictions"
    rows = d.batch * masked_tokens(d.seq)
    positions = g.stream_in("masked_lm_positions", rows * INT)
    y = gather(g, f"{h}/GatherMasked", h, x, positions, rows * d.hidden * HALF)
    y = dense(g, f"{h}/transform/dense", h, y, rows, d.hidden, d.hidden)
    y = unary(g, f"{h}/transform/Gelu", "Gelu", "gelu", h, y,
              GradRule("/GeluGrad", "GeluGrad", "gelu_grad", 0, ("i0",)))
    y = layer_norm(g, d, f"{h}/transform", h, y, rows)
    if not tied:
        word = g.weight(f"{h}/decoder/kernel", d.vocab * d.hidden * HALF, h)
    logits = matmul(g, f"{h}/decoder/MatMul", h, y, word, rows, d.hidden, d.vocab)
    logits = bias_add(g, f"{h}/decoder/BiasAdd", h, logits, g.weight(f"{h}/output_bias", d.vocab * HALF, h))
    return logits, rows, d.vocab


def _bert_embeddings(g: GraphBuilder, d: Dims, reference: bool) -> tuple[int, int, int]:
    e = "bert/embeddings"
    ids = g.stream_in("input_ids", d.tokens * INT)
    seg = g.stream_in("segment_ids", d.tokens * INT)
    input_mask = g.stream_in("input_mask", d.tokens * INT)
    pos = g.const("position_ids", d.seq * INT)
    word = g.weight(f"{e}/word_embeddings", d.vocab * d.hidden * HALF, e)
    posw = g.weight(f"{e}/position_embeddings", max(512, d.seq) * d.hidden * HALF, e)
    typ = g.weight(f"{e}/token_type_embeddings", 2 * d.hidden * HALF, e)
    x = gather(g, f"{e}/Gather", e, word, ids, d.act)
    if reference:
        # Google's reference BERT (modeling.py) looks token types up by a one-hot matmul.
        (one_hot,) = g.op(f"{e}/one_hot", "OneHot", "one_hot", e, [seg], [(":0", d.tokens * 2 * HALF)],
                          2 * d.tokens * 2 * HALF)
        t = matmul(g, f"{e}/MatMul", e, one_hot, typ, d.tokens, 2, d.hidden)
    else:
        t = gather(g, f"{e}/Gather_1", e, typ, seg, d.act)
    p = gather(g, f"{e}/Gather_2", e, posw, pos, d.seq * d.hidden * HALF)
    x = add(g, f"{e}/add", e, x, t)
    x = add(g, f"{e}/add_1", e, x, p, broadcast=True)
    x = layer_norm(g, d, e, e, x, d.tokens)
    if d.training:
        x = dropout(g, f"{e}/dropout/Dropout", e, x)
    # The additive attention mask: a Call with no layer anywhere (only input_mask).
    m = "bert/encoder/AttentionMask"
    (mask,) = g.op(f"{m}/Cast", "Cast", "cast", m, [input_mask], [(":0", d.tokens * HALF)], 3 * d.tokens * HALF,
                   share="attention-mask")
    if reference:
        # The reference builds it once for all layers, broadcast to [batch, seq, seq].
        full = d.batch * d.seq * d.seq * HALF
        (mask,) = g.op(f"{m}/mul", "Mul", "broadcast_mul", m, [mask], [(":0", full)], 3 * full)
    return x, mask, word


def _bert_layer(g: GraphBuilder, d: Dims, i: int, x: int, mask: int) -> int:
    p = f"bert/encoder/layer_{i}"
    hh, h4 = d.hidden * d.hidden * HALF, 4 * d.hidden * d.hidden * HALF
    w = {n: g.weight(f"{p}/{n}/kernel", hh, p) for n in
         ("attention/self/query", "attention/self/key", "attention/self/value", "attention/output/dense")}
    bias = {n: g.weight(f"{p}/{n}/bias", d.hidden * HALF, p) for n in w}
    # Q, K and V have the same shape: PopART outlines them into one shared body.
    qkv = []
    for n in ("query", "key", "value"):
        y = matmul(g, f"{p}/attention/self/{n}/MatMul", p, x, w[f"attention/self/{n}"], d.tokens, d.hidden,
                   d.hidden, share=f"{p}/projection")
        qkv.append(bias_add(g, f"{p}/attention/self/{n}/BiasAdd", p, y, bias[f"attention/self/{n}"]))
    q, k, v = qkv
    ctx = _attention(g, d, p + "/attention/self", k, q, v, mask)
    o = matmul(g, f"{p}/attention/output/dense/MatMul", p, ctx, w["attention/output/dense"], d.tokens, d.hidden,
               d.hidden, share=f"{p}/projection")
    o = bias_add(g, f"{p}/attention/output/dense/BiasAdd", p, o, bias["attention/output/dense"])
    if d.training:
        o = dropout(g, f"{p}/attention/output/dropout/Dropout", p, o, share=f"{p}/dropout")
    o = add(g, f"{p}/attention/output/add", p, o, x)
    a = layer_norm(g, d, f"{p}/attention/output", p, o, d.tokens, share=f"{p}/layernorm")
    w1 = g.weight(f"{p}/intermediate/dense/kernel", h4, p)
    b1 = g.weight(f"{p}/intermediate/dense/bias", 4 * d.hidden * HALF, p)
    w2 = g.weight(f"{p}/output/dense/kernel", h4, p)
    b2 = g.weight(f"{p}/output/dense/bias", d.hidden * HALF, p)
    f = matmul(g, f"{p}/intermediate/dense/MatMul", p, a, w1, d.tokens, d.hidden, 4 * d.hidden)
    f = bias_add(g, f"{p}/intermediate/dense/BiasAdd", p, f, b1)
    f = unary(g, f"{p}/intermediate/Gelu", "Gelu", "gelu", p, f,
              GradRule("/GeluGrad", "GeluGrad", "gelu_grad", 0, ("i0",)))
    f = matmul(g, f"{p}/output/dense/MatMul", p, f, w2, d.tokens, 4 * d.hidden, d.hidden)
    f = bias_add(g, f"{p}/output/dense/BiasAdd", p, f, b2)
    if d.training:
        f = dropout(g, f"{p}/output/dropout/Dropout", p, f, share=f"{p}/dropout")
    f = add(g, f"{p}/output/add", p, f, a)
    return checkpoint(g, d, p, layer_norm(g, d, f"{p}/output", p, f, d.tokens, share=f"{p}/layernorm"))


def _attention(g: GraphBuilder, d: Dims, p: str, k: int, q: int, v: int, mask: int, causal: int = -1) -> int:
    """Scores, scale, mask, softmax, dropout and context: the [heads, seq, seq] part."""
    group = p.split("/attention")[0].split("/attn")[0]
    # The key transpose has a generic name: its layer shows only in its inputs.
    kt = unary(g, g.generic("Transpose"), "Transpose", "transpose", group, k,
               GradRule("/TransposeGrad", "Transpose", "transpose", 0))
    flops = 2.0 * d.batch * d.seq * d.seq * d.hidden
    s = g.op(f"{p}/MatMul", "MatMul", "bmm", group, [q, kt], [(":0", d.scores)], flops,
             grads=(GradRule("_grad/MatMulLhsGrad", "MatMulLhsGrad", "bmm", 0, ("i1",)),
                    GradRule("_grad/MatMulRhsGrad", "MatMulRhsGrad", "bmm", 1, ("i0",))))[0]
    s = unary(g, f"{p}/Mul", "Mul", "scale", group, s, GradRule("/MulGrad", "Mul", "scale", 0))
    if causal >= 0:
        s = g.op(f"{p}/Where", "Where", "select", group, [s, causal], [(":0", d.scores)], 3 * d.scores,
                 grads=(GradRule("/WhereGrad", "Where", "select", 0, ("i1",)),))[0]
    s = g.op(f"{p}/add", "Add", "mask_add", group, [s, mask], [(":0", d.scores)], 3 * d.scores,
             grads=(GradRule("", "Identity", "identity", 0),))[0]
    s = unary(g, f"{p}/Softmax", "Softmax", "softmax", group, s,
              GradRule("/SoftmaxGrad", "SoftmaxGrad", "softmax_grad", 0, ("o0",)))
    if d.training:
        s = dropout(g, f"{p}/dropout/Dropout", group, s)
    return g.op(f"{p}/MatMul_1", "MatMul", "bmm", group, [s, v], [(":0", d.act)], flops,
                grads=(GradRule("_grad/MatMulLhsGrad", "MatMulLhsGrad", "bmm", 0, ("i1",)),
                       GradRule("_grad/MatMulRhsGrad", "MatMulRhsGrad", "bmm", 1, ("i0",))))[0]


# -- GPT-like decoder ---------------------------------------------------------------


def gpt(g: GraphBuilder, d: Dims, layers: int, tied: bool = True) -> tuple[int, int, int]:
    ids = g.stream_in("input_ids", d.tokens * INT)
    pos = g.const("position_ids", d.seq * INT)
    causal = g.const("causal_mask", d.seq * d.seq)
    mask = g.const("attention_bias", d.seq * d.seq * HALF)
    wte = g.weight("gpt2/wte/word_embeddings", d.vocab * d.hidden * HALF, "gpt2/wte")
    wpe = g.weight("gpt2/wpe/position_embeddings", d.seq * d.hidden * HALF, "gpt2/wpe")
    x = gather(g, "gpt2/wte/Gather", "gpt2/wte", wte, ids, d.act)
    p = gather(g, "gpt2/wpe/Gather", "gpt2/wpe", wpe, pos, d.seq * d.hidden * HALF)
    x = add(g, "gpt2/embeddings/add", "gpt2/embeddings", x, p, broadcast=True)
    if d.training:
        x = dropout(g, "gpt2/embeddings/dropout/Dropout", "gpt2/embeddings", x)
    for i in range(layers):
        x = _gpt_block(g, d, i, x, mask, causal)
    x = layer_norm(g, d, "gpt2/ln_f", "gpt2/ln_f", x, d.tokens, weights="gpt2/ln_f")
    # The LM head reuses the word-embedding table (tied weights), or has a weight of its own (untied).
    w = wte if tied else g.weight("gpt2/lm_head/kernel", d.vocab * d.hidden * HALF, "gpt2/lm_head")
    logits = matmul(g, "gpt2/lm_head/MatMul", "gpt2/lm_head", x, w, d.tokens, d.hidden, d.vocab)
    return logits, d.tokens, d.vocab


def _gpt_block(g: GraphBuilder, d: Dims, i: int, x: int, mask: int, causal: int) -> int:
    p = f"gpt2/blocks/{i}"

    a = layer_norm(g, d, f"{p}/ln_1", p, x, d.tokens, share=f"{p}/ln", weights=f"{p}/ln_1")
    qkv = dense(g, f"{p}/attn/c_attn", p, a, d.tokens, d.hidden, 3 * d.hidden)
    ctx = _attention(g, d, f"{p}/attn", qkv, qkv, qkv, mask, causal)
    o = dense(g, f"{p}/attn/c_proj", p, ctx, d.tokens, d.hidden, d.hidden)
    if d.training:
        o = dropout(g, f"{p}/attn/dropout/Dropout", p, o, share=f"{p}/dropout")
    x = add(g, f"{p}/add", p, x, o)
    m = layer_norm(g, d, f"{p}/ln_2", p, x, d.tokens, share=f"{p}/ln", weights=f"{p}/ln_2")
    h = dense(g, f"{p}/mlp/c_fc", p, m, d.tokens, d.hidden, 4 * d.hidden)
    h = unary(g, f"{p}/mlp/Gelu", "Gelu", "gelu", p, h, GradRule("/GeluGrad", "GeluGrad", "gelu_grad", 0, ("i0",)))
    h = dense(g, f"{p}/mlp/c_proj", p, h, d.tokens, 4 * d.hidden, d.hidden)
    if d.training:
        h = dropout(g, f"{p}/mlp/dropout/Dropout", p, h, share=f"{p}/dropout")
    return checkpoint(g, d, p, add(g, f"{p}/add_1", p, x, h))


# -- ResNet-like CNN ----------------------------------------------------------------

#: Blocks per stage in ResNet-50; other depths are spread in the same proportion.
_STAGES = (3, 4, 6, 3)


def stage_of(block: int, blocks: int, repeats: tuple[int, ...]) -> int:
    """The stage of ``block`` among ``blocks``, spread over stages of ``repeats`` blocks in proportion."""
    pos = (block + 0.5) * sum(repeats) / blocks
    return min(bisect.bisect_right(list(itertools.accumulate(repeats)), pos), len(repeats) - 1)


def resnet(g: GraphBuilder, d: Dims, blocks: int) -> tuple[int, int, int]:
    """``hidden`` is the stem width, ``seq`` the image side, ``vocab`` the classes."""
    width, side, b = d.hidden, d.seq, d.batch
    img = g.stream_in("image", b * 3 * side * side * HALF)
    stem = "resnet/stem"
    hw = side // 2
    k = g.weight(f"{stem}/conv1/kernel", 3 * width * 49 * HALF, stem)
    x = conv(g, f"{stem}/conv1/Conv2D", stem, img, k, b * width * hw * hw * HALF, 2.0 * b * hw * hw * 3 * width * 49)
    x = bn_relu(g, f"{stem}/bn", stem, x, width, b * hw * hw)
    hw //= 2
    x = g.op(f"{stem}/MaxPool", "MaxPool", "maxpool", stem, [x], [(":0", g.tensors[x].nbytes // 4)],
             g.tensors[x].nbytes, grads=(GradRule("/MaxPoolGrad", "MaxPoolGrad", "maxpool_grad", 0, ("i0", "o0")),))[0]
    channels = width
    for i in range(blocks):
        stage = stage_of(i, blocks, _STAGES)
        first = i == 0 or stage_of(i - 1, blocks, _STAGES) != stage
        stride = 2 if first and i > 0 else 1
        x, channels, hw = _bottleneck(g, d, i, x, channels, width << stage, hw, stride, first)
    return classify(g, d, "resnet/head", "resnet/head/fc", x, channels)


def classify(g: GraphBuilder, d: Dims, head: str, fc: str, x: int, channels: int) -> tuple[int, int, int]:
    """A CNN's head: global average pooling, then the dense layer ``fc`` to the classes."""
    pooled = g.op(f"{head}/AvgPool", "GlobalAveragePool", "avgpool", head, [x], [(":0", d.batch * channels * HALF)],
                  g.tensors[x].nbytes, grads=(GradRule("/AveragePoolGrad", "AveragePoolGrad", "avgpool_grad", 0),))[0]
    return dense(g, fc, head, pooled, d.batch, channels, d.vocab), d.batch, d.vocab


def bn_relu(g: GraphBuilder, name: str, group: str, x: int, channels: int, pixels: int,
             share: str | None = None, relu: bool = True) -> int:
    gamma = g.weight(f"{name}/gamma", channels * HALF, group)
    beta = g.weight(f"{name}/beta", channels * HALF, group)
    stats = (g.state(f"{name}/moving_mean", channels * FLOAT, group),
             g.state(f"{name}/moving_variance", channels * FLOAT, group))
    y = norm(g, f"{name}/BatchNorm", "BatchNorm", group, x, gamma, beta, channels, share=share, extra=stats)
    if not relu:
        return y
    return unary(g, f"{name}/Relu", "Relu", "relu", group, y,
                 GradRule("/ReluGrad", "ReluGrad", "relu_grad", 0, ("o0",)))


def _bottleneck(g: GraphBuilder, d: Dims, i: int, x: int, cin: int, mid: int, hw: int, stride: int,
                first: bool) -> tuple[int, int, int]:
    p = f"resnet/blocks.{i}"
    b, out = d.batch, 4 * mid
    hw_out = max(1, hw // stride)

    def cv(name: str, y: int, ci: int, co: int, ksize: int, side: int) -> int:
        k = g.weight(f"{p}/{name}/kernel", ci * co * ksize * ksize * HALF, p)
        flops = 2.0 * b * side * side * ci * co * ksize * ksize
        return conv(g, f"{p}/{name}/Conv2D", p, y, k, b * co * side * side * HALF, flops)

    y = cv("conv1", x, cin, mid, 1, hw)
    y = bn_relu(g, f"{p}/bn1", p, y, mid, b * hw * hw, share=f"{p}/bn/{b * hw * hw}")
    y = cv("conv2", y, mid, mid, 3, hw_out)
    y = bn_relu(g, f"{p}/bn2", p, y, mid, b * hw_out * hw_out, share=f"{p}/bn/{b * hw_out * hw_out}")
    y = cv("conv3", y, mid, out, 1, hw_out)
    y = bn_relu(g, f"{p}/bn3", p, y, out, b * hw_out * hw_out, relu=False)
    shortcut = x
    if first:
        shortcut = cv("shortcut", x, cin, out, 1, hw_out)
        shortcut = bn_relu(g, f"{p}/shortcut_bn", p, shortcut, out, b * hw_out * hw_out, relu=False)
    y = add(g, f"{p}/add", p, y, shortcut)
    y = unary(g, f"{p}/Relu", "Relu", "relu", p, y, GradRule("/ReluGrad", "ReluGrad", "relu_grad", 0, ("o0",)))
    return y, out, hw_out
