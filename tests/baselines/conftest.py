"""Fixtures of the baselines tests (the loopback chat endpoint, ``chat_stub``, is in ``tests/conftest.py``)."""
