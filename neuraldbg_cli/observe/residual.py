"""Residual blocks' numbers: the branch against the skip, and the stream along the depth.

A block is a container whose output has its input's shape and is, on the autograd graph,
that input plus something (`x + f(x)`, `relu(f(x) + x)`, two sums in a pre-norm transformer
block): decided once per module, at its first eager call with gradients in training, by
following the output's grad_fn through a few sums to the input's own node. Nothing needs
configuring, and an `nn.Sequential(Linear, ReLU, Linear)` of equal shapes is not a block.

Per call, norms on the device (of out - in, in, out), their squares summed over the step's
calls and read with the step's other numbers: no tensor is held past the call. The
difference is taken directly rather than from ||out||² + ||in||² - 2<out, in>, which in
float32 cancels below a branch ratio of ~1e-3, above the collapse threshold.

The stream's norms (in, out) are always of the whole tensor: they carry a NaN and the
stream's growth. The branch (out - in, and the in it is compared with) is read on every row
of a block of up to SAMPLE values, and on every k-th row of a larger one: a ResNet stage's
maps are millions of values, and the difference costs a full read of both and a write (a
BasicBlock on 16x64x56x56 maps, 2 CPU threads: 3.2 ms a call read whole, 1.7 sampled, of
which the output's own norm is about 0.9). The rows read move by one each call, so that any
`cover` consecutive calls read every row (k <= cover; the collapse verdict asks `window`
steps in a row, and is given it): a branch that adds something on any row is seen adding
it within that many steps. The ratio of one call is then an estimate, from a sample of at
least 1/k of the rows.
"""
from __future__ import annotations

import math
import weakref

import torch

from .naming import class_name, is_wrapper

# grad_fn names: the sum of branch and skip, and an activation a block may apply after it
# (torchvision's BasicBlock and Bottleneck: relu(out + identity))
_SUMS = frozenset(("AddBackward0", "AddBackward1"))
_AFTER = frozenset(("ReluBackward0", "GeluBackward0", "SiluBackward0", "HardtanhBackward0",
                    "LeakyReluBackward0", "LeakyReluBackward1"))
_MAX_SUMS = 4           # sums followed back from the output (a pre-norm block has 2)
_F32 = torch.float32
_Tensor = torch.Tensor
SAMPLE = 1 << 18        # values: a block's branch read on every row up to this many (1 MB of float32)
UNSEEN = object()       # a container's `residual` before its first call decides it
BLOCK_KIND = "block"    # the kind written with a block's transitions


def is_sum_of(y, x) -> bool:
    """Is `y` (a tensor of x's shape) `x + something` on the autograd graph?"""
    target = x.grad_fn
    node = y.grad_fn
    if node is None or y is x:
        return False
    if type(node).__name__ in _AFTER and node.next_functions:
        node = node.next_functions[0][0]
    frontier = [node]
    for _ in range(_MAX_SUMS):
        sums = [n for n in frontier if n is not None and type(n).__name__ in _SUMS]
        frontier = []
        for n in sums:
            for f, _ in n.next_functions:
                if f is None:
                    continue
                if f is target if target is not None else getattr(f, "variable", None) is x:
                    return True
                frontier.append(f)
    return False


def block_of(module, args, y, registry):
    """The Block of a container at its first call in training with gradients, or None: not
    a block (a leaf, a wrapper, another shape, not a sum with its input, or holding blocks
    of its own, as a stage or an encoder of blocks does: the inner blocks are the ones)."""
    watchers = [d for d in registry.detectors if getattr(d, "blocks", False)]
    x = args[0] if args else None
    if not watchers or next(module.children(), None) is None or is_wrapper(module) \
            or not isinstance(x, torch.Tensor) or y is None or not x.requires_grad \
            or not x.is_floating_point() or y.shape != x.shape or not x.numel() \
            or not is_sum_of(y, x):
        return None
    recs = registry.recs
    for m in module.modules():
        rec = recs.get(id(m))
        if m is not module and rec is not None and isinstance(getattr(rec, "residual", None),
                                                              Block):
            return None
    cover = min(getattr(d, "cover", 1) for d in watchers)
    return Block(module, watchers, registry.debounce, registry.hysteresis, cover)


