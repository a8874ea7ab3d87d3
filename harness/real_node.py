"""A real node for the tests that need one (docs/agent.md, "Proven on a real node"): etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and a kubelet on containerd and runc, on loopback.

What the kubelet, the scheduler and the container runtime do with what the agent publishes and writes (batch
allocatable admitted or not, cgroup folders, evictions, a kubelet restart) can only be shown by them. The tier is
skipped unless ``COLOCATION_TEST_NODE`` names a folder holding ``kube-apiserver``, ``kube-controller-manager``,
``kube-scheduler``, ``kubelet`` and ``kubectl`` of one version (1.30 or newer) and ``etcd`` (or ``etcd`` on
PATH); containerd, runc and the loopback CNI plugin come from the distribution (Debian: ``containerd``, ``runc``,
``containernetworking-plugins``), and ``umoci``, ``skopeo`` and a static ``busybox`` (``busybox-static``) make the
only image, locally. Nothing of Kubernetes' source, its binaries or how they were built belongs in this repository:
this module holds the tier's own set-up (configurations, the image, certificates, start and stop).

Everything listens on 127.0.0.1 and every pod uses the host's network: no bridge, no route, no traffic elsewhere.
It needs root and a writable cgroup v1 hierarchy, and it must never run beside the cgroup tests: a running kubelet
removes the pod cgroups it does not know. What the kubelet changes outside its folder (``/var/lib/kubelet``,
``/var/log/containers``, ``/var/log/pods``, three sysctls, the ``kubepods`` cgroups) is put back when it stops.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from harness.real_apiserver import MIN_MINOR, Cluster, _cert, _etcd, _free_port, _kubeconfig, _pem_key, _pki

NODE_ENV = "COLOCATION_TEST_NODE"
KEEP_LOGS_ENV = "COLOCATION_TEST_NODE_KEEP_LOGS"   # a folder the logs of every part are copied into at the end
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl")
# What the node needs from the distribution, and the Debian package that has it.
SYSTEM_TOOLS = {"containerd": "containerd", "ctr": "containerd", "runc": "runc", "umoci": "umoci",
                "skopeo": "skopeo"}
CNI_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
IMAGE = "colocation.test/busybox:1"
# The kubelet sets these whatever its configuration (pkg/kubelet/cm/container_manager_linux.go setupKernelTunables)
# and writes these folders whatever its --root-dir: all put back at the end.
SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
KUBELET_LEFTOVERS = (Path("/var/lib/kubelet"), Path("/var/log/containers"), Path("/var/log/pods"))
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Outside /tmp: a test may run a program with a read-only /tmp of its own (the shipped DaemonSet's root).
WORK_ROOT = Path("/var/lib/colocation-test-node")


def _busybox() -> str | None:
    for candidate in ("/bin/busybox", shutil.which("busybox") or ""):
        if candidate and Path(candidate).is_file():
            done = subprocess.run(["file", "-b", candidate], capture_output=True, text=True, check=False) \
                if shutil.which("file") else None
            if done is None or "statically linked" in done.stdout or "static-pie" in done.stdout:
                return candidate
    return None


def _cni_loopback() -> Path | None:
    return next((d for d in CNI_DIRS if (d / "loopback").is_file()), None)


def skip_reason() -> str | None:
    """Why the tier cannot run here, or None."""
    if not os.environ.get(NODE_ENV):
        return (f"no real node: set {NODE_ENV} to a folder with kube-apiserver, kube-controller-manager, "
                "kube-scheduler, kubelet and kubectl (1.30+) and etcd (docs/agent.md, \"Proven on a real node\")")
    assets = Path(os.environ[NODE_ENV])
    missing = [b for b in BINARIES if not (assets / b).is_file()]
    if missing:
        return f"{NODE_ENV}={assets}: no {', '.join(missing)} in it"
    if _etcd(assets) is None:
        return f"{NODE_ENV}={assets}: no etcd in it nor on PATH"
    absent = sorted({pkg for tool, pkg in SYSTEM_TOOLS.items() if shutil.which(tool) is None})
    if _cni_loopback() is None:
        absent.append("containernetworking-plugins")
    if _busybox() is None:
        absent.append("busybox-static")
    if absent:
        return f"the real node needs these Debian packages: {' '.join(sorted(set(absent)))} (apt-get install)"
    if os.geteuid() != 0:
        return "the real node needs root (the kubelet and containerd)"
    if not (CGROUP_ROOT / "memory" / "cgroup.procs").exists() or not (CGROUP_ROOT / "cpu").is_dir():
        return "the real node needs cgroup v1 (memory and cpu hierarchies under /sys/fs/cgroup)"
    return None


@dataclass
class Node:
    """The running node: its cluster (kubectl as cluster-admin), name, folder and processes."""

    cluster: Cluster
    name: str
    folder: Path
    assets: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(self.assets / "kubectl"), "--kubeconfig", str(self.cluster.kubeconfig), *args],
                              input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
        return done

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, docs: list[dict[str, Any]]) -> None:
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=colocation-test", "-f", "-",
                     input="\n---\n".join(json.dumps(d) for d in docs))

    @property
    def kubelet_log(self) -> Path:
        return self.folder / "kubelet.log"

    def restart_kubelet(self) -> None:
        """Stop the kubelet (its pods' containers go on running in containerd) and start it again."""
        _stop(self.procs.pop("kubelet"))
        self.procs["kubelet"] = _start_kubelet(self)
        self.wait_ready(120)

    def wait_ready(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for what, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{what} exited with {p.returncode}: {_tail(self.folder / f'{what}.log')}")
            done = self.kubectl("get", "node", self.name, "-o", "json", check=False)
            if done.returncode == 0:
                conditions = json.loads(done.stdout).get("status", {}).get("conditions") or []
                if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                    return
            time.sleep(0.5)
        raise RuntimeError(f"node {self.name} not Ready within {seconds:.0f} s: {_tail(self.kubelet_log)}")

    def status_writes(self, user: str) -> list[float]:
        """When ``user`` wrote this node's status (the apiserver's audit log, seconds since the epoch)."""
        import datetime as dt

        out = []
        log = self.folder / "audit.log"
        for line in (log.read_text().splitlines() if log.exists() else []):
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if (event.get("user", {}).get("username") == user and ref.get("name") == self.name
                    and ref.get("subresource") == "status" and event.get("stage") == "ResponseComplete"):
                stamp = event["requestReceivedTimestamp"].replace("Z", "+00:00")
                out.append(dt.datetime.fromisoformat(stamp).timestamp())
        return out

    def token_kubeconfig(self, path: Path, token: str) -> Path:
        """A kubeconfig for ``token`` with the cluster's CA embedded (``certificate-authority-data``), as an
        in-cluster tool gets it."""
        import base64

        ca = base64.b64encode((self.folder / "ca.crt").read_bytes()).decode()
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "node", "cluster": {"server": f"https://127.0.0.1:{self.cluster.port}",
                                                      "certificate-authority-data": ca}}],
            "users": [{"name": "token", "user": {"token": token}}],
            "contexts": [{"name": "node", "context": {"cluster": "node", "user": "token"}}],
            "current-context": "node"}))
        return path


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _stop(p: subprocess.Popen[bytes], seconds: float = 15) -> None:
    if p.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(seconds)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _spawn(folder: Path, what: str, argv: list[str]) -> subprocess.Popen[bytes]:
    with open(folder / f"{what}.log", "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _node_pki(folder: Path, node: str) -> None:
    """The kubelet's client pair (``system:node:<name>`` in ``system:nodes``: the Node authorizer's), signed by the
    tier's CA."""
    ca_key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_name = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes()).subject
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _cert(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")]),
                 key, ca_name, ca_key, ca=False, client=True)
    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving = _cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)]), serving_key, ca_name, ca_key,
                    ca=False, sans=[x509.DNSName(node), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    pem = serialization.Encoding.PEM
    for name, data in (("kubelet-client.crt", cert.public_bytes(pem)), ("kubelet-client.key", _pem_key(key)),
                       ("kubelet.crt", serving.public_bytes(pem)), ("kubelet.key", _pem_key(serving_key))):
        (folder / name).write_bytes(data)


def _containerd_config(folder: Path, cni: Path) -> Path:
    c = folder / "containerd"
    (folder / "cni").mkdir(exist_ok=True)
    # Only loopback: every pod uses the host's network, and the runtime reports its network ready with a config.
    (folder / "cni" / "10-loopback.conflist").write_text(json.dumps(
        {"cniVersion": "0.4.0", "name": "loopback", "plugins": [{"type": "loopback"}]}))
    path = folder / "containerd.toml"
    # restrict_oom_score_adj: root in these VMs lacks CAP_SYS_RESOURCE, and runc fails to lower a score
    # ("can't get final child's PID from pipe: EOF") unless the runtime keeps it at its own.
    path.write_text(f"""version = 2
root = "{c}/root"
state = "{c}/state"
[grpc]
  address = "{c}/containerd.sock"
[ttrpc]
  address = "{c}/containerd.sock.ttrpc"
[debug]
  address = "{c}/debug.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{c}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni}"
    conf_dir = "{folder / 'cni'}"
""")
    return path


def _image(folder: Path, ctr_address: Path) -> None:
    """The one image: busybox and its links, ``sleep`` for a command (it is the sandbox image too), made with umoci,
    turned into a docker archive by skopeo and imported into containerd's k8s.io namespace."""
    layout, bundle, archive = folder / "image", folder / "bundle", folder / "image.tar"
    busybox = _busybox()
    assert busybox is not None

    def run(*argv: str) -> None:
        subprocess.run(argv, check=True, capture_output=True, timeout=120)

    run("umoci", "init", "--layout", str(layout))
    run("umoci", "new", "--image", f"{layout}:1")
    run("umoci", "unpack", "--image", f"{layout}:1", str(bundle))
    rootfs = bundle / "rootfs"
    (rootfs / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(busybox, rootfs / "bin" / "busybox")
    listed = subprocess.run([busybox, "--list-full"], capture_output=True, text=True, check=True).stdout.split()
    for rel in listed:
        link = rootfs / rel
        if link.exists() or link.is_symlink():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to("/bin/busybox")
    for d in ("tmp", "proc", "sys", "dev", "etc"):
        (rootfs / d).mkdir(exist_ok=True)
    run("umoci", "repack", "--image", f"{layout}:1", str(bundle))
    run("umoci", "config", "--image", f"{layout}:1", "--config.env", "PATH=/bin:/sbin:/usr/bin:/usr/sbin",
        "--config.cmd", "sleep", "--config.cmd", "2147483647")
    run("skopeo", "copy", f"oci:{layout}:1", f"docker-archive:{archive}:{IMAGE}")
    run("ctr", "--address", str(ctr_address), "-n", "k8s.io", "images", "import", str(archive))


def _kubelet_config(node: Node) -> Path:
    f = node.folder
    path = f / "kubelet.yaml"
    if not path.exists():
        ports = {"port": _free_port(), "healthzPort": _free_port()}
        path.write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False,
            "makeIPTablesUtilChains": False, "address": "127.0.0.1", "healthzBindAddress": "127.0.0.1",
            "readOnlyPort": 0, **ports,
            "tlsCertFile": str(f / "kubelet.crt"), "tlsPrivateKeyFile": str(f / "kubelet.key"),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(f / "ca.crt")}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{f / 'containerd' / 'containerd.sock'}",
            # The kubelet's own eviction stays out of the way of the agent's on this machine.
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "resolvConf": "", "serializeImagePulls": False, "registerNode": True,
            "nodeStatusReportFrequency": "10s", "syncFrequency": "10s"}))
    return path


