"""Record-level DP-SGD in a job's local steps (``train.dp_sgd``; Abadi et al., CCS 2016, Algorithm 1), with Opacus.

    dp = JobDP(cfg.train.dp_sgd, seed=noise_seed, device=device, expected_batch_size=min(B, n_k))
    dp.attach(module)                       # Opacus's per-sample gradient hooks on the job's own module
    optimizer = dp.wrap(module.configure_optimizers(), after=prox.add)   # its own optimizer inside a DPOptimizer
    ... every step: zero_grad, training_step, backward (per-sample grads), optimizer.step() ...
    dp.detach(module)                       # hooks and Opacus's attributes off: the module is as it was

One step of a batch b (Poisson-sampled by the job's :class:`~seafl_dist.train.plan.StepPlan`, ``poisson=True``):

    g = ( Σ_{i ∈ b} g_i · min(1, C / (‖g_i‖ + 1e-6))  +  N(0, (σ C)² I) ) / B_exp,   B_exp = q · n_k = min(B, n_k)

with g_i the gradient of sample i's own loss over every trainable parameter (Opacus rescales the batch's mean loss
by |b|, so a module's ``training_step`` returns the mean over its batch, as Lightning's modules do), the noise drawn
parameter by parameter in the optimizer's order from the job's own ``torch.Generator`` (seeded from the devices' secret
key, privacy/device_key.py, as the Poisson batches are: never ``run.seed``, never torch's global generator), then the module's own optimizer steps on g (``DPOptimizer`` wraps any
``torch.optim.Optimizer``; its ``param_groups`` are the wrapped one's, so schedulers step as before). FedProx's term
(``train.prox_mu``) is added after the noise (Opacus's step hook): it reads no data, so it costs no privacy. An empty
batch is a step of noise only, as Opacus's own ``DPDataLoader`` makes it; a step whose ``training_step`` returned None
(no gradient at all) is skipped, as Lightning skips it, and releases nothing.

This module owns, and is the only one to train with, Opacus (only with ``train.dp_sgd.enabled``: :func:`require_opacus`
refuses a missing one in one line naming the extra; its accountants are privacy/record_accountant.py's): the hooks (:class:`JobDP`), the check of a model Opacus cannot
train (:func:`blocker`, naming the layer) and the fix its ``ModuleValidator`` proposes (:func:`fix_model`), and what a
job says to an accountant (:class:`DPSteps`, :func:`job_steps`: how many DP steps at what q and σ, from the schedule
alone, so rank 0 can compose a device's jobs).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from seafl_dist.settings.errors import ConfigError
from seafl_dist.train.optim_config import ModuleContractError
from seafl_dist.train.plan import epoch_bounds

EXTRA = "dp"  # pyproject.toml's extra that installs Opacus


def require_opacus():
    """The opacus package, or one line naming the extra that installs it."""
    try:
        import opacus
    except ImportError:
        raise ConfigError("config key 'train.dp_sgd.enabled' has value True; allowed: false unless Opacus is "
                          f"installed: pip install \"seafl_dist[{EXTRA}]\" (or pip install \"opacus>=1.6,<1.7\")") from None
    return opacus


@dataclass(frozen=True)
class DPSteps:
    """What one job's DP-SGD is, for an accountant: ``steps`` Poisson-sampled steps at rate ``sample_rate`` with
    noise multiplier ``noise_multiplier`` (a skipped step counted too: an upper bound)."""

    steps: int
    sample_rate: float
    noise_multiplier: float


def job_steps(n: int, batch_size: int, epochs: int, noise_multiplier: float, max_steps: int | None = None) -> DPSteps:
    """The DP steps of a job of ``epochs`` epochs on a shard of ``n`` samples (a step-counted job: at most
    ``max_steps``): the plain plan's step count (train/plan.py), at q = min(1, B / n). A pure function of the
    schedule, as the StepPlan's own count is."""
    whole = epochs * len(epoch_bounds(n, batch_size))
    steps = whole if max_steps is None else min(whole, max_steps)
    return DPSteps(steps, min(1.0, batch_size / max(n, 1)), float(noise_multiplier))


# ---- the model: what Opacus cannot train, and its fix --------------------------------------------------------------
def blocker(model) -> str | None:
    """Why Opacus cannot train ``model`` (the first such layer, by name and type), or None."""
    from opacus.utils.module_utils import trainable_modules
    from opacus.validators import ModuleValidator
    for name, sub in trainable_modules(model):
        check = ModuleValidator.VALIDATORS.get(type(sub))
        errors = check(sub) if check is not None else []
        if errors:
            why = str(errors[0]).split(". ")[0]
            return f"its layer {name or '(the model)'!r} ({type(sub).__name__}) cannot be trained by Opacus: {why}"
        if next(iter(sub.buffers(recurse=False)), None) is not None:
            return (f"its layer {name or '(the model)'!r} ({type(sub).__name__}) has trainable parameters and buffers, "
                    f"which Opacus's per-sample gradients do not cover")
    return None


def fixable(model) -> bool:
    """Whether Opacus's ``ModuleValidator`` has a fix for some layer of ``model`` (BatchNorm, LSTM, ...)."""
    from opacus.utils.module_utils import trainable_modules
    from opacus.validators import ModuleValidator
    return any(type(sub) in ModuleValidator.FIXERS for _, sub in trainable_modules(model))


