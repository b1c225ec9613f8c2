"""The state vocabulary: every signal, its states, and what each state means to every reader.

One registry, torch-free, used by the writers (detectors), the gates (`--fail-on`, the
summary line, `dbg.failures()`), `explain` (severity, wording, default fix) and the report
(timeline letter, colour). A new state is one `State` in one `Signal`; a new detector
registers its signal with `register`. `tests/test_states.py` checks that every state is
complete and that every reader knows it.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import InputError


@dataclass(frozen=True)
class State:
    """One state of one signal.

    name: as written in the trace (`to`, `from`); failure: counted by `--fail-on`, the summary
    and `dbg.failures()`; severity: how much `explain` believes a failure of this kind matters
    (0..1); letter: its timeline cell; style: its rich colour; verb: how a sentence says the
    layer entered it ("died"); fix: what to try when no cause rule knows better; prominence:
    which state a timeline cell shows when a layer held several in its steps, the highest
    (None: its severity)."""
    name: str
    failure: bool
    severity: float = 0.0
    letter: str = "."
    style: str = "green dim"
    verb: str = ""
    fix: str = ""
    prominence: float | None = None

    @property
    def shown_before(self) -> float:
        """The key `worst_first` sorts by: prominence, or else severity."""
        return self.severity if self.prominence is None else self.prominence


@dataclass(frozen=True)
class Signal:
    """A kind of measurement of a layer (or pseudo-layer), with its states; `ok` is the
    state of a layer in good health on this signal; `short`: its name in the timeline's row
    labels (empty: the name itself)."""
    name: str
    ok: str
    states: tuple
    short: str = ""

    @property
    def label(self) -> str:
        return self.short or self.name

    def state(self, name: str) -> State | None:
        return next((s for s in self.states if s.name == name), None)


def _ok(name: str) -> State:
    return State(name, failure=False)


_NONFINITE_FIX = ("Find the operation that overflows (log/sqrt/division of values reaching 0, "
                  "float16 overflow): add an eps or clamp, use stable losses (log_softmax, "
                  "BCEWithLogitsLoss), and clip gradients.")

ACTIVATION = Signal("activation", "normal", (
    _ok("normal"),
    # Prominence (here and on `exploding`): a timeline cell that held a NaN or an explosion
    # shows it over a death, the louder symptom; how much explain believes each is severity.
    State("dead", True, 1.0, "D", "bold red", "died",
          "Switch to LeakyReLU/GELU, lower the learning rate, and check the bias of the layer "
          "before it.", prominence=0.98),
    State("saturated", True, 0.85, "S", "cyan", "saturated",
          "Normalise the input of this layer (BatchNorm/LayerNorm before it) or lower the "
          "learning rate."),
    # A sudden shift is a warning sign, not a failure: it gates nothing (schema 2).
    State("anomalous", False, 0.6, "A", "yellow", "output shifted abruptly",
          "Look at the batches around this step (outliers, a changed data source); if it "
          "recurs, lower the learning rate."),
    State("nonfinite", True, 1.0, "N", "bold magenta", "output NaN/inf", _NONFINITE_FIX),
), short="act")

GRADIENT = Signal("gradient", "healthy", (
    _ok("healthy"),
    State("vanishing", True, 0.9, "V", "bold blue", "vanished",
          "Add normalisation or residual paths, and check that no detach() or no_grad cuts "
          "the graph before this layer."),
    State("exploding", True, 0.95, "E", "bold yellow", "exploded",
          "Clip gradients (torch.nn.utils.clip_grad_norm_) and lower the learning rate; check "
          "the scale of the loss and the targets.", prominence=0.99),
    State("nonfinite", True, 1.0, "N", "bold magenta", "turned NaN/inf", _NONFINITE_FIX),
), short="grad")

# Schema 2: learning dynamics and the training loop.
UPDATE = Signal("update", "normal", (
    _ok("normal"),
    State("too_large", True, 0.9, "L", "bold red", "took updates too large for its weights",
          "Lower the learning rate (updates near 1e-3 of the weights are the usual rule) or "
          "warm it up; clip gradients."),
    State("frozen", True, 0.8, "F", "bold cyan", "never changed although it gets gradients",
          "Put the layer's parameters in the optimizer (build it after the model is final) "
          "and check their learning rate; set requires_grad=False if it is meant to stay fixed."),
    State("detached", True, 0.85, "X", "bold cyan", "got no gradient although the layers after "
          "it did", "Find the detach(), .data, .item() or torch.no_grad() between this layer and "
          "the loss, and remove it; set requires_grad=False if the layer is meant to stay fixed."),
    State("symmetric", True, 0.9, "Y", "bold red", "has units that are copies of one another",
          "Initialise the weights randomly (nn.init.kaiming_uniform_ or xavier_uniform_, the "
          "default of nn.Linear and nn.Conv2d) instead of zeros or a constant: units that start "
          "equal get equal gradients and never differ. A zero-initialised layer is safe only "
          "where the layers around it are random."),
), short="upd")

LOSS = Signal("loss", "normal", (
    _ok("normal"),
    State("spiking", True, 0.75, "P", "bold yellow", "spiked",
          "Lower the learning rate or clip gradients; look at the batches of the spike."),
    State("diverging", True, 0.9, "G", "bold red", "diverged",
          "Lower the learning rate (or warm it up), and clip gradients."),
    State("stalled", True, 0.8, "T", "yellow", "stalled near its starting level",
          "Check that every trainable layer is in the optimizer with a learning rate above 0, "
          "and that the loss, the targets and the output layer match; then raise the learning "
          "rate."),
    State("nonfinite", True, 1.0, "N", "bold magenta", "turned NaN/inf", _NONFINITE_FIX),
))

LOOP = Signal("loop", "normal", (
    _ok("normal"),
    State("no_zero_grad", True, 0.95, "Z", "bold red", "never reset the gradients",
          "Call optimizer.zero_grad() once per optimizer step (before backward, or after "
          "optimizer.step()); with gradient accumulation, once per accumulation cycle."),
    State("eval_mode", True, 0.85, "M", "bold yellow", "trained in eval() mode",
          "Call model.train() after evaluation (Dropout and BatchNorm behave differently in "
          "eval mode)."),
    State("no_backward", True, 0.95, "B", "bold red", "stepped the optimizer without "
          "backward()", "Call loss.backward() before optimizer.step() in every step (the "
          "gradients are what the optimizer applies)."),
    State("no_gradient", True, 0.95, "J", "bold red", "stepped the optimizer on no "
          "gradient from backward()", "Compute the loss from the model's output with gradients "
          "on: no torch.no_grad(), .detach(), .item(), .numpy() or torch.tensor(...) on its way "
          "(`loss.requires_grad = True` silences the error and trains nothing)."),
    State("no_step", True, 0.95, "H", "bold red", "never stepped the optimizer",
          "Call optimizer.step() after loss.backward() in every step (a learning-rate "
          "scheduler's step() does not update the weights; the optimizer's does)."),
))

# The model's output against the loss and the targets (the pseudo-layer (output)).
OUTPUT = Signal("output", "normal", (
    _ok("normal"),
    State("constant", True, 0.95, "C", "bold red", "is constant (the same for every input)",
          "Give the output layer as many units as the softmax normalises over (2 or more), or "
          "use one unit with a sigmoid (BCELoss) or none (BCEWithLogitsLoss) for two classes."),
    State("mismatched", True, 0.9, "W", "bold red", "does not match its loss",
          "Feed the loss what it expects: logits into CrossEntropyLoss and BCEWithLogitsLoss, "
          "log_softmax into NLLLoss, outputs of the targets' shape into regression losses."),
    State("unreachable", True, 0.9, "U", "bold red", "cannot reach its targets",
          "Use a linear output for regression (no sigmoid/tanh/softmax) and scale the targets; "
          "give BCE losses targets in [0, 1]."),
    State("one_class", True, 0.9, "O", "bold yellow", "is trained on one class only",
          "Check the labels after preprocessing (y / 255 or a cast applied to the labels turns "
          "them all into class 0) and shuffle the data."),
), short="out")

# Normalisation health (BatchNorm's batch against its running statistics; norm gains).
NORM = Signal("norm", "normal", (
    _ok("normal"),
    State("drift", True, 0.85, "R", "bold yellow", "drifted from its running statistics",
          "Shuffle the training data (DataLoader(shuffle=True)) so that each batch is a fair "
          "sample of it, and use larger batches; with batches that must stay small, use "
          "GroupNorm or LayerNorm instead of BatchNorm."),
    State("collapsed", True, 0.8, "K", "bold cyan", "collapsed its gain toward zero",
          "Exclude the normalisation gains and biases from weight decay (a parameter group "
          "with weight_decay=0) and lower the learning rate."),
    State("stale", True, 0.8, "I", "bold magenta", "kept running statistics that never "
          "follow the batches (momentum 0)",
          "Give BatchNorm a momentum above 0 (PyTorch's default is 0.1; a Keras or "
          "TensorFlow momentum of 0.99 is PyTorch's 0.01): at 0 its running mean and variance "
          "keep their initial 0 and 1, and eval() normalises every batch with them."),
))

# Residual health: a block's branch against its skip, the stream along the depth. Letters,
# colours and severities are those of the same names above (one name, one cell and weight).
RESIDUAL = Signal("residual", "normal", (
    _ok("normal"),
    State("exploding", True, 0.95, "E", "bold yellow", "grew the residual stream block after "
          "block", "Scale each residual branch down at init (zero-init its last layer, or "
          "multiply it by 1/sqrt(number of blocks)) or put a normalisation in each branch "
          "(pre-norm: x + f(norm(x))).", prominence=0.99),
    State("collapsed", True, 0.8, "K", "bold cyan", "stopped contributing (its branch adds "
          "nothing to the skip)", "Check that the branch's layers are in the optimizer and "
          "learn (requires_grad, a learning rate above 0), and that the branch is not scaled "
          "to zero or dead inside (all-zero ReLUs)."),
), short="res")

# torch.amp.GradScaler's loss scale (the pseudo-layer (scaler)). A skipped step now and then,
# the scale recovering, is how the scaler works; calibration at the start is never a finding.
SCALER = Signal("scaler", "normal", (
    _ok("normal"),
    State("skipping", True, 0.85, "Q", "bold yellow", "skipped most optimizer steps",
          "Find what overflows float16 in the backward pass (the layer named, a loss summed "
          "instead of averaged, an unscaled input or target); or train in bfloat16 "
          "(torch.autocast(dtype=torch.bfloat16), no GradScaler), whose range is float32's."),
    State("collapsed", True, 0.8, "K", "bold cyan", "collapsed its loss scale",
          "The gradients overflow float16 even unscaled: a loss summed over many terms "
          "(reduction=\"sum\": take the mean), a value that overflows float16 in the forward "
          "pass, or a model that diverges. Train in bfloat16 (float32's range), or keep the "
          "part that overflows in float32 (torch.autocast(..., enabled=False) around it)."),
), short="scl")

SIGNALS: dict = {s.name: s for s in (ACTIVATION, GRADIENT, UPDATE, LOSS, LOOP, OUTPUT, NORM,
                                     RESIDUAL, SCALER)}


def register(signal: Signal) -> Signal:
    """Add a detector's signal (or replace one of the same name); returns it."""
    SIGNALS[signal.name] = signal
    return signal


