"""Vertex types and the lowering recipe ("kernel") of each kind of operation.

Names follow the poplibs codelets a real compile uses. The same vertex type is
deliberately reused by several kinds of operation (a ``ScaledAddSupervisor``
serves the optimizer and the layer norm gradient, ``ConvPartial1x1Out`` serves
every matmul), because code is stored once per tile per type: which operations
share a tile decides how much code a pipeline stage needs.

A kernel is a list of phases; each phase is an optional exchange followed by
one compute set. At scale 1 a kernel has ``pre + repeats + post`` phases; the
generator stretches or thins the ``main`` phase to follow ``scale``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = ["KERNELS", "Kernel", "Phase", "VertexType"]


@dataclass(frozen=True)
class VertexType:
    name: str
    size: int  # bytes of state per instance
    code: int  # bytes of code on a tile where the type is present
    per_tile: int  # usual instances on a tile in one compute set (1 for supervisor vertices)


@dataclass(frozen=True)
class Phase:
    #: (vertex type, coverage): where on the operation's tiles it is placed. all: every tile; head: the first
    #: half; few: up to 4 tiles; strided: every 8th tile.
    vertices: tuple[tuple[VertexType, str], ...]
    exchange: bool = True  # a DoExchange runs before the compute set
    weight: float = 1.0  # share of the operation's compute cycles
    label: str = "Compute"


@dataclass(frozen=True)
class Kernel:
    context: str  # name of the poplibs debug context the compute sets hang off
    main: Phase
    repeats: int  # main phases at scale 1
    pre: tuple[Phase, ...] = ()
    post: tuple[Phase, ...] = ()
    bound: str = "bytes"  # "flops": work is FLOPs; "bytes": work is bytes touched
    exchange_code: int = 32  # exchange code bytes per tile of one DoExchange at scale 1
    temp_factor: float = 0.0  # temporaries, as a multiple of the largest output
    jitter: bool = False  # data-dependent per-tile cycles (dense cycle vectors)
    loop: int = 0  # > 0: the main phases run inside a Repeat of this count

    @property
    def base_phases(self) -> int:
        return len(self.pre) + self.repeats + len(self.post)


# The vertex types, by the short names the kernel table below uses.
CONV11 = VertexType("poplin::ConvPartial1x1Out<half,float,true,false,6>", 40, 3712, 1)
CONV11H = VertexType("poplin::ConvPartial1x1Out<half,half,true,false,6>", 40, 3488, 1)
CONVN1 = VertexType("poplin::ConvPartialnx1<half,float,true,false,6,4>", 48, 4096, 1)
HMAC = VertexType("poplin::ConvPartialHorizontalMac<half,float,true>", 36, 2840, 1)
RED_PARTIALS = VertexType("poplin::ReduceAdd<float,half,false,false>", 24, 1320, 2)
TRANSPOSE = VertexType("popops::Transpose2d<half>", 16, 1104, 2)
RED_ADD = VertexType(
    "popops::Reduce<popops::ReduceAdd,half,float,false,popops::ReductionSpecialisation::DEFAULT>", 28, 1980, 2)
RED_ADD_F = VertexType(
    "popops::Reduce<popops::ReduceAdd,float,float,false,popops::ReductionSpecialisation::STRIDED_REDUCE>", 28, 1712, 1)
RED_MAX = VertexType(
    "popops::Reduce<popops::ReduceMax,half,half,false,popops::ReductionSpecialisation::STRIDED_REDUCE>", 28, 1650, 1)
RED_SQ = VertexType(
    "popops::Reduce<popops::ReduceSquareAdd,half,float,false,popops::ReductionSpecialisation::DEFAULT>", 28, 2044, 2)
CAST_FH = VertexType("popops::Cast1DSupervisor<float,half>", 16, 612, 1)
CAST_HF = VertexType("popops::Cast1DSupervisor<half,float>", 16, 580, 1)
ADD = VertexType("popops::BinaryOp1DInPlaceSupervisor<popops::expr::BinaryOpType::ADD,half>", 12, 446, 1)
MUL = VertexType("popops::BinaryOp1DSupervisor<popops::expr::BinaryOpType::MULTIPLY,half>", 16, 470, 1)
MUL_F = VertexType("popops::BinaryOp1DSupervisor<popops::expr::BinaryOpType::MULTIPLY,float>", 16, 452, 1)
DIV_F = VertexType("popops::BinaryOp1DSupervisor<popops::expr::BinaryOpType::DIVIDE,float>", 16, 738, 1)
SCALAR_MUL = VertexType(
    "popops::BroadcastScalar1DInPlaceSupervisor<popops::expr::BinaryOpType::MULTIPLY,half>", 12, 388, 1)
BIAS_ADD = VertexType("popops::BroadcastVectorInnerInPlaceSupervisor<popops::expr::BinaryOpType::ADD,half>", 16, 824, 1)
ROW_ADD = VertexType(
    "popops::BroadcastVectorOuterByRowInPlaceSupervisor<popops::expr::BinaryOpType::ADD,half,false>", 20, 902, 1)
EXP = VertexType("popops::UnaryOp1DSupervisor<popops::expr::UnaryOpType::EXPONENT,float>", 12, 964, 1)
SQRT = VertexType("popops::UnaryOp1DSupervisor<popops::expr::UnaryOpType::SQRT,float>", 12, 690, 1)
SADD = VertexType("popops::ScaledAddSupervisor<half,half,half,true>", 20, 536, 1)
SADD_F = VertexType("popops::ScaledAddSupervisor<float,float,float,true>", 20, 508, 1)
SADD_HF = VertexType("popops::ScaledAddSupervisor<half,float,half,true>", 20, 574, 1)
SSUB = VertexType("popops::ScaledSubtractSupervisor<half,half,half,true>", 20, 540, 1)
INV_STD = VertexType("poplin::InverseStdDeviation<float,float,half,true>", 24, 860, 6)
CH_MUL = VertexType("popops::ChannelMul2D<half>", 24, 1240, 2)
CH_ADD = VertexType("popops::AddToChannel2D<half>", 24, 1176, 2)
CH_SADD = VertexType("popops::ScaledAddToChannel2D<half,half>", 24, 1230, 2)
GELU = VertexType("popnn::NonLinearitySupervisor<half,popnn::NonLinearityType::GELU>", 12, 1290, 1)
GELU_GRAD = VertexType("popnn::NonLinearityGradSupervisor<half,popnn::NonLinearityType::GELU>", 16, 1436, 1)
RELU = VertexType("popnn::NonLinearitySupervisor<half,popnn::NonLinearityType::RELU>", 12, 402, 1)
RELU_GRAD = VertexType("popnn::NonLinearityGradSupervisor<half,popnn::NonLinearityType::RELU>", 16, 488, 1)
DROPOUT = VertexType("poprand::DropoutSupervisor<half>", 16, 820, 1)
SLICE = VertexType("popops::MultiSlice<half,true>", 32, 1010, 1)
UPDATE_ADD = VertexType("popops::MultiUpdateAdd<half,true>", 36, 1286, 1)
FILL_H = VertexType("popops::Fill<half>", 12, 244, 1)
FILL_F = VertexType("popops::Fill<float>", 12, 236, 1)
SELECT = VertexType("popops::Select<half>", 20, 376, 6)
ONE_HOT = VertexType("popops::EncodeOneHot<unsigned int,half>", 24, 530, 1)
XENT = VertexType("popnn::LossCrossEntropyTransform<float>", 24, 690, 6)
MAX_CLASS = VertexType("popnn::ReduceMaxClassGather<float,unsigned int>", 28, 612, 1)
MAXPOOL = VertexType("popnn::MaxPooling<half>", 40, 1460, 1)
MAXPOOL_GRAD = VertexType("popnn::MaxPoolingGrad<half>", 44, 1720, 1)
SUMPOOL = VertexType("popnn::SumPooling<half>", 40, 1250, 1)


def _p(*vertices: tuple[VertexType, str], exchange: bool = True, weight: float = 1.0, label: str = "Compute") -> Phase:
    return Phase(vertices, exchange, weight, label)


def _matmul_like(context: str, partial: VertexType, temp: float) -> Kernel:
    return Kernel(
        context=context,
        pre=(_p((TRANSPOSE, "head"), weight=0.1, label="Transpose"),),
        main=_p((partial, "all"), label="Convolve"),
        repeats=7,
        post=(_p((RED_PARTIALS, "all"), weight=0.2, label="Reduce"),
              _p((CAST_FH, "head"), exchange=False, weight=0.05, label="Cast")),
        bound="flops",
        exchange_code=40,
        temp_factor=temp,
    )


def _elementwise(context: str, vertex: VertexType, exchange: bool = False, repeats: int = 2) -> Kernel:
    return Kernel(context=context, main=_p((vertex, "all"), exchange=exchange), repeats=repeats, exchange_code=20)


def _norm(context: str, apply_vertex: VertexType, affine: VertexType) -> Kernel:
    return Kernel(
        context=context,
        pre=(_p((RED_SQ, "all"), (RED_ADD_F, "strided"), weight=0.4, label="Statistics"),
             _p((INV_STD, "few"), exchange=False, weight=0.05, label="InvStdDev")),
        main=_p((apply_vertex, "all"), label="Normalise"),
        repeats=2,
        post=(_p((affine, "all"), exchange=False, weight=0.5, label="Affine"),),
        exchange_code=28,
        temp_factor=0.05,
    )


def _norm_grad(context: str, channel: VertexType) -> Kernel:
    return Kernel(
        context=context,
        pre=(_p((RED_ADD, "all"), (RED_ADD_F, "strided"), weight=0.4, label="GradStatistics"),),
        main=_p((channel, "all"), (MUL, "all"), label="Normalise"),
        repeats=2,
        post=(_p((SADD, "all"), exchange=False, weight=0.5, label="ScaledAdd"),
              _p((RED_ADD, "head"), weight=0.3, label="ParamGrads")),
        exchange_code=28,
        temp_factor=0.5,
    )


_KERNELS: dict[str, Kernel] = {
    "matmul": _matmul_like("matMul", CONV11, 2.0),
    "bmm": _matmul_like("matMulGrouped", CONV11H, 1.0),
    "matmul_rhs_grad": _matmul_like("matMulWeightGrad", HMAC, 2.0),
    "conv": _matmul_like("convolution", CONVN1, 1.5),
    "conv_data_grad": _matmul_like("convolutionDataGrad", CONVN1, 1.5),
    "conv_weight_grad": _matmul_like("convolutionWeightGrad", HMAC, 1.5),
    "bias_add": _elementwise("addBias", BIAS_ADD, exchange=True),
    "bias_grad": Kernel(
        context="reduce",
        main=_p((RED_ADD, "all"), label="Reduce"),
        repeats=2,
        post=(_p((RED_ADD_F, "strided"), weight=0.2, label="ReduceFinal"),
              _p((CAST_FH, "few"), exchange=False, weight=0.05, label="Cast")),
        exchange_code=36,
    ),
    "add": _elementwise("map", ADD),
    # PopART's checkpointOutput: an Identity, lowered as one on-tile copy of the tensor.
    "checkpoint": _elementwise("identity", ADD, repeats=1),
    "scale": _elementwise("map", SCALAR_MUL),
    "mask_add": _elementwise("map", ROW_ADD, exchange=True),
    "broadcast_mul": _elementwise("map", MUL, exchange=True),
    "one_hot": _elementwise("encodeOneHot", ONE_HOT, exchange=True),
    "select": _elementwise("map", SELECT),
    "transpose": _elementwise("transpose", TRANSPOSE, exchange=True),
    "cast": _elementwise("cast", CAST_HF),
    "gelu": _elementwise("nonLinearity", GELU),
    "gelu_grad": _elementwise("nonLinearityGrad", GELU_GRAD),
    "relu": _elementwise("nonLinearity", RELU),
    "relu_grad": _elementwise("nonLinearityGrad", RELU_GRAD),
    "dropout": _elementwise("dropout", DROPOUT),
    "dropout_grad": _elementwise("map", MUL),
    "softmax": Kernel(
        context="softmax",
        pre=(_p((RED_MAX, "all"), weight=0.3, label="ReduceMax"),),
        main=_p((EXP, "all"), exchange=False, label="Exp"),
        repeats=2,
        post=(_p((RED_ADD_F, "all"), weight=0.3, label="ReduceSum"),
              _p((DIV_F, "all"), (CAST_FH, "all"), exchange=False, weight=0.4, label="Divide")),
        exchange_code=32,
        temp_factor=2.0,
    ),
    "softmax_grad": Kernel(
        context="softmaxGrad",
        main=_p((MUL, "all"), exchange=False, label="Mul"),
        repeats=1,
        post=(_p((RED_ADD_F, "all"), weight=0.3, label="ReduceSum"),
              _p((SSUB, "all"), exchange=False, weight=0.5, label="Subtract")),
        exchange_code=32,
        temp_factor=1.0,
    ),
    "layernorm": _norm("layerNormalise", MUL, BIAS_ADD),
    "layernorm_grad": _norm_grad("layerNormaliseGrad", BIAS_ADD),
    "batchnorm": _norm("batchNormalise", CH_MUL, CH_ADD),
    "batchnorm_grad": _norm_grad("batchNormaliseGrad", CH_SADD),
    "gather": Kernel(
        context="multiSlice",
        main=_p((SLICE, "all"), label="MultiSlice"),
        repeats=2,
        exchange_code=48,
        temp_factor=0.5,
        jitter=True,
    ),
    "gather_grad": Kernel(
        context="multiUpdateAdd",
        pre=(_p((FILL_H, "all"), exchange=False, weight=0.1, label="Zero"),),
        main=_p((UPDATE_ADD, "all"), label="MultiUpdateAdd"),
        repeats=2,
        post=(_p((CAST_FH, "strided"), exchange=False, weight=0.05, label="Cast"),),
        exchange_code=48,
        temp_factor=0.25,
        jitter=True,
        loop=8,
    ),
    "maxpool": _elementwise("pooling", MAXPOOL, exchange=True, repeats=2),
    "maxpool_grad": _elementwise("poolingGrad", MAXPOOL_GRAD, exchange=True, repeats=2),
    "avgpool": _elementwise("pooling", SUMPOOL, exchange=True),
    "avgpool_grad": _elementwise("poolingGrad", SUMPOOL, exchange=True),
    "loss": Kernel(
        context="nllLoss",
        pre=(_p((MAX_CLASS, "strided"), (ONE_HOT, "few"), weight=0.2, label="OneHot"),),
        main=_p((XENT, "all"), label="CrossEntropy"),
        repeats=2,
        post=(_p((RED_ADD_F, "few"), weight=0.1, label="ReduceLoss"),),
        exchange_code=40,
        temp_factor=2.0,
        jitter=True,
        loop=4,
    ),
    "loss_grad": Kernel(
        context="nllLossGrad",
        main=_p((XENT, "all"), (SSUB, "all"), label="CrossEntropyGrad"),
        repeats=2,
        post=(_p((CAST_FH, "all"), exchange=False, weight=0.1, label="Cast"),),
        exchange_code=40,
        temp_factor=1.0,
    ),
    "adam_updater": Kernel(
        context="adamUpdater",
        pre=(_p((CAST_HF, "all"), weight=0.2, label="CastGrad"),),
        main=_p((SADD_F, "all"), (MUL_F, "all"), exchange=False, label="Moments"),
        repeats=2,
        post=(_p((SQRT, "all"), (DIV_F, "all"), exchange=False, weight=0.6, label="Update"),),
        exchange_code=24,
    ),
    "var_update": _elementwise("varUpdate", SADD_HF),
    "sgd_update": Kernel(
        context="sgdUpdate",
        main=_p((SADD_F, "all"), (SADD, "all"), label="Momentum"),
        repeats=2,
        exchange_code=24,
    ),
    "fill": Kernel(context="fill", main=_p((FILL_F, "few"), exchange=False, label="Fill"), repeats=1),
}
#: kind of operation -> how it is lowered (read-only view). Kinds "stream" and
#: "call" are lowered specially and have no entry.
KERNELS: Final = MappingProxyType(_KERNELS)
