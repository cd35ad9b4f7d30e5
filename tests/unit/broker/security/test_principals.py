"""Goal: client certificates name principals only through explicit rules over their subject (Kafka's
ssl.principal.mapping.rules), first match wins, and no rule can name a reserved principal (raftbus:...)."""
import pytest

from raftbus.broker.security.principals import certificate_principal, principal_rules
from raftbus.broker.security.service import not_reserved
from raftbus.client import errors


@pytest.mark.parametrize("rules, subject, principal", [
    ("", "CN=alice", None),                                              # no rules: no principal
    ("RULE:^CN=([^,]+)$/$1/", "CN=alice", "alice"),
    ("RULE:^CN=([^,]+)$/$1/", "CN=alice,O=Acme", None),                  # the regex must match the whole subject
    ("RULE:^CN=([^,]+),O=Acme$/$1@acme/L", "CN=Alice,O=Acme", "alice@acme"),
    ("RULE:^CN=(.*)$/$1/U", "CN=alice", "ALICE"),
    ("RULE:^CN=(x)$/$1/, DEFAULT", "CN=alice", "CN=alice"),               # first match wins, DEFAULT last
    ("RULE:^CN=([^\\/]+)\\/ops$/$1/", "CN=team/ops", "team"),            # escaped slashes in the regex
    ("RULE:^CN=(.+)$/svc\\/$1/", "CN=a", "svc/a"),                       # ... and in the replacement
])
def test_rules_map_subjects_in_order(rules, subject, principal):
    """Each rule form maps the subject as documented."""
    assert certificate_principal(principal_rules(rules), subject) == principal


@pytest.mark.parametrize("rules, subject", [
    ("RULE:^CN=([^,]+)$/$1/", "CN=raftbus:broker"),
    ("RULE:^CN=([^,]+)$/$1/L", "CN=RAFTBUS:BROKER"),
    ("RULE:^CN=(.*)$/raftbus:$1/", "CN=anything"),
    ("RULE:^CN=(.*)$/ $1/", "CN=alice"),                                  # not a valid principal
])
def test_a_rule_giving_a_reserved_or_invalid_principal_refuses_the_certificate(rules, subject):
    """A certificate never names a broker: the result is refused, not passed on."""
    with pytest.raises(errors.Unauthenticated):
        certificate_principal(principal_rules(rules), subject)


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*)$", "RULE:^CN=(.*)$/$1", "RULE:^CN=(.*$/$1/", "CN=alice",
                                   "RULE:^CN=(.*)$/$2/", "DEFAULT RULE:x/y/"])
def test_malformed_rules_are_refused_naming_the_setting(rules):
    """A typo in the rules stops the broker at start with a message naming tls_principal_rules."""
    with pytest.raises(errors.InvalidArgument, match="tls_principal_rules"):
        principal_rules(rules)


@pytest.mark.parametrize("name", ["raftbus:broker", "raftbus:anything", "RaftBus:Broker"])
def test_tokens_and_acls_cannot_name_a_reserved_principal(name):
    """CreateToken, GrantAcl and the bootstrap admin refuse a reserved principal before anything is proposed."""
    with pytest.raises(errors.InvalidArgument, match="reserved"):
        not_reserved(name)
    assert not_reserved("raftbus-app") == "raftbus-app"
