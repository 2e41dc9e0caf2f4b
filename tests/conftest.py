"""Test-session setup shared by all tests."""

from __future__ import annotations

import signal


def pytest_configure(config) -> None:
    # Several tests check what Ctrl-C does (SIGINT to `rlsys profile`, the bench harness and
    # their children). A test run started in the background of a non-interactive shell
    # (`make test &`, `nohup`) inherits SIGINT ignored, and ignored signals stay ignored in
    # every child: restore Python's handler (children then get the default at exec).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
