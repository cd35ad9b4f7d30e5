"""The first admin: while the cluster has no token and no ACL, the controller turns the bootstrap token file into
a token of `auth_bootstrap_principal` with admin on the cluster. Once any token exists the file is ignored, so the
bootstrap token can be revoked like any other (docs/security.md)."""
from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

BOOTSTRAP_RETRY_S = 0.5


def seed_first_admin(service, principal: str, token: str, stopping: threading.Event, is_controller) -> None:
    """Until some token exists: propose the bootstrap command whenever this broker is the controller."""
    while not stopping.wait(BOOTSTRAP_RETRY_S):
        if service.context.metadata_sm.security().tokens:
            return
        if not is_controller():
            continue
        try:
            if service.bootstrap_admin(principal, token):
                log.info("first admin created from the bootstrap token file", extra={"principal": principal})
        except Exception as exc:  # retried: the controller may move, the commit may time out
            log.debug("bootstrap of the first admin will be retried: %s", exc)
