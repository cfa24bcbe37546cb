"""The certificates a control plane on loopback needs, made fresh in its directory: a CA, the API
server's serving certificate, an admin client (system:masters), the service-account key, and the
webhook servers' certificates (127.0.0.1, as envtest gives its webhooks). Valid for ten years: the
operators' certificate rotator replaces one that expires within 90 days."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(directory: Path, name: str, cert: x509.Certificate, key) -> Pair:
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    pair.key.chmod(0o600)
    return pair


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


class Pki:
    def __init__(self, directory: Path):
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.UTC)
        self._valid = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=3650))
        self._ca_key = _key()
        ca = (
            self._builder(_name("trainstack-test-ca"), self._ca_key.public_key())
            .issuer_name(_name("trainstack-test-ca"))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        self._ca = ca
        self.ca = _write(directory, "ca", ca, self._ca_key)
        self.serving = self.issue("serving", "127.0.0.1", server=True)
        self.admin = self.issue("admin", "admin", org="system:masters")
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.service_account_key = directory / "sa.key"
        self.service_account_key.write_bytes(
            sa_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )

    def _builder(self, subject: x509.Name, public_key) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._valid[0])
            .not_valid_after(self._valid[1])
        )

    def issue(
        self, name: str, cn: str, *, org: str | None = None, server: bool = False, dns: tuple[str, ...] = ()
    ) -> Pair:
        """A certificate signed by the CA: a server's for 127.0.0.1 (and `dns`), else a client's."""
        key = _key()
        builder = self._builder(_name(cn, org), key.public_key()).issuer_name(self._ca.subject)
        if server:
            names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            names += [x509.DNSName(n) for n in (*LOOPBACK_NAMES, *dns)]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
            usage = ExtendedKeyUsageOID.SERVER_AUTH
        else:
            usage = ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        return _write(self.dir, name, builder.sign(self._ca_key, hashes.SHA256()), key)

    def rotator_secret(self, name: str, ca_name: str, dns_name: str) -> dict[str, bytes]:
        """The Secret an operator's certificate rotator (open-policy-agent/cert-controller
        pkg/rotator) keeps as it finds it, with a server certificate valid for 127.0.0.1 too, which
        the API server calls. The rotator keeps a Secret only where ValidCert holds for both: the CA
        verified as a certificate for the DNS name `ca_name`, its key PKCS#1 RSA (ParsePKCS1PrivateKey),
        and the server's verified for `dns_name` (<service>.<namespace>.svc); otherwise it makes its
        own, for the Service's name alone. Its files are written under `name/` as well."""
        ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        ca = (
            self._builder(_name(ca_name), ca_key.public_key())
            .issuer_name(_name(ca_name))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, True, False, False, True, True, False, False), critical=True
            )
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(ca_name)]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        names = [x509.DNSName(dns_name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        cert = (
            self._builder(_name(dns_name), key.public_key())
            .issuer_name(ca.subject)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        pkcs1 = serialization.PrivateFormat.TraditionalOpenSSL
        found = {
            "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
            "ca.key": ca_key.private_bytes(serialization.Encoding.PEM, pkcs1, serialization.NoEncryption()),
            "tls.crt": cert.public_bytes(serialization.Encoding.PEM),
            "tls.key": key.private_bytes(serialization.Encoding.PEM, pkcs1, serialization.NoEncryption()),
        }
        folder = self.dir / name
        folder.mkdir(exist_ok=True)
        for file, content in found.items():
            (folder / file).write_bytes(content)
        return found