def parse_signals(text, *, what: str = "--detectors") -> tuple | None:
    """'activation,gradient' (or a list of names) -> ('activation', 'gradient'): the signals
    whose detectors run; None, '' or 'all' -> None (every detector)."""
    if text is not None and not isinstance(text, str):
        text = ",".join(text)
    items = [s.strip().lower() for s in (text or "").split(",") if s.strip()]
    if not items or items == ["all"]:
        return None
    for name in items:
        if name not in SIGNALS:     # read now: a detector may have registered since import
            raise InputError(f"{what}: unknown signal {name!r} (expected one of: "
                             f"{', '.join(SIGNALS)}, or all)")
    return tuple(dict.fromkeys(items))


def lookup(signal: str, name: str) -> State | None:
    """The state `name` of `signal`, or None for one this version does not know."""
    s = SIGNALS.get(signal)
    return s.state(name) if s is not None else None


def named(name: str) -> State | None:
    """The first state called `name` in any signal (severity, letter and colour agree across
    signals for a shared name such as `nonfinite`)."""
    return next((st for s in SIGNALS.values() for st in s.states if st.name == name), None)


def state_names() -> tuple:
    """Every state name of every signal, in registry order, each once."""
    return tuple(dict.fromkeys(st.name for s in SIGNALS.values() for st in s.states))


def ok_names() -> tuple:
    """The good-health state of each signal (`normal`, `healthy`)."""
    return tuple(dict.fromkeys(s.ok for s in SIGNALS.values()))


def failure_names() -> tuple:
    """The states that fail a run: what `--fail-on`, the summary and `dbg.failures()` count."""
    return tuple(dict.fromkeys(st.name for s in SIGNALS.values() for st in s.states
                               if st.failure))


def problem_names() -> tuple:
    """Every state other than good health: failures and warning signs (anomalous)."""
    ok = ok_names()
    return tuple(n for n in state_names() if n not in ok)


def severity(name: str, default: float = 0.6) -> float:
    st = named(name)
    return st.severity if st is not None and st.severity else default


def worst_first() -> tuple:
    """Problem states, the one a timeline cell shows first when several were held (legend
    order too): by prominence, else severity; ties keep registry order."""
    names = problem_names()
    return tuple(sorted(names, key=lambda n: -named(n).shown_before))


def state_of(signal: str, name: str) -> State | None:
    """The state `name` of `signal`, or else the first state of that name in another signal:
    a trace from another version may write a known state on a signal that does not list it."""
    return lookup(signal, name) or named(name)
