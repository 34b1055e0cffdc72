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
    else:
        one_line_message(line, cls.__name__, "2 nodes (--nnodes=2)")


@pytest.mark.parametrize("conf,seconds", [("join_timeout=45", 45), ("last_call_timeout=3, join_timeout = 7", 7),
                                          ("", JOIN_TIMEOUT_DEFAULT), ("read_timeout=9", JOIN_TIMEOUT_DEFAULT),
                                          ("join_timeout=soon", JOIN_TIMEOUT_DEFAULT)])
def test_join_timeout_is_read_from_rdzv_conf(conf, seconds):
    assert join_timeout(conf) == seconds
