"""Names as a reader says them: arms ("SEAFL, K = 10, β = 10", "FedAsync, β = ∞"), figure titles
("MNIST, LeNet-5: K varies"), and each arm's style (the algorithm sets the hue, a varying value
the shade, from Okabe & Ito's colour-blind-safe palette, with a line style and a marker of its own for print).

An arm's label is built from the keys that vary between the arms shown, in reader's symbols
(:data:`SYMBOLS`), leaving out the budget (``run.*``), the seed and the keys an algorithm does not
read or fixes itself (FedAvg's K and β, FedAsync's K): "FedAvg", not "FedAvg, K = 20, β = 0".
Where two arms would then share a label, the keys that tell them apart are added back.
"""
from __future__ import annotations

import json

ALGORITHMS = {"seafl": "SEAFL", "seafl2": "SEAFL²", "fedbuff": "FedBuff", "fedasync": "FedAsync", "fedavg": "FedAvg",
              "ca2fl": "CA²FL", "fadas": "FADAS", "asyncsgd": "async SGD", "port": "Port",
              "fedstaleweight": "FedStaleWeight", "fedcompass": "FedCompass", "scaffold": "SCAFFOLD"}
DATASETS = {"digits": "digits", "mnist": "MNIST", "emnist": "EMNIST", "cifar10": "CIFAR-10", "cinic10": "CINIC-10",
            "femnist": "FEMNIST"}
MODELS = {"lenet5": "LeNet-5", "resnet18": "ResNet-18", "vgg16": "VGG-16"}
SYMBOLS = {"algorithm.name": "algorithm", "algorithm.buffer_size": "K", "algorithm.staleness_limit": "β",
           "algorithm.alpha": "α", "algorithm.mu": "μ", "algorithm.theta": "ϑ", "algorithm.server_lr": "η_g",
           "algorithm.mixing": "α_mix", "devices.num": "N", "devices.concurrency": "M", "train.epochs": "E",
           "train.lr": "lr", "data.concentration": "concentration", "devices.dropout": "dropout",
           "devices.availability_scale": "availability scale", "devices.profile": "profile",
           "algorithm.update_norm_factor": "guard", "algorithm.server_opt.name": "server optimizer",
           "algorithm.server_opt.lr": "η_s", "algorithm.server_opt.beta1": "β₁", "algorithm.server_opt.beta2": "β₂",
           "algorithm.server_opt.tau": "τ", "algorithm.server_opt.pseudo_gradient": "pseudo-gradient",
           "algorithm.server_opt.delay_adaptive": "delay-adaptive η", "algorithm.server_opt.delay_threshold": "τ_C",
           "algorithm.server_opt.delay_c": "c", "algorithm.asyncsgd.lr": "η", "algorithm.asyncsgd.tau_c": "τ_C",
           "algorithm.asyncsgd.c": "c",
           "compression.codec": "codec", "compression.levels": "QSGD s", "compression.bucket": "bucket",
           "compression.fraction": "top-k", "compression.error_feedback": "error feedback",
           "algorithm.port.b": "b", "algorithm.port.lag": "L",
           "algorithm.fedstaleweight.offset": "c"}
CODEC_KEYS = {"compression.levels": ("qsgd",), "compression.bucket": ("qsgd",),  # the codecs that read each key
              "compression.fraction": ("topk",)}  # (error_feedback: every codec but none)
INFINITE_WHEN_NULL = ("algorithm.staleness_limit", "run.max_time", "run.max_aggregations")
ZERO_WHEN_NULL = ("devices.dropout",)  # no dropout
OFF_WHEN_NULL = ("algorithm.update_norm_factor",)  # no guard
ON_OFF = ("compression.error_feedback",)  # a switch reads "on" / "off", not "True" / "False"
_SEAFL = ("buffer_size", "staleness_limit", "alpha", "mu", "theta", "similarity", "similarity_over", "partial",
          "update_norm_factor", "server_opt")
