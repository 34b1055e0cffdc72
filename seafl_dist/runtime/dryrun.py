"""``seafl run CONFIG ... --dry-run``: what a run checks before it trains, and nothing more.

    seafl run configs/cifar10.yaml run.seed=1 --out runs/c10 --dry-run
    torchrun --nproc_per_node=3 -m seafl_dist run configs/quickstart.yaml --dry-run

In order, each step a one-line error (exit 2) when it fails: the config (loaded by the CLI, its
plugins imported), the dataset (formats and sizes only, :mod:`seafl_dist.data.check`: nothing
downloaded, no cache built), the model (built for the dataset's samples and given a batch of
zeros: images, or token ids 0), a rule of your own (``algorithm.name: pkg.module:rule``, called on a
buffer of two updates of the model's size and its result checked as a run checks it, algo/dispatch.py
``try_rule``), the partition (the run's own, from the same seed), the compute
device, and the run dir (can it be made, and would the run start fresh, resume from a checkpoint, or find it completed).
A device profile (``devices.profile``) is read and checked like the run reads it. Then one report
on stdout: the non-default config keys, the dataset, the model, the devices and their shard sizes,
the device population (profile rows, who is online at t = 0, a stall known before the run), the rank layout (``WORLD_SIZE`` ranks under torchrun, else one process) and the
run dir. Nothing is trained and nothing is written: no run dir, no data cache, no ``__pycache__``
of a user's plugin module (the CLI turns bytecode writing off first). Under torchrun only rank 0
checks and prints; the other ranks exit at once, and no process group is formed.
"""
from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

from seafl_dist.settings import Config, ConfigError
from seafl_dist.settings.plugins import is_import_path


def dry_run(cfg: Config, out: Path, *, explicit: bool, overwrite: bool = False, environ=None, stream=None) -> int:
    """Check ``cfg`` and its run dir ``out`` (``explicit``: ``--resume``), print the report; exit status 0."""
    environ = os.environ if environ is None else environ
    if environ.get("RANK", "0") != "0":
        return 0
    from seafl_dist.data.check import check_dataset
    from seafl_dist.runtime.device_eval import held_out_split
    from seafl_dist.runtime.shards import check_private_test, make_shards

    found = check_dataset(cfg.data, cfg.data_seed)
    if cfg.data.validation and (found.labels is not None or found.samples):  # the devices' part; n_test: the server's validation rows
        from seafl_dist.data.holdout import validation_data
        from seafl_dist.sim import stream_seed
        found, _ = validation_data(found, cfg.data.validation, stream_seed(cfg.data_seed, "validation"))
    held = cfg.algorithm.defense.server_samples
    if held and found.labels is not None and not found.samples:  # the devices share what the server-held set leaves
        import dataclasses
        from seafl_dist.data.server_set import server_rows
        from seafl_dist.sim import stream_seed
        rest, _ = server_rows(found.labels, len(found.labels), held, stream_seed(cfg.data_seed, "server_data"))
        found = dataclasses.replace(found, labels=found.labels[rest], note="; ".join(
            x for x in (found.note, f"{held} more training samples held by the server") if x))
    data = found.samples[0] if found.samples else found  # a DataModule's training set, else what was read
    lines = [f"config: {cfg.name} ({cfg.algorithm.name}); keys not at their default:", *non_default(cfg)]
    lines.append(f"data: {found.name} ({found.where}): " + (
        f"{len(found.samples[0])} training and {found.n_test} test {_samples(found)}, "
        f"{found.num_classes or 'no'} classes" if found.samples else
        f"{len(found.labels)} training and {found.n_test} {'validation' if cfg.data.validation else 'test'} "
        f"{_samples(found)}, "
        f"{found.num_classes} classes" if found.labels is not None else "") + (f"; {found.note}" if found.note else ""))
    model_line, numel, model = check_model(cfg, found)
    lines.append(f"model: {model_line}")
    if is_import_path(cfg.algorithm.rule):
        lines.append(f"rule: {cfg.algorithm.rule}: {try_rule_on(cfg, model)}")
    d = cfg.devices
    if found.labels is None and not found.samples:
        lines.append(f"devices: {d.num} simulated, {d.concurrency} training at once; shards: made after the download")
    else:
        shards, writers = make_shards(cfg, data)
        test = found.samples[1] if found.samples else found.test
        if cfg.privacy.enabled and writers is not None and test is not None:  # the devices' own test samples
            check_private_test(cfg, test, writers)
        shards, held = held_out_split(cfg, data, shards)  # a device left without a training sample: refused here
        by = cfg.data.partition_by
        each = "" if writers is None else f" (one per writer, of {len(found.writers)})" if by is None else \
            f" (one per value of {by!r})"
        lines.append(f"devices: {len(shards)} simulated{each}, {d.concurrency} training at once; shard sizes "
                     f"({cfg.data.partition}{', training parts' if held else ''}): {summarise([len(s) for s in shards])}")
        if held:
            lines.append(f"held out (data.device_holdout={cfg.data.device_holdout:g}): "
                         f"{summarise([len(h) for h in held])}")
        lines += population_lines(cfg, [len(s) for s in shards], 4 * numel)
    lines.append(f"ranks: {layout(cfg, environ)}")
    lines.append(f"run dir: {out}: {run_dir_plan(cfg, out, explicit, overwrite)}")
    print("\n".join(lines), file=stream or sys.stdout)
    print("seafl: dry run: config, data, model, " + ("rule, " if is_import_path(cfg.algorithm.rule) else "")
          + "partition and run dir check out; nothing was trained or written",
          file=sys.stderr)
    return 0


