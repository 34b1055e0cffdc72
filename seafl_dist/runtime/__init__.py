"""Runners: the server loop, the in-process executor, the distributed runtime."""
