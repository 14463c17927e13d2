"""Faults survived (issues 30 and 46): kill -9, full disks, a stopped store, dying
workers. Run as ``python -m benchmarks.faults``; one module a scenario (or two of a kind),
`__main__` says what each measures."""
