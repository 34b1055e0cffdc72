"""benchmarks/make_femnist.py: LEAF's FEMNIST files laid out as arakotom/flic holds them (a git repo of
data/femnist/{train,test}/all_data_<i>_niid_05_keep_0_<split>_9.json) become the folders seafl_dist's FEMNIST
loader reads; a pair whose training or test file cannot be read is left out, and what was copied is counted."""
import json
import subprocess
import sys
from pathlib import Path

from seafl_dist.data.femnist import load_femnist

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "make_femnist.py"
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def leaf(writers: dict) -> dict:
    """LEAF's JSON for ``writers`` (name -> list of labels); pixels 1.0 (white) but one per image."""
    data = {}
    for w, ys in writers.items():
        xs = [[1.0] * 784 for _ in ys]
        for k, x in enumerate(xs):
            x[k] = 0.0
        data[w] = {"x": xs, "y": ys}
    return {"users": list(writers), "num_samples": [len(ys) for ys in writers.values()], "user_data": data}


def test_complete_pairs_are_copied_and_counted(tmp_path):
    repo = tmp_path / "flic"
    files = {("train", 0): {"a": [0, 1, 2], "b": [61]}, ("test", 0): {"a": [3], "b": [61]},
             ("train", 1): {"c": [5, 5]}, ("test", 1): {"c": [5]},
             ("train", 2): {"d": [7]}}  # pair 2's test file is not in the repo: d is no device
    for (split, i), writers in files.items():
        path = repo / "data" / "femnist" / split / f"all_data_{i}_niid_05_keep_0_{split}_9.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(leaf(writers)))
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*GIT, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "x"], check=True)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(repo), "--data-root", str(tmp_path / "data")],
                          capture_output=True, text=True, check=True)
    out = tmp_path / "data" / "femnist"
    assert sorted(p.name for p in (out / "train").iterdir()) == [f"all_data_{i}_niid_05_keep_0_train_9.json"
                                                                for i in (0, 1)]
    assert sorted(p.name for p in (out / "test").iterdir()) == [f"all_data_{i}_niid_05_keep_0_test_9.json"
                                                               for i in (0, 1)]
    assert "copied 2 file pairs" in proc.stdout and "missing for 1: [2]" in proc.stdout
    assert "train: 3 writers, 6 images, 1..3 a writer (median 2)" in proc.stdout
    assert "test: 3 writers, 3 images, 1..1 a writer" in proc.stdout
    assert "classes present: 6 of 62" in proc.stdout  # 0, 1, 2, 3, 5, 61: pair 2's 7 is not copied
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(tmp_path / "bare.git")], check=True)
    bare = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "bare.git"), "--data-root",
                           str(tmp_path / "from_bare")], capture_output=True, text=True, check=True)
    assert bare.stdout.replace("from_bare", "data") == proc.stdout  # a bare mirror (what `fetch` gives) alike
    train = load_femnist(tmp_path / "data", train=True, write_cache=False)
    test = load_femnist(tmp_path / "data", train=False, write_cache=False)
    assert (len(train), len(test)) == (6, 3)
