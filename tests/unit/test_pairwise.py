"""The pairwise generator of tests/pairwise.py (the feature matrix's rows): every pair is covered by brute force,
no row holds a forbidden pair, and what cannot be covered is said."""
from itertools import combinations

from hypothesis import given, strategies as st

from pairwise import pairwise


def covered(rows, factors):
    """Brute force: every (a=x, b=y) that some row holds."""
    return {((a, r[a]), (b, r[b])) for r in rows for a, b in combinations(list(factors), 2)}


@given(levels=st.lists(st.integers(1, 4), min_size=2, max_size=7))
def test_every_pair_appears_in_some_row(levels):
    factors = {f"f{i}": list(range(n)) for i, n in enumerate(levels)}
    rows, impossible = pairwise(factors)
    assert not impossible
    want = {((a, x), (b, y)) for a, b in combinations(list(factors), 2) for x in factors[a] for y in factors[b]}
    assert covered(rows, factors) == want
    assert all(set(r) == set(factors) for r in rows)
    a, b = sorted(levels)[-2:]
    assert len(rows) >= a * b  # the two largest factors alone need that many


def test_forbidden_pairs_are_never_in_a_row_and_are_returned():
    factors = {"data": ["digits", "leaf", "dm"], "partition": ["iid", "natural"], "privacy": [False, True],
               "eval": [False, True]}

    def forbidden(row):
        return (row.get("data") == "digits" and row.get("partition") == "natural") or \
            (row.get("privacy") is True and row.get("eval") is True)
    rows, impossible = pairwise(factors, forbidden)
    assert rows and not any(forbidden(r) for r in rows)
    assert impossible == {(("data", "digits"), ("partition", "natural")), (("privacy", True), ("eval", True))}
    every = {((a, x), (b, y)) for a, b in combinations(list(factors), 2) for x in factors[a] for y in factors[b]}
    assert covered(rows, factors) == every - impossible


def test_a_pair_no_allowed_row_can_complete_is_impossible():
    factors = {"a": [0, 1], "b": [0, 1], "c": [0, 1]}

    def forbidden(row):  # a=1 with b=1 is allowed alone, but every c is refused beside it
        return row.get("a") == 1 and row.get("b") == 1 and "c" in row
    rows, impossible = pairwise(factors, forbidden)
    assert (("a", 1), ("b", 1)) in impossible and not any(r["a"] == 1 and r["b"] == 1 for r in rows)


@given(levels=st.lists(st.integers(1, 4), min_size=2, max_size=6))
def test_each_row_holds_the_first_pair_uncovered_before_it(levels):
    """The documented seed: a row starts from the uncovered pair that comes first (factors, then levels, in listed
    order) and keeps it: the filling never moves the seed's two levels."""
    factors = {f"f{i}": list(range(n)) for i, n in enumerate(levels)}
    rows, _ = pairwise(factors)
    names = list(factors)
    uncovered = {((a, x), (b, y)) for a, b in combinations(names, 2) for x in factors[a] for y in factors[b]}
    for row in rows:
        (a, x), (b, y) = min(uncovered, key=lambda p: (names.index(p[0][0]), p[0][1], names.index(p[1][0]), p[1][1]))
        assert row[a] == x and row[b] == y, (row, (a, x), (b, y))
        uncovered -= {((p, row[p]), (q, row[q])) for p, q in combinations(names, 2)}
    assert not uncovered
