"""A tiny linear problem for local-training oracles (FedProx, SCAFFOLD, FedCompass's step cut): 12 rows, x in R^3,
y in {0, 1}, drawn from one seeded generator, served in the dataset interface train_job reads (``batch``)."""
import torch


class Rows:
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(12, 3, generator=g), torch.randint(0, 2, (12,), generator=g)

    def batch(self, idx, augment=False, draws=None, device=None):
        return self.x[idx], self.y[idx]

    augment_draws = None
