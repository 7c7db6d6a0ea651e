"""The Python clients speak HTTPS to a server started with --tls-cert/--tls-key, checking its
certificate against a CA file: given (Client(ca_file=...)) or from $HF3FS_META_CA_FILE."""

import subprocess

import pytest

from conftest import Server
from hf3fs_meta import Client, Hf3fsGlobalMetadataClient, MetadataError


def make_certificate(directory, name):
    """A self-signed certificate for 127.0.0.1, made now (P-256, valid one day)."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


@pytest.fixture
def certificates(tmp_path):
    return make_certificate(tmp_path, "server"), make_certificate(tmp_path, "other")


@pytest.fixture
def tls_server(server_binary, certificates):
    (cert, key), _ = certificates
    s = Server(server_binary, "--tls-cert", str(cert), "--tls-key", str(key))
    yield s
    s.stop()


def test_the_client_speaks_https_with_a_ca_file(tls_server, certificates, monkeypatch):
    monkeypatch.delenv("HF3FS_META_CA_FILE", raising=False)
    (cert, _), _ = certificates
    assert tls_server.url.startswith("https://")
    client = Client(tls_server.url, ca_file=str(cert))
    client.ensure_initialized(0, 8)
    [page] = client.allocate(0, ["k"])
    client.confirm_write(0, [("k", page)])
    assert client.batch_exists(["k", "other"]) == [True, False]


def test_a_certificate_from_another_ca_is_refused(tls_server, certificates, monkeypatch):
    monkeypatch.delenv("HF3FS_META_CA_FILE", raising=False)
    _, (other, _) = certificates
    with pytest.raises(MetadataError) as caught:
        Client(tls_server.url, ca_file=str(other), attempts=1).batch_exists(["k"])
    assert caught.value.code == "connection_failed"
    assert "certificate" in str(caught.value)


def test_the_drop_in_takes_the_ca_file_from_the_environment(tls_server, certificates, monkeypatch):
    (cert, _), (other, _) = certificates
    monkeypatch.setenv("HF3FS_META_CA_FILE", str(other))
    with pytest.raises(MetadataError) as caught:
        Hf3fsGlobalMetadataClient(tls_server.url, max_retries=0).batch_key_exists(["k"])
    assert caught.value.code == "connection_failed"
    monkeypatch.setenv("HF3FS_META_CA_FILE", str(cert))
    client = Hf3fsGlobalMetadataClient(tls_server.url)
    client.initialize(0, 8)
    assert client.allocate_pages_for_keys(0, [("k", "")]) == [["k", 0]]
    # An explicit ca_file wins over the environment; empty means the system's CAs, which do not know
    # this self-signed certificate.
    with pytest.raises(MetadataError) as caught:
        Client(tls_server.url, ca_file="", attempts=1).batch_exists(["k"])
    assert caught.value.code == "connection_failed"
