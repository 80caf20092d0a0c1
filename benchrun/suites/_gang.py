"""A suite's place in a multi-node gang, read from the rendezvous variables its launcher set.

Standard library only (runs in pods). The launcher (local process groups or a JobSet) sets
``MASTER_ADDR``, ``MASTER_PORT``, ``NODE_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE`` and
``BENCHRUN_NODES``; a suite run without them is a single node.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Gang:
    """Where this process sits: node ``node_rank`` of ``nodes``, ``local_world_size`` ranks each."""

    nodes: int
    node_rank: int
    local_world_size: int
    world_size: int
    master_addr: str
    master_port: int
    node_name: str

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.local_world_size + local_rank

    def node_of(self, rank: int) -> int:
        return rank // self.local_world_size

    @property
    def init_method(self) -> str:
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"tcp://{host}:{self.master_port}"


def node_name(env: Mapping[str, str] | None = None) -> str:
    """This node's name: the launcher's (Kubernetes node, or host-nodeN locally), else the hostname."""
    env = os.environ if env is None else env
    return env.get("BENCHRUN_NODE_NAME") or socket.gethostname()


def gang_from_env(env: Mapping[str, str] | None = None) -> Gang | None:
    """The gang this process belongs to, or None for a single-node launch."""
    env = os.environ if env is None else env
    nodes = int(env.get("BENCHRUN_NODES", "1") or 1)
    if nodes <= 1:
        return None
    try:
        local = int(env.get("LOCAL_WORLD_SIZE", "1"))
        gang = Gang(nodes=nodes, node_rank=int(env["NODE_RANK"]), local_world_size=local,
                    world_size=int(env.get("WORLD_SIZE", str(nodes * local))),
                    master_addr=env["MASTER_ADDR"], master_port=int(env["MASTER_PORT"]), node_name=node_name(env))
    except (KeyError, ValueError) as exc:
        raise ValueError(f"BENCHRUN_NODES={nodes} but the rendezvous variables are missing or invalid: {exc}") from None
    if gang.world_size != nodes * local or not 0 <= gang.node_rank < nodes:
        raise ValueError(f"inconsistent gang: WORLD_SIZE={gang.world_size}, BENCHRUN_NODES={nodes}, "
                         f"LOCAL_WORLD_SIZE={local}, NODE_RANK={gang.node_rank}")
    return gang
