"""Layer 8, interop: SGLang's command lines and logs, in and out. ``from-sglang`` (the launch, bench and router
commands, the startup log, aiperf's AgentX mapping) turns what an operator types into a scenario; ``to-sglang``
turns a scenario back into the launch command.

May import: every layer below.
"""
