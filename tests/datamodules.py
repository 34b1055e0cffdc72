"""A user's LightningDataModule and the LightningModule it feeds, as a test writes them to a file.

``write(folder)`` puts ``SOURCE`` in ``folder/<name>.py`` under a fresh module name and returns the name;
``ARGS(name)`` are the overrides that run it. The samples are dicts ``{"tokens": LongTensor[3..12], "label":
int}`` of variable length (class k: about half the tokens are k + 1), padded per batch by the DataModule's
collate; ``setup`` makes the train/validation split with ``random_split`` (torch's global generator). The
module embeds, averages the tokens a row holds and classifies; its ``test_step`` logs ``test_loss`` and
``test_acc``. ``SpeakersDM``'s samples declare no labels and add a ``speaker`` (one of ten names, drawn
skewed) and a ``topic`` (the class as a 0-d tensor): what ``data.partition_by`` reads. ``ModuleLabels``' training
samples declare no labels (``Unlabelled``'s) and the DataModule declares them, as its ``labels``.
"""
import itertools
from pathlib import Path

SOURCE = '''
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, random_split

VOCAB, CLASSES = 20, 4


class Words(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, CLASSES, (n,), generator=g)
        self.rows = []
        for k in self.labels.tolist():
            length = int(torch.randint(3, 13, (1,), generator=g))
            row = torch.randint(0, VOCAB, (length,), generator=g)
            row[torch.rand(length, generator=g) < 0.5] = k + 1
            self.rows.append(row)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"tokens": self.rows[i], "label": int(self.labels[i])}


def pad(items):
    longest = max(len(it["tokens"]) for it in items)
    tokens = torch.zeros(len(items), longest, dtype=torch.int64)
    for i, it in enumerate(items):
        tokens[i, :len(it["tokens"])] = it["tokens"]
    return {"tokens": tokens, "lengths": torch.tensor([len(it["tokens"]) for it in items]),
            "label": torch.tensor([it["label"] for it in items])}


class WordsDM(L.LightningDataModule):
    def __init__(self, data_dir="unused"):
        super().__init__()
        self.data_dir = data_dir

    def setup(self, stage):
        if stage == "fit":
            self.train_set, self.val_set = random_split(Words(480, 0), [400, 80])
        if stage == "test":
            self.test_set = Words(120, 1)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=8, shuffle=True, collate_fn=pad)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=64, collate_fn=pad)


class Prepared(WordsDM):
    """Its prepare_data appends a line to data_dir/prepared.txt: how many processes ran it."""

    def prepare_data(self):
        import os
        os.makedirs(self.data_dir, exist_ok=True)
        with open(os.path.join(self.data_dir, "prepared.txt"), "a") as f:
            f.write(f"{os.getpid()}\\n")


def words_dm():
    return WordsDM()


class Unsplit(WordsDM):
    """Its setup draws the split from a generator of its own, seeded from the process: ranks disagree."""

    def setup(self, stage):
        import os
        super().setup(stage)
        if stage == "fit":
            g = torch.Generator().manual_seed(os.getpid())
            self.train_set, self.val_set = random_split(Words(480, 0), [400, 80], generator=g)


class Stream(IterableDataset):
    def __iter__(self):
        return iter(Words(10, 0))


class Streams(WordsDM):
    def train_dataloader(self):
        return DataLoader(Stream(), batch_size=8, collate_fn=pad)


class Hidden(Dataset):
    """Words' samples with no labels declared."""

    def __init__(self, words):
        self.words = words

    def __len__(self):
        return len(self.words)

    def __getitem__(self, i):
        return self.words[i]


class Unlabelled(WordsDM):
    def train_dataloader(self):
        return DataLoader(Hidden(self.train_set), batch_size=8, collate_fn=pad)


class ModuleLabels(Unlabelled):
    """Its training set declares no labels; the DataModule itself does (docs/datasets.md), one per row."""

    @property
    def labels(self):
        return self.train_set.dataset.labels[self.train_set.indices]


SPEAKERS = ["ann", "bo", "cy", "di", "ed", "flo", "gus", "hal", "ivy", "jo"]


class Spoken(Dataset):
    """Words' samples with no labels declared, each said by a speaker (a skewed draw of its own seed), its class
    also under "topic" as a 0-d tensor."""

    def __init__(self, words, seed):
        self.words = words
        g = torch.Generator().manual_seed(seed)
        weights = torch.arange(1, len(SPEAKERS) + 1, dtype=torch.float64)
        self.speakers = [SPEAKERS[k] for k in torch.multinomial(weights, len(words), True, generator=g).tolist()]

    def __len__(self):
        return len(self.words)

    def __getitem__(self, i):
        item = self.words[i]
        return {**item, "topic": torch.tensor(item["label"]), "speaker": self.speakers[i]}


class SpeakersDM(Prepared):
    def train_dataloader(self):
        return DataLoader(Spoken(self.train_set, 2), batch_size=8, collate_fn=pad)

    def test_dataloader(self):
        return DataLoader(Spoken(self.test_set, 3), batch_size=64, collate_fn=pad)


class NoLoader(L.LightningDataModule):
    pass


class BagOfWords(L.LightningModule):
    def __init__(self, width=1.0):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, tokens, lengths):
        mask = (torch.arange(tokens.shape[1])[None, :] < lengths[:, None]).float()
        mean = (self.embed(tokens) * mask[..., None]).sum(1) / lengths[:, None]
        return self.head(mean)

    def training_step(self, batch, batch_idx):
        return nn.functional.cross_entropy(self(batch["tokens"], batch["lengths"]), batch["label"])

    def test_step(self, batch, batch_idx):
        logits = self(batch["tokens"], batch["lengths"])
        self.log("test_loss", nn.functional.cross_entropy(logits, batch["label"]))
        self.log("test_acc", (logits.argmax(1) == batch["label"]).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def bag_of_words(num_classes, in_channels, image_size, width):
    return BagOfWords(width)


class NoTestStep(BagOfWords):
    test_step = L.LightningModule.test_step


def no_test_step(num_classes, in_channels, image_size, width):
    return NoTestStep(width)
'''

_COUNTER = itertools.count()


def write(folder, source: str = SOURCE, prefix: str = "user_dm") -> str:
    name = f"{prefix}_{next(_COUNTER)}"
    Path(folder, f"{name}.py").write_text(source)
    return name


def ARGS(name: str, datamodule: str = "WordsDM") -> list[str]:
    """Overrides that run the DataModule ``datamodule`` of module ``name`` with its bag-of-words model."""
    return [f"data.name={name}:{datamodule}", f"model.name={name}:bag_of_words", "data.partition=iid",
            "run.target_metric=test_acc", "train.batch_size=8"]
