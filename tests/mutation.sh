#!/usr/bin/env bash
# Mutation testing (docs/testing.md, "Mutation testing"): mutmut changes the named source files one small
# edit at a time (a comparison flipped, a constant changed, a call's argument dropped, ...) and runs the
# named tests against each mutant; a mutant the tests still pass "survived". Not part of CI.
#
#   tests/mutation.sh FILE[::FUNCTION]... -- TEST...
#   tests/mutation.sh --again DIR      # after writing tests: retest only DIR's survivors, with the tests as they are now
#
#   tests/mutation.sh seafl_dist/report/divergence.py -- tests/unit/test_divergence.py
#   tests/mutation.sh seafl_dist/train/loop.py::_fit 'seafl_dist/train/loop.py::_Job.*' \
#       -- tests/unit/test_lightning_conformance.py
#
# FILE::FUNCTION mutates that function only (FILE::Class.method a method; * matches any characters).
# TEST is anything pytest takes (a file, a node id, -k EXPR). The tests must run in pytest's own process:
# a test that starts `python -m seafl_dist` in a subprocess imports the unmutated package and kills nothing.
# The run happens in a copy of the work tree as it is now (uncommitted edits too), in $MUTATION_DIR
# (default: a new /tmp/seafl-mutation.*), which is kept: `cd $MUTATION_DIR && mutmut show NAME` shows a
# mutant's diff, and the table printed at the end is also in $MUTATION_DIR/summary.txt.
# MUTATION_JOBS: mutants tested at once (default: the number of CPUs).
set -euo pipefail

usage() {
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
command -v mutmut >/dev/null || { echo "mutation.sh: mutmut is not installed: pip install -e '.[dev]'" >&2; exit 2; }
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)

summary() {  # the table of $work's mutants that match its globs, and the wall time $1
    local globs
    mapfile -t globs < "$work/globs"
    (cd "$work" && python - "$1" "${globs[@]}" > summary.txt <<'EOF'
import fnmatch, json, sys
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code  # mutmut's own reading of a mutant's exit code

wall, globs = int(sys.argv[1]), sys.argv[2:]
print(f"{'file':36} {'mutants':>7} {'killed':>6} {'survived':>8} {'no test':>7} {'other':>5}  score")
left = []
for meta in sorted(Path("mutants").rglob("*.py.meta")):
    codes = {k: v for k, v in json.loads(meta.read_text())["exit_code_by_key"].items()
             if any(fnmatch.fnmatch(k, g) for g in globs)}
    if not codes:
        continue
    status = {k: status_by_exit_code[v] for k, v in codes.items()}
    n = Counter(status.values())
    killed = n["killed"] + n["timeout"]  # a mutant that makes the tests hang is caught too
    other = len(codes) - killed - n["survived"] - n["no tests"]
    name = str(meta.relative_to("mutants"))[:-len(".meta")]
    print(f"{name:36} {len(codes):7} {killed:6} {n['survived']:8} {n['no tests']:7} {other:5}  {killed / len(codes):.0%}")
    left += [f"{k}: {s}" for k, s in status.items() if s not in ("killed", "timeout")]
print(f"wall time {wall // 60} min {wall % 60} s")
if left:
    print("not killed (mutmut show NAME shows one):")
    print("\n".join("    " + k for k in sorted(left)))
EOF
    )
    cat "$work/summary.txt"
    echo "(in $work)"
}

if [[ ${1:-} == --again ]]; then
    work=${2:?usage: tests/mutation.sh --again DIR}
    [[ -f $work/globs ]] || { echo "mutation.sh: $work holds no run of mutation.sh" >&2; exit 2; }
    rm -rf "$work/tests"  # the tests as they are now (mutmut copies them into mutants/ and finds the new ones)
    (cd "$root" && git ls-files -z -co --exclude-standard tests | tar --null -T - -cf -) | tar -xf - -C "$work"
    left=$(cd "$work" && sed -n 's/^    \(.*\): \(survived\|no tests\)$/\1/p' summary.txt)
    [[ -n $left ]] || { echo "mutation.sh: no survivor to retest in $work" >&2; exit 0; }
    start=$(date +%s)
    (cd "$work" && mutmut run --max-children "${MUTATION_JOBS:-$(nproc)}" $left > again.log 2>&1) || {
        tail -40 "$work/again.log" >&2; exit 1; }
    summary $(( $(date +%s) - start ))
    exit 0
fi

files=() tests=() sep=0
for arg in "$@"; do
    if [[ $sep == 0 && $arg == -- ]]; then sep=1
    elif [[ $sep == 0 ]]; then files+=("$arg")
    else tests+=("$arg")
    fi
done
[[ ${#files[@]} -gt 0 && ${#tests[@]} -gt 0 ]] || usage
work=${MUTATION_DIR:-$(mktemp -d /tmp/seafl-mutation.XXXXXX)}
mkdir -p "$work"
rm -rf "$work/mutants"

# the work tree as it is: tracked files and untracked ones git does not ignore
(cd "$root" && git ls-files -z -co --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$work"

paths=() globs=()
for spec in "${files[@]}"; do
    path=${spec%%::*}
    [[ -f $root/$path && $path == seafl_dist/*.py ]] || { echo "mutation.sh: $path is not a file under seafl_dist/" >&2; exit 2; }
    paths+=("$path")
    module=${path%.py}
    module=${module//\//.}
    if [[ $spec == *::* ]]; then
        name=${spec#*::}
        if [[ $name == *.* ]]; then globs+=("$module.xǁ${name%%.*}ǁ${name#*.}__mutmut_*")
        else globs+=("$module.x_${name}__mutmut_*")
        fi
    else
        globs+=("$module.*")
    fi
done

# mutmut's configuration (setup.cfg is read when pyproject.toml has no [tool.mutmut]): the files to
# mutate, the tests, and what the tests read besides the package (configs, docs, the README ...).
# forkserver: mutants are forked from a process that has imported torch but run nothing (torch's
# thread pools do not survive a fork from a process that used them).
{
    echo "[mutmut]"
    echo "source_paths = seafl_dist"
    echo "only_mutate ="; printf '    %s\n' "${paths[@]}"
    echo "pytest_add_cli_args_test_selection ="; printf '    %s\n' "${tests[@]}"
    echo "pytest_add_cli_args ="; printf '    %s\n' -p no:cacheprovider -p no:timeout
    echo "also_copy ="; printf '    %s\n' configs docs README.md benchmarks slurm setup.py MANIFEST.in
    echo "process_isolation = forkserver"
    echo "use_git_change_detection = false"
} > "$work/setup.cfg"

printf '%s\n' "${globs[@]}" > "$work/globs"
start=$(date +%s)
(cd "$work" && mutmut run --max-children "${MUTATION_JOBS:-$(nproc)}" "${globs[@]}" > run.log 2>&1) || {
    tail -40 "$work/run.log" >&2
    echo "mutation.sh: mutmut failed; the whole log: $work/run.log" >&2
    exit 1
}
wall=$(( $(date +%s) - start ))

summary "$wall"
