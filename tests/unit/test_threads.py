"""The warning for more torch threads than CPUs (ranks x runtime.threads), which thrash."""
from seafl_dist.runtime.setup import oversubscription


def test_oversubscribed_threads_are_warned_about_with_a_fix():
    assert oversubscription(1, 2, 2) is None  # two workers of one thread on two CPUs: fine
    assert oversubscription(8, 1, 8) is None
    msg = oversubscription(2, 2, 2)
    assert "4 threads on 2 CPUs" in msg and "runtime.threads=1" in msg and "fewer ranks" in msg
    msg = oversubscription(16, 1, 4)
    assert "16 torch threads" in msg and "runtime.threads=4" in msg and "ranks" not in msg
