"""FedProx's local step written out by hand, the oracle of ``train.prox_mu`` (tests/unit/test_prox.py, tests/gpu):
plain torch SGD on a job's batches (its StepPlan), the gradient of mu/2 ||w - w_base||^2 added to each trainable
parameter's gradient after backward, then clipping by norm, then the step. Nothing of seafl's training code."""
import torch
import torch.nn.functional as F

from seafl_dist.train import StepPlan, flatten, load_flat


def prox_sgd(net, start, data, idx, *, epochs, batch_size, seed, mu, lr, momentum, weight_decay=0.0, clip=None,
             device="cpu"):
    """One job of ``net`` from flat ``start`` on ``data[idx]``: forward, cross-entropy, backward,
    g += mu (w - w_base), clip by norm, SGD; the trained flat vector (CPU)."""
    fmt = torch.channels_last if getattr(net, "channels_last", False) else torch.contiguous_format
    load_flat(net, start)
    net.to(device, memory_format=fmt).train()
    params = [p for p in net.parameters() if p.requires_grad]
    w_base = [p.detach().clone() for p in params]
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    for _, rows, _ in StepPlan(idx, epochs, batch_size, seed).batches():
        x, y = data.batch(rows, device=device)
        loss = F.cross_entropy(net(x.contiguous(memory_format=fmt)), y)
        opt.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p, w0 in zip(params, w_base):
                p.grad = p.grad + mu * (p - w0)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
    return flatten(net)
