"""``python -m seafl_dist.runtime.torchrun ARGS``: torchrun (``torch.distributed.run``) with the same arguments, whose
rendezvous failures end in one line instead of torchrun's traceback.

slurm/multinode.sbatch starts every node's agent with it. When the nodes do not meet (a node that never
arrives, or one lost while the others wait to restart under ``--max-restarts``), torchrun raises a
``RendezvousError`` out of its agent and prints some 40 lines of its own stack, the last of which names
the class. Here the agent's error becomes one ``seafl: error: ...`` line saying which rendezvous, how many
nodes were due, how long they waited and what to check; the exit code stays non-zero (1). Nothing else
changes: a rank's failure still ends in torchrun's own summary, and a run dir is written only by the
ranks, which a rendezvous that never completes does not start.
"""
from __future__ import annotations

import sys
import traceback

from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.elastic.rendezvous.api import (RendezvousClosedError, RendezvousConnectionError,
                                                      RendezvousError, RendezvousGracefulExitError,
                                                      RendezvousTimeoutError)

JOIN_TIMEOUT_DEFAULT = 600  # torchrun's c10d join_timeout when --rdzv_conf does not set one


def join_timeout(rdzv_conf: str) -> int:
    """The ``join_timeout`` of torchrun's ``--rdzv_conf`` ("key=value,..."), else torchrun's default."""
    for item in filter(None, (s.strip() for s in rdzv_conf.split(","))):
        key, _, value = item.partition("=")
        if key.strip() == "join_timeout" and value.strip().isdigit():
            return int(value)
    return JOIN_TIMEOUT_DEFAULT


def rendezvous_line(err: RendezvousError, args) -> str:
    """The one line for an agent's rendezvous failure, from torchrun's parsed arguments."""
    where = f"the {args.rdzv_backend} rendezvous at {args.rdzv_endpoint or 'localhost'} (rdzv_id {args.rdzv_id})"
    due = f"{args.nnodes} nodes (--nnodes={args.nnodes})"
    text = " ".join(str(err).split())  # one line, whatever torch put in the message
    detail = f" ({text})" if text else ""
    if isinstance(err, RendezvousTimeoutError):
        wait = join_timeout(args.rdzv_conf or "")
        return (f"seafl: error: the nodes did not meet at {where}: {due} were due and not all of them joined "
                f"within the join timeout of {wait} s{detail}: a node never started, cannot reach that endpoint, "
                f"or was lost before a restart; check each node's log and srun --nodes=N, or raise join_timeout "
                f"in --rdzv_conf (SEAFL_JOIN_TIMEOUT under slurm/multinode.sbatch)")
    if isinstance(err, RendezvousConnectionError):
        return (f"seafl: error: cannot reach {where}{detail}; check that the first node is up and that the "
                f"port is open to every node (SEAFL_PORT under slurm/multinode.sbatch)")
    if isinstance(err, RendezvousGracefulExitError):
        return (f"seafl: error: this node was left out of {where}: the others met without it{detail}; more "
                f"nodes started than --nnodes={args.nnodes} admits, or it arrived after they had met")
    if isinstance(err, RendezvousClosedError):
        return (f"seafl: error: {where} was closed by another node (it ended or failed first){detail}; "
                f"see that node's log")
    return f"seafl: error: {where} failed for {due}: {type(err).__name__}{detail}; check each node's log"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = torchrun.parse_args(argv)
    try:
        torchrun.run(args)
    except RendezvousError as err:
        print(rendezvous_line(err, args), file=sys.stderr, flush=True)
        return 1
    except AttributeError as err:
        if not _graceful_exit_swallowed(err):
            raise
        print(rendezvous_line(RendezvousGracefulExitError(), args), file=sys.stderr, flush=True)
        return 1
    return 0


def _graceful_exit_swallowed(err: AttributeError) -> bool:
    """torch's agent catches a RendezvousGracefulExitError itself (it logs it at INFO and returns None), and
    torchrun's launcher then fails on that None (``result.is_failed()``, torch 2.14): the graceful exit
    reaches us only as this AttributeError out of ``launch_agent``."""
    frames = traceback.extract_tb(err.__traceback__)
    return "'NoneType' object has no attribute 'is_failed'" in str(err) and bool(frames) and \
        frames[-1].name == "launch_agent"


if __name__ == "__main__":
    # torchrun's own main is wrapped in @record, which writes a failed rank's error file for the agent:
    # keep it for everything but the rendezvous failures handled above
    sys.exit(record(main)() or 0)
