"""``python -m seafl_dist.runtime.torchrun``: torchrun's arguments unchanged, its rendezvous errors as one line each.

The real path (a node that never arrives, a lost node under --max-restarts) runs in tests/dist/test_two_nodes.py;
here every RendezvousError class torch defines gets its line, from torchrun's own argument parser.
"""
import inspect

import pytest
from torch.distributed import run as torchrun_module
from torch.distributed.elastic.rendezvous import api

from one_line import one_line_message
from seafl_dist.runtime.torchrun import JOIN_TIMEOUT_DEFAULT, join_timeout, rendezvous_line

ARGS = ["--nnodes=2", "--nproc_per_node=2", "--rdzv_id=job7", "--rdzv_backend=c10d",
        "--rdzv_endpoint=gpu07:29623", "--rdzv_conf=join_timeout=45", "-m", "seafl_dist", "run", "c.yaml"]
ERRORS = sorted((c for _, c in inspect.getmembers(api, inspect.isclass) if issubclass(c, api.RendezvousError)),
                key=lambda c: c.__name__)


def test_every_rendezvous_error_class_is_enumerated():
    assert {c.__name__ for c in ERRORS} >= {"RendezvousError", "RendezvousTimeoutError", "RendezvousClosedError",
                                            "RendezvousConnectionError"}


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_each_rendezvous_error_is_one_line_naming_the_rendezvous(cls):
    args = torchrun_module.parse_args(ARGS)
    line = one_line_message(rendezvous_line(cls("first\nsecond"), args), "seafl: error: ",
                            "the c10d rendezvous at gpu07:29623 (rdzv_id job7)", "(first second)")
    if cls is api.RendezvousTimeoutError:
        one_line_message(line, "2 nodes (--nnodes=2) were due", "join timeout of 45 s", "SEAFL_JOIN_TIMEOUT")
    elif cls is api.RendezvousConnectionError:
        one_line_message(line, "cannot reach", "SEAFL_PORT")
    elif cls is api.RendezvousClosedError:
        one_line_message(line, "was closed by another node")
    elif cls is api.RendezvousGracefulExitError:
        one_line_message(line, "this node was left out of", "--nnodes=2")
    else:
        one_line_message(line, cls.__name__, "2 nodes (--nnodes=2)")


@pytest.mark.parametrize("conf,seconds", [("join_timeout=45", 45), ("last_call_timeout=3, join_timeout = 7", 7),
                                          ("", JOIN_TIMEOUT_DEFAULT), ("read_timeout=9", JOIN_TIMEOUT_DEFAULT),
                                          ("join_timeout=soon", JOIN_TIMEOUT_DEFAULT)])
def test_join_timeout_is_read_from_rdzv_conf(conf, seconds):
    assert join_timeout(conf) == seconds


class Refusing(api.RendezvousHandler):
    """A rendezvous backend whose every rendezvous fails with one RendezvousError class, as a real one does."""

    def __init__(self, cls, params):
        self.cls, self.params = cls, params

    def next_rendezvous(self):
        raise self.cls("the nodes\nnever met")

    def get_backend(self):
        return f"refusing_{self.cls.__name__}"

    def is_closed(self):
        return False

    def set_closed(self):
        pass

    def num_nodes_waiting(self):
        return 0

    def get_run_id(self):
        return self.params.run_id

    def shutdown(self):
        return True


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_main_ends_each_rendezvous_failure_in_one_line_and_exit_1(cls, capsys):
    """torchrun itself runs (its agent asks a registered backend for the rendezvous, which fails): ``main``
    must turn every RendezvousError class into our one line, not only the timeout."""
    from torch.distributed.elastic.rendezvous.registry import handler_registry
    from seafl_dist.runtime import torchrun as ours
    backend = f"refusing_{cls.__name__}"
    handler_registry.register(backend, lambda params, cls=cls: Refusing(cls, params))
    argv = ["--nnodes=2", "--nproc_per_node=1", "--rdzv_id=job7", f"--rdzv_backend={backend}",
            "--rdzv_endpoint=gpu07:29623", "--max-restarts=0", "-m", "seafl_dist", "run", "c.yaml"]
    assert ours.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    # torch's agent swallows a graceful exit (logs it, returns None): its message does not reach us
    raised = cls() if cls is api.RendezvousGracefulExitError else cls("the nodes\nnever met")
    assert err[-1] == rendezvous_line(raised, torchrun_module.parse_args(argv))
    assert len(err) == 1, err  # nothing of torchrun's own above it
