"""Credentials made in the test: NKeys, operator/account/user JWTs (.creds), and a TLS CA.

Everything is generated fresh per test run, so the auth tests prove each method against a real
server configured for it, with no key material committed to the repository.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import nkeys


@dataclass(frozen=True)
class NKey:
    seed: str
    public: str

    @classmethod
    def create(cls, prefix: int) -> NKey:
        seed = nkeys.encode_seed(os.urandom(32), prefix).decode()
        return cls(seed=seed, public=nkeys.from_seed(seed.encode()).public_key.decode())

    def sign(self, data: bytes) -> bytes:
        return nkeys.from_seed(self.seed.encode()).sign(data)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def encode_jwt(issuer: NKey, subject: str, name: str, nats_claims: dict) -> str:
    """A NATS JWT (ed25519-nkey) signed by ``issuer``."""
    claims = {"iat": int(time.time()), "iss": issuer.public, "name": name, "sub": subject, "nats": nats_claims}
    claims["jti"] = base64.b32encode(hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest()).decode()
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    signature = _b64(issuer.sign(f"{header}.{body}".encode()))
    return f"{header}.{body}.{signature}"


UNLIMITED_ACCOUNT = {
    "subs": -1,
    "data": -1,
    "payload": -1,
    "imports": -1,
    "exports": -1,
    "wildcards": True,
    "conn": -1,
    "leaf": -1,
    "mem_storage": -1,
    "disk_storage": -1,
    "streams": -1,
    "consumer": -1,
}


@dataclass(frozen=True)
class OperatorSetup:
    """An operator, a system account and a JetStream account with one user, as server config."""

    server_config: str
    user_jwt: str
    user_seed: str

    @property
    def creds(self) -> str:
        return (
            f"-----BEGIN NATS USER JWT-----\n{self.user_jwt}\n------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{self.user_seed}\n------END USER NKEY SEED------\n"
        )


def operator_setup(store_dir: Path) -> OperatorSetup:
    operator = NKey.create(nkeys.PREFIX_BYTE_OPERATOR)
    system = NKey.create(nkeys.PREFIX_BYTE_ACCOUNT)
    account = NKey.create(nkeys.PREFIX_BYTE_ACCOUNT)
    user = NKey.create(nkeys.PREFIX_BYTE_USER)
    operator_jwt = encode_jwt(
        operator, operator.public, "OP", {"type": "operator", "version": 2, "system_account": system.public}
    )
    system_jwt = encode_jwt(
        operator, system.public, "SYS", {"type": "account", "version": 2, "limits": {"conn": -1, "subs": -1}}
    )
    account_jwt = encode_jwt(
        operator, account.public, "ACC", {"type": "account", "version": 2, "limits": UNLIMITED_ACCOUNT}
    )
    user_jwt = encode_jwt(
        account, user.public, "edge", {"type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1}
    )
    config = (
        f"operator: {operator_jwt}\n"
        f"system_account: {system.public}\n"
        "resolver: MEMORY\n"
        f"resolver_preload: {{\n  {system.public}: {system_jwt}\n  {account.public}: {account_jwt}\n}}\n"
        f"jetstream {{ store_dir: {json.dumps(str(store_dir))}, domain: creds }}\n"
    )
    return OperatorSetup(server_config=config, user_jwt=user_jwt, user_seed=user.seed)


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path


def make_tls(
    directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), ca_name: str = "jetstream-test-ca"
) -> TlsFiles:
    """A CA, a server certificate for ``hosts``, and a client certificate, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)

    def key_pem(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )

    def cert(subject: str, key, issuer_name, issuer_key, ca: bool, sans=None):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            # Python 3.13 verifies with VERIFY_X509_STRICT: key identifiers and key usage are required.
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=not ca,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=not ca,
                    key_cert_sign=ca,
                    crl_sign=ca,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca_cert = cert(ca_name, ca_key, issuer, ca_key, ca=True)
    sans = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = cert("nats-server", server_key, issuer, ca_key, ca=False, sans=sans)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = cert("airflow", client_key, issuer, ca_key, ca=False, sans=[x509.DNSName("airflow")])

    files = TlsFiles(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server-key.pem",
        directory / "client.pem",
        directory / "client-key.pem",
    )
    files.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    files.client_cert.write_bytes(client_cert.public_bytes(serialization.Encoding.PEM))
    key_pem(server_key, files.key)
    key_pem(client_key, files.client_key)
    return files
