"""A stand-in for the internet, for the egress tests: a network namespace of the test's own,
reached from the host by a veth pair, with an HTTP and an HTTPS server (a test CA), a PyPI
"simple" index and a UDP listener in it.

Made with iproute2 under corral-* names, and removed whatever happens (``Internet.close``).
The servers run in a child process inside the namespace (``serve``, this module as a script).

A run that was killed cannot remove what it made: its namespace and veth stay, and with them a
route to their subnet that wins over a new one's, so every dial of a later run reaches a
namespace whose servers are gone (seen in CI: every egress refused as "cannot connect").
``start`` therefore removes what a dead process of ours left, and claims a subnet that no
other process holds (a lock per subnet) and no interface has.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import http.server
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SECRET = "Bearer s3cr3t-" + "9f2c" * 8
"""The header value the tests inject: it must reach the server, and never the sandbox."""


@dataclass(frozen=True)
class Internet:
    """Where the stand-in answers and what a corral config needs to reach it."""

    name: str
    host_address: str
    """The host's end of the veth: one of the host's own addresses."""
    address: str
    address6: str
    ca_pem: Path
    """The test CA that signed ``secure.test``'s certificate (the egress side's upstream_ca)."""
    wheelhouse: Path
    process: subprocess.Popen[bytes]
    claim: int
    """The subnet's lock (a descriptor), held as long as the stand-in lives."""

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        subprocess.run(["ip", "netns", "del", self.name], check=False, capture_output=True)
        os.close(self.claim)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


