"""Stand-in: PopTorch's optimizers, imported (not used) by optimum-graphcore's trainer."""


class Optimizer:
    pass


class AdamW(Optimizer):
    pass


class LAMB(Optimizer):
    pass
