"""The update sampler keeps its copy buffers from step to step: an optimizer that steps twice
before the step ends (a GAN's discriminator, say) still gets each of its updates measured,
and the batch it hands over holds the norms of that update alone."""
import math

import torch
from torch import nn

from neuraldbg_cli.observe.updates import UpdateSampler, ratios
from neuraldbg_cli.thresholds import Thresholds

TH = Thresholds()


class _Layer:
    """What the sampler needs of a layer record."""
    module_type = "Linear"
    in_optimizer = False
    on_update = ["watched"]             # (some detector watches its updates)


def exact_ratio(before: list, params: list) -> float:
    du = sum(float(((p.detach() - b) ** 2).sum()) for p, b in zip(params, before))
    w = sum(float((p.detach() ** 2).sum()) for p in params)
    return math.sqrt(du / w)


def test_two_steps_of_one_optimizer_are_each_measured_on_their_own():
    torch.manual_seed(0)
    lin = nn.Linear(16, 8)          # fewer elements than the sample: every one is sampled
    params = list(lin.parameters())
    rec = _Layer()
    owners = {id(p): rec for p in params}
    opt = torch.optim.SGD(params, lr=0.1)
    sampler = UpdateSampler(TH.update.sample)
    found = []
    for scale in (1.0, 5.0):        # a second update five times the first
        before = [p.detach().clone() for p in params]
        sampler.before(opt, owners)
        for p in params:
            p.grad = torch.full_like(p, scale)
        opt.step()
        batch = sampler.after(opt)
        # on the CPU the norms are one vector; elsewhere 0-d tensors (both read later)
        assert batch.normed and batch.vector and batch.tensors.dim() == 1
        found.append((batch, exact_ratio(before, params)))
    # both judged only now, after the buffers were copied into again
    for batch, exact in found:
        sampled = ratios(batch, values(batch))[rec]
        assert math.isclose(sampled, exact, rel_tol=1e-4), (sampled, exact)
    assert found[1][1] > found[0][1]           # (the two updates do differ)
    assert rec.in_optimizer


def values(batch) -> list:
    return batch.tensors.tolist() if batch.vector else [t.item() for t in batch.tensors]


def test_parameters_of_several_dtypes_are_measured_one_buffer_each():
    """Views of one dtype share one padded buffer (two whole-buffer calls); of several, each
    has its own (one call per view): both give the same ratios."""
    torch.manual_seed(0)
    a, b = nn.Linear(12, 10), nn.Linear(10, 4).double()     # (every element sampled)
    for mixed in (False, True):
        layers = (a, b) if mixed else (a,)
        params = [p for m in layers for p in m.parameters()]
        recs = [_Layer() for _ in layers]
        owners = {id(p): r for m, r in zip(layers, recs) for p in m.parameters()}
        opt = torch.optim.SGD(params, lr=0.1)
        sampler = UpdateSampler(TH.update.sample)
        before = [p.detach().clone() for p in a.parameters()]
        sampler.before(opt, owners)
        for p in params:
            p.grad = torch.randn_like(p)
        opt.step()
        batch = sampler.after(opt)
        assert batch.vector is not mixed
        exact = exact_ratio(before, list(a.parameters()))
        assert math.isclose(ratios(batch, values(batch))[recs[0]], exact, rel_tol=1e-4)
        with torch.no_grad():       # the same weights for the other layout
            for p, w in zip(a.parameters(), before):
                p.copy_(w)


def test_a_step_taken_unobserved_is_not_counted_in_the_next_observed_one():
    """Observed steps in a row copy the weights once a step (the last step's copy is the
    next one's before); a step between them that is not observed (`--every`) breaks that
    chain, and the next observed step is measured alone."""
    torch.manual_seed(0)
    lin = nn.Linear(16, 8)
    params = list(lin.parameters())
    rec = _Layer()
    owners = {id(p): rec for p in params}
    opt = torch.optim.SGD(params, lr=0.1)
    sampler = UpdateSampler(TH.update.sample)

    def step(scale: float, observed: bool = True):
        before = [p.detach().clone() for p in params]
        if observed:
            sampler.before(opt, owners)
        else:
            sampler.skip(opt)
        for p in params:
            p.grad = torch.full_like(p, scale)
        opt.step()
        if observed:
            batch = sampler.after(opt)
            return ratios(batch, values(batch))[rec], exact_ratio(before, params)
        return None

    for scale in (1.0, 2.0, 3.0):          # in a row: each measured on its own
        sampled, exact = step(scale)
        assert math.isclose(sampled, exact, rel_tol=1e-4), (scale, sampled, exact)
    step(50.0, observed=False)              # a large update nobody measured
    sampled, exact = step(1.0)
    assert math.isclose(sampled, exact, rel_tol=1e-4), (sampled, exact)