class Block:
    """One residual block: its step's sums of squares, its chain predecessor, and what the
    step end needs to judge and name it (it quacks as a layer record there)."""

    __slots__ = ("ref", "module_type", "kind", "site", "fallback_name", "watching", "total",
                 "numel", "sampled", "cover", "calls", "prev", "linked", "out_norm", "out_version")

    def __init__(self, module, detectors: list, debounce: int, hysteresis, cover: int = 1):
        """cover: any this many consecutive calls read the branch on every row (1: every
        call reads every row)."""
        from .layers import Watch  # (layers.py imports this module)
        from .tracker import SignalTracker
        self.ref = weakref.ref(module)
        self.module_type = class_name(module)
        self.kind = BLOCK_KIND
        self.site = 0
        self.fallback_name = None
        self.watching = [Watch(d, d.history(), SignalTracker(debounce, d.signal.ok, *hysteresis))
                         for d in detectors]
        # (||out - in||² and ||in||² on the rows read, ||in||², ||out||²) summed over the calls
        self.total = None
        self.numel = 0
        self.sampled = 0        # values on the rows read, summed over the calls
        self.cover = max(1, cover)
        self.calls = 0          # (the rows read move by one a call)
        self.prev = None        # the block whose output is this one's input
        self.linked = False     # prev decided (at the first call after another block's)
        self.out_norm = None    # ||out|| of its last call this step (0-d): the next block,
        #                         fed by that output, takes it as its ||in||, without a pass
        self.out_version = -1   # (unless it was changed in place since)

    def add(self, x, y, last) -> bool:
        """Account for one call; `last`: (block, output) of the block called before, or None.
        True on the step's first call."""
        if not self.linked:
            self.linked = True
            if last is not None and last[1] is x and last[0] is not self:
                self.prev = last[0]
        # The stream's norm where it enters is the one it had where the block before left
        # it (a transformer's blocks: one pass saved a block).
        known = last[0].out_norm if last is not None and last[1] is x \
            and last[0].out_version == x._version else None
        x, y = x.detach(), y.detach()
        xs, ys = self._rows(x, y)
        sampled = xs is not x
        ts = [torch.sub(ys, xs), y]
        if known is None:
            ts.append(x)
        if sampled:
            ts.append(xs)
        if y.dtype == torch.float64 or x.dtype == torch.float64:
            norms = [n.float() for n in torch._foreach_norm(ts)]
        else:   # (half-precision sums of squares overflow)
            norms = torch._foreach_norm(ts, 2, dtype=_F32)
        self.out_norm, self.out_version = norms[1], y._version
        full_in = norms[2] if known is None else known
        squares = torch.stack((norms[0], norms[-1] if sampled else full_in, full_in,
                               norms[1])).square_()
        first = self.total is None
        self.total = squares if first else self.total.add_(squares)
        self.numel += x.numel()
        self.sampled += xs.numel()
        return first

    def _rows(self, x, y) -> tuple:
        """(x, y) themselves, or for a block of more than SAMPLE values, the same every k-th
        row of each (rows: along the last dimension in memory), from an offset that moves by
        one each call. k is at most `cover`, and prime to the rows of one sample where it can
        be, so that a call's rows spread over its channels and positions. (A tensor subclass,
        a DTensor say, is read whole, by its own rules.)"""
        n = x.numel()
        if n <= SAMPLE or self.cover == 1 or type(x) is not _Tensor or type(y) is not _Tensor \
                or x.stride() != y.stride():
            return x, y
        if x.is_contiguous():
            xr, yr = x.view(-1, x.shape[-1]), y.view(-1, y.shape[-1])
        elif x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
            xr, yr = (t.permute(0, 2, 3, 1).reshape(-1, t.shape[1]) for t in (x, y))  # (views)
        else:
            return x, y
        k = min(-(-n // SAMPLE), self.cover)
        inner = xr.shape[0] // x.shape[0] if x.dim() > 2 else 1     # rows of one sample
        step = next((j for j in range(k, self.cover + 1) if math.gcd(j, inner) == 1), k)
        at = self.calls % step
        self.calls += 1
        return xr[at::step], yr[at::step]

    def take(self) -> tuple:
        """(the four 0-d tensors to read, numel, values on the rows read); empties it for the
        next step."""
        out = self.total.unbind(), self.numel, self.sampled
        self.total, self.numel, self.sampled = None, 0, 0
        self.out_norm = None
        return out


SUMS = 4        # 0-d tensors read per block


def residual_tensors(blocks: list) -> tuple:
    """(0-d tensors to read, [(block, numel, sampled)]) for the step's blocks, in call
    order."""
    tensors, jobs = [], []
    for block in blocks:
        if block.total is not None:
            four, numel, sampled = block.take()
            tensors += four
            jobs.append((block, numel, sampled))
    return tensors, jobs


def residual_facts(jobs: list, values: list, growth: float) -> list:
    """[(block, facts)] from the values read (three a block). Each block's branch ratio
    ||out - in|| / ||in||, the stream's rms in and out and its growth; and the run it belongs
    to: consecutive blocks of one chain (each fed by the one before) each growing the stream
    at least `growth` times (its length, the stream's growth per block over it and its first
    and last rms, whether it turned non-finite there, and the branch's own growth per block:
    ~1 where each branch adds a like amount, as normalised branches do, the stream's rate
    where each branch scales with its input and so multiplies the stream)."""
    out, run_of = [], {}
    for k, (block, numel, sampled) in enumerate(jobs):
        d2, s2, i2, o2 = values[SUMS * k: SUMS * k + SUMS]    # (s2: ||in||² on the rows read)
        rms_in, rms_out = math.sqrt(i2 / numel), math.sqrt(o2 / numel)
        branch = math.sqrt(d2 / s2) if s2 > 0 else (0.0 if d2 == 0 else math.inf)
        size = math.sqrt(d2 / sampled)      # the branch's own rms
        g = rms_out / rms_in if rms_in > 0 else (1.0 if rms_out == 0 else math.inf)
        facts = {"branch_ratio": branch, "rms_in": rms_in, "rms_out": rms_out, "growth": g}
        if g >= growth and rms_in > 0:  # (NaN is not; a stream from nothing is not multiplied)
            run = run_of.get(block.prev)
            if run is None:
                run = {"blocks": 0, "rms_from": rms_in, "branch_from": size}
            facts["run_index"] = run["blocks"]     # 0: the block the run starts at
            run["blocks"] += 1
            run["rms_to"], run["branch_to"] = rms_out, size
            run_of[block] = run
            facts["run"] = run
        out.append((block, facts))
    for _, facts in out:
        run = facts.pop("run", None)
        if run is not None:
            n, a, b = run["blocks"], run["rms_from"], run["rms_to"]
            p, q = run["branch_from"], run["branch_to"]
            facts.update(run_blocks=n, run_rms_from=a, run_rms_to=b,
                         run_growth=_rate(a, b, n), run_nonfinite=not math.isfinite(b),
                         run_branch_growth=_rate(p, q, n - 1) if n > 1 else 1.0)
    return out


def _rate(a: float, b: float, n: int) -> float:
    """The per-block factor taking a to b over n blocks (from 0: inf, or 1 to 0)."""
    if a <= 0:
        return math.inf if b > 0 else 1.0
    return (b / a) ** (1 / n) if math.isfinite(b) else math.inf


def blocks_of(registry) -> list:
    """Every block found so far (their trackers, flushed at the end of a failed run)."""
    return [r.residual for r in registry.recs.values()
            if isinstance(getattr(r, "residual", None), Block)]
