"""A real Slurm for the tests: munged, slurmctld and two slurmd started from a generated slurm.conf.

Partition ``test`` (the default) is one node, this host. Partition ``two`` adds a second node,
``<host>-2``: a second slurmd on this host (``slurmd -N <host>-2``, its own port, spool and pid file,
``NodeAddr=127.0.0.1``), so `sbatch -p two --nodes=2` runs a real two-node job whose first node
is this host by its name (the rendezvous endpoint `multinode.sbatch` takes from the allocation).

Everything lives in a fresh directory under /tmp (munge's socket and key, Slurm's state, spool
and logs), the daemons listen on free ports and run in the foreground as children of pytest, so
nothing touches a system Slurm or systemd and everything stops at the end of the session. The
packages come from Debian (`apt-get install -y --no-install-recommends slurmctld slurmd
slurm-client munge`; .ci/run installs them). Where they are missing the tests skip with that
command, except under CI=true, where they fail: a CI run must never pass by skipping the cluster.
Where the daemons do not come up the tests fail with their logs.
"""
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

APT = "apt-get update && apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol", "scancel")
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: submits the project's sbatch scripts to a real single-node Slurm")


def _find(name):
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)),
                                      None)


def _unavailable(why):
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"Slurm tests cannot run under CI: {why}", pytrace=False)
    pytest.skip(f"{why}; install with: {APT}")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_conf(base: Path, host: str, cpus: int) -> Path:
    conf = base / "slurm.conf"
    conf.write_text(f"""\
ClusterName=seafltest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={base}/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool-%n
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd-%n.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
MinJobAge=4
KillWait=10
ReturnToService=2
NodeName={host} NodeAddr=127.0.0.1 Port={_free_port()} CPUs={cpus} RealMemory=512 State=UNKNOWN
NodeName={host}-2 NodeAddr=127.0.0.1 Port={_free_port()} CPUs={cpus} RealMemory=512 State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName=two Nodes={host},{host}-2 MaxTime=INFINITE State=UP
""")
    return conf


