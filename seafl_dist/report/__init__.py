"""Run outputs: sinks, progress, time-to-accuracy."""
from seafl_dist.report.progress import Progress
from seafl_dist.report.sinks import RunWriter, read_events, read_metrics, time_to_target, write_json

__all__ = ["Progress", "RunWriter", "read_events", "read_metrics", "time_to_target", "write_json"]
