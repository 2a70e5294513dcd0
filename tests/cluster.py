"""A one-node SLURM cluster on this machine, from Debian's packages, for the tests.

MUNGE runs as the munge user; slurmctld and slurmd run from a temporary directory that
holds their configuration, state, spool, logs, sockets and PID files, on free loopback
ports, and are stopped by their PID files on exit, also when the body raises. No
slurmdbd: ``sacct`` does not work, so clients ask ``squeue``.

Job steps find the configuration at the compiled-in ``/etc/slurm/slurm.conf``, as on a
real cluster's nodes (Snakemake's job step drops ``SLURM_CONF`` before its ``srun``), so
the cluster links it there while it runs; it will not replace a configuration of the
machine's own. A link left by a run that was killed before its clean-up (its owner
process gone) is stale: its daemons are stopped and the link and directory removed.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
ROOT_PREFIX = "taskgeom-slurm-"
OWNER = "owner.pid"  # in a cluster's root: the PID of the process that brought it up
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
NODE = "taskgeom-node"
PARTITION = "debug"


@dataclass(frozen=True)
class Cluster:
    root: Path
    conf: Path
    env: dict[str, str]  # SLURM_CONF for clients

    def log(self, daemon: str) -> str:
        path = self.root / ("munge" if daemon == "munged" else "log") / f"{daemon}.log"
        return path.read_text(errors="replace") if path.is_file() else f"({path} missing)"


def missing_programs() -> list[str]:
    return [p for p in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")
            if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def total_memory_mb() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


def slurm_conf(root: Path, cpus: int, memory_mb: int) -> str:
    return "\n".join([
        "ClusterName=taskgeom-test",
        f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={root / 'munge/munge.socket'}",
        f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'run/slurmctld.pid'}",
        f"SlurmdPidFile={root / 'run/slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log/slurmctld.log'}",
        f"SlurmdLogFile={root / 'log/slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "MinJobAge=300",
        # A job's memory request is checked against the node's, not enforced by cgroups here.
        f"NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} CPUs={cpus} "
        f"RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def wait_for(check, what: str, timeout: float, cluster: Cluster) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    logs = "\n".join(f"--- {d} ---\n{cluster.log(d)[-3000:]}" for d in DAEMONS)
    raise TimeoutError(f"{what} not ready after {timeout:.0f} s\n{logs}")


def stop_by_pid_file(pid_file: Path, timeout: float = 15) -> None:
    """SIGTERM the process named in ``pid_file``, then SIGKILL it if it outlives ``timeout``."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def node_idle(env: dict[str, str]) -> bool:
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True, text=True)
    return proc.returncode == 0 and proc.stdout.strip().rstrip("*") in {"idle", "mixed"}


def start(cmd: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stdout}{proc.stderr}")


def make_munge_key(munge_dir: Path) -> Path:
    """A fresh key readable by the munge user only, in a directory it owns."""
    munge_user = pwd.getpwnam("munge")
    munge_dir.mkdir(mode=0o755)  # munged wants its socket's directory searchable by all
    key = munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for path in (munge_dir, key):
        os.chown(path, munge_user.pw_uid, munge_user.pw_gid)
    return key


def pid_files(root: Path) -> dict[str, Path]:
    return {"munged": root / "munge/munged.pid", "slurmctld": root / "run/slurmctld.pid",
            "slurmd": root / "run/slurmd.pid"}


def alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text().split()[0]), 0)
    except (OSError, ValueError, IndexError):
        return False
    return True


def clear_stale_link() -> None:
    """Remove a ``SYSTEM_CONF`` link that an earlier test cluster left when its owner was
    killed: stop that cluster's daemons, then remove the link and its directory. A link
    whose owner still runs, or a configuration that is not such a link, is left alone."""
    if not SYSTEM_CONF.is_symlink():
        return
    root = Path(os.readlink(SYSTEM_CONF)).parent
    if not root.name.startswith(ROOT_PREFIX) or alive(root / OWNER):
        return
    for daemon in ("slurmd", "slurmctld", "munged"):
        stop_by_pid_file(pid_files(root)[daemon])
    SYSTEM_CONF.unlink()
    shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def slurm_cluster(cpus: int | None = None, memory_mb: int | None = None, timeout: float = 90) -> Iterator[Cluster]:
    """Bring up munged, slurmctld and slurmd; yield the cluster; stop all three on exit."""
    clear_stale_link()
    if SYSTEM_CONF.exists() or SYSTEM_CONF.is_symlink():
        raise RuntimeError(f"{SYSTEM_CONF} exists: this machine has a SLURM configuration of its own")
    # Not under pytest's tmp_path: that is private to root, and munged runs as munge.
    root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
    root.chmod(0o755)
    (root / OWNER).write_text(f"{os.getpid()}\n")
    conf = root / "slurm.conf"
    cluster = Cluster(root, conf, {**os.environ, "SLURM_CONF": str(conf)})
    munge_dir = root / "munge"
    pids = pid_files(root)
    try:
        for sub in ("state", "spool", "run", "log"):
            (root / sub).mkdir(mode=0o755)
        key = make_munge_key(munge_dir)
        conf.write_text(slurm_conf(root, cpus or os.cpu_count() or 1, memory_mb or total_memory_mb() * 3 // 4))
        SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
        SYSTEM_CONF.symlink_to(conf)
        start(["runuser", "-u", "munge", "--", "munged", f"--socket={munge_dir / 'munge.socket'}",
               f"--key-file={key}", f"--pid-file={pids['munged']}", f"--log-file={munge_dir / 'munged.log'}",
               f"--seed-file={munge_dir / 'munged.seed'}"], cluster.env)
        start(["slurmctld", "-f", str(conf)], cluster.env)
        wait_for(lambda: "UP" in subprocess.run(["scontrol", "ping"], env=cluster.env, capture_output=True,
                                                text=True).stdout, "slurmctld", timeout, cluster)
        start(["slurmd", "-f", str(conf), "-N", NODE], cluster.env)
        wait_for(lambda: node_idle(cluster.env), f"node {NODE}", timeout, cluster)
        yield cluster
    finally:
        if pids["slurmctld"].exists():
            subprocess.run(["scancel", "--full", "--quiet", "-u", pwd.getpwuid(os.getuid()).pw_name],
                           env=cluster.env, capture_output=True, timeout=30)
        for daemon in ("slurmd", "slurmctld", "munged"):
            stop_by_pid_file(pids[daemon])
        if SYSTEM_CONF.is_symlink() and SYSTEM_CONF.resolve() == conf.resolve():
            SYSTEM_CONF.unlink()
        shutil.rmtree(root, ignore_errors=True)
