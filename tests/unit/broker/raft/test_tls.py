"""Raft TLS settings: all three files or none, and a file that cannot be loaded is named in the error."""
from __future__ import annotations

import ssl

import pytest

from raftbus.broker.raft.tls import raft_tls
from raftbus.broker.tls_dev import write_dev_pki
from raftbus.client import errors


def test_no_files_means_tls_off():
    """Empty settings leave the Raft port in plaintext."""
    assert raft_tls("", "", "") is None


def test_some_files_but_not_all_are_refused(tmp_path):
    """Setting only some of the three names the missing ones."""
    pki = write_dev_pki(tmp_path, [1])
    cert, _ = pki.broker(1)
    with pytest.raises(errors.InvalidArgument, match="raft_tls_key_file"):
        raft_tls(str(cert), "", str(pki.ca_file))


def test_unloadable_files_are_named(tmp_path):
    """A missing key, or a CA file that is not PEM, fails with the setting and the path."""
    pki = write_dev_pki(tmp_path, [1])
    cert, key = pki.broker(1)
    with pytest.raises(errors.InvalidArgument, match="raft_tls_cert_file"):
        raft_tls(str(cert), str(tmp_path / "missing.pem"), str(pki.ca_file))
    bad_ca = tmp_path / "bad-ca.pem"
    bad_ca.write_text("not a certificate")
    with pytest.raises(errors.InvalidArgument, match="raft_tls_ca_file"):
        raft_tls(str(cert), str(key), str(bad_ca))


def test_both_sides_require_a_certificate_and_tls_1_3(tmp_path):
    """The server context requires client certificates; both refuse anything below TLS 1.3."""
    pki = write_dev_pki(tmp_path, [1])
    tls = raft_tls(*map(str, pki.broker(1)), str(pki.ca_file))
    assert tls.server.verify_mode == ssl.CERT_REQUIRED and tls.client.verify_mode == ssl.CERT_REQUIRED
    assert tls.client.check_hostname
    assert tls.server.minimum_version == tls.client.minimum_version == ssl.TLSVersion.TLSv1_3
