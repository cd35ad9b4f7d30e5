"""Goal: an ACL allows exactly the operation and resources it names; only admin on the cluster allows everything;
malformed ACLs are refused with InvalidArgument naming the field."""
import pytest

from raftbus.broker.security.acl import Acl, allows, grants, validate_acl
from raftbus.client import errors


@pytest.mark.parametrize("acl, resource, expected", [
    (Acl("a", "topic", "orders", "produce"), ("topic", "orders", "produce"), True),
    (Acl("a", "topic", "orders", "produce"), ("topic", "orders", "consume"), False),
    (Acl("a", "topic", "orders", "produce"), ("topic", "orders.dlq", "produce"), False),
    (Acl("a", "topic", "orders", "admin"), ("topic", "orders", "produce"), False),
    (Acl("a", "topic", "*", "consume"), ("topic", "anything", "consume"), True),
    (Acl("a", "topic", "*", "consume"), ("group", "anything", "consume"), False),
    (Acl("a", "prefix", "billing.", "consume"), ("topic", "billing.invoices", "consume"), True),
    (Acl("a", "prefix", "billing.", "consume"), ("topic", "billing", "consume"), False),
    (Acl("a", "prefix", "billing.", "consume"), ("group", "billing.x", "consume"), False),
    (Acl("a", "group", "workers", "consume"), ("group", "workers", "consume"), True),
    (Acl("a", "group", "workers", "consume"), ("topic", "workers", "consume"), False),
    (Acl("a", "group", "*", "consume"), ("group", "other", "consume"), True),
    (Acl("a", "cluster", "", "produce"), ("topic", "orders", "produce"), False),
    (Acl("a", "cluster", "", "produce"), ("cluster", "", "produce"), True),
    (Acl("a", "cluster", "", "admin"), ("topic", "orders", "produce"), True),
    (Acl("a", "cluster", "", "admin"), ("group", "g", "consume"), True),
    (Acl("a", "cluster", "", "admin"), ("cluster", "", "admin"), True),
    (Acl("a", "topic", "orders", "admin"), ("cluster", "", "admin"), False),
])
def test_an_acl_grants_exactly_what_it_names(acl, resource, expected):
    assert grants(acl, *resource) is expected


def test_any_matching_acl_allows_and_none_denies():
    acls = [Acl("a", "topic", "t1", "produce"), Acl("a", "group", "g", "consume")]
    assert allows(acls, "topic", "t1", "produce")
    assert allows(acls, "group", "g", "consume")
    assert not allows(acls, "topic", "t2", "produce")
    assert not allows([], "topic", "t1", "produce")


@pytest.mark.parametrize("acl, word", [
    (Acl("", "topic", "t", "produce"), "principal"),
    (Acl(" a", "topic", "t", "produce"), "principal"),
    (Acl("a", "queue", "t", "produce"), "resource type"),
    (Acl("a", "topic", "t", "write"), "operation"),
    (Acl("a", "cluster", "x", "admin"), "cluster ACL"),
    (Acl("a", "topic", "", "produce"), "resource name"),
    (Acl("a", "group", "g" * 300, "consume"), "longer"),
])
def test_malformed_acls_are_refused(acl, word):
    with pytest.raises(errors.InvalidArgument, match=word):
        validate_acl(acl)
