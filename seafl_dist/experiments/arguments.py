"""The sweep's command-line values: ``--grid key=v1,v2`` and ``--seeds 0,1,2``, split at top-level
commas (brackets and quotes kept whole), each value read as YAML like a ``key=value`` override."""
from __future__ import annotations

from seafl_dist.settings import ConfigError, parse_override


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside brackets and quotes: ``'1,[0.5,0.7],null'`` → 3 parts."""
    parts, depth, quote, cur = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def parse_grid_arg(text: str) -> tuple[str, list]:
    """``'algorithm.buffer_size=1,5,10'`` → ``('algorithm.buffer_size', [1, 5, 10])``."""
    key, _ = parse_override(text)
    raw = text.split("=", 1)[1]
    values = [parse_override(f"{key}={part}")[1] for part in split_top_level(raw)]
    if not key or not values or values == [""]:
        raise ConfigError(f"--grid {text!r} is not of the form key.sub=v1,v2 (e.g. algorithm.buffer_size=1,5,10)")
    return key, values


def parse_seeds(text: str) -> list[int]:
    try:
        return [int(s) for s in split_top_level(text) if s != ""]
    except ValueError:
        raise ConfigError(f"--seeds {text!r} is not a comma-separated list of integers (e.g. 0,1,2)") from None
