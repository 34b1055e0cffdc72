"""GPU probe (scratch): which levers pay for ResNet-18 / LeNet-5 local training. Prints one line per figure."""
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F

from seafl_dist.models import build_model
from seafl_dist.train import flatten
from seafl_dist.train.batched import FusedStep, _Stack, _trainable
from seafl_dist.train.flat import FlatLayout

dev = torch.device("cuda")
T0 = time.perf_counter()


def say(*a):
    print(f"[{time.perf_counter() - T0:6.1f}s]", *a, flush=True)


def timed(fn, min_s=1.0, warm=2):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t0, n = time.perf_counter(), 0
    while True:
        fn()
        n += 1
        if n % 4 == 0:
            torch.cuda.synchronize()
            if time.perf_counter() - t0 > min_s:
                break
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def net_of(name, cl=False):
    c, s = (3, 32) if name != "lenet5" else (1, 28)
    m = build_model(name, 10, c, image_size=s, lightning=False).to(dev).train()
    if cl:
        m = m.to(memory_format=torch.channels_last)
    return m, c, s


def data_of(c, s, n, cl=False):
    x = torch.randn(n, c, s, s, device=dev)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, torch.randint(0, 10, (n,), device=dev)


def eager(name, batch, cl=False, bf16=False):
    m, c, s = net_of(name, cl)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x, y = data_of(c, s, batch, cl)

    def step():
        with torch.autocast("cuda", torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(m(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return batch / timed(step)


class Slot:
    """One job's model, optimiser and step graph on its own stream (static x, y)."""

    def __init__(self, name, batch, cl, bf16, pool):
        self.m, c, s = net_of(name, cl)
        self.opt = torch.optim.SGD(self.m.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        self.x, self.y = data_of(c, s, batch, cl)
        self.stream = torch.cuda.Stream()
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            for _ in range(3):
                self._step()
        torch.cuda.current_stream().wait_stream(self.stream)
        self.g = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.g, pool=pool, stream=self.stream):
            self._step(zero=False)
        self.bf16 = bf16

    def _step(self, zero=True):
        with torch.autocast("cuda", torch.bfloat16, enabled=getattr(self, "bf16", False)):
            loss = F.cross_entropy(self.m(self.x), self.y)
        if zero:
            self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()


def graphs(name, batch, streams, cl=False, bf16=False, src=None):
    pool = torch.cuda.graph_pool_handle()
    slots = []
    for _ in range(streams):
        sl = Slot.__new__(Slot)
        sl.bf16 = bf16
        Slot.__init__(sl, name, batch, cl, bf16, None)
        slots.append(sl)
    xs = src

    def run():
        for sl in slots:
            with torch.cuda.stream(sl.stream):
                if xs is not None:
                    sl.x.copy_(xs[0][:batch])
                    sl.y.copy_(xs[1][:batch])
                sl.g.replay()
        for sl in slots:
            torch.cuda.current_stream().wait_stream(sl.stream)
    return batch * streams / timed(run)


def fused(name, g, batch=32, cl=False, graph=False, bf16=False):
    m, c, s = net_of(name)
    starts = [flatten(m)] * g
    stack = _Stack(FlatLayout.of(m), _trainable(m), starts, dev)
    step = FusedStep(m, stack.trainable, dev, "bf16" if bf16 else "32")
    x = torch.randn(g, batch, c, s, s, device=dev)
    if cl:  # physical (batch, h, w, g, c): vmap's merge of g into channels is then channels-last
        x = x.permute(1, 3, 4, 0, 2).contiguous().permute(3, 0, 4, 1, 2)
    y = torch.randint(0, 10, (g, batch), device=dev)
    step(stack, x, y)  # momenta made
    if not graph:
        return g * batch / timed(lambda: step(stack, x, y))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step(stack, x, y)
    torch.cuda.current_stream().wait_stream(side)
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        step(stack, x, y)
    return g * batch / timed(gr.replay)


def bits_check():
    """Deterministic mode: graph replay vs eager, same bits? streams vs one?"""
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    out = {}
    for name in ("resnet18", "lenet5"):
        torch.manual_seed(0)
        ref, c, s = net_of(name)
        start = flatten(ref)
        torch.manual_seed(1)
        xs = [data_of(c, s, 32) for _ in range(6)]

        def run_eager():
            m, _, _ = net_of(name)
            from seafl_dist.train.flat import load_flat
            load_flat(m, start.to(dev))
            opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
            for x, y in xs:
                loss = F.cross_entropy(m(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            return flatten(m)

        def run_graph():
            from seafl_dist.train.flat import load_flat
            sl = Slot(name, 32, False, False, None)
            load_flat(sl.m, start.to(dev))
            for st in sl.opt.state.values():
                st["momentum_buffer"].zero_()
            for x, y in xs:
                sl.x.copy_(x)
                sl.y.copy_(y)
                sl.g.replay()
            torch.cuda.synchronize()
            return flatten(sl.m)
        a, b, a2 = run_eager(), run_graph(), run_eager()
        b2 = run_graph()
        out[name] = (torch.equal(a, a2), torch.equal(a, b), torch.equal(b, b2), float((a - b).abs().max()))
        say(f"bits {name}: eager==eager {out[name][0]}, eager==graph {out[name][1]}, graph==graph {out[name][2]}, "
            f"max|eager-graph| {out[name][3]:.3g}")
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False


def guarded(label, fn):
    try:
        say(f"{label}: {fn():,.0f} images/s")
    except Exception as e:  # noqa
        say(f"{label}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        torch.cuda.synchronize()


def main():
    say(torch.cuda.get_device_name(), torch.__version__)
    part = sys.argv[1] if len(sys.argv) > 1 else "all"
    if part in ("all", "bits"):
        try:
            bits_check()
        except Exception:
            traceback.print_exc()
    R = "resnet18"
    if part in ("all", "r"):
        guarded("R eager b32", lambda: eager(R, 32))
        guarded("R ceiling b640", lambda: eager(R, 640))
        guarded("R ceiling b640 CL", lambda: eager(R, 640, cl=True))
        guarded("R ceiling b640 bf16 CL", lambda: eager(R, 640, cl=True, bf16=True))
        for st in (1, 2, 4, 8):
            guarded(f"R graph b32 streams={st}", lambda: graphs(R, 32, st))
        guarded("R graph b32 streams=4 CL", lambda: graphs(R, 32, 4, cl=True))
        guarded("R graph b32 streams=4 CL bf16", lambda: graphs(R, 32, 4, cl=True, bf16=True))
        guarded("R graph b32 streams=1 CL", lambda: graphs(R, 32, 1, cl=True))
        guarded("R fused G=10 eager", lambda: fused(R, 10))
        guarded("R fused G=10 graph", lambda: fused(R, 10, graph=True))
        guarded("R fused G=10 graph CLx", lambda: fused(R, 10, graph=True, cl=True))
        guarded("R fused G=20 graph CLx", lambda: fused(R, 20, graph=True, cl=True))
        torch.backends.cudnn.benchmark = True
        guarded("R fused G=10 graph CLx benchmark", lambda: fused(R, 10, graph=True, cl=True))
        guarded("R graph b32 streams=4 CL benchmark", lambda: graphs(R, 32, 4, cl=True))
        torch.backends.cudnn.benchmark = False
    L = "lenet5"
    if part in ("all", "l"):
        guarded("L eager b32", lambda: eager(L, 32))
        guarded("L ceiling b640", lambda: eager(L, 640))
        for st in (1, 4, 8):
            guarded(f"L graph b32 streams={st}", lambda: graphs(L, 32, st))
        guarded("L fused G=20 graph", lambda: fused(L, 20, graph=True))
        guarded("L fused G=40 graph", lambda: fused(L, 40, graph=True))
    say("done")


if __name__ == "__main__":
    main()
