"""GPU checks (skipped without CUDA): a CIFAR-format job on full-width ResNet-18 and VGG-16, in
fp32 and bf16 autocast (ranks sharing one GPU give the one-process bytes: test_reproducible.py).

Run on a GPU machine with ``python -m pytest -q tests/gpu -s``; the per-epoch times are printed.
"""
import time

import pytest
import torch

from fake_datasets import write_cifar

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("model", ["resnet18", "vgg16"])
def test_full_width_cifar_job_on_the_gpu(tmp_path, model):
    from seafl_dist.data import load_dataset
    from seafl_dist.models import build_model
    from seafl_dist.train import flatten, train_job
    write_cifar(tmp_path, per_batch=500)  # 2,500 training images in the real pickle format
    data = load_dataset("cifar10", root=tmp_path, train=True).to("cuda")
    net = build_model(model, 10, 3, image_size=32)
    start = flatten(net)
    idx = torch.arange(len(data))
    for precision in ("32", "bf16"):
        train_job(net, start, data, idx[:64], epochs=1, batch_size=32, seed=0, device="cuda", precision=precision)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = train_job(net, start, data, idx, epochs=1, batch_size=32, seed=0, augment=True, device="cuda",
                        precision=precision)
        torch.cuda.synchronize()
        print(f"\n{model} full width, {precision}: {time.perf_counter() - t0:.3f} s per epoch of {len(idx)} images "
              f"on {torch.cuda.get_device_name()}")
        assert torch.isfinite(out).all() and not torch.equal(out, start)
