"""Every call driver dispatches through one op table (``@handles``) and one answer frame: the call's op and names
first, then the handler's fields, then what every answer of the format reports; an op the format lacks is one line."""

import pytest

from sim.base.errors import InputError
from sim.offline.driver import CallDriver, handles
from sim.offline.hostcalls import PlainHostDriver
from sim.offline.treecalls import CALL_FIELDS, RADIX_CALL_FIELDS, HostDriver, RadixDriver, TreeDriver
from sim.offline.v4hostcalls import V4HostDriver

HOST_OPS = {"config", "request", "admit", "extend", "decode", "finish", "match", "state", "ack", "complete_loads",
            "step", "evict", "evict_host"}  # fmt: skip


def test_each_driver_handles_exactly_the_ops_its_format_declares():
    assert TreeDriver.ops.keys() == CALL_FIELDS.keys()
    assert RadixDriver.ops.keys() == RADIX_CALL_FIELDS.keys()
    assert PlainHostDriver.ops.keys() == V4HostDriver.ops.keys() == HOST_OPS


def test_a_subclass_overrides_a_handler_by_name_and_adds_ops():
    class Base(CallDriver):
        @handles("ping")
        def _ping(self, call):
            return {"pong": 1}

        def _state(self):
            return {"calls": 1}

    class Child(Base):
        echo = ("id",)

        def _ping(self, call):
            return {"pong": 2}

        @handles("pang")
        def _pang(self, call):
            return {}

    assert Child.ops == {"ping": "_ping", "pang": "_pang"} and Base.ops == {"ping": "_ping"}
    assert Child()({"op": "ping", "id": "a", "rid": "r"}) == {"op": "ping", "id": "a", "pong": 2, "calls": 1}
    assert list(Base()({"op": "ping", "rid": "r"})) == ["op", "rid", "pong", "calls"]


@pytest.mark.parametrize(("driver", "message"), [
    (TreeDriver(), "op: unknown op 'insert' (known: config, request, admit, extend, decode, finish, match, state)"),
    (RadixDriver(), "op: unknown op 'insert2' (known: insert, match, evict, state)"),
    (PlainHostDriver(), "op: unknown op 'insert' (known: config, request, admit, extend, decode, finish, match, ack, "
                        "complete_loads, step, evict_host, evict, state)"),
])  # fmt: skip
def test_an_op_the_format_lacks_is_refused_naming_it(driver, message):
    op = "insert2" if isinstance(driver, RadixDriver) else "insert"
    with pytest.raises(InputError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        driver({"op": op})


def test_a_host_tier_stream_starts_with_a_config_call():
    with pytest.raises(InputError, match="starts with a config call"):
        HostDriver()({"op": "match", "tokens": [1]})
    with pytest.raises(InputError, match="starts with a config call"):
        V4HostDriver()({"op": "step"})
    with pytest.raises(InputError, match="op: unknown op \\[1\\] \\(known: config,"):
        V4HostDriver()({"op": [1]})
