"""SecuritySettings: the client port's TLS and its bearer-token and ACL authorization (docs/security.md)."""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.broker.section import require, setting
from raftbus.broker.security.principals import principal_rules


@dataclass(frozen=True)
class SecuritySettings:
    TITLE = ("Client-port security (docs/security.md). Empty files = plaintext; auth off = every caller may do "
             "everything.")

    tls_cert_file: str = setting("", "PEM certificate of this broker's client port (TLS when set)")
    tls_key_file: str = setting("", "its PEM private key")
    tls_client_ca_file: str = setting("", "mutual TLS: clients must present a certificate signed by this CA")
    tls_ca_file: str = setting("", 'CA this broker trusts when it calls other brokers\' client port ("" = system '
                                   'store)')
    tls_principal_rules: str = setting(
        "", 'mutual TLS: which principal a client certificate names, "RULE:<regex>/<replacement>/[L|U]" or DEFAULT, '
            'comma-separated, first match wins ("" = none: certificates name no principal; docs/security.md)')
    auth_enabled: bool = setting(False, "bearer tokens / client certificates and ACLs on every call")
    auth_bootstrap_principal: str = setting("admin", "the first admin, created from the bootstrap token file ...")
    auth_bootstrap_token_file: str = setting("", "... while the cluster has no token and no ACL yet")
    allow_insecure_network: bool = setting(
        False, "let the client, Kafka or metrics port listen beyond loopback without authentication (refused "
               "otherwise; a warning at every start)")

    def validate(self) -> None:
        require(bool(self.tls_cert_file) == bool(self.tls_key_file),
                "TLS on the client port needs both tls_cert_file and tls_key_file")
        require(not self.tls_client_ca_file or bool(self.tls_cert_file),
                "tls_client_ca_file (mutual TLS) needs tls_cert_file and tls_key_file")
        require(not self.auth_bootstrap_token_file or self.auth_enabled,
                "auth_bootstrap_token_file is set but auth_enabled is false")
        principal_rules(self.tls_principal_rules)  # InvalidArgument naming what is wrong
