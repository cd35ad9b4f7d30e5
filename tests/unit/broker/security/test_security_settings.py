"""Goal: the client-port security settings load from TOML and RAFTBUS_* variables, and inconsistent ones are
refused with InvalidArgument naming the setting, before a broker serves anything."""
import pytest

from raftbus.broker.security import tls
from raftbus.broker.settings import load_settings
from raftbus.broker.tls_dev import write_dev_pki
from raftbus.client import errors


def test_defaults_are_plaintext_with_auth_off():
    s = load_settings().security
    assert (s.tls_cert_file, s.tls_client_ca_file, s.auth_enabled, s.auth_bootstrap_principal) == ("", "", False,
                                                                                                   "admin")
    assert tls.server_credentials(s) is None
    assert tls.peer_tls_files(s) == {"tls_ca": False}


OWN_SECRET = {"cluster_secret": "s" * 40, "cluster_id": "settings-test"}


def test_auth_switch_comes_from_the_environment_as_a_boolean(monkeypatch):
    """RAFTBUS_AUTH_ENABLED is read as true or false."""
    monkeypatch.setenv("RAFTBUS_CLUSTER_SECRET", OWN_SECRET["cluster_secret"])
    monkeypatch.setenv("RAFTBUS_CLUSTER_ID", OWN_SECRET["cluster_id"])
    monkeypatch.setenv("RAFTBUS_AUTH_ENABLED", "true")
    assert load_settings().security.auth_enabled is True
    monkeypatch.setenv("RAFTBUS_AUTH_ENABLED", "false")
    assert load_settings().security.auth_enabled is False


def test_a_non_boolean_switch_is_refused(tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text('[default]\nauth_enabled = "false"\n')
    with pytest.raises(errors.InvalidArgument, match="auth_enabled"):
        load_settings(str(config))


@pytest.mark.parametrize("overrides, word", [
    ({"tls_cert_file": "cert.pem"}, "tls_key_file"),
    ({"tls_client_ca_file": "ca.pem"}, "tls_client_ca_file"),
    ({"auth_bootstrap_token_file": "admin.token"}, "auth_enabled"),
])
def test_inconsistent_security_settings_are_refused(overrides, word):
    """Each inconsistency is refused naming the setting to fix."""
    with pytest.raises(errors.InvalidArgument, match=word):
        load_settings(**overrides)


def test_tls_files_are_read_and_checked(tmp_path):
    dev = write_dev_pki(tmp_path, [1])
    cert, key = dev.broker(1)
    pki, files = {"ca": str(dev.ca_file)}, {"cert": str(cert), "key": str(key)}
    s = load_settings(tls_cert_file=files["cert"], tls_key_file=files["key"], tls_client_ca_file=pki["ca"],
                      tls_ca_file=pki["ca"]).security
    assert tls.server_credentials(s) is not None
    assert tls.peer_tls_files(s) == {"tls_ca": pki["ca"], "tls_cert": files["cert"], "tls_key": files["key"]}
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    with pytest.raises(errors.InvalidArgument, match="tls_cert_file .* no PEM"):
        tls.server_credentials(load_settings(tls_cert_file=str(not_pem), tls_key_file=files["key"]).security)
    with pytest.raises(errors.InvalidArgument, match="tls_key_file"):
        tls.server_credentials(
            load_settings(tls_cert_file=files["cert"], tls_key_file=str(tmp_path / "missing")).security)


@pytest.mark.parametrize("secret", [{}, {"cluster_secret": "s" * 40}, {"cluster_secret": "short", "cluster_id": "x"}])
def test_auth_needs_a_cluster_secret_of_its_own_even_on_loopback(secret):
    """With auth on, the brokers' internal identity is a key of the cluster secret: with the public default (or a
    weak secret, or the default cluster id) anyone could compute it, so the broker refuses to start, on loopback too."""
    with pytest.raises(errors.InvalidArgument, match="auth_enabled needs a cluster secret of this cluster's own"):
        load_settings(auth_enabled=True, **secret)
    assert load_settings(auth_enabled=True, **OWN_SECRET).security.auth_enabled
