"""Goal: a broker's state (active or draining) is metadata: set through the metadata group, kept when the broker
registers again after a restart, refused for unknown brokers or states."""
import pytest

from raftbus.broker import commands, model
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors
from tests.unit.broker.metadata.test_metadata_state_machine import Metadata


@pytest.fixture
def meta():
    metadata = Metadata(MemoryStore(MetadataStateMachine.TABLES))
    metadata.register(1, 2, 3)
    return metadata


def set_state(meta, broker_id, state):
    return meta.apply(commands.encode_set_broker_state(broker_id=broker_id, state=state, now_ms=50))


def test_draining_survives_a_new_registration_and_undrains(meta):
    assert set_state(meta, 2, "draining").draining
    meta.apply(commands.encode_register_broker(broker_id=2, address="moved:1", raft_address="h:8002", now_ms=60))
    assert meta.sm.brokers()[2].draining and meta.sm.brokers()[2].address == "moved:1"
    assert set_state(meta, 2, "active").state == model.ACTIVE
    assert not meta.sm.brokers()[2].draining


def test_the_state_is_stored_with_the_broker(meta):
    set_state(meta, 3, "draining")
    reopened = MetadataStateMachine(meta.store)
    assert reopened.brokers()[3].draining and not reopened.brokers()[1].draining


@pytest.mark.parametrize("broker_id, state, error", [(9, "draining", errors.UnknownBroker),
                                                     (1, "asleep", errors.InvalidArgument)])
def test_unknown_brokers_and_states_are_refused(meta, broker_id, state, error):
    """An unknown broker is UNKNOWN_BROKER, as `brokers decommission` answers it."""
    assert type(set_state(meta, broker_id, state)) is error
    assert all(b.state == model.ACTIVE for b in meta.sm.brokers().values())
