"""The host-tier copies are queued and reaped as SGLang's HiCacheController does: a merged write copy per batch result,
one load copy per closed batch, and acknowledgements in FIFO order that stop at the first copy still in flight."""

from sim.offline.copies import HostCopies, Load


def test_acks_are_reaped_in_order_and_stop_at_the_first_copy_in_flight():
    q, acked = HostCopies(), []
    q.start_writing(["a", "b"])
    q.start_writing([])  # nothing queued: no copy
    q.start_writing(["c"])
    assert len(q.ack_write_queue) == 2
    q.ack_write_queue[1].done = True  # the second copy lands first
    q.reap(acked.append, None)
    assert acked == [] and len(q.ack_write_queue) == 2
    assert q.complete_writes(1) == 1
    q.reap(acked.append, None)
    assert acked == ["a", "b", "c"] and not q.ack_write_queue


def test_queued_loads_start_as_one_copy_and_complete_together():
    q, done = HostCopies(), []
    assert q.start_loading() is None
    n1, n2 = object(), object()
    q.load_queue += [Load(n1, 16, "r1"), Load(n2, 4, "r2")]
    assert q.loading() == {id(n1), id(n2)} and q.pending_loads == 2
    assert q.start_loading() == 20
    assert len(q.ack_load_queue) == 1 and q.pending_loads == 2 and q.loading() == {id(n1), id(n2)}
    assert q.complete_loads() == 1
    q.reap(None, done.append)
    assert done == ["r1", "r2"] and q.pending_loads == 0 and q.loading() == set()