USES = {  # the algorithm.* keys (or sections) each built-in rule reads and does not fix itself (own rule: all)
    "seafl": _SEAFL, "seafl2": _SEAFL, "fedbuff": ("buffer_size", "staleness_limit", "server_lr", "staleness_scaling",
                                                   "partial", "update_norm_factor", "server_opt"),
    "fedasync": ("staleness_limit", "mixing", "staleness_fn", "poly_a", "hinge_a", "hinge_b", "partial",
                 "update_norm_factor", "server_opt"),
    "fedavg": ("update_norm_factor", "server_opt"),  # the update guard runs before every rule, the optimizer after
    "ca2fl": ("buffer_size", "staleness_limit", "server_lr", "partial", "update_norm_factor", "server_opt"),
    "fadas": ("buffer_size", "staleness_limit", "staleness_scaling", "partial", "update_norm_factor", "server_opt"),
    "asyncsgd": ("staleness_limit", "partial", "update_norm_factor", "asyncsgd"),
    "port": ("buffer_size", "staleness_limit", "port", "partial", "update_norm_factor", "server_opt"),
    "fedstaleweight": ("buffer_size", "staleness_limit", "fedstaleweight", "partial", "update_norm_factor",
                       "server_opt"),
    "fedcompass": ("fedcompass", "staleness_fn", "poly_a", "hinge_a", "hinge_b", "update_norm_factor", "server_opt"),
    "scaffold": ("buffer_size", "staleness_limit", "server_lr", "staleness_scaling", "partial", "update_norm_factor",
                 "server_opt")}
NOT_ARMS = ("name", "run.", "logging.", "runtime.")  # budget, bookkeeping and execution: not what an arm is
# Okabe & Ito's colour-blind-safe palette: one colour per algorithm, the spare ones (a rule of your own) in an order
# that keeps the next arm far from the last (reddish purple beside FedBuff's orange, not its neighbour vermillion)
OKABE_ITO = {"blue": "#0072B2", "orange": "#E69F00", "bluish green": "#009E73", "sky blue": "#56B4E9",
             "reddish purple": "#CC79A7", "vermillion": "#D55E00", "yellow": "#F0E442", "black": "#000000"}
HUES = {"seafl": OKABE_ITO["blue"], "seafl2": OKABE_ITO["sky blue"], "fedbuff": OKABE_ITO["orange"],
        "fedasync": OKABE_ITO["bluish green"], "fedavg": OKABE_ITO["black"]}
SPARE_HUES = tuple(OKABE_ITO[c] for c in ("reddish purple", "vermillion", "yellow"))
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)))
MARKERS = ("o", "s", "^", "D", "v", "P", "h", "*")  # not "X": the time-to-target figure's "never"


def algorithm_name(name) -> str:
    return ALGORITHMS.get(str(name), str(name))


def value_text(key: str, value) -> str:
    """A value as a label prints it: ``None`` of a limit is ∞, floats short, a profile by its file name."""
    if value is None:
        return "∞" if key in INFINITE_WHEN_NULL else "0" if key in ZERO_WHEN_NULL else \
            "off" if key in OFF_WHEN_NULL else "none"
    if key in ON_OFF:
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if key == "devices.profile":
        return str(value).replace("\\", "/").rsplit("/", 1)[-1]
    return str(value)


def _is_arm_key(key: str) -> bool:
    return not any(key == n or (n.endswith(".") and key.startswith(n)) for n in NOT_ARMS)


def _used(config: dict, key: str) -> bool:
    if key == "algorithm.server_opt.name" and config.get("algorithm.name") == "fadas":
        return False  # FADAS's preset fixes amsgrad
    if key.startswith("algorithm.server_opt.") and key != "algorithm.server_opt.name" and \
            config.get("algorithm.server_opt.name", "none") == "none":
        return False  # no server optimizer: its lr, β and τ are read by nothing
    if key.startswith("compression.") and key != "compression.codec":
        codec = config.get("compression.codec") or "none"  # the section is left out of a run's config at its defaults
        return codec != "none" and codec in CODEC_KEYS.get(key, (codec,))  # QSGD's s is no top-k arm's
    uses = USES.get(str(config.get("algorithm.name")))
    return uses is None or not key.startswith("algorithm.") or key == "algorithm.name" or key.split(".")[1] in uses


