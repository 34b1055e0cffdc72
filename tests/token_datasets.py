"""A user's plain map-style Datasets of samples that are not images, as a test writes them to a file.

``write(folder)`` puts ``SOURCE`` in ``folder/<name>.py`` under a fresh module name and returns the name.
``chars(root, train)`` is the case issue 54 began with: a Dataset of ``(LongTensor[80], int)`` character
windows (vocabulary 20, 4 classes: the class is the last character mod 4), and ``char_lstm`` an Embedding +
LSTM LightningModule that reads it. ``talk(root, train)`` gives dict samples ``{"tokens", "label", "speaker"}``
with no labels declared (``data.partition_by`` reads them); ``ragged`` samples of two lengths with no
collate, ``padded`` the same with a ``collate_fn`` attribute that pads; ``stream`` an IterableDataset;
``test_label_out_of_range`` (a map-style Dataset) and ``pair_test_label_out_of_range`` (an ``(inputs, labels)``
pair of tensors) a test split whose item 5 has label 7, outside the training split's 4 classes.
"""
import itertools
from pathlib import Path

SOURCE = '''
import lightning as L
import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset

VOCAB, CLASSES, LENGTH = 20, 4, 80


class Chars(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.rows = torch.randint(0, VOCAB, (n, LENGTH), generator=g)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i], int(self.rows[i, -1]) % CLASSES


def chars(root, train):
    return Chars(400 if train else 120, 0 if train else 1)


def char_arrays(root, train):
    ds = chars(root, train)
    return ds.rows.numpy(), (ds.rows[:, -1] % CLASSES).numpy()


class CharLSTM(L.LightningModule):
    def __init__(self, num_classes):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 8)
        self.lstm = nn.LSTM(8, 32, batch_first=True)
        self.head = nn.Linear(32, num_classes)

    def forward(self, x):
        out, _ = self.lstm(self.embed(x))
        return self.head(out[:, -1])

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.02)


def char_lstm(num_classes, in_channels, image_size, width):
    return CharLSTM(num_classes)


SPEAKERS = ["ann", "bo", "cy", "di", "ed", "flo"]


class Talk(Dataset):
    def __init__(self, train):
        self.chars = chars(None, train)

    def __len__(self):
        return len(self.chars)

    def __getitem__(self, i):
        x, y = self.chars[i]
        return {"tokens": x, "label": y, "speaker": SPEAKERS[(i * 7) % len(SPEAKERS)]}


def talk(root, train):
    return Talk(train)


class DictLSTM(CharLSTM):
    def training_step(self, batch, batch_idx):
        return nn.functional.cross_entropy(self(batch["tokens"]), batch["label"])

    def test_step(self, batch, batch_idx):
        logits = self(batch["tokens"])
        self.log("test_acc", (logits.argmax(1) == batch["label"]).float().mean())


def dict_lstm(num_classes, in_channels, image_size, width):
    return DictLSTM(CLASSES)


class Ragged(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return torch.arange(3 + i % 2), i % 2


def ragged(root, train):
    return Ragged()


class Padded(Ragged):
    @staticmethod
    def collate_fn(items):
        longest = max(len(x) for x, _ in items)
        x = torch.zeros(len(items), longest, dtype=torch.int64)
        for k, (row, _) in enumerate(items):
            x[k, :len(row)] = row
        return x, torch.tensor([y for _, y in items])


def padded(root, train):
    return Padded()


class Stream(IterableDataset):
    def __iter__(self):
        return iter(Chars(4, 0))


def stream(root, train):
    return Stream()


class TooManyClasses(Chars):
    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return x, (7 if i == 5 else y)


def test_label_out_of_range(root, train):
    return Chars(400, 0) if train else TooManyClasses(120, 1)


def pair_test_label_out_of_range(root, train):
    ds = Chars(400 if train else 120, 0 if train else 1)
    labels = ds.rows[:, -1] % CLASSES
    if not train:
        labels[5] = 7
    return ds.rows, labels
'''

_COUNTER = itertools.count()


def write(folder, source: str = SOURCE, prefix: str = "user_tokens") -> str:
    name = f"{prefix}_{next(_COUNTER)}_{abs(hash(str(folder))) % 10**8}"
    Path(folder, f"{name}.py").write_text(source)
    return name


def ARGS(name: str, dataset: str = "chars", model: str = "char_lstm") -> list[str]:
    """Overrides that train the LSTM ``model`` of module ``name`` on its ``dataset``."""
    return [f"data.name={name}:{dataset}", f"model.name={name}:{model}", "train.batch_size=8"]
