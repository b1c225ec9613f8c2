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
        assert batch.normed and all(t.dim() == 0 for t in batch.tensors)
        found.append((batch, exact_ratio(before, params)))
    # both read only now, after the buffers were copied into again
    for batch, exact in found:
        sampled = ratios(batch, [t.item() for t in batch.tensors])[rec]
        assert math.isclose(sampled, exact, rel_tol=1e-4), (sampled, exact)
    assert found[1][1] > found[0][1]           # (the two updates do differ)
    assert rec.in_optimizer