_OURS = re.compile(r"corral-inet-(\d+)-(\d+)")
_LAST_INDEX = 254  # 10.201.{index}.0/30: an octet, 0 left out
_CLAIMS = Path("/run/lock") if Path("/run/lock").is_dir() else Path("/tmp")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_the_dead() -> None:
    """Remove the namespaces (and with each its veth and its servers) that a test process of
    ours made and could not remove, being dead. Nothing else is touched."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    for line in listed.stdout.splitlines():
        found = _OURS.fullmatch(line.split(" ", 1)[0])
        if found is None or _alive(int(found[1])):
            continue
        name, pid, index = found[0], int(found[1]), found[2]
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
        for server in pids.stdout.split():  # its servers outlive it: they keep it alive
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(server), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        outside = f"corral-{index}h{pid % 10000}"
        subprocess.run(["ip", "link", "del", outside], check=False, capture_output=True)


def _subnet_in_use(index: int) -> bool:
    shown = subprocess.run(
        ["ip", "-o", "-4", "route", "show", "to", "match", f"10.201.{index}.2"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return any(not line.startswith("default") for line in shown.stdout.splitlines())


def _claim(preferred: int) -> tuple[int, int]:
    """A free subnet's index, from ``preferred`` on, and its lock's descriptor."""
    for index in (*range(preferred, _LAST_INDEX + 1), *range(1, preferred)):
        claim = os.open(_CLAIMS / f"corral-inet-{index}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(claim)
            continue
        if not _subnet_in_use(index):
            return index, claim
        os.close(claim)
    raise OSError("every 10.201.x.0/30 subnet of the stand-in internet is in use")


def _make_ca(folder: Path) -> tuple[Path, Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "corral test internet CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName(n) for n in ("secure.test", "inject.test", "example.test")]
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "secure.test")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_path, cert_path, key_path = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    ca_path.write_bytes(ca.public_bytes(pem))
    cert_path.write_bytes(leaf.public_bytes(pem))
    key_path.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca_path, cert_path, key_path


def build_wheel(folder: Path, name: str = "corral_test_pkg", version: str = "1.0") -> Path:
    """A pure-Python wheel made here (no index needed): ``import corral_test_pkg``."""
    import base64
    import hashlib
    import zipfile

    dist = f"{name}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{dist}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
        ),
        f"{dist}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: corral-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = []
    for member, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{member},sha256={digest},{len(data)}")
    record.append(f"{dist}.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w") as wheel:
        for member, data in files.items():
            wheel.writestr(member, data)
        wheel.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def start(folder: Path, preferred: int) -> Internet:
    """Make the namespace, the veth and the servers (root, iproute2), on the first free
    subnet from ``preferred`` on."""
    if shutil.which("ip") is None:
        raise OSError("iproute2's ip is not installed")
    _sweep_the_dead()
    index, claim = _claim(preferred)
    try:
        return _start(folder, index, claim)
    except BaseException:
        os.close(claim)
        raise


def _start(folder: Path, index: int, claim: int) -> Internet:
    name = f"corral-inet-{os.getpid()}-{index}"
    # Interface names hold 15 characters: corral-, the index (to 255), a side, 4 digits.
    outside, inside = (f"corral-{index}{side}{os.getpid() % 10000}" for side in "hn")
    host_address, address = f"10.201.{index}.1", f"10.201.{index}.2"
    address6 = f"fd00:201:{index}::2"
    _ip("netns", "add", name)
    try:
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", name)
        _ip("addr", "add", f"{host_address}/30", "dev", outside)
        _ip("-6", "addr", "add", f"fd00:201:{index}::1/64", "dev", outside, "nodad")
        _ip("link", "set", outside, "up")
        for args in (
            ("addr", "add", f"{address}/30", "dev", inside),
            ("-6", "addr", "add", f"{address6}/64", "dev", inside, "nodad"),
            ("link", "set", inside, "up"),
            ("link", "set", "lo", "up"),
        ):
            _ip("netns", "exec", name, "ip", *args)
        ca, cert, key = _make_ca(folder)
        wheels = folder / "wheels"
        wheels.mkdir(mode=0o755)  # a sandbox's uid reads it as a wheelhouse
        build_wheel(wheels).chmod(0o644)
        process = subprocess.Popen(
            ["ip", "netns", "exec", name, sys.executable, __file__, address, address6,
             str(cert), str(key), str(wheels)],
            stdout=subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None
        if process.stdout.readline().strip() != b"ready":
            process.kill()
            raise OSError("the stand-in internet's servers did not start")
    except BaseException:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        subprocess.run(["ip", "link", "del", outside], check=False, capture_output=True)
        raise
    return Internet(name, host_address, address, address6, ca, wheels, process, claim)


# the servers, run inside the namespace ---------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept alive, as most hosts are
    disable_nagle_algorithm = True  # a head and a body in two writes: no delayed-ACK stall
    wheels: Path = Path()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, body: bytes, kind: str = "text/plain") -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path == "/":
            self._send(b"hello from the stand-in internet\n")
        elif path == "/headers":
            seen = {"authorization_is_secret": self.headers.get("Authorization") == SECRET,
                    "authorization_present": "Authorization" in self.headers,
                    "host": self.headers.get("Host")}  # fmt: skip
            self._send(json.dumps(seen).encode(), "application/json")
        elif path == "/big":
            size = int(query.partition("=")[2] or "0")
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = b"x" * (1 << 20)  # large writes: the stand-in must outrun what it measures
            while size > 0:
                self.wfile.write(chunk[: min(size, len(chunk))])
                size -= len(chunk)
        elif path == "/hold":  # one byte, then held open until the client goes
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"x")
            self.wfile.flush()
            self.rfile.read(1)
        elif path.startswith("/simple/"):
            project = path.strip("/").split("/")[1].replace("-", "_").lower()
            links = [
                f'<a href="/packages/{w.name}">{w.name}</a>'
                for w in sorted(self.wheels.iterdir())
                if w.name.lower().startswith(project + "-")
            ]
            if not links:
                self.send_error(404)
                return
            self._send(("<html><body>" + "".join(links) + "</body></html>").encode(), "text/html")
        elif path.startswith("/packages/"):
            wheel = self.wheels / path.rsplit("/", 1)[1]
            if not wheel.is_file():
                self.send_error(404)
                return
            self._send(wheel.read_bytes(), "application/octet-stream")
        else:
            self.send_error(404)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


def _udp_echo(address: str) -> None:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as udp:
        udp.bind((address, 9999))
        while True:
            data, peer = udp.recvfrom(2048)
            udp.sendto(data, peer)


def serve(address: str, address6: str, cert: str, key: str, wheels: str) -> None:
    _Handler.wheels = Path(wheels)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    servers = []
    for where, kind in ((address, _Server), (address6, _Server6)):
        for port in (80, 8080):
            servers.append(kind((where, port), _Handler))
        secure = kind((where, 443), _Handler)
        secure.socket = tls.wrap_socket(secure.socket, server_side=True)
        servers.append(secure)
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    for where in (address, address6):
        threading.Thread(target=_udp_echo, args=(where,), daemon=True).start()
    print("ready", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()


def addresses_of(internet: Internet) -> list[str]:
    return [str(ipaddress.ip_address(internet.address)), internet.address6]


if __name__ == "__main__":
    serve(*sys.argv[1:6])