def _start_kubelet(node: Node) -> subprocess.Popen[bytes]:
    f = node.folder
    return _spawn(f, "kubelet", [
        str(node.assets / "kubelet"), f"--config={_kubelet_config(node)}", f"--kubeconfig={f / 'kubelet.kubeconfig'}",
        f"--root-dir={f / 'kubelet'}", f"--cert-dir={f / 'kubelet-pki'}", f"--hostname-override={node.name}",
        "--v=2"])


def _kubelet_kubeconfig(folder: Path, port: int) -> None:
    text = _kubeconfig(folder, port).read_text()
    for kind in ("crt", "key"):
        text = text.replace(str(folder / f"admin.{kind}"), str(folder / f"kubelet-client.{kind}"))
    (folder / "kubelet.kubeconfig").write_text(text)


def _saved_host() -> dict[str, Any]:
    return {"sysctl": {k: (Path("/proc/sys") / k).read_text() for k in SYSCTLS},
            "existed": {p: p.exists() for p in KUBELET_LEFTOVERS},
            "kubepods": {d: (d / "kubepods").exists() for d in CGROUP_ROOT.iterdir() if d.is_dir()}}


def _unmount_under(folder: Path) -> None:
    with open("/proc/self/mounts") as f:
        points = [line.split()[1].encode().decode("unicode_escape") for line in f]
    for point in sorted((p for p in points if p.startswith(str(folder)) or p.startswith("/var/lib/kubelet")),
                        key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _kill_in_kubepods() -> None:
    """Every process left in a pod cgroup (a runtime that died before its containers did)."""
    for procs in (CGROUP_ROOT / "memory" / "kubepods").rglob("cgroup.procs") if \
            (CGROUP_ROOT / "memory" / "kubepods").is_dir() else []:
        with suppress(OSError):
            for pid in procs.read_text().split():
                with suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)


