"""corral's egress CA, made in a folder and checked with ssl itself."""

from __future__ import annotations

import ssl
import stat
from pathlib import Path
from typing import Any

import pytest

from corral.network import CertificateAuthority

# the CA -----------------------------------------------------------------------------------


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, name: str) -> dict[str, Any]:
    """A TLS handshake in memory between the two contexts; the certificate the client
    accepted (ssl raises if it accepted none)."""
    client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_side = client.wrap_bio(client_in, client_out, server_hostname=name)
    server_side = server.wrap_bio(server_in, server_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(8):  # TLS 1.3 takes three flights
        for role, side, out, peer_in in (
            ("client", client_side, client_out, server_in),
            ("server", server_side, server_out, client_in),
        ):
            if not done[role]:
                try:
                    side.do_handshake()
                    done[role] = True
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(out.read())
        if all(done.values()):
            certificate = client_side.getpeercert()
            assert certificate
            return dict(certificate)
    raise AssertionError("the handshake did not finish")


def test_the_ca_is_made_once_with_its_key_private(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "egress-ca"
    ca = CertificateAuthority(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    key = folder / "ca-key.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in key.read_bytes()
    assert (folder / "ca.pem").read_text() == ca.cert_pem
    assert "PRIVATE" not in ca.cert_pem
    assert sorted(p.name for p in folder.iterdir()) == ["ca-key.pem", "ca.pem"]

    again = CertificateAuthority(folder)
    assert again.cert_pem == ca.cert_pem
    assert key.read_bytes() == (folder / "ca-key.pem").read_bytes()


def test_a_loose_folder_is_made_private(tmp_path: Path) -> None:
    folder = tmp_path / "ca"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    CertificateAuthority(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.parametrize("strict", [False, True])
def test_a_leaf_is_for_its_name_and_signed_by_the_ca(tmp_path: Path, strict: bool) -> None:
    ca = CertificateAuthority(tmp_path / "ca")
    client = ssl.create_default_context(cadata=ca.cert_pem)
    if strict:  # Python 3.13's create_default_context() sets it
        client.verify_flags |= ssl.VERIFY_X509_STRICT
    certificate = handshake(ca.server_context("inject.test"), client, "inject.test")
    assert certificate["subjectAltName"] == (("DNS", "inject.test"),)
    issuer = dict(pair[0] for pair in certificate["issuer"])
    assert issuer == {"commonName": "corral egress CA"}


def test_a_leaf_made_by_a_second_instance_is_trusted_through_the_first(tmp_path: Path) -> None:
    first = CertificateAuthority(tmp_path / "ca")
    second = CertificateAuthority(tmp_path / "ca")
    client = ssl.create_default_context(cadata=first.cert_pem)
    assert handshake(second.server_context("api.test"), client, "api.test")
    assert not any((tmp_path / "ca" / "leaves").iterdir())  # no leaf key left on disk


def test_a_leaf_is_refused_for_another_name_and_by_another_ca(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "ca")
    other = CertificateAuthority(tmp_path / "other")
    server = ca.server_context("inject.test")
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        handshake(server, ssl.create_default_context(cadata=ca.cert_pem), "pypi.org")
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        handshake(server, ssl.create_default_context(cadata=other.cert_pem), "inject.test")


def test_server_contexts_are_kept_by_name(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "ca")
    first = ca.server_context("one.test")
    assert ca.server_context("one.test") is first
    assert ca.server_context("two.test") is not first
