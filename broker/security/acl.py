"""Access-control entries and how they match a request. Pure.

An ACL grants one principal one operation on one resource:
    topic    NAME      that topic ("*": every topic)
    prefix   PREFIX    every topic whose name starts with PREFIX
    group    NAME      that consumer group ("*": every group)
    cluster  ""        the cluster: topics' lifecycle, tokens and ACLs, broker stats
Operations are independent (admin on a topic does not imply produce or consume on it), with one exception:
admin on the cluster allows every operation on every resource (the bootstrap admin holds it).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from raftbus.client import errors

TOPIC, PREFIX, GROUP, CLUSTER = "topic", "prefix", "group", "cluster"
RESOURCE_TYPES = (TOPIC, PREFIX, GROUP, CLUSTER)
PRODUCE, CONSUME, ADMIN = "produce", "consume", "admin"
OPERATIONS = (PRODUCE, CONSUME, ADMIN)
ANY_NAME = "*"
PRINCIPAL_BYTES_MAX = 255
RESOURCE_NAME_BYTES_MAX = 255


class Acl(NamedTuple):
    principal: str
    resource_type: str
    resource_name: str
    operation: str

    def to_dict(self) -> dict:
        return self._asdict()


def validate_principal(principal: str) -> str:
    if not principal or len(principal.encode()) > PRINCIPAL_BYTES_MAX or not principal.isprintable() \
            or principal != principal.strip():
        raise errors.InvalidArgument(f"principal {principal!r} must be 1 to {PRINCIPAL_BYTES_MAX} printable bytes "
                                     "without surrounding spaces")
    return principal


def validate_acl(acl: Acl) -> Acl:
    """The ACL if well formed; InvalidArgument naming the bad field otherwise."""
    validate_principal(acl.principal)
    if acl.resource_type not in RESOURCE_TYPES:
        raise errors.InvalidArgument(f"resource type must be one of {RESOURCE_TYPES}, not {acl.resource_type!r}")
    if acl.operation not in OPERATIONS:
        raise errors.InvalidArgument(f"operation must be one of {OPERATIONS}, not {acl.operation!r}")
    if acl.resource_type == CLUSTER and acl.resource_name:
        raise errors.InvalidArgument("a cluster ACL names no resource")
    if acl.resource_type != CLUSTER and not acl.resource_name:
        raise errors.InvalidArgument(f"a {acl.resource_type} ACL needs a resource name")
    if len(acl.resource_name.encode()) > RESOURCE_NAME_BYTES_MAX:
        raise errors.InvalidArgument(f"resource name is longer than {RESOURCE_NAME_BYTES_MAX} bytes")
    return acl


def grants(acl: Acl, resource_type: str, name: str, operation: str) -> bool:
    """Whether one ACL (of the caller) allows `operation` on the resource (`topic`, `group` or `cluster`)."""
    if acl.resource_type == CLUSTER and acl.operation == ADMIN:
        return True
    if acl.operation != operation:
        return False
    if resource_type == TOPIC:
        if acl.resource_type == TOPIC:
            return acl.resource_name in (name, ANY_NAME)
        return acl.resource_type == PREFIX and name.startswith(acl.resource_name)
    if resource_type == GROUP:
        return acl.resource_type == GROUP and acl.resource_name in (name, ANY_NAME)
    return resource_type == CLUSTER and acl.resource_type == CLUSTER


def allows(acls: Iterable[Acl], resource_type: str, name: str, operation: str) -> bool:
    """Whether any of a principal's ACLs allows `operation` on the resource."""
    return any(grants(acl, resource_type, name, operation) for acl in acls)


def describe(resource_type: str, name: str) -> str:
    """How a denial names the resource: `topic 'orders'`, `group 'billing'`, `the cluster`."""
    return "the cluster" if resource_type == CLUSTER else f"{resource_type} {name!r}"
