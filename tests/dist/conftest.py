"""Fixtures of the distributed tests; the launch helpers live in launching.py."""
import pytest

from launching import Launch


def pytest_configure(config):
    config.addinivalue_line("markers", "dist: launches torchrun with several gloo ranks on CPU")


@pytest.fixture
def launcher():
    """launcher(world, *run_args, cwd=...) -> Launch; every launch is killed at teardown if still alive."""
    started = []

    def start(world, *run_args, cwd, **kw):
        started.append(Launch(world, *run_args, cwd=cwd, **kw))
        return started[-1]

    yield start
    for launch in started:
        launch.kill()
