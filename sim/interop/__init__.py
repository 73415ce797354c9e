"""Layer 8, interop: SGLang's command lines and logs, in and out. ``from-sglang`` (the launch, bench and router
commands, the startup log, aiperf's AgentX mapping) turns what an operator types into a scenario; ``to-sglang``
turns a scenario back into the launch command; ``measured`` reads what a run left behind (the clients' exports,
SGLang's ``/metrics``) for ``score`` and ``calibrate compute --from``.

May import: every layer below.
"""
