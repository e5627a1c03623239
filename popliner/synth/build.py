"""The one entry point that declares a whole synthetic model on a graph.

It picks the builder for the spec's kind; the builders live in
:mod:`popliner.synth.models` (BERT, GPT, ResNet) and
:mod:`popliner.synth.effnet` (EfficientNet, which builds on the former's
operation helpers), so neither of them has to import the other back.
"""

from __future__ import annotations

from popliner.synth.effnet import efficientnet
from popliner.synth.graph import GraphBuilder
from popliner.synth.models import Dims, bert, gpt, loss_and_backward, resnet
from popliner.synth.spec import SynthSpec

__all__ = ["build_model"]


def build_model(g: GraphBuilder, spec: SynthSpec) -> None:
    """Declare the whole model of ``spec`` on ``g``."""
    d = Dims(spec.batch, spec.seq, spec.hidden, spec.heads, spec.vocab, spec.training, spec.checkpoints)
    if spec.kind == "encoder":
        out = bert(g, d, spec.layers, spec.head, spec.reference_bert, tied=not spec.untied_head)
    elif spec.kind == "decoder":
        out = gpt(g, d, spec.layers, tied=not spec.untied_head)
    elif spec.kind == "efficientnet":
        out = efficientnet(g, d, spec.layers, spec.edgetpu_builder, spec.shape_cache)
    else:
        out = resnet(g, d, spec.layers)
    logits, rows, classes = out
    if spec.training:
        loss_and_backward(g, logits, rows, classes)
    else:
        g.stream_out(logits)
