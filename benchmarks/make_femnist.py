"""Place the partial public copy of LEAF's FEMNIST 5% sample under DATA_ROOT/femnist/{train,test} (docs/REPRODUCTION.md,
"Fig. 5 on FEMNIST's writers"), for machines that reach GitHub mirrors but not NIST:

    python benchmarks/make_femnist.py FLIC_GIT_DIR --data-root /work/data

FLIC_GIT_DIR is a clone (or bare mirror) of ``arakotom/flic``, whose ``data/femnist/{train,test}`` hold LEAF's
``-s niid --sf 0.05 -k 0 -t sample --tf 0.9`` files, ``all_data_<i>_niid_05_keep_0_{train,test}_9.json``. Its
snapshot lacks some training blobs; only the pairs whose training AND test files can be read are copied (the test
file of a missing training file would hold writers that are no device). The blobs are read with ``git cat-file``
from HEAD, so a bare mirror needs no checkout. Prints what was copied: writers, images, images a writer, classes.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path


def blob(git: str, path: str) -> bytes | None:
    proc = subprocess.run(["git", "--git-dir", git, "cat-file", "blob", f"HEAD:{path}"], capture_output=True)
    return proc.stdout if proc.returncode == 0 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("git_dir")
    ap.add_argument("--data-root", required=True)
    args = ap.parse_args()
    git = str(Path(args.git_dir) / ".git") if (Path(args.git_dir) / ".git").is_dir() else args.git_dir
    names = subprocess.run(["git", "--git-dir", git, "ls-tree", "-r", "--name-only", "HEAD", "data/femnist/"],
                           capture_output=True, text=True, check=True).stdout.split()
    pattern = re.compile(r"data/femnist/train/all_data_(\d+)_niid_05_keep_0_train_9\.json")
    numbers = sorted(int(m.group(1)) for m in map(pattern.fullmatch, names) if m)
    out = Path(args.data_root) / "femnist"
    stats = {"train": [], "test": []}
    labels: set[int] = set()
    kept, missing = [], []
    for i in numbers:
        pair = {split: blob(git, f"data/femnist/{split}/all_data_{i}_niid_05_keep_0_{split}_9.json")
                for split in ("train", "test")}
        if any(b is None for b in pair.values()):
            missing.append(i)
            continue
        kept.append(i)
        for split, data in pair.items():
            (out / split).mkdir(parents=True, exist_ok=True)
            (out / split / f"all_data_{i}_niid_05_keep_0_{split}_9.json").write_bytes(data)
            doc = json.loads(data)
            stats[split] += doc["num_samples"]
            labels.update(y for u in doc["users"] for y in doc["user_data"][u]["y"])
    print(f"copied {len(kept)} file pairs to {out}; training blob or test blob missing for {len(missing)}: {missing}")
    for split, sizes in stats.items():
        sizes.sort()
        print(f"{split}: {len(sizes)} writers, {sum(sizes)} images, {sizes[0]}..{sizes[-1]} a writer "
              f"(median {sizes[len(sizes) // 2]})" if sizes else f"{split}: nothing")
    print(f"classes present: {len(labels)} of 62")


if __name__ == "__main__":
    main()
