"""``train.prox_mu`` on a GPU (skipped without CUDA): graph slots capture the proximal term with the step and
replay it, with deterministic algorithms, to the bits of train_job, and train_job's to the bits of the term added by
hand (tests/prox_oracle.py); every job of a slot is rebased on its own start (5 jobs on 3 slots).

    PYTHONPATH=$PWD python3 -m pytest -q tests/gpu/test_prox_cuda.py -s
"""
import pytest
import torch

from prox_oracle import prox_sgd

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("name,width", [("lenet5", 1.0), ("resnet18", 0.25)])
def test_graph_slots_replay_the_proximal_term_to_the_bit(name, width):
    from seafl_dist.data import ArrayDataset
    from seafl_dist.models import build_model
    from seafl_dist.runtime import determinism
    from seafl_dist.settings import TrainConfig
    from seafl_dist.train import flatten, train_job
    from seafl_dist.train.graphed import Slot, train_slots
    shards_n, epochs, mu = [48, 45, 33, 7, 20], [2, 1, 3, 2, 2], 0.1
    determinism.apply()
    try:
        g = torch.Generator().manual_seed(0)
        data = ArrayDataset(torch.randint(0, 256, (sum(shards_n), 3, 32, 32), dtype=torch.uint8, generator=g),
                            torch.randint(0, 10, (sum(shards_n),), generator=g), 10, "fake", (0.5,) * 3,
                            (0.25,) * 3).to("cuda")
        optim = TrainConfig(lr=0.05, momentum=0.9, weight_decay=5e-4)

        def model():
            return build_model(name, 10, 3, width=width, image_size=32, lightning=False, optim=optim)
        net = model()
        starts = []
        for j in range(len(shards_n)):
            torch.manual_seed(j)
            starts.append(flatten(model()))
        shards = list(torch.arange(sum(shards_n)).split(shards_n))
        slots = [Slot(net, data, 16, torch.device("cuda"), "32", prox_mu=mu) for _ in range(3)]
        assert all(s.graph is not None for s in slots)  # captured, term and all
        got = train_slots(slots, starts, data, shards, epochs=epochs, batch_size=16, seeds=[1, 2, 3, 4, 5])
        for j in range(len(shards_n)):
            alone = train_job(net, starts[j], data, shards[j], epochs=epochs[j], batch_size=16, seed=j + 1,
                              device="cuda", prox_mu=mu)
            assert torch.equal(got[j], alone), f"{name}: job {j}'s slot differs from train_job"
            want = prox_sgd(model(), starts[j], data, shards[j], epochs=epochs[j], batch_size=16, seed=j + 1, mu=mu,
                            lr=optim.lr, momentum=optim.momentum, weight_decay=optim.weight_decay, device="cuda")
            assert torch.equal(alone, want), f"{name}: job {j} differs from the term added by hand"
            plain = train_job(net, starts[j], data, shards[j], epochs=epochs[j], batch_size=16, seed=j + 1,
                              device="cuda")
            assert not torch.equal(alone, plain)  # the term changed the job
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
