"""runtime/elastic.py's handshake in one process, on an in-memory store standing for torchrun's agent store
(issue 61: only tests/dist's torchrun restarts held it): a worker that first reads an earlier attempt's token,
whose acknowledgement is still in the store, does not take that attempt; it joins the one rank 0 opens next,
whose acknowledgement lists the worker's own nonce."""
import datetime
import json
import threading
import time

import torch.distributed as dist

from seafl_dist.runtime import elastic

RUN = "seafl/run7"


def test_a_worker_joins_only_the_attempt_whose_acknowledgement_lists_its_own_nonce():
    base = dist.HashStore()
    base.set_timeout(datetime.timedelta(seconds=20))  # a broken handshake fails the test, it does not hang it
    # the attempt before a torchrun restart, as its keys stay in the agent's store: rank 1 of it acknowledged
    base.set(f"{RUN}/attempt", "stale")
    base.set(f"{RUN}/stale/join/1", "123-dead")
    base.set(f"{RUN}/stale/ack", json.dumps({"nonces": ["123-dead"], "plan": {"action": "resume", "stale": True}}))
    joined = {}
    worker = threading.Thread(target=lambda: joined.update(attempt=elastic.join(base, RUN, 1)), daemon=True)
    worker.start()
    time.sleep(0.3)  # the worker has read the stale token and its acknowledgement, which does not list its nonce
    assert worker.is_alive() and not joined, "the worker took an earlier attempt's acknowledgement"
    lead = elastic.lead(base, RUN, 2, {"action": "fresh"})
    worker.join(10)
    assert "attempt" in joined, "the worker never joined the attempt rank 0 opened"
    attempt = joined["attempt"]
    assert attempt.token == lead.token != "stale" and attempt.plan == {"action": "fresh"}
    nonce = base.get(f"{RUN}/{lead.token}/join/1").decode()
    assert nonce != "123-dead" and json.loads(base.get(f"{RUN}/{lead.token}/ack"))["nonces"] == [nonce]
