"""A defense test's config and its one-line refusal (tests/unit/test_server_defenses.py, test_asyncfilter.py):
``config(*overrides, k=K, m=M)`` is the default config with buffer K and M devices in flight; ``refused(...)``
the ConfigError's one line those overrides end in."""
import pytest

from seafl_dist.settings import ConfigError, config_from_dict


def config(*overrides, k=5, m=20):
    return config_from_dict({}, [f"algorithm.buffer_size={k}", f"devices.concurrency={m}", *overrides])


def refused(*overrides, k=5):
    with pytest.raises(ConfigError) as err:
        config(*overrides, k=k)
    assert "\n" not in str(err.value)
    return str(err.value)
