"""What a Hugging Face source costs at start-up against the IDX reader, on 60,000 MNIST-sized rows.

    python benchmarks/hf_startup.py [--dir DIR] [--rows 60000] [--repeats 3] [--mnist DATA_ROOT]

With ``--mnist DATA_ROOT`` the rows are real MNIST's (DATA_ROOT/MNIST/raw, e.g. as benchmarks/make_mnist.py
rebuilds it): its first ``--rows`` training images and the test set. Without it they are synthetic (28x28 uint8
noise, labels 0..9): what is timed is reading and decoding, which does not depend on the pixels' values except
through PNG sizes (noise compresses worse than digits, so the synthetic PNG figures are an upper bound). The same rows are written
three ways: MNIST's IDX files (the built-in ``mnist`` reader), a ``save_to_disk`` DatasetDict whose ``image``
column is an HF ``Image`` (PNG bytes, as MNIST on the Hub is stored), and one whose ``image`` column is a raw
``Array2D`` of uint8. Each load runs in a fresh process (``load_dataset(..., train=True)`` of seafl_dist, the
training split only) and reports the process's wall and CPU seconds for the import of the reader and for the
load itself; medians over ``--repeats``. A script, not a test; docs/performance.md quotes its output.
"""
from __future__ import annotations

import argparse
import json
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

PROBE = r"""
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import seafl_dist.data as d
if sys.argv[1].startswith("hf:"):
    import datasets  # noqa: F401  (its import is part of the source's cost)
t1, c1 = time.perf_counter(), time.process_time()
ds = d.load_dataset(sys.argv[1], sys.argv[2], train=True)
t2, c2 = time.perf_counter(), time.process_time()
assert len(ds) == int(sys.argv[3]) and tuple(ds.images.shape[1:]) == (1, 28, 28), ds
print(json.dumps({"import_s": t1 - t0, "import_cpu": c1 - c0, "load_s": t2 - t1, "load_cpu": c2 - c1}))
"""


def write_idx(path: Path, array: np.ndarray) -> None:
    code = 0x08  # unsigned bytes
    path.write_bytes(struct.pack(">HBB", 0, code, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
                     + array.astype(np.uint8).tobytes())


def read_idx(path: Path) -> np.ndarray:
    data = path.read_bytes()
    ndim = data[3]
    shape = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def make(root: Path, n: int, mnist: Path | None = None) -> None:
    import datasets
    from PIL import Image
    if mnist is not None:  # real MNIST: the first n training rows, the whole test set
        raw_in = mnist / "MNIST" / "raw"
        splits = {"train": (read_idx(raw_in / "train-images-idx3-ubyte")[:n],
                            read_idx(raw_in / "train-labels-idx1-ubyte")[:n].astype(np.int64)),
                  "test": (read_idx(raw_in / "t10k-images-idx3-ubyte"),
                           read_idx(raw_in / "t10k-labels-idx1-ubyte").astype(np.int64))}
    else:
        g = np.random.default_rng(0)
        splits = {"train": (g.integers(0, 256, (n, 28, 28), dtype=np.uint8), g.integers(0, 10, n)),
                  "test": (g.integers(0, 256, (100, 28, 28), dtype=np.uint8), g.integers(0, 10, 100))}
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, prefix in (("train", "train"), ("test", "t10k")):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", splits[split][0])
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", splits[split][1])
    label = datasets.ClassLabel(names=[str(k) for k in range(10)])
    png = datasets.Features({"image": datasets.Image(), "label": label})
    array = datasets.Features({"image": datasets.Array2D((28, 28), "uint8"), "label": label})
    datasets.DatasetDict({s: datasets.Dataset.from_dict({"image": [Image.fromarray(a) for a in x],
                                                         "label": y.tolist()}, features=png)
                          for s, (x, y) in splits.items()}).save_to_disk(str(root / "hf_png"))
    datasets.DatasetDict({s: datasets.Dataset.from_dict({"image": x, "label": y.tolist()}, features=array)
                          for s, (x, y) in splits.items()}).save_to_disk(str(root / "hf_array"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--rows", type=int, default=60000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mnist", type=Path, default=None, help="a data root holding real MNIST (MNIST/raw)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        make(root, args.rows, args.mnist)
        rows = {}
        for label, name in (("IDX reader (mnist)", "mnist"), ("HF save_to_disk, Image (PNG)", "hf:hf_png"),
                            ("HF save_to_disk, Array2D uint8", "hf:hf_array")):
            runs = [json.loads(subprocess.run([sys.executable, "-c", PROBE, name, str(root), str(args.rows)],
                                              capture_output=True, text=True, check=True).stdout.splitlines()[-1])
                    for _ in range(args.repeats)]
            rows[label] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    base = rows["IDX reader (mnist)"]
    what = "real MNIST" if args.mnist else "synthetic 28x28 uint8"
    print(f"{args.rows} rows of {what}, medians of {args.repeats} fresh processes")
    print(f"{'source':34} {'import s':>9} {'import cpu':>10} {'load s':>8} {'load cpu':>9} {'load cpu / IDX':>15}")
    for label, r in rows.items():
        print(f"{label:34} {r['import_s']:9.2f} {r['import_cpu']:10.2f} {r['load_s']:8.2f} {r['load_cpu']:9.2f} "
              f"{r['load_cpu'] / base['load_cpu']:15.1f}")


if __name__ == "__main__":
    main()
