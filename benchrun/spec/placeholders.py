"""The ``${NAME}`` placeholders a ``repoCommand`` may use, and their per-argument substitution.

Substitution works on an argv list (``shlex.split`` of what a person wrote), one argument
at a time; nothing is ever handed to a shell, so a value holding ``; rm -rf ~`` stays one
literal argument.
"""

from __future__ import annotations

from typing import Mapping

# Names a launcher resolves per node of a multi-node gang (``nodes > 1``): the node's rank,
# the rendezvous address and port, and the node count. For a single-node suite the planner
# resolves them (0, localhost, 29500, 1).
GANG_NAMES = frozenset({"NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NNODES"})
# Names the planner fills in itself for every invocation.
RUNTIME_NAMES = frozenset(
    {"RUN_ID", "RUN_DIR", "REPLICATE", "SUITE", "LAYER", "BENCHMARK_CASE_ID", "HOSTS", "LABELS", "BENCHRUN_HOME"}
) | GANG_NAMES
# Names whose value comes from the site (environment ``BENCHRUN_VAR_<NAME>``): cluster
# access and the reference template's knobs. Known, so a typo is caught at admission.
SITE_NAMES = frozenset(
    {
        "SSH_USER",
        "SSH_KEY",
        "OOB_IF",
        "SOCKET_IFNAME",
        "PRIMARY_LABEL",
        "GPU_HOURLY_COST_USD",
        "VLLM_MULTINODE_IMAGE",
        "BASELINE_RUN_ID",
        "ENDPOINT_URL",
    }
)
KNOWN_NAMES = RUNTIME_NAMES | SITE_NAMES
SITE_VAR_PREFIX = "BENCHRUN_VAR_"  # a site name's value comes from $BENCHRUN_VAR_<NAME>


def _spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of every ``${NAME}`` in ``text``: ``${``, then anything up to the first ``}``.

    Scanned by hand because the equivalent regex retries at every ``${`` and reads on to the end when
    no ``}`` follows: quadratic on a megabyte of ``${]${]...`` in a spec. Once no ``}`` is
    left, nothing more can match.
    """
    out = []
    pos = 0
    while (start := text.find("${", pos)) >= 0:
        end = text.find("}", start + 2)
        if end < 0:
            break
        out.append((start, end + 1, text[start + 2 : end]))
        pos = end + 1
    return out


def placeholder_names(text: str) -> list[str]:
    """Every ``${NAME}`` in ``text``, in order (duplicates kept)."""
    return [name for _, _, name in _spans(text)]


def unknown_placeholders(text: str) -> list[str]:
    """The placeholder names in ``text`` that benchrun does not know."""
    return [n for n in placeholder_names(text) if n not in KNOWN_NAMES]


def substitute(arg: str, values: Mapping[str, str]) -> str:
    """Replace every ``${NAME}`` in one argument; KeyError names a missing value."""
    parts = []
    pos = 0
    for start, end, name in _spans(arg):
        if name not in values:
            raise KeyError(name)
        parts += [arg[pos:start], str(values[name])]
        pos = end
    parts.append(arg[pos:])
    return "".join(parts)