class Cluster:
    """The running test cluster: ``env`` for the Slurm commands, helpers to submit and wait."""

    def __init__(self, base: Path, conf: Path, host: str, cpus: int):
        self.base, self.conf, self.host, self.cpus = base, conf, host, cpus
        # nothing of an enclosing Slurm job (tests run inside an allocation) may leak into ours
        outer = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_")
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith(outer)}, "SLURM_CONF": str(conf)}
        self.procs: list[subprocess.Popen] = []

    def cmd(self, *args, check=True, timeout=60, **kw) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(a) for a in args], env=kw.pop("env", self.env), capture_output=True, text=True,
                              timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
                                 + self.logs())
        return proc

    def job_state(self, job_id) -> dict:
        """``scontrol show job`` as a dict ({} once the job is gone: MinJobAge purges finished jobs)."""
        out = self.cmd("scontrol", "show", "job", "-o", job_id, check=False).stdout.strip()
        return dict(f.split("=", 1) for f in out.split() if "=" in f) if out else {}

    def wait_job(self, job_id, timeout=120.0) -> dict:
        """Poll until the job (not just one attempt of it) has finished; its final state ({} if already purged)."""
        deadline, last = time.monotonic() + timeout, {}
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if not state or state.get("JobState") in FINISHED or state.get("Reason") == "DependencyNeverSatisfied":
                return state
            last = state
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} still {last.get('JobState')} after {timeout:.0f}s" + self.logs())

    def logs(self, *extra: Path) -> str:
        """The daemons' logs and stderr (munged's log) and ``extra`` job outputs, tails, for assertion messages."""
        text = ""
        logs = sorted((self.base / "log").glob("*.log")) + sorted((self.base / "log").glob("*.err"))
        for path in [*logs, *(self.base / "munge").glob("*.log"), *extra]:
            try:
                lines = Path(path).read_text(errors="replace").splitlines()[-40:]
            except OSError as err:
                lines = [f"(unreadable: {err})"]
            text += f"\n--- {path} ---\n" + "\n".join(lines)
        return text

    def start(self, *args, user=None, name=None):
        """A daemon in the foreground (so stopping it is ours), its stderr in log/<name>.err."""
        with open(self.base / "log" / f"{name or Path(args[0]).name}.err", "w") as err:
            self.procs.append(subprocess.Popen([str(a) for a in args], env=self.env, stdin=subprocess.DEVNULL,
                                               stdout=subprocess.DEVNULL, stderr=err, user=user, group=user))

    def stop(self):
        self.cmd("scancel", f"--user={pwd.getpwuid(os.getuid()).pw_name}", check=False)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and self.cmd("squeue", "-h", check=False).stdout.strip():
            time.sleep(0.3)
        for proc in reversed(self.procs):  # slurmd, slurmctld, then munged
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start_cluster(base: Path) -> Cluster:
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
    cpus = len(os.sched_getaffinity(0))  # `nproc`: more CPUs than slurmd finds would drain the node
    for sub in ("state", f"spool-{host}", f"spool-{host}-2", "log"):
        (base / sub).mkdir()
    cluster = Cluster(base, write_conf(base, host, cpus), host, cpus)
    munge_dir = base / "munge"  # munged wants its socket dir owned by it and traversable by all, its key private
    munge_dir.mkdir(mode=0o755)
    (munge_dir / "munge.key").write_bytes(os.urandom(1024))
    (munge_dir / "munge.key").chmod(0o600)
    for path in (munge_dir, munge_dir / "munge.key"):
        shutil.chown(path, "munge", "munge")
    cluster.start(_find("munged"), "--foreground", f"--socket={munge_dir}/munge.socket",
                  f"--key-file={munge_dir}/munge.key", f"--pid-file={munge_dir}/munged.pid",
                  f"--seed-file={munge_dir}/munged.seed", f"--log-file={munge_dir}/munged.log", user="munge")
    _wait(cluster, lambda: (munge_dir / "munge.socket").exists(), "munged did not create its socket")
    cluster.start(_find("slurmctld"), "-D", "-f", cluster.conf)
    cluster.start(_find("slurmd"), "-D", "-f", cluster.conf)
    cluster.start(_find("slurmd"), "-D", "-N", f"{host}-2", "-f", cluster.conf, name="slurmd-2")

    def nodes_idle():
        out = cluster.cmd("sinfo", "-h", "-N", "-p", "two", "-o", "%T", check=False, timeout=10).stdout.split()
        return out == ["idle", "idle"]
    _wait(cluster, nodes_idle, "the two nodes never became idle in sinfo")
    return cluster


def _wait(cluster: Cluster, ready, what: str, timeout=30.0):
    """Until ``ready()``; else stop everything and fail with every daemon's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        dead = [Path(p.args[0]).name for p in cluster.procs if p.poll() is not None]
        if dead:
            what += f" ({', '.join(dead)} exited)"
            break
        time.sleep(0.2)
    cluster.stop()
    pytest.fail(f"Slurm did not start: {what}; its files are in {cluster.base}" + cluster.logs(), pytrace=False)


@pytest.fixture(scope="session")
def slurm():
    """The test cluster; skips (fails under CI=true) where Slurm or munge is not installed or we are not root."""
    missing = [d for d in DAEMONS if not _find(d)]
    if missing:
        _unavailable(f"Slurm/munge commands not found: {', '.join(missing)}")
    if os.geteuid() != 0:
        _unavailable("the test cluster runs slurmd, slurmctld and munged as root/munge, and this is not root")
    try:
        pwd.getpwnam("munge")
    except KeyError:
        _unavailable("there is no 'munge' user (the munge package creates it)")
    base = Path(tempfile.mkdtemp(prefix="seafl-slurm-"))  # not under pytest's 0700 tmp: munged must reach it
    base.chmod(0o755)
    cluster = start_cluster(base)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
