"""One instance's scheduler, split where SGLang splits its own.

:class:`~sim.serve.scheduler.instance.Instance` is the event loop and batch formation (``managers/scheduler.py``);
it drives the schedule policy and its budgets (:mod:`.schedule_policy`, ``managers/schedule_policy.py``), the
running decode batch and its retraction (:mod:`.running_batch`, ``managers/schedule_batch.py``), the cache
controller's copies and acks (:mod:`.cache_controller`, ``managers/cache_controller.py``), L3 prefetch
(:mod:`.prefetch`), output streaming (:mod:`.output`) and, under DP attention, the ranks' lockstep and the DP
controller (:mod:`.dp`).

Part of layer 4, ``sim.serve``; may import what it may.
"""