def varying_keys(configs: list[dict], *, arms_only: bool = True) -> list[str]:
    """Keys whose value differs between ``configs`` (dotted key → value), the algorithm first; with
    ``arms_only``, the arm keys that differ between the configs whose algorithm reads them."""
    keys = dict.fromkeys(k for c in configs for k in c if k not in ("name", "run.seed") and (_is_arm_key(k) or not arms_only))
    varying = [k for k in keys if len({json.dumps(c.get(k), sort_keys=True, default=str) for c in configs
                                       if _used(c, k) or not arms_only}) > 1]
    return sorted(varying, key=lambda k: k != "algorithm.name")


def _usual(configs: list[dict], keys: list[str]) -> dict:
    """{(algorithm, key): value} where a key varies between an algorithm's three or more arms and one value
    is held by more than half of them: the study's shared setting, left out of those arms' labels
    ("SEAFL, β = 1" beside "SEAFL")."""
    usual = {}
    for algo in {str(c.get("algorithm.name")) for c in configs}:
        mine = [c for c in configs if str(c.get("algorithm.name")) == algo]
        for k in keys:
            values = [json.dumps(c.get(k), sort_keys=True, default=str) for c in mine if _used(c, k)]
            top = max(set(values), key=values.count, default=None)
            if len(values) >= 3 and len(set(values)) > 1 and values.count(top) * 2 > len(values):
                usual[algo, k] = top
    return usual


def _part(config: dict, key: str) -> str:
    return f"{SYMBOLS.get(key, key.rsplit('.', 1)[-1])} = {value_text(key, config.get(key))}"


def _label(config: dict, keys: list[str], usual: dict) -> str:
    algo = str(config.get("algorithm.name"))
    parts = [algorithm_name(algo)] if "algorithm.name" in keys else []
    parts += [_part(config, k) for k in keys if k != "algorithm.name" and _used(config, k) and
              usual.get((algo, k)) != json.dumps(config.get(k), sort_keys=True, default=str)]
    return ", ".join(parts)


def reader_labels(configs: list[dict]) -> list[str]:
    """One label per config (an arm, or a grid point), from the keys that vary between them."""
    keys = varying_keys(configs)
    labels = [_label(c, keys, _usual(configs, keys)) for c in configs]
    if len(set(labels)) < len(labels):  # spell out every varying key: the usual values, the budget, keys ignored
        every = varying_keys(configs, arms_only=False)
        labels = [lab if labels.count(lab) == 1 else
                  ", ".join([p for p in [_label(c, every, {})] if p] + [_part(c, k) for k in every if not _used(c, k)])
                  for c, lab in zip(configs, labels)]
    return [lab or algorithm_name(c.get("algorithm.name", "run")) for c, lab in zip(configs, labels)]


def _algorithm_defaults(algo: str) -> dict | None:
    """A built-in algorithm's resolved defaults (dotted key → value); None for a rule of one's own."""
    if algo not in ALGORITHMS:
        return None
    if algo not in _DEFAULTS:
        from seafl_dist.report.runs import flatten
        from seafl_dist.settings import config_from_dict
        tree = {"algorithm": {"name": algo}}
        if algo == "fedcompass":  # cross-silo: every device in flight is its default (settings/core.py refuses less)
            tree["devices"] = {"concurrency": config_from_dict({}).devices.num}
        _DEFAULTS[algo] = flatten(config_from_dict(tree).to_dict())
    return _DEFAULTS[algo]


_DEFAULTS: dict = {}


def _each_at_its_default(configs: list[dict], key: str) -> bool:
    """Every arm holds its own algorithm's default for ``key`` (β: 10 for SEAFL, ∞ for FedBuff)."""
    if key == "algorithm.name":  # what each default depends on
        return False
    defaults = [_algorithm_defaults(str(c.get("algorithm.name"))) for c in configs]
    return all(d is not None and key in d and d[key] == c.get(key) for c, d in zip(configs, defaults))