def non_default(cfg: Config) -> list[str]:
    """``  key = value`` for each resolved key whose value is not the default's (``name`` aside)."""
    from seafl_dist.runtime.rundir import config_tree, flat_keys
    # a section config.yaml leaves out whole at its defaults (algorithm.server_opt) is written whole once one key
    # differs: its other keys are compared with the dataclasses' defaults
    ours, default = flat_keys(config_tree(cfg)), {**flat_keys(Config().to_dict()), **flat_keys(config_tree(Config()))}
    changed = [k for k in ours if k != "name" and ours[k] != default.get(k, "<absent>")]
    return [f"  {k} = {_show(ours[k])}" for k in changed] or ["  (every key at its default)"]


def _show(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def summarise(sizes: list, total: bool = True) -> str:
    """Every value for a small population; min / median / max (and the total, for counts) for a large one."""
    def fmt(v) -> str:
        return f"{v:g}" if isinstance(v, float) else str(v)
    if len(sizes) <= 12:
        return ", ".join(map(fmt, sizes))
    return (f"min {fmt(min(sizes))}, median {statistics.median(sizes):g}, max {fmt(max(sizes))}"
            + (f" (total {sum(sizes)} over {len(sizes)} devices)" if total else f" over {len(sizes)} devices"))


def _samples(found) -> str:
    """What one sample of the checked dataset is, for the report's data line."""
    if found.inputs == "samples":
        return "samples (its collate batches them)"
    if found.inputs == "tokens":
        return f"sequences of {found.shape[0]} token ids (vocabulary {found.vocab})"
    return f"images of {'x'.join(map(str, found.shape))}"


def try_rule_on(cfg: Config, model) -> str:
    """A user's rule called on two updates of ``model``'s flat size, its result checked (algo/dispatch.py
    ``try_rule``); what the report says of it."""
    from seafl_dist.algo import FlatParts
    from seafl_dist.algo.dispatch import try_rule
    from seafl_dist.train import FlatLayout, flatten
    layout = FlatLayout.of(model)
    parts = FlatParts(params=layout.mask("param"), stats=layout.mask("stat"), counters=layout.mask("counter"))
    try_rule(cfg.algorithm, flatten(model), parts)
    return f"called on 2 updates of {layout.numel:,} entries; its result has the shape a run needs"


def check_model(cfg: Config, found) -> tuple:
    """Build the model for the dataset's samples and run a batch of two zeros through it (images of zeros, or
    sequences of token 0; a user's model: and a probe job on four, runtime/model_checks.py ``check_user_model``):
    the report's line, the flat size and the model."""
    import torch

    from seafl_dist.models import build_model
    tokens = found.inputs == "tokens"
    if found.samples:  # a DataModule: the user's model, probed on its real samples as the run probes it
        return _check_on_samples(cfg, *found.samples)
    c, h = (found.vocab, found.shape[0]) if tokens else found.shape[:2]  # build_model's in_channels, image_size

    def zeros(n: int):
        return torch.zeros(n, *found.shape, dtype=torch.int64 if tokens else torch.float32)
    name = cfg.model.name
    from seafl_dist.runtime.model_checks import built, check_inputs, check_model_size
    check_inputs(cfg, found.inputs)
    check_model_size(cfg, found.num_classes, c, h)
    with torch.random.fork_rng(devices=[]):  # like the run: building a model must not move torch's generator
        try:
            model = built(cfg, lambda: build_model(name, found.num_classes, c, width=cfg.model.width, image_size=h,
                                                   optim=cfg.train, lightning=False, params=cfg.model.params))
        except ValueError as err:
            raise ConfigError(f"config key 'model.name' has value {name!r}: {err}") from None
        x = zeros(2)
        if is_import_path(name):  # its logits, then a probe job on zeros (the data is not loaded here)
            from seafl_dist.runtime.model_checks import check_target_metric, check_user_model, say_unused_optimizer_keys
            from seafl_dist.runtime.setup import pick_device
            try:
                device = pick_device(cfg.runtime.device, 0)
            except RuntimeError as err:
                raise ConfigError(str(err)) from None
            from seafl_dist.train.probe import Rows
            names = check_user_model(cfg, model, Rows(zeros(4), torch.arange(4) % found.num_classes),
                                     found.num_classes, device)
            check_target_metric(cfg, names)
            say_unused_optimizer_keys(cfg, model)
        else:
            from seafl_dist.runtime.setup import check_target_metric
            check_target_metric(cfg, None)
            with torch.no_grad():
                try:
                    model.eval()(x)
                except RuntimeError as err:
                    raise ConfigError(f"model.name={name} cannot take {found.name}'s {_samples(found)}: "
                                      f"{str(err).splitlines()[0]}") from None
    params = sum(p.numel() for p in model.parameters())
    numel = sum(t.numel() for t in model.state_dict().values())  # the flat vector a transfer moves
    line = f"{name} (width {cfg.model.width:g}), {params:,} parameters, {found.num_classes} classes"
    if cfg.compression.active:  # what an upload costs on the clock and the wire (docs/compression.md)
        from seafl_dist.codecs import UpdateCodec
        from seafl_dist.train import FlatLayout
        codec = UpdateCodec(cfg.compression, FlatLayout.of(model))
        line += (f"; uploads {codec.name}: {codec.upload_bytes:,} of the model's {codec.model_bytes:,} bytes "
                 f"({codec.ratio:.4g})" + (", with error feedback" if cfg.compression.error_feedback else ""))
    return line, numel, model


def _check_on_samples(cfg: Config, train, test) -> tuple:
    """check_model for a DataModule's samples: the model built and probed as runtime/setup.py ``prepare`` does."""
    import numpy as np
    import torch

    from seafl_dist.models import build_model
    from seafl_dist.runtime.model_checks import built, check_inputs, say_unused_optimizer_keys
    from seafl_dist.runtime.model_checks import check_target_metric, check_user_model
    from seafl_dist.runtime.setup import EVAL_PROBE_ROWS, pick_device
    check_inputs(cfg, "samples")
    try:
        device = pick_device(cfg.runtime.device, 0)
    except RuntimeError as err:
        raise ConfigError(str(err)) from None
    with torch.random.fork_rng(devices=[]):
        model = built(cfg, lambda: build_model(cfg.model.name, train.num_classes, train.in_channels,
                                               width=cfg.model.width, image_size=train.image_size, optim=cfg.train,
                                               lightning=False, params=cfg.model.params))
        names = check_user_model(cfg, model, train, train.num_classes, device,
                                 test.take(np.arange(min(EVAL_PROBE_ROWS, len(test)))))
    check_target_metric(cfg, names)
    say_unused_optimizer_keys(cfg, model)
    params = sum(p.numel() for p in model.parameters())
    return f"{cfg.model.name} (width {cfg.model.width:g}), {params:,} parameters", \
        sum(t.numel() for t in model.state_dict().values()), model


def population_lines(cfg: Config, n_samples: list[int], model_bytes: int) -> list[str]:
    """The device population a profile or a dropout makes (docs/devices.md): read and checked as the run
    reads it; who is online at t = 0; the stall the run would end in at once, if any."""
    d = cfg.devices
    lines = [f"dropout: each job drops with probability {d.dropout:g}"] if d.dropout is not None else []
    if d.profile is None:
        return lines
    import numpy as np

    from seafl_dist.sim.clock import ProfiledSpeed, SpeedModel
    from seafl_dist.sim.population import Population
    from seafl_dist.sim.profiles import read_profiles
    table = read_profiles(d.profile)
    pop = Population(table, len(n_samples), cfg.data_seed, availability_scale=d.availability_scale,
                     compute_scale=cfg.clock.compute_scale, model_bytes=model_bytes)
    online = int(np.count_nonzero(pop.profiles_online(0.0)[pop.device_profiles()]))
    sps = pop.sec_per_sample * pop.compute_scale
    lines.append(f"profile: {d.profile} ({len(table)} rows, sha256 {table.sha256[:12]}...): {online} of "
                 f"{len(n_samples)} devices online at t=0, {int(pop.always.sum())} row(s) always on; seconds per "
                 f"sample {summarise(sorted(sps.tolist()), total=False)}")
    idle = None if cfg.clock.idle.distribution == "none" else SpeedModel(cfg.clock, n_samples, cfg.run.seed,
                                                                          cfg.train.epochs)
    why = ProfiledSpeed(pop, n_samples, cfg.train.epochs, idle).stall_reason()
    if why:
        lines.append(f"warning: the run would stall at once: {why}")
    return lines


def layout(cfg: Config, environ) -> str:
    """The ranks a run started with this environment would have, and the device each computes on."""
    from seafl_dist.runtime.setup import pick_device
    try:
        device = pick_device(cfg.runtime.device, 0)
    except RuntimeError as err:
        raise ConfigError(str(err)) from None
    world = int(environ.get("WORLD_SIZE", "1"))
    if device.type == "cuda":
        import torch
        where = f"cuda ({torch.cuda.device_count()} GPU(s) here; a rank uses cuda:<local rank mod GPUs>)"
    else:
        where = "cpu"
    if world <= 1:
        return f"one process, on {where}"
    return (f"{world} ranks: rank 0 aggregates, {world - 1} worker(s) train (runtime.placement="
            f"{cfg.runtime.placement}), on {where}")


def run_dir_plan(cfg: Config, out: Path, explicit: bool, overwrite: bool = False) -> str:
    """What the run would do with ``out``: made fresh, resumed from a checkpoint, or left as completed."""
    from seafl_dist.runtime.checkpoint import plan
    decided = plan(cfg, out, explicit=explicit, overwrite=overwrite)  # reads the run dir and the checkpoint header only
    if decided.action == "resume":
        return f"resume from {decided.checkpoint.name} (after aggregation {int(decided.checkpoint.stem[11:])})"
    if decided.action == "completed":
        return "holds a completed run of this config; the run would do nothing"
    return "fresh (made when the run starts)" if not Path(out).exists() else "fresh (the run starts over in it)"