def _remove_kubepods(saved: dict[Path, bool]) -> None:
    for hierarchy, existed in saved.items():
        top = hierarchy / "kubepods"
        if existed or not top.is_dir():
            continue
        for _ in range(20):
            folders = sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True)
            for d in [*folders, top]:
                with suppress(OSError):
                    d.rmdir()
            if not top.exists():
                break
            time.sleep(0.25)


def _restore_host(saved: dict[str, Any]) -> None:
    for key, value in saved["sysctl"].items():
        with suppress(OSError):
            (Path("/proc/sys") / key).write_text(value)
    _remove_kubepods(saved["kubepods"])
    for path, existed in saved["existed"].items():
        if not existed:
            shutil.rmtree(path, ignore_errors=True)


def _teardown(node: Node, saved: dict[str, Any]) -> None:
    with suppress(Exception):
        node.kubectl("delete", "pods", "--all", "-A", "--grace-period=1", "--wait=true", timeout=90, check=False)
    if "kubelet" in node.procs:
        _stop(node.procs.pop("kubelet"))
    sock = node.folder / "containerd" / "containerd.sock"
    if "containerd" in node.procs and sock.exists():
        ctr = ["ctr", "--address", str(sock), "-n", "k8s.io"]
        tasks = subprocess.run([*ctr, "tasks", "ls", "-q"], capture_output=True, text=True, check=False).stdout.split()
        for task in tasks:
            subprocess.run([*ctr, "tasks", "kill", "-s", "SIGKILL", task], capture_output=True, check=False)
        time.sleep(0.5)
        for task in tasks:
            subprocess.run([*ctr, "tasks", "delete", "-f", task], capture_output=True, check=False)
    _kill_in_kubepods()
    for what in ("containerd", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
        if what in node.procs:
            _stop(node.procs.pop(what))
    # The runtime's shims outlive it: each names the runtime's socket in its command line.
    for pid_dir in Path("/proc").iterdir():
        if pid_dir.name.isdigit():
            with suppress(OSError, ProcessLookupError):
                if str(sock).encode() in (pid_dir / "cmdline").read_bytes():
                    os.kill(int(pid_dir.name), signal.SIGKILL)
    _kill_in_kubepods()
    _unmount_under(node.folder)
    _restore_host(saved)
    keep = os.environ.get(KEEP_LOGS_ENV)
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for log in [*node.folder.glob("*.log"), *node.folder.glob("*/*.log")]:
            shutil.copy2(log, Path(keep) / log.name)
    shutil.rmtree(node.folder, ignore_errors=True)


@contextmanager
def started() -> Iterator[Node]:
    """The whole node, Ready, with the image imported; everything stopped and put back afterwards."""
    assets = Path(os.environ[NODE_ENV])
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    name = f"colo-node-{uuid.uuid4().hex[:6]}"
    folder = WORK_ROOT / name
    folder.mkdir()
    saved = _saved_host()
    port = _free_port()
    node = Node(Cluster(_kubeconfig(folder, port), "", 0, True), name, folder, assets)
    try:
        _pki(folder)
        _node_pki(folder, name)
        _kubelet_kubeconfig(folder, port)
        etcd_port, peer_port = _free_port(), _free_port()
        node.procs["etcd"] = _spawn(folder, "etcd", [
            _etcd(assets) or "etcd", "--data-dir", str(folder / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}", "--unsafe-no-fsync"])
        node.procs["kube-apiserver"] = _spawn(folder, "kube-apiserver", [
            str(assets / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={folder}", f"--tls-cert-file={folder / 'serving.crt'}",
            f"--tls-private-key-file={folder / 'serving.key'}", f"--client-ca-file={folder / 'ca.crt'}",
            f"--kubelet-client-certificate={folder / 'admin.crt'}", f"--kubelet-client-key={folder / 'admin.key'}",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            "--disable-admission-plugins=ServiceAccount", "--service-cluster-ip-range=10.0.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={folder / 'sa.pub'}",
            f"--service-account-signing-key-file={folder / 'sa.key'}", "--allow-privileged=true",
            f"--audit-policy-file={_audit_policy(folder)}", f"--audit-log-path={folder / 'audit.log'}"])
        _wait_apiserver(node)
        admin = str(node.cluster.kubeconfig)
        node.procs["kube-controller-manager"] = _spawn(folder, "kube-controller-manager", [
            str(assets / "kube-controller-manager"), f"--kubeconfig={admin}", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={_free_port()}",
            f"--authentication-kubeconfig={admin}", f"--authorization-kubeconfig={admin}",
            f"--service-account-private-key-file={folder / 'sa.key'}", f"--root-ca-file={folder / 'ca.crt'}",
            "--controllers=*,-serviceaccount-token"])
        node.procs["kube-scheduler"] = _spawn(folder, "kube-scheduler", [
            str(assets / "kube-scheduler"), f"--kubeconfig={admin}", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={_free_port()}",
            f"--authentication-kubeconfig={admin}", f"--authorization-kubeconfig={admin}"])
        (folder / "containerd").mkdir()
        cni = _cni_loopback()
        assert cni is not None
        node.procs["containerd"] = _spawn(folder, "containerd", [
            "containerd", "--config", str(_containerd_config(folder, cni))])
        sock = folder / "containerd" / "containerd.sock"
        _wait_for(lambda: sock.exists(), "containerd's socket", 30)
        _image(folder, sock)
        node.procs["kubelet"] = _start_kubelet(node)
        node.wait_ready(180)
        info = json.loads(node.kubectl("get", "--raw", "/version").stdout)
        minor = int("".join(ch for ch in str(info.get("minor", "0")) if ch.isdigit()) or 0)
        node.cluster = Cluster(node.cluster.kubeconfig, str(info.get("gitVersion", "")), minor, True)
        yield node
    finally:
        _teardown(node, saved)


def _audit_policy(folder: Path) -> Path:
    """Who writes the nodes' status, and nothing else: the figure of node status writes per minute is counted
    at the apiserver, by writer."""
    path = folder / "audit-policy.json"
    path.write_text(json.dumps({"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                                "rules": [{"level": "Metadata", "verbs": ["patch", "update"],
                                           "resources": [{"group": "", "resources": ["nodes/status"]}]},
                                          {"level": "None"}]}))
    return path


def _wait_for(ready: Any, what: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not there within {seconds:.0f} s")
        time.sleep(0.2)


def _wait_apiserver(node: Node) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for what, p in node.procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"{what} exited with {p.returncode}: {_tail(node.folder / f'{what}.log')}")
        done = node.kubectl("get", "--raw", "/readyz", check=False)
        if done.returncode == 0 and done.stdout.strip() == "ok":
            return
        time.sleep(0.5)
    raise RuntimeError(f"the apiserver was not ready in time: {_tail(node.folder / 'kube-apiserver.log')}")


@contextmanager
def for_tests() -> Iterator[Node]:
    """The tier's node for a test module's fixture: skipped, with the reason, when the parts are missing."""
    import pytest

    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with started() as node:
        if node.cluster.minor < MIN_MINOR:
            pytest.skip(f"the node is {node.cluster.version}: the tier needs 1.{MIN_MINOR} or newer")
        yield node


if __name__ == "__main__":  # start one by hand: python -m harness.real_node (stops on Enter or Ctrl-C)
    reason = skip_reason()
    if reason:
        raise SystemExit(reason)
    with started() as n:
        print(f"{n.cluster.version} node {n.name} Ready: export KUBECONFIG={n.cluster.kubeconfig}", flush=True)
        with suppress(KeyboardInterrupt, EOFError):
            input()
