"""Secrets the code can use but never read: headers added to a host's requests on the way out.

For a host with rules (E2B's ``network.rules`` with static ``transform.headers``, corral's
``"network": {"inject": ...}``), the egress side reads the sandbox's HTTP requests and adds
the headers (replacing any the code set of the same name) before they go upstream. HTTPS is
terminated for such hosts only, with a certificate for the host that corral's own CA signs:
a per-server CA, made once in the server's data folder (its key 0600), which sandboxes trust
through their CA bundle and ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``, ``PIP_CERT`` and
``NODE_EXTRA_CA_CERTS``. Upstream, the connection is TLS again, checked against the system's
CAs and ``upstream_ca``. Every other host's TLS is spliced untouched.

The values live in the server's memory and on the wire upstream, never in the sandbox: not
in its environment, its files or its ``/proc``. What the host answers is the host's to say:
one that echoes a request's headers back would show them (the threat model in the README).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import ssl
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path

import anyio
import anyio.abc
from anyio.streams.tls import TLSStream

from corral.network._relay import Prefixed, Switched, relay_http

__all__ = ["CertificateAuthority", "intercept"]

_CA_DAYS = 3650
_LEAF_DAYS = 30
_LEAVES = 256  # leaf contexts kept, by host name


class CertificateAuthority:
    """corral's egress CA: made once in ``folder`` (0700, its key 0600), then only loaded."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self.cert_pem, self._key_pem = _load_or_make(folder)
        self._leaves: OrderedDict[str, ssl.SSLContext] = OrderedDict()
        self._lock = threading.Lock()

    def server_context(self, name: str) -> ssl.SSLContext:
        """A TLS server context presenting a certificate for ``name`` (blocking, cached)."""
        with self._lock:
            context = self._leaves.get(name)
            if context is not None:
                self._leaves.move_to_end(name)
                return context
        context = self._leaf(name)
        with self._lock:
            self._leaves[name] = context
            while len(self._leaves) > _LEAVES:
                self._leaves.popitem(last=False)
        return context

    def _leaf(self, name: str) -> ssl.SSLContext:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        ca_key = serialization.load_pem_private_key(self._key_pem, password=None)
        ca_cert = x509.load_pem_x509_certificate(self.cert_pem.encode())
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=_LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            # Python 3.13's default context verifies strictly (VERIFY_X509_STRICT): these
            # key identifiers must be there, or the sandbox's TLS to an inject host fails.
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
                critical=False,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        )
        pem_key = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.set_alpn_protocols(["http/1.1"])
        leaves = self._folder / "leaves"
        leaves.mkdir(mode=0o700, exist_ok=True)
        # ssl loads a chain from files only: written 0600 in the CA's 0700 folder, then gone.
        path = leaves / f"{os.getpid()}-{threading.get_ident()}.pem"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(descriptor, "wb") as chain:
                chain.write(pem_key + cert.public_bytes(serialization.Encoding.PEM))
            context.load_cert_chain(path)
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        return context


def _load_or_make(folder: Path) -> tuple[str, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    cert_path, key_path = folder / "ca.pem", folder / "ca-key.pem"
    if cert_path.is_file() and key_path.is_file():
        return cert_path.read_text(), key_path.read_bytes()
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "corral egress CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    for path, data, mode in ((key_path, key_pem, 0o600), (cert_path, None, 0o644)):
        content = data if data is not None else cert.public_bytes(serialization.Encoding.PEM)
        temporary = path.with_suffix(".new")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content)
        os.replace(temporary, path)  # whole or not at all, never a half-written key
    return cert_path.read_text(), key_pem


async def intercept(
    sandbox: anyio.abc.ByteStream,
    first: bytes,
    upstream: anyio.abc.ByteStream,
    *,
    name: str,
    ca: CertificateAuthority,
    upstream_ca: str,
    headers: Mapping[str, str],
    count: Callable[[int], bool],
) -> tuple[anyio.abc.ByteStream, anyio.abc.ByteStream, Switched | None]:
    """Terminate the sandbox's TLS with a certificate for ``name``, open the upstream side
    (TLS again, verified), and relay requests for ``name`` with ``headers`` added
    (``_relay``).

    Returns:
        Both TLS streams, and what a protocol switch left to splice, if the host switched.
    """
    server = await anyio.to_thread.run_sync(ca.server_context, name)
    inner = await TLSStream.wrap(Prefixed(first, sandbox), server_side=True, ssl_context=server)
    client = ssl.create_default_context(cafile=upstream_ca or None)
    if upstream_ca:
        client.load_default_certs()
    client.set_alpn_protocols(["http/1.1"])
    outer = await TLSStream.wrap(upstream, hostname=name, ssl_context=client)
    switched = await relay_http(inner, outer, name=name, headers=headers, count=count)
    return inner, outer, switched
