"""Layer 0, base: what every layer may use. The one user-facing error type, the input-structure rules every
reader goes through (bounds, nesting, sizes), atomic file output, progress bars, shared wording, the cyclic
garbage collector paused while a run plays, and which modules the compiled build compiles (``compiled.py``).

May import: nothing of ``sim``.
"""
