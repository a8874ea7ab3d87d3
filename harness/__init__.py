"""The test harness that tests/ and bench/ share: a replaying API server and a real one, a TCP proxy that misbehaves
on demand, fake cgroup and /proc trees, real-kernel helpers, an in-memory transport for a protocol and a log handler
that keeps records.

Test-harness code, not the product's: it is not packaged (pyproject.toml packages ``webhook*`` only). Both tests/
and bench/ import it; it imports neither, and neither imports the other (tests/test_import_cycles.py).
"""