def what_varies(configs: list[dict], swept=()) -> str:
    """"K and β vary": the keys that differ between the arms, except one that no sweep set (``swept``: the
    keys the sweeps' grid points set) and that every arm holds at its own algorithm's default (a sweep
    over the algorithm alone does not vary β, though SEAFL's 10 differs from FedBuff's ∞)."""
    keys = [k for k in varying_keys(configs) if k in swept or not _each_at_its_default(configs, k)]
    names = [SYMBOLS.get(k, k.rsplit(".", 1)[-1]) for k in keys]
    if not names:
        return ""
    return (names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]) + \
        (" varies" if len(names) == 1 else " vary")


def _dropout(value) -> str | None:
    return f"dropout {float(value):g}" if value not in (None, 0, 0.0) else None


def _profile(value) -> str | None:
    return f"device profile {value_text('devices.profile', value)}" if value else None


CONDITIONS = (("devices.dropout", _dropout), ("devices.profile", _profile))  # said in a title when shared


def figure_title(configs: list[dict], seeds: list[int], swept=()) -> str:
    """"MNIST, LeNet-5: K varies, 3 seeds each" from the arms' configs and their seed counts; a device
    condition every arm shares (a dropout, a device profile) joins the setting: "MNIST, LeNet-5, dropout 0.3"."""
    setting = []
    for key, names in (("data.name", DATASETS), ("model.name", MODELS)):
        values = {str(c.get(key)) for c in configs if c.get(key) is not None}
        if len(values) == 1:
            setting.append(names.get(next(iter(values)), next(iter(values))))
    for key, say in CONDITIONS:  # a device condition all arms share is part of the setting too
        values = {json.dumps(c.get(key)) for c in configs}
        if len(values) == 1 and (words := say(configs[0].get(key))):
            setting.append(words)
    head = ", ".join(setting)
    algos = {str(c.get("algorithm.name")) for c in configs if "algorithm.name" in c}
    if len(algos) == 1:
        head = f"{algorithm_name(algos.pop())} on {head}" if head else algorithm_name(algos.pop())
    n = sorted(set(seeds))
    count = "" if n in ([], [1]) else f"{n[0]} seeds each" if len(n) == 1 else f"{n[0]}–{n[-1]} seeds each"
    tail = ", ".join(p for p in (what_varies(configs, swept), count) if p)
    return f"{head}: {tail}" if head and tail else head or tail


def shade(color: str, amount: float) -> tuple:
    """``color`` mixed with white by ``amount`` > 0, with black by −``amount`` < 0 (its hue kept): RGB."""
    from matplotlib.colors import to_rgb
    mix = (1.0, 1.0, 1.0) if amount > 0 else (0.0, 0.0, 0.0)
    return tuple(c + abs(amount) * (m - c) for c, m in zip(to_rgb(color), mix))


def styles(configs: list[dict]) -> list[dict]:
    """Matplotlib keyword sets, one per arm: the colour by algorithm (:data:`OKABE_ITO`), lighter to darker and a
    line style by rank within it, the marker by rank among all arms."""
    algos = list(dict.fromkeys(str(c.get("algorithm.name")) for c in configs))
    spare = iter(SPARE_HUES * (1 + len(algos)))
    hue = {a: HUES.get(a) or next(spare) for a in algos}
    out, seen = [], {a: 0 for a in algos}
    for rank, c in enumerate(configs):
        a = str(c.get("algorithm.name"))
        n, i = sum(str(d.get("algorithm.name")) == a for d in configs), seen[a]
        seen[a] += 1
        out.append({"color": shade(hue[a], 0.0 if n == 1 else 0.45 - 0.75 * i / (n - 1)),
                    "linestyle": LINESTYLES[i % len(LINESTYLES)],
                    "marker": MARKERS[rank % len(MARKERS)]})  # no two of up to 8 arms share one
    return out
