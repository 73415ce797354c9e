"""One instance's scheduler, split where SGLang splits its own.

:class:`~sim.serve.scheduler.instance.Instance` is the event loop and batch formation (``managers/scheduler.py``);
it drives the schedule policy and its budgets (:mod:`.schedule_policy`, ``managers/schedule_policy.py``), the
running decode batch and its retraction (:mod:`.running_batch`, ``managers/schedule_batch.py``), the cache
controller's copies and acks (:mod:`.cache_controller`, ``managers/cache_controller.py``), L3 prefetch
(:mod:`.prefetch`), output streaming (:mod:`.output`) and, under DP attention, the ranks' lockstep and the DP
controller (:mod:`.dp`); the prefill delayer (:mod:`.prefill_delayer`) may hold its admission back.

The files read one way: a request's state (:mod:`.req`, with its L3 read, :mod:`.l3read`) and what the parts
share of their instance (:mod:`.instance_state`: the cache, the queues, the wake-up, the run's
:class:`~sim.serve.state.RunState`) sit below the parts; each part holds that, the parts below it, and callbacks
into the instance; the instance above them holds the parts, and knows the prefill delayer, which reads the
ranks from above, only as a protocol (:class:`~.instance.Delayer`).

Part of layer 4, ``sim.serve``; may import what it may.
"""
