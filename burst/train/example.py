"""The example model of the quickstart: a small MLP on a synthetic, seeded regression task.

Dropout makes the torch RNG matter, so exact resume has to restore RNG states too.
"""

from __future__ import annotations

import torch
from torch import nn

from burst.spec import BurstJob
from burst.train.setup import Batch, TrainSetup

FEATURES = 32
DATASET_SIZE = 4096


class SmallMLP(nn.Module):
    def __init__(self, width: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(FEATURES, width),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(width, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_dataset(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(DATASET_SIZE, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(DATASET_SIZE, 1, generator=g)
    return x, y


def build(job: BurstJob) -> TrainSetup:
    seed = job.training.seed
    torch.manual_seed(seed)
    model = SmallMLP()
    optimizer = torch.optim.AdamW(model.parameters(), lr=job.training.learning_rate)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=job.training.steps)
    x, y = make_dataset(seed)
    batch = job.training.batch_size
    per_epoch = DATASET_SIZE // batch

    def order(epoch: int) -> torch.Tensor:
        return torch.randperm(DATASET_SIZE, generator=torch.Generator().manual_seed(seed + epoch))

    def batch_for_step(step: int) -> Batch:
        epoch, index = divmod(step, per_epoch)
        idx = order(epoch)[index * batch : (index + 1) * batch]
        return x[idx], y[idx]

    def batch_for_samples(start: int, count: int) -> Batch:
        """Samples ``start .. start+count`` of the endless sequence of shuffled epochs (each
        epoch a permutation of the dataset seeded by seed + epoch)."""
        pos = torch.arange(start, start + count)
        epochs = pos // DATASET_SIZE
        idx = torch.empty(count, dtype=torch.long)
        for e in torch.unique(epochs).tolist():
            sel = epochs == e
            idx[sel] = order(int(e))[pos[sel] % DATASET_SIZE]
        return x[idx], y[idx]

    return TrainSetup(
        model, optimizer, scheduler, batch_for_step, nn.functional.mse_loss, batch_for_samples
    )


STUDENT_WIDTH = 32


def build_student(job: BurstJob) -> nn.Module:
    """The distilled student of ``build``'s model (``burst distill``): the same network, a
    quarter of the width (about 1/12 of the parameters)."""
    torch.manual_seed(job.training.seed + 1)
    return SmallMLP(width=STUDENT_WIDTH)
