"""Aggregation rules: pure functions of flat 1-D float tensors (SPEC "Aggregation rules").

No process groups, no Lightning: the server loop hands :func:`aggregate` the current
version t, w_t, the buffered updates and a way to fetch older global models, and gets
back w_{t+1} and one info dict per update (weights, rejections, SEAFL's γ, s, cos).

- FedAvg: :mod:`.fedavg`; FedBuff: :mod:`.fedbuff`; FedAsync: :mod:`.fedasync`;
  SEAFL / SEAFL² (paper Eq. 4–8): :mod:`.seafl`; delay-adaptive asynchronous SGD: :mod:`.asyncsgd`
  (FADAS is FedBuff with the ``amsgrad`` server optimizer and its delay-adaptive η: :mod:`.server_opt`);
  Port as PLATO computes it (a rule with memory): :mod:`.port`; FedStaleWeight as its authors' bench computes it
  (each device's observed staleness kept): :mod:`.fedstaleweight`.
- Your own: a function with their signature, named ``algorithm.name: pkg.module:fn``;
  :func:`screen` gives it the same rejection of NaN / wrongly sized updates.
- A rule may keep a state between aggregations (CA²FL's cache, Port's last models, a user's own): the contract
  and the server's holder of it are :mod:`.memory`.
- After the rule, the server optimizer (``algorithm.server_opt``: FedAvgM, Reddi et al.'s Adam, Yogi,
  Adagrad, AMSGrad) steps on its result: :mod:`.server_opt`, with a state the server checkpoints.
"""
from .common import check_update, cosine, screen
from .dispatch import aggregate, memory_of
from .memory import RuleMemory
from .fedasync import staleness_factor_fedasync
from .seafl import seafl_gamma
from .server_opt import ServerOptimizer, ServerOptState, optimizer_step
from .types import AggregationResult, BufferedUpdate, FlatParts

__all__ = [
    "AggregationResult",
    "BufferedUpdate",
    "FlatParts",
    "RuleMemory",
    "ServerOptState",
    "ServerOptimizer",
    "aggregate",
    "memory_of",
    "check_update",
    "cosine",
    "optimizer_step",
    "screen",
    "seafl_gamma",
    "staleness_factor_fedasync",
]
