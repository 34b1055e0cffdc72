"""A pairwise (all-pairs) covering set: rows over several factors such that every pair of levels of every two
factors appears together in at least one row, with pairs that may not meet kept apart.

    rows = pairwise({"codec": ["none", "int8"], "W": [1, 3], ...}, forbidden=lambda row: ...)

Greedy and deterministic (AETG's idea without its randomness): each new row starts from the uncovered pair that
comes first, then fills the other factors one at a time with the level that covers the most uncovered pairs (ties:
the level listed first), skipping any assignment ``forbidden`` refuses for the partial row. Pairs that no allowed
row can hold are returned separately, so a caller can show that each is refused rather than silently missing.
"""
from __future__ import annotations

from itertools import combinations
from typing import Callable


def all_pairs(factors: dict[str, list]) -> set[tuple]:
    """Every ((factor a, level), (factor b, level)) with a listed before b."""
    names = list(factors)
    return {((a, x), (b, y)) for a, b in combinations(names, 2) for x in factors[a] for y in factors[b]}


def pairs_of(row: dict, names: list[str]) -> set[tuple]:
    present = [n for n in names if n in row]
    return {((a, row[a]), (b, row[b])) for a, b in combinations(present, 2)}


def pairwise(factors: dict[str, list], forbidden: Callable[[dict], bool] = lambda row: False
             ) -> tuple[list[dict], set[tuple]]:
    """(rows, pairs that no allowed row holds). ``forbidden(partial_row)`` is asked of partial rows too, so it must
    answer only from the factors the row already has."""
    names = list(factors)
    uncovered = {p for p in all_pairs(factors) if not forbidden(dict(p))}
    impossible = all_pairs(factors) - uncovered
    rows: list[dict] = []
    while uncovered:
        (a, x), (b, y) = min(uncovered, key=lambda p: (names.index(p[0][0]), factors[p[0][0]].index(p[0][1]),
                                                        names.index(p[1][0]), factors[p[1][0]].index(p[1][1])))
        row = {a: x, b: y}
        for name in names:
            if name in row:
                continue
            best, gain = None, -1
            for level in factors[name]:
                trial = {**row, name: level}
                if forbidden(trial):
                    continue
                g = len(pairs_of(trial, names) & uncovered)
                if g > gain:
                    best, gain = level, g
            if best is None:
                break
            row[name] = best
        if len(row) < len(names):  # the seed pair cannot be completed into an allowed row
            uncovered.discard(((a, x), (b, y)))
            impossible.add(((a, x), (b, y)))
            continue
        uncovered -= pairs_of(row, names)
        rows.append({n: row[n] for n in names})
    return rows, impossible
