"""What a broker's client port gets from its security settings: TLS credentials, the auth interceptor, the Security
service, the credentials the broker itself uses toward other brokers, and the bootstrap of the first admin."""
from __future__ import annotations

import functools
import logging

from raftbus.broker.security import tls
from raftbus.broker.security.principals import principal_rules
from raftbus.broker.security.bootstrap import seed_first_admin
from raftbus.broker.security.interceptor import AuthInterceptor, Authorizer
from raftbus.broker.security.service import SecurityService, bootstrap_token
from raftbus.broker.security.servicer import security_servicers
from raftbus.broker.security.settings import SecuritySettings
from raftbus.broker.security.tokens import internal_token

log = logging.getLogger(__name__)


def peer_credentials(settings: SecuritySettings, keys) -> dict:
    """The SDK credentials of this broker toward other brokers' client ports (joining, dead-letter moves,
    redrives, store copies): their TLS files and, with auth on, the internal token of the cluster's keys."""
    files = tls.peer_tls_files(settings)
    if settings.auth_enabled:
        files["token"] = internal_token(keys.internal_client)
    return files


class ClientPortSecurity:
    def __init__(self, context, settings: SecuritySettings, keys, accepted_keys=()):
        self.context = context
        self.settings = s = settings
        self.keys = keys
        self.service = SecurityService(context)
        # during a secret rotation (cluster_secret_accepted) a broker still on the other secret presents its token
        accepted = tuple(internal_token(k.internal_client) for k in (keys, *accepted_keys))
        self.authorizer = Authorizer(context.metadata_sm.security, internal_tokens=accepted,
                                     certificate_rules=principal_rules(s.tls_principal_rules)) \
            if s.auth_enabled else None
        self.first_admin_token = bootstrap_token(s.auth_bootstrap_token_file) if s.auth_bootstrap_token_file else None
        self.credentials = tls.server_credentials(s)  # read now: a bad file stops the broker before it serves
        if s.auth_enabled and self.credentials is None:
            log.warning("auth_enabled without TLS on the client port: bearer tokens cross the network in clear")

    def server_credentials(self):
        return self.credentials

    def policy(self):
        """() -> the AccessPolicy in force, for the Kafka port's authorization hook; None when auth is off."""
        return self.authorizer.policy if self.authorizer is not None else None

    def interceptors(self) -> list:
        return [AuthInterceptor(self.authorizer)] if self.authorizer is not None else []

    def servicers(self) -> list:
        return security_servicers(self.service, self.authorizer)

    def peer_credentials(self) -> dict:
        """The SDK credentials of this broker toward other brokers' client ports (dead-letter moves, redrives)."""
        return peer_credentials(self.settings, self.keys)

    def register(self, registry) -> None:
        """The Security servicer, the auth interceptor and, with a bootstrap token file, the first admin's seeding."""
        registry.serve(self.servicers())
        registry.intercept(self.interceptors())
        if self.first_admin_token is not None:
            registry.thread("raftbus-first-admin", self.seed_first_admin)

    def seed_first_admin(self, stopping) -> None:
        is_controller = functools.partial(getattr, self.context.metadata_group, "is_leader")
        seed_first_admin(self.service, self.settings.auth_bootstrap_principal, self.first_admin_token, stopping,
                         is_controller)
