"""Map a SLURM task's environment to torch.distributed's ``env://`` variables.

One rank per GPU, launched with ``srun``: SLURM already numbers the tasks, so each task's
rank is ``SLURM_PROCID``, its local rank ``SLURM_LOCALID``, the world size ``SLURM_NTASKS``,
and the master is the first host of the step's node list (where ``srun`` puts task 0).

``slurm_dist_env`` is pure: it reads a mapping and returns the variables to export;
``slurm_task_env`` adds ``scontrol``'s expansion of the node list. The command that exports
them and execs the training command is ``python -m launch.slurm_env CMD ...`` (run by ``srun``
in launch/slurm/run.sh).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping

PORT_BASE = 20000  # MASTER_PORT = PORT_BASE + job id % PORT_SPAN when not given
PORT_SPAN = 10000  # stays below Linux's ephemeral range (32768+); jobs sharing a node differ
NODELIST_VARS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")


def _int(environ: Mapping[str, str], *names: str) -> int:
    """The first of ``names`` present in ``environ``, as a non-negative int."""
    for name in names:
        if name in environ:
            value = environ[name].strip()
            if not value.isdigit():
                raise ValueError(f"{name}: expected a non-negative integer, got {value!r}")
            return int(value)
    raise ValueError(f"{names[0]}: not set; is this running inside an srun step?")


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a SLURM host list, as ``scontrol show hostnames`` does.

    ``"gpu[01-03,07],login"`` -> ``["gpu01", "gpu02", "gpu03", "gpu07", "login"]``; several
    bracket groups in one name expand as a product; zero padding is kept.
    """
    names, depth, start = [], 0, 0
    for i, ch in enumerate(hostlist + ","):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"host list {hostlist!r}: unbalanced ']'")
        elif ch == "," and depth == 0:
            if i > start:
                names.extend(_expand_one(hostlist[start:i], hostlist))
            start = i + 1
    if depth:
        raise ValueError(f"host list {hostlist!r}: unbalanced '['")
    return names


def _expand_one(name: str, whole: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", name)
    if m is None:
        return [name]
    head, tail = name[: m.start()], name[m.end():]
    out = []
    for part in m.group(1).split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"host list {whole!r}: bad range {part!r}")
        width = len(lo)
        for k in range(int(lo), int(hi if sep else lo) + 1):
            out.extend(_expand_one(f"{head}{k:0{width}d}{tail}", whole))
    return out


def nodelist(environ: Mapping[str, str]) -> str:
    """The step's node list (falling back to the job's); ``ValueError`` if none is set."""
    for name in NODELIST_VARS:
        if environ.get(name):
            return environ[name]
    raise ValueError(f"{NODELIST_VARS[1]}: not set (nor {', '.join(NODELIST_VARS[::2])})")


def slurm_dist_env(environ: Mapping[str, str], hostnames: list[str] | None = None,
                   port: int | None = None) -> dict[str, str]:
    """RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT for one SLURM task.

    - RANK = SLURM_PROCID, LOCAL_RANK = SLURM_LOCALID, WORLD_SIZE = SLURM_NTASKS
      (or SLURM_NPROCS).
    - MASTER_ADDR: ``environ["MASTER_ADDR"]`` if set, else ``hostnames[0]`` (the output of
      ``scontrol show hostnames``), else the first host of the node list expanded here.
    - MASTER_PORT: ``port`` if given, else ``environ["MASTER_PORT"]``, else
      ``PORT_BASE + SLURM_JOB_ID % PORT_SPAN`` (same on every rank, differs between jobs).

    Raises ``ValueError`` naming the missing or malformed variable.
    """
    rank = _int(environ, "SLURM_PROCID")
    local_rank = _int(environ, "SLURM_LOCALID")
    world = _int(environ, "SLURM_NTASKS", "SLURM_NPROCS")
    if rank >= world:
        raise ValueError(f"SLURM_PROCID: {rank} is not below SLURM_NTASKS {world}")
    if local_rank >= world:
        raise ValueError(f"SLURM_LOCALID: {local_rank} is not below SLURM_NTASKS {world}")

    if environ.get("MASTER_ADDR"):
        addr = environ["MASTER_ADDR"]
    else:
        hosts = hostnames if hostnames is not None else expand_hostlist(nodelist(environ))
        if not hosts or not hosts[0]:
            raise ValueError("hostnames: empty; cannot choose MASTER_ADDR")
        addr = hosts[0]

    if port is None:
        port = (_int(environ, "MASTER_PORT") if environ.get("MASTER_PORT")
                else PORT_BASE + _int(environ, "SLURM_JOB_ID") % PORT_SPAN)
    if not 0 < port < 65536:
        raise ValueError(f"MASTER_PORT: {port} is not a TCP port")

    return {"RANK": str(rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": str(world),
            "MASTER_ADDR": addr, "MASTER_PORT": str(port)}


def scontrol_hostnames(hostlist: str) -> list[str] | None:
    """``scontrol show hostnames HOSTLIST``; None where scontrol is missing or fails (then
    the caller expands the list itself)."""
    exe = shutil.which("scontrol")
    if exe is None:
        return None
    res = subprocess.run([exe, "show", "hostnames", hostlist], capture_output=True, text=True)
    return res.stdout.split() if res.returncode == 0 and res.stdout.strip() else None


def slurm_task_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``slurm_dist_env`` of this task, the node list expanded by ``scontrol show hostnames``
    where scontrol is there (unless MASTER_ADDR is given), else here."""
    hosts = None if environ.get("MASTER_ADDR") else scontrol_hostnames(nodelist(environ))
    return slurm_dist_env(environ, hosts)
