"""Which principal a verified client certificate names: explicit rules over its subject, never its bare name.

A certificate's subject (`CN=orders-app,O=Acme`, RFC 2253 order, as gRPC reports it) names a principal only
through `tls_principal_rules`, tried in order, the first that matches deciding (Kafka's
`ssl.principal.mapping.rules`):

    RULE:<regex>/<replacement>/[L|U]   the regex must match the whole subject; the replacement may use $1, $2...
                                       (L: lowercase the result, U: uppercase it); "/" inside either is written "\\/"
    DEFAULT                            the whole subject is the principal

Rules are separated by commas (`RULE:^CN=([^,]+),O=Acme$/$1/,RULE:^CN=([^,]+)$/$1/L`). With no rules (the
default) a certificate names no principal: callers authenticate with a bearer token, and the certificate only
gates the TLS handshake. A subject no rule matches names no principal either. A rule whose result is a reserved
principal (`raftbus:...`, the brokers' own) or not a valid principal refuses the certificate: no certificate can
make its holder a broker.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from raftbus.client import errors

from raftbus.broker.security.acl import validate_principal
from raftbus.broker.security.tokens import is_reserved

DEFAULT = "DEFAULT"
_GROUP_REFERENCE = re.compile(r"\$(\d+)")


class Rule(NamedTuple):
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str  # in Python's \g<N> form
    case: str  # "", "L" or "U"

    def apply(self, subject: str) -> str | None:
        if self.pattern is None:
            return subject
        match = self.pattern.fullmatch(subject)
        if match is None:
            return None
        result = match.expand(self.replacement)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


def _until_slash(text: str, start: int, what: str) -> tuple[str, int]:
    """The text from `start` to the next unescaped "/" (with "\\/" unescaped), and the position after that "/"."""
    out, i = [], start
    while i < len(text):
        if text.startswith("\\/", i):
            out.append("/")
            i += 2
        elif text[i] == "/":
            return "".join(out), i + 1
        else:
            out.append(text[i])
            i += 1
    raise errors.InvalidArgument(f"tls_principal_rules: the {what} of a RULE at position {start} has no closing /")


def principal_rules(text: str) -> tuple[Rule, ...]:
    """The rules of a `tls_principal_rules` value; InvalidArgument naming what is wrong."""
    rules, i = [], 0
    while True:
        while i < len(text) and (text[i].isspace() or text[i] == ","):
            i += 1
        if i >= len(text):
            return tuple(rules)
        if text.startswith(DEFAULT, i):
            rules.append(Rule(None, "", ""))
            i += len(DEFAULT)
        elif text.startswith("RULE:", i):
            pattern, i = _until_slash(text, i + len("RULE:"), "regex")
            replacement, i = _until_slash(text, i, "replacement")
            case = text[i] if i < len(text) and text[i] in "LU" else ""
            i += len(case)
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise errors.InvalidArgument(f"tls_principal_rules: regex {pattern!r}: {exc}") from None
            used = [int(n) for n in _GROUP_REFERENCE.findall(replacement)]
            if any(n > compiled.groups for n in used):
                raise errors.InvalidArgument(f"tls_principal_rules: replacement {replacement!r} names a group regex "
                                             f"{pattern!r} does not have")
            rules.append(Rule(compiled, _GROUP_REFERENCE.sub(r"\\g<\1>", replacement.replace("\\", "\\\\")),
                              case))
        else:
            raise errors.InvalidArgument(f"tls_principal_rules: expected RULE:... or DEFAULT at position {i}: "
                                         f"{text[i:i + 20]!r}")
        while i < len(text) and text[i].isspace():
            i += 1
        if i < len(text) and text[i] != ",":
            raise errors.InvalidArgument(f"tls_principal_rules: expected a comma at position {i}: {text[i:i + 20]!r}")


def certificate_principal(rules: tuple[Rule, ...], subject: str) -> str | None:
    """The principal the rules give a verified certificate's subject, or None when no rule matches.
    Unauthenticated when the result is reserved or not a valid principal."""
    for rule in rules:
        principal = rule.apply(subject)
        if principal is None:
            continue
        if is_reserved(principal):
            raise errors.Unauthenticated(f"the client certificate {subject!r} maps to {principal!r}, a reserved "
                                         "principal (raftbus:...): no certificate may name one")
        try:
            return validate_principal(principal)
        except errors.InvalidArgument:
            raise errors.Unauthenticated(f"the client certificate {subject!r} maps to {principal!r}, which is not a "
                                         "valid principal") from None
    return None