def fix_model(model) -> list[str]:
    """Replace, in place, each layer of ``model`` that Opacus's ``ModuleValidator.fix`` would replace (BatchNorm by
    GroupNorm(gcd(32, C), C), LSTM by its DPLSTM): its fixers, without its clone (which pickles the whole module). Returns
    ``"name: Old -> New"`` for each layer replaced, in the model's order."""
    from opacus.utils.module_utils import get_submodule, trainable_modules
    from opacus.validators import ModuleValidator
    replaced = []
    for name in [n for n, _ in trainable_modules(model)]:
        sub = get_submodule(model, name)
        fixer = ModuleValidator.FIXERS.get(type(sub))
        if fixer is None or not name:
            continue
        new = fixer(sub).to(next(sub.parameters()).device)
        ModuleValidator._replace_sub_module(root=model, sub_module_name=name, new_sub_module=new)
        replaced.append(f"{name}: {type(sub).__name__} -> {type(new).__name__}({_shape(new)})")
    return replaced


def _shape(m) -> str:
    if isinstance(m, torch.nn.GroupNorm):
        return f"{m.num_groups}, {m.num_channels}"
    return ""


def fix_line(replaced: list[str]) -> str:
    """The start-up line of a run whose model was fixed (train.dp_sgd.fix_modules)."""
    return (f"seafl: train.dp_sgd.fix_modules: Opacus's ModuleValidator.fix replaced {len(replaced)} layer"
            f"{'s' if len(replaced) != 1 else ''} of the model in every copy of it (w_0, the server's, model.pt): "
            + "; ".join(replaced))


def _quiet() -> None:
    """Two torch warnings every DP job would print, neither a fault: a full backward hook on a first layer whose input
    needs no gradient (Opacus reads the layer's output gradient, which is there), and a noised gradient laid out
    contiguously for a channels-last weight (the step reads it either way). Set at every job (a filter set again
    replaces itself), as a caller's ``catch_warnings`` may have reset them."""
    warnings.filterwarnings("ignore", message=r"Full backward hook is firing when gradients are computed with "
                                              r"respect to module outputs since no inputs require gradients")
    warnings.filterwarnings("ignore", message=r"grad and param do not obey the gradient layout contract")


# ---- one job ------------------------------------------------------------------------------------------------------
class JobDP:
    """One job's DP-SGD: Opacus's hooks on its module and its optimizer wrapped (module doc)."""

    def __init__(self, dp, *, seed: int, device, expected_batch_size: int):
        self.dp, self.device, self.expected = dp, torch.device(device), int(expected_batch_size)
        self.generator = torch.Generator(device=self.device).manual_seed(int(seed))
        self.hooks, self._inplace = None, []

    def attach(self, module) -> "JobDP":
        """Per-sample gradient hooks on ``module`` (in place: the module's own forward and ``training_step`` run as
        they are), and its in-place activations off for the job (a full backward hook forbids them; same values)."""
        from opacus.grad_sample import GradSampleHooks
        _quiet()
        self._inplace = [m for m in module.modules() if getattr(m, "inplace", False) is True]
        for m in self._inplace:
            m.inplace = False
        self.hooks = GradSampleHooks(module, loss_reduction="mean", strict=True,
                                     force_functorch=self.dp.grad_sample_mode == "functorch")
        return self

    def wrap(self, optimizer, after=None):
        """``optimizer`` (the module's own) inside a DPOptimizer clipping to C and noising with σC from the job's
        generator; ``after()`` (FedProx's term) runs on the noised gradients, before the step."""
        from opacus.optimizers import DPOptimizer

        class _JobOptimizer(DPOptimizer):
            def pre_step(self, closure=None):
                samples = [p.grad_sample for p in self.params]
                if samples and all(s is None for s in samples):  # training_step returned None: no step, no release
                    return False
                missing = [i for i, s in enumerate(samples) if s is None]
                if missing:
                    raise ModuleContractError(f"train.dp_sgd: parameter {missing[0]} of the optimizer got no "
                                              f"per-sample gradient in this step (a parameter the forward did not "
                                              f"use, or a layer Opacus's hooks do not see); freeze it "
                                              f"(requires_grad=False) or leave it out of configure_optimizers")
                return super().pre_step(closure)

        if isinstance(optimizer, DPOptimizer):
            return optimizer
        wrapped = _JobOptimizer(optimizer, noise_multiplier=self.dp.noise_multiplier, max_grad_norm=self.dp.clip,
                                expected_batch_size=self.expected, loss_reduction="mean", generator=self.generator)
        if after is not None:
            wrapped.attach_step_hook(lambda _opt: after())
        return wrapped

    def detach(self) -> None:
        """Hooks and Opacus's attributes off the module, its in-place activations back."""
        if self.hooks is not None:
            module = self.hooks._module
            self.hooks.cleanup()
            for p in module.parameters():
                for attr in ("summed_grad", "grad_sample"):
                    if hasattr(p, attr):
                        delattr(p, attr)
            self.hooks = None
        for m in self._inplace:
            m.inplace = True
        self._inplace = []


def summary(dp, replaced: list[str] | None, epsilon: dict | None = None) -> dict:
    """summary.json's ``dp_sgd`` entry: the mechanism's constants (σ as trained: calibrated under ``target_epsilon``,
    which is beside it), the layers the fix replaced and, given, each device's ε (``epsilon``:
    privacy/record_accountant.py's summary); {} when off."""
    if not dp.enabled:
        return {}
    return {"dp_sgd": {"clip": dp.clip, "noise_multiplier": dp.noise_multiplier, "sampling": "poisson",
                       "grad_sample_mode": dp.grad_sample_mode, "replaced": list(replaced or []),
                       **({"target_epsilon": dp.target_epsilon} if dp.target_epsilon is not None else {}),
                       **({"epsilon": epsilon} if epsilon else {})}}
