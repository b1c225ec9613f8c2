"""Where the model's output meets the loss and the targets: the loss call, observed.

The functional losses of `torch.nn.functional` are wrapped; the loss modules
(`nn.CrossEntropyLoss`, `nn.MSELoss`, ...) call them at call time, so both forms are seen
without editing the script. Of a step's loss calls, the first one made with gradients is
read: which loss, the activation that produced its input (read off the autograd graph, so
`torch.softmax(x)` is seen as well as `nn.Softmax`), shapes and dtypes (known on the host),
and a few reductions over at most ROWS rows of the output and the target, read with the
step's other numbers. The pairing belongs to the script rather than to the batch, so after the
first `dense_steps` only one step in `every` is read, and half as often each time the run
doubles past `every` x `points` steps (a few dozen reads per doubling, at steps that are
also the summaries' steps). The user's call always runs, unchanged and outside of any guard:
a fault here switches this part off with a warning.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .caller_warnings import warning_from_caller
from .loss_graph import activation_of, from_output
from .transforms import transform_level

ROWS = 64           # rows of the output (and the target) reduced per read step
CLASS_LOSSES = ("cross_entropy", "nll_loss")            # class dimension 1, class-index targets
BCE_LOSSES = ("binary_cross_entropy", "binary_cross_entropy_with_logits")
REGRESSION_LOSSES = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss")
# Losses of log-probabilities over the last dimension: (T, N, C) for CTC
LOG_PROB_LOSSES = ("nll_loss", "ctc_loss")
LOSSES = CLASS_LOSSES + BCE_LOSSES + REGRESSION_LOSSES + ("ctc_loss",)

_is_compiling = torch.compiler.is_compiling


class LossCall(NamedTuple):
    """One loss call of a step: what the host knows, and the 0-d reductions to read."""
    loss: str               # the functional name: "cross_entropy", "mse_loss", ...
    activation: str | None  # "sigmoid", "softmax", "log_softmax", "tanh"; None: none seen
    normalised: int | None  # the size of the dimension a softmax/log_softmax normalised
    units: int              # output units: classes (class losses), else the last dimension
    rows: int               # rows reduced
    target: str             # "index" (integer classes), "float", or "bool"
    output_shape: tuple
    target_shape: tuple
    names: tuple            # the names of `tensors`' values
    tensors: list           # 0-d float32 tensors
    step: int = 0           # the step of the call
    dtype: str | None = None    # the output's dtype where reduced ("bfloat16"), else None
    from_model: bool | None = None  # the input is the model's output (None: not known)

    def facts(self, values: list) -> dict:
        """What the detector is told: the host facts and the values read for `tensors`."""
        low = {k: v for k, v in (("output_dtype", self.dtype), ("from_model", self.from_model))
               if v is not None}
        return {"loss_fn": self.loss, "activation": self.activation,
                "normalised": self.normalised, "units": self.units, "rows": self.rows,
                "target": self.target, "output_shape": self.output_shape,
                "target_shape": self.target_shape, "step": self.step, **low,
                **dict(zip(self.names, values))}


class LossCalls:
    """Wraps the functional losses; keeps the current step's first observed call."""

    def __init__(self, clock, hooks, thresholds, fault):
        self._clock = clock
        self._hooks = hooks         # (whether this step is observed)
        self._dense, self._every = thresholds.dense_steps, thresholds.every
        self._points = thresholds.points
        self._interval = self._every        # of the reads at the run's present length
        self._fault = fault         # callable(what, error)
        self.active = False
        self.call: LossCall | None = None
        self._output = None         # the model's output of the step's last forward, if read
        self.bare = None            # callable: is the model made of bare tensors (no module)?
        self._saved, self.evidence = None, None     # (evidence: a capture's, or None)

    def install(self) -> None:
        self._saved = [(name, getattr(F, name)) for name in LOSSES if hasattr(F, name)]
        for name, original in self._saved:
            setattr(F, name, self._wrap(name, original))
        self.active = True

    def remove(self) -> None:
        for name, original in self._saved or ():
            setattr(F, name, original)
        self._saved = None
        self.active = False

    def take(self) -> LossCall | None:
        """The step's call, now handed over to the step end."""
        call, self.call, self._output = self.call, None, None
        return call

    def saw_output(self, out) -> None:
        """The outermost module returned `out` (kept on read steps: for a hand-written loss)."""
        if self.active and self.call is None and isinstance(out, torch.Tensor) \
                and out.requires_grad and self._due(self._clock.step):
            self._output = out

    def saw_loss(self, loss) -> None:
        """backward() of `loss`: with no functional loss seen this step, read the loss off
        its graph (handwritten.py), to the model's output or (bare tensors) a prediction."""
        out = self._output
        if self.call is not None or not self.active or out is None and not (
                self.bare is not None and self.bare() and self._due(self._clock.step)):
            return
        self._output = None
        try:
            from .handwritten import read_handwritten

            call = read_handwritten(loss, out)
            if call is not None:
                self.call = call._replace(step=self._clock.step)
        except Exception as e:  # noqa: BLE001 - the user's backward must run
            self.active = False
            self._fault("loss-call observation switched off", e)

    def _wrap(self, name: str, original):
        @functools.wraps(original)
        def loss(*args, **kwargs):
            inside = transform_level() is not None     # (vmap's tensors: transforms.py)
            if self.evidence is not None and not inside:    # (a capture's targets)
                self.evidence.saw_loss(args, kwargs)
            if self.active and self.call is None and self._hooks.observing \
                    and not _is_compiling() and not inside:
                try:
                    self._saw(name, args, kwargs)
                except Exception as e:  # noqa: BLE001 - the user's loss must run
                    self.active = False
                    self._fault("loss-call observation switched off", e)
            if name in REGRESSION_LOSSES and _shapes_differ(args, kwargs):
                return warning_from_caller(original, args, kwargs)
            return original(*args, **kwargs)
        return loss

    def _saw(self, name: str, args: tuple, kwargs: dict) -> None:
        step = self._clock.step
        if not self._due(step):
            return
        out = args[0] if args else kwargs.get("input")
        target = args[1] if len(args) > 1 else kwargs.get("target")
        if not isinstance(out, torch.Tensor) or not isinstance(target, torch.Tensor) \
                or not out.requires_grad or not torch.is_grad_enabled() \
                or not out.is_floating_point() or out.numel() == 0 or target.numel() == 0:
            return      # (a metric, an evaluation pass, or a call the loss itself rejects)
        weight = args[2] if len(args) > 2 else kwargs.get("weight")
        ignore = args[4] if len(args) > 4 else kwargs.get("ignore_index", -100)
        self.call = read_call(name, out, target, weight, ignore)._replace(
            step=step, dtype=low_dtype(out), from_model=from_output(out, self._output))

    def _due(self, step: int) -> bool:
        return step < self._dense or not step % self._read_interval(step)

    def _read_interval(self, step: int) -> int:
        """One step in `every`, half as often each time the run doubles past `every` x
        `points` steps (computed again only when the run's length crosses a doubling)."""
        n, points = self._interval, self._points
        if step >= n * points or (n > self._every and step < n * points // 2):
            n = self._every
            while step >= n * points:
                n *= 2
            self._interval = n
        return n


def low_dtype(t: torch.Tensor) -> str | None:
    """"float16" or "bfloat16" for a tensor in reduced precision, else None."""
    return _LOW.get(t.dtype)


_LOW = {torch.float16: "float16", torch.bfloat16: "bfloat16"}


def _shapes_differ(args: tuple, kwargs: dict) -> bool:
    out = args[0] if args else kwargs.get("input")
    target = args[1] if len(args) > 1 else kwargs.get("target")
    return isinstance(out, torch.Tensor) and isinstance(target, torch.Tensor) \
        and out.shape != target.shape


def read_call(name: str, out: torch.Tensor, target: torch.Tensor, weight=None,
              ignore_index: int = -100) -> LossCall:
    """The host facts of one loss call, and its reductions (queued, not read); `weight`: a
    class loss's per-class weights, if given."""
    if name in CLASS_LOSSES:
        class_dim = 1 if out.dim() >= 2 else 0
    else:       # (one value per row when the output has no unit dimension)
        class_dim = out.dim() - 1 if out.dim() >= 2 else None
    units = out.shape[class_dim] if class_dim is not None else 1
    activation, normalised = activation_of(out)
    o = rows_of(out.detach(), class_dim).float()
    names, tensors = ["output_min", "output_max"], [*o.aminmax()]
    if name == "cross_entropy" and activation is None and units >= 2:
        # rows that are probabilities though no softmax is on the graph just before (experts'
        # softmaxes mixed by their gates, a dispatcher's cat and index_add)
        names.append("output_row_sum_gap")
        tensors.append((o.sum(-1) - 1).abs().amax())
    if target.is_floating_point() or target.dtype == torch.bool:
        kind = "bool" if target.dtype == torch.bool else "float"
        same = target.shape == out.shape
        t = rows_of(target.detach(), class_dim if same else
                    target.dim() - 1 if target.dim() >= 2 else None).float()
        if same and units >= 2 and t.dim() == 2:    # one-hot targets: rows of 0s and a 1
            names += ["target_row_sum_gap", "target_row_max_min"]
            tensors += [(t.sum(-1) - 1).abs().amax(), t.amax(-1).amin()]
    else:
        kind = "index"
        index = _spread(target.detach())
        t = index.float()
        if name in CLASS_LOSSES:
            names.append("target_classes")
            tensors.append(_classes_seen(index, int(units)))
            if isinstance(weight, torch.Tensor) and weight.numel() == units >= 2 \
                    and weight.device == index.device:
                names += ["targets_weighted", "target_weight_share"]
                tensors += _weight_share(index, weight, ignore_index)
    names += ["target_min", "target_max"]
    tensors += [*t.aminmax()]
    if name in LOG_PROB_LOSSES and units >= 2:
        # rows' logsumexp: 0 for log-probabilities, < 0 averaged (Bayes by backprop), > 0 logits
        # or probabilities (a softmax into CTC: its loss goes below 0 and nothing is learnt);
        # a row of zeros is one masked out (log-probabilities times a padding mask), not read
        names.append("row_logsumexp_gap")
        gap = o.exp().sum(-1).log()
        tensors.append(torch.where((o == 0).all(-1), -math.inf, gap).amax())
    return LossCall(name, activation, normalised, int(units), int(o.shape[0]), kind,
                    tuple(out.shape), tuple(target.shape), tuple(names), tensors)


def _spread(index: torch.Tensor) -> torch.Tensor:
    """At most ROWS values spread evenly over `index`, flattened (a strided view where it is
    contiguous): the class of every pixel of a segmentation batch, not the top row of its
    first image (sky). The stride is a prime, not a divisor of a sample's count of values,
    so that the reads move along a sample's positions instead of all falling on one, even
    where the samples were flattened first (the copying task's sequences of 30 targets, 25
    blanks first, read every 30th value: blanks only)."""
    flat = index.flatten()
    n = flat.numel()
    if n <= ROWS:
        return flat
    stride = -(-n // ROWS)
    row = n // index.shape[0]
    while row % stride == 0 or any(stride % d == 0 for d in range(2, math.isqrt(stride) + 1)):
        stride += 1
    return flat[::stride]


def _classes_seen(index: torch.Tensor, units: int) -> torch.Tensor:
    """How many distinct classes `index` holds, those out of range (an ignore_index) left out;
    no host sync (a mask would size its result on the host)."""
    index = index.long()
    slot = torch.where((index >= 0) & (index < units), index, units)
    seen = torch.zeros(units + 1, device=index.device).index_fill_(0, slot, 1.0)
    return seen[:units].sum()


def _weight_share(index: torch.Tensor, weight: torch.Tensor, ignore_index: int) -> list:
    """[the targets in `index` that count (not an ignore_index, a class out of range, nor a
    class weighted 0: padding masked by its weight), their mean class weight over the mean
    weight of the classes among them]: above 1 where the frequent classes weigh most, 1 for
    balanced classes or even weights, below 1 where the weights lift the rare classes. (Over
    the classes seen, not all of them: a class never in the targets says nothing of the
    others.) A dozen ops on the classes' counts, no host sync."""
    units = weight.numel()
    # (below 0 and beyond the classes counted apart, in the first and last bins)
    slot = index.long().clamp(-1, units).add_(1)
    counts = torch.bincount(slot, minlength=units + 2)[1:units + 1]
    if 0 <= ignore_index < units:
        counts[ignore_index] = 0
    w = weight.detach().reshape(-1).float()
    c = counts.float().mul_(w != 0)
    seen = (c > 0).float()
    n = c.sum()
    return [n, torch.dot(c, w) / n / (torch.dot(seen, w) / seen.sum())]


def rows_of(x: torch.Tensor, class_dim: int | None) -> torch.Tensor:
    """At most ROWS rows of `x`, one column per unit of `class_dim` (None: one value a row):
    a 2-D view where `x` allows (a copy of at most ROWS rows otherwise), so the work does not
    grow with `x`."""
    if class_dim is None:
        return x.reshape(-1, 1)[:ROWS]
    if x.dim() == 1:            # one unbatched row of classes
        return x.reshape(1, -1)
    y = x.movedim(class_dim, -1) if class_dim != x.dim() - 1 else x
    while y.dim() > 2:      # the first rows of each leading dimension, up to ROWS in all
        k = max(1, ROWS // max(1, min(y.shape[0], ROWS)))
        y = y[:ROWS, :k].flatten(0, 1)
    return y[:ROWS]
