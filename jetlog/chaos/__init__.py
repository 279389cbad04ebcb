"""Fault injection and hostile-input tools that ship with jetlog (``jetlog fuzz``, ``jetlog chaos``,
the fault-injecting proxy): product code, so every test suite and operator can reuse them."""
