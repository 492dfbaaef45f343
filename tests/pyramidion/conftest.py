"""Every test here runs torch at one thread (the ``one_thread`` fixture): their tensors are tiny,
and at two threads each call forks a team whose threads wait for each other, most of the CPU
time these tests take on a loaded machine (and under ``make test``'s two workers). A module that
checks what threads do overrides ``one_thread_here``."""

import pytest


@pytest.fixture(autouse=True)
def one_thread_here(one_thread) -> None:
    """torch at one thread for the test, as before after it."""
