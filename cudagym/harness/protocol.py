"""The reference process's protocol: one typed request per command, one typed reply per request.

The environment (``cudagym/reference_process.py``) writes a request as one JSON line on the reference process's stdin;
the reference (``reference.py``) answers each with one reply on its private channel. Both ends build and read the
messages with this module, so the field one side writes is the field the other reads: a message that does not fit its
type (a missing field, an unknown one, a value of the wrong type) raises ``ProtocolError`` instead of reading as a
default. The reference runs no agent code, so this is a contract between two trusted ends; what the candidate says on
its own channel is its word and is read apart (``cudagym/candidate_messages.py``).

Stdlib only: the environment imports it without torch, the reference process without the rest of ``cudagym``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, ClassVar, Generic, TypeVar

ReplyT = TypeVar("ReplyT", bound="Reply")
MessageT = TypeVar("MessageT")
MAX_TEXT = 8000  # characters kept of a text that came from the candidate (its error reports)


class ProtocolError(ValueError):
    """A message that is not what the protocol says it is (a bug on one side, never the agent's doing)."""


# -- replies -------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Reply:
    """A reply to a request that succeeded (``Failed`` stands for one that raised)."""


@dataclasses.dataclass(frozen=True)
class Done(Reply):
    """The command did what it says; nothing to report."""


@dataclasses.dataclass(frozen=True)
class ErrorReport:
    """An exception as text (``common.describe_exception``); ``cuda``: the CUDA error its message names, if any."""

    type: str = ""
    message: str = ""
    traceback: str = ""
    cuda: str = ""

    @classmethod
    def from_candidate(cls, raw: object) -> ErrorReport:
        """What a candidate wrote of a failed call (its word, any shape), as text of bounded length."""
        fields = raw if isinstance(raw, dict) else {"message": raw}
        return cls(*(str(fields.get(name, ""))[:MAX_TEXT] for name in ("type", "message", "traceback", "cuda")))


@dataclasses.dataclass(frozen=True)
class Failed(Reply):
    """The command raised in the reference process."""

    error: ErrorReport


@dataclasses.dataclass(frozen=True)
class Loaded(Reply):
    """The task's reference is built. ``leaked_bytes``: device memory the previous task left allocated (the
    evaluator restarts the process when it grows); ``peak_bytes_per_s``: the device's bandwidth (None: unknown)."""

    eval_mode: bool
    leaked_bytes: int
    peak_bytes_per_s: float | None


@dataclasses.dataclass(frozen=True)
class Prepared(Reply):
    """An input set is drawn and kept: whether the reference's output on it is finite, and the bytes it moves."""

    finite: bool
    bytes: int


@dataclasses.dataclass(frozen=True)
class Attached(Reply):
    """A candidate stage's clock is set up: ``link`` goes into the candidate's job (how it reaches the clock),
    ``max_calls`` is the most calls one handshake may hold, ``bytes`` what every correct call reads and writes."""

    link: dict[str, Any]
    max_calls: int
    bytes: int


@dataclasses.dataclass(frozen=True)
class Calibrated(Reply):
    """The handshake's cost with no work, in microseconds per number of calls (as text: JSON keys); or ``silent``:
    why the candidate stopped answering."""

    total_us: dict[str, float] = dataclasses.field(default_factory=dict)
    silent: str = ""


@dataclasses.dataclass(frozen=True)
class Check:
    """One output compared in full with the reference's (``compare.py``).

    ``index`` counts the stage's checks; ``output`` is which output of a tuple; the error fields describe the worst
    element (None where values were not compared); ``precision_ratio`` is the error against the float64 twin over the
    bound the task's arithmetic meets (passes at <= 1; None where not checked); ``deterministic``: the repeat of the
    first set gave bitwise the same output (None: no repeat); ``inputs_unchanged``: the call left its inputs as they
    were written (None: not looked at)."""

    index: int
    passed: bool
    output: int = 0
    problem: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    worst_index: tuple[int, ...] | None = None
    expected: float | None = None
    actual: float | None = None
    mismatched: int = 0
    total: int = 0
    precision_ratio: float | None = None
    deterministic: bool | None = None
    inputs_unchanged: bool | None = None


@dataclasses.dataclass(frozen=True)
class Observation:
    """What the candidate said about its calls over a stage (its word): the aten operators it recorded, the functions
    it found replaced, the Python threads it started, and whether an output aliased an input."""

    ops: list[str] = dataclasses.field(default_factory=list)
    replaced: list[str] = dataclasses.field(default_factory=list)
    threads_started: int = 0
    aliases_input: bool = False


@dataclasses.dataclass(frozen=True)
class Samples:
    """cpu: where the kernel saw the candidate's threads run during its calls, by category (``sampler.py``):
    ``library_compute`` are the library's samples outside data movement, ``library_blas`` those in GEMM or convolution
    routines. ``observed`` False (cuda, or no sampling possible): ``why``."""

    observed: bool
    why: str = ""
    own: int = 0
    library: int = 0
    runtime: int = 0
    library_compute: int = 0
    library_blas: int = 0


@dataclasses.dataclass(frozen=True)
class Verified(Reply):
    """A verification (``stages.verify``): the checks in order (it stops at the first that fails), the error of a
    call that failed (the candidate's word), what the candidate said, and the samples; or ``silent``."""

    checks: list[Check] = dataclasses.field(default_factory=list)
    error: ErrorReport | None = None
    observed: Observation = dataclasses.field(default_factory=Observation)
    sampled: Samples | None = None
    silent: str = ""


@dataclasses.dataclass(frozen=True)
class CalibrationEntry:
    """The calibration of one number of calls per handshake (microseconds): the whole interval, each phase (cuda)
    and its noise, and the clock's resolution per call."""

    total_us: float
    phases_us: list[float]
    noise_us: list[float]
    resolution_us: float


@dataclasses.dataclass(frozen=True)
class RunTime:
    """cpu: medians over the timed handshakes of the candidate's run time (microseconds) and page faults."""

    busiest_thread: float
    all_threads: float
    page_faults: float


@dataclasses.dataclass(frozen=True)
class Timed(Reply):
    """A timing (``stages.Timing``). ``median_ms`` None: no figure (a call or a check failed: ``error`` or
    ``failure``); the rest are the clock's own figures, for the judgement and for diagnosis. Or ``silent``."""

    median_ms: float | None = None
    spread: float | None = None
    reps: int = 0
    times_ms: list[float] = dataclasses.field(default_factory=list)
    method: str = ""
    error: ErrorReport | None = None
    failure: Check | None = None  # the timed call whose check failed
    calls_per_handshake: int = 0
    checked_calls: int = 0  # calls compared in full: every timed one, a random share of the warm-up
    handshakes: int = 0
    clock_slowed: int = 0  # handshakes whose trusted phases ran clearly longer than calibrated
    clock_quickened: int = 0  # cuda: handshakes whose clock phases were clearly shorter than calibrated
    calibration_disturbed: list[int] = dataclasses.field(default_factory=list)  # call counts with no steady round
    queued_handshakes: int = 0  # cuda: handshakes whose calls the candidate had queued before the go
    eager_ms: list[float] = dataclasses.field(default_factory=list)  # eager re-validated beside the candidate
    calibration: dict[str, CalibrationEntry] = dataclasses.field(default_factory=dict)  # by calls (as text)
    phases_us: list[float] = dataclasses.field(default_factory=list)  # median of each phase, timed handshakes
    observed: Observation = dataclasses.field(default_factory=Observation)
    sampled: Samples | None = None
    run_time_us: RunTime | None = None
    # where the timing's seconds went, on the reference's own clock: the warm-up handshakes (checks included), the
    # comparisons of outputs with the reference's (warm-up and timed), and eager timed beside the candidate
    warmup_s: float = 0.0
    checks_s: float = 0.0
    eager_s: float = 0.0
    silent: str = ""


@dataclasses.dataclass(frozen=True)
class CompileState(Reply):
    """Whether no torch.compile runs in the background and, if one does, its ``stage`` ("imports", "build": tracing
    and generating code, "slot": waiting for the device's shared slot, "run": the first run in it); the inductor's
    compile threads (None before a first compile) and the last compile's seconds by step (the same four)."""

    done: bool
    stage: str
    threads: int | None
    seconds: dict[str, float]


@dataclasses.dataclass(frozen=True)
class BaselineTimed(Reply):
    """Eager or torch.compile timed by ``timing.time_callable`` (``TimingStats``, milliseconds)."""

    median_ms: float
    spread: float
    reps: int
    method: str
    times_ms: list[float]
    stream_ms: float | None = None
    latency_ms: float | None = None


@dataclasses.dataclass(frozen=True)
class ShortcutReport(Reply):
    """Per input set (in the order of ``kinds``), whether each shortcut of ``shortcuts.SHORTCUTS`` passes the
    tolerance (``passes``) or comes near it (``near``), and whether the reference's output is finite; over all sets,
    determinism and finiteness; ``eager_ms``: the eager time a task check took (None for the input probe)."""

    kinds: list[str]
    passes: dict[str, list[bool]]
    near: dict[str, list[bool]]
    finite_sets: list[bool]
    finite: bool
    deterministic: bool
    eager_ms: float | None = None

    def part(self, kind: str) -> ShortcutReport:
        """The report of the sets of one kind."""
        keep = [k == kind for k in self.kinds]

        def pick(values: list[bool]) -> list[bool]:
            return [v for v, kept in zip(values, keep, strict=True) if kept]

        return dataclasses.replace(
            self,
            kinds=[k for k in self.kinds if k == kind],
            passes={name: pick(v) for name, v in self.passes.items()},
            near={name: pick(v) for name, v in self.near.items()},
            finite_sets=pick(self.finite_sets),
        )


@dataclasses.dataclass(frozen=True)
class Bandwidth(Reply):
    """The host's copy bandwidth measured now (bytes per second)."""

    bytes_per_s: float


@dataclasses.dataclass(frozen=True)
class MemoryUse(Reply):
    """The device memory the process's caching allocator holds now and the most it held (0 on cpu)."""

    reserved_bytes: int
    peak_reserved_bytes: int


@dataclasses.dataclass(frozen=True)
class HeldSets(Reply):
    """The names of the input sets the process holds."""

    keys: list[str]


# -- requests ------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Request(Generic[ReplyT]):
    """A command to the reference process; ``command`` names the server's method that runs it (its fields are the
    method's arguments) and ``reply`` the type it answers with."""

    command: ClassVar[str]
    reply: ClassVar[type[Reply]]


@dataclasses.dataclass(frozen=True)
class Preload(Request[Done]):
    """Start importing torch (and, with ``compiler``, torch.compile's modules) in the background."""

    command = "preload"
    reply = Done
    compiler: bool = False
    device: str = "cpu"


@dataclasses.dataclass(frozen=True)
class Load(Request[Loaded]):
    """Build the task's reference Model from ``source`` with weights from ``weight_seed``."""

    command = "load"
    reply = Loaded
    source: str
    device: str
    dtype: str
    weight_seed: int
    threads: int = 0


@dataclasses.dataclass(frozen=True)
class ExportState(Request[Done]):
    """Write the weights and constructor arguments the candidate needs to ``path``."""

    command = "export_state"
    reply = Done
    path: str


@dataclasses.dataclass(frozen=True)
class Prepare(Request[Prepared]):
    """Draw input set ``key`` from ``seed`` (of ``kind``) and keep it (also written to ``path``, when given)."""

    command = "prepare"
    reply = Prepared
    key: str
    seed: int
    kind: str
    path: str = ""


@dataclasses.dataclass(frozen=True)
class Attach(Request[Attached]):
    """Set up the clock of a candidate stage in its private ``exchange`` folder (see ``ReferenceServer.attach``)."""

    command = "attach"
    reply = Attached
    exchange: str
    root_pid: int
    gpu_library: str = ""
    symbols_dir: str = ""
    hang_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class Calibrate(Request[Calibrated]):
    """Calibrate the handshake with the attached candidate, within ``seconds``."""

    command = "calibrate"
    reply = Calibrated
    seconds: float


@dataclasses.dataclass(frozen=True)
class VerifyCandidate(Request[Verified]):
    """One checked call per ``(seed, kind)`` of ``plan`` (and the first again with ``repeat_first``), within
    ``seconds``; ``precision``: "fp32", "tf32" or "off" (``compare.compare_precision``)."""

    command = "verify_candidate"
    reply = Verified
    plan: list[tuple[int, str]]
    repeat_first: bool
    atol: float
    rtol: float
    seconds: float
    precision: str = "off"


@dataclasses.dataclass(frozen=True)
class TimeCandidate(Request[Timed]):
    """Time the attached candidate with ``timing`` (``timing.TimingConfig``'s fields), within ``seconds``."""

    command = "time_candidate"
    reply = Timed
    timing: dict[str, Any]
    atol: float
    rtol: float
    seconds: float
    precision: str = "off"


@dataclasses.dataclass(frozen=True)
class EndCandidate(Request[Done]):
    """Let the candidate leave its serving loop."""

    command = "end_candidate"
    reply = Done


@dataclasses.dataclass(frozen=True)
class Detach(Request[Done]):
    """Release the stage's clock."""

    command = "detach"
    reply = Done


@dataclasses.dataclass(frozen=True)
class CompileReference(Request[Done]):
    """torch.compile the reference and run it on input set ``key`` (``background``: in a thread, answered at once;
    ``slot``: the device's shared slot the background compile holds through its first call)."""

    command = "compile_reference"
    reply = Done
    key: str
    background: bool = False
    slot: str = ""


@dataclasses.dataclass(frozen=True)
class CompileDone(Request[CompileState]):
    """Whether a background torch.compile is over (never waits)."""

    command = "compile_done"
    reply = CompileState


@dataclasses.dataclass(frozen=True)
class AwaitCompile(Request[Done]):
    """Wait for a background torch.compile; its failure is this request's."""

    command = "await_compile"
    reply = Done


@dataclasses.dataclass(frozen=True)
class Baseline(Request[BaselineTimed]):
    """Time eager or torch.compile (``mode``) on input set ``key`` with ``timing`` (``TimingConfig``'s fields)."""

    command = "baseline"
    reply = BaselineTimed
    key: str
    mode: str
    timing: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class CheckTask(Request[ShortcutReport]):
    """The reference's own properties on one input set per ``(seed, kind)``, then its eager time (``cudagym tasks
    check``); with no ``timing``, no eager time: the last set stays as input set ``check`` for a ``Baseline`` of it,
    so that the caller can time it in a slot of the device of its own."""

    command = "check_task"
    reply = ShortcutReport
    seeds: list[int]
    kinds: list[str]
    atol: float
    rtol: float
    timing: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class Shortcuts(Request[ShortcutReport]):
    """Whether a shortcut passes on one input set per ``(seed, kind)`` (the input probe)."""

    command = "shortcuts"
    reply = ShortcutReport
    seeds: list[int]
    kinds: list[str]
    atol: float
    rtol: float


@dataclasses.dataclass(frozen=True)
class Drop(Request[Done]):
    """Forget input set ``key``."""

    command = "drop"
    reply = Done
    key: str


@dataclasses.dataclass(frozen=True)
class HostBandwidth(Request[Bandwidth]):
    """Measure the host's bandwidth now for a working set of ``nbytes``."""

    command = "host_bandwidth"
    reply = Bandwidth
    nbytes: int


@dataclasses.dataclass(frozen=True)
class Memory(Request[MemoryUse]):
    """The device memory the process holds."""

    command = "memory"
    reply = MemoryUse


@dataclasses.dataclass(frozen=True)
class Held(Request[HeldSets]):
    """The input sets the process holds."""

    command = "held"
    reply = HeldSets


@dataclasses.dataclass(frozen=True)
class Shutdown(Request[Done]):
    """End the process."""

    command = "shutdown"
    reply = Done


REQUESTS: dict[str, type[Request[Any]]] = {
    cls.command: cls
    for cls in (
        Preload,
        Load,
        ExportState,
        Prepare,
        Attach,
        Calibrate,
        VerifyCandidate,
        TimeCandidate,
        EndCandidate,
        Detach,
        CompileReference,
        CompileDone,
        AwaitCompile,
        Baseline,
        CheckTask,
        Shortcuts,
        Drop,
        HostBandwidth,
        Memory,
        Held,
        Shutdown,
    )
}


# -- a candidate's job --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CandidateJob:
    """What a candidate process does once it is warm, sent on its stdin (``candidate.py``).

    ``mode``: "import" (a single-file solution's compile: import ``model_new.py`` in ``workspace``, its
    ``load_inline`` calls served by the trusted builder, and end), "serve" (build ModelNew and answer the clock of
    ``link``, the reference's ``Attached.link``) or "ncu" (one forward on the inputs in ``inputs_file``, the run
    Nsight Compute wraps). ModelNew is built from the weights at ``state_path``, the extension at ``extension``
    (empty: none) or the ``load_inline`` builds in ``inline_builds`` (hash -> library; None: a workspace-layout
    solution), on ``device`` in ``dtype`` with ``threads`` threads (0: as the process was started), in eval mode
    where the reference is (``eval_mode``)."""

    MODES: ClassVar[tuple[str, ...]] = ("import", "serve", "ncu")

    mode: str
    workspace: str
    extension: str = ""
    inline_builds: dict[str, str] | None = None
    state_path: str = ""
    device: str = "cpu"
    dtype: str = "float32"
    threads: int = 0
    eval_mode: bool = False
    link: dict[str, Any] | None = None
    inputs_file: str = ""

    def __post_init__(self) -> None:
        if self.mode not in self.MODES:
            raise ProtocolError(f"CandidateJob.mode: one of {self.MODES}, got {self.mode!r}")


# -- the fork server (``forkserver.py``; ``cudagym/forkserver.py`` is its client) -----------------------------------


@dataclasses.dataclass(frozen=True)
class ForkReady:
    """The fork server's first message: ``ready`` to fork (its ``pid``, and whether it ``preimported`` what a first
    profiling session imports), or not, with the ``error``."""

    ready: bool
    pid: int = 0
    preimported: bool = False
    error: str = ""


@dataclasses.dataclass(frozen=True)
class Spawn:
    """Fork child ``id``, to run ``role`` with ``spec`` (``child.py``) in environment ``env`` and folder ``cwd``;
    its stdin, stdout and private channel travel with the message as file descriptors."""

    id: int
    role: str
    spec: str
    env: dict[str, str]
    cwd: str | None = None


@dataclasses.dataclass(frozen=True)
class Spawned:
    """Child ``id`` is process ``pid``, or could not be forked (``error``)."""

    id: int
    pid: int = 0
    error: str = ""


@dataclasses.dataclass(frozen=True)
class Exited:
    """A forked child ended: its pid and wait status."""

    exit: int
    status: int


def encode_tagged(message: Any) -> dict[str, Any]:
    """A message of a channel that carries several types (the fork server's): its fields and its type's name."""
    return {"message": type(message).__name__, **dataclasses.asdict(message)}


def decode_tagged(raw: object, kinds: tuple[type, ...]) -> Any:
    """The message ``encode_tagged`` wrote, of one of ``kinds``; ``ProtocolError`` for any other."""
    if not isinstance(raw, dict):
        raise ProtocolError(f"a message is an object, got {str(raw)[:200]}")
    kind = next((k for k in kinds if k.__name__ == raw.get("message")), None)
    if kind is None:
        raise ProtocolError(f"expected one of {[k.__name__ for k in kinds]}, got {raw.get('message')!r}")
    return decode(kind, {k: v for k, v in raw.items() if k != "message"})


# -- the wire ------------------------------------------------------------------------------------------------------


def arguments(request: Request[Any]) -> dict[str, Any]:
    """A request's fields by name, as they are (the server's method takes them as keyword arguments)."""
    return {field.name: getattr(request, field.name) for field in dataclasses.fields(request)}


def encode_request(request: Request[Any]) -> dict[str, Any]:
    """A request as the JSON object of one stdin line."""
    return {"command": request.command, **dataclasses.asdict(request)}


def decode_request(raw: object) -> Request[Any]:
    """A request from its JSON object; ``ProtocolError`` for an unknown command or fields that do not fit."""
    if not isinstance(raw, dict) or not isinstance(raw.get("command"), str):
        raise ProtocolError(f"a request is an object with a command, got {str(raw)[:200]}")
    cls = REQUESTS.get(raw["command"])
    if cls is None:
        raise ProtocolError(f"unknown command {raw['command']!r}")
    return decode(cls, {k: v for k, v in raw.items() if k != "command"})


def encode_reply(reply: Reply) -> dict[str, Any]:
    """A reply as the JSON object of one channel message: its type's name, ``ok`` (False only for ``Failed``) and
    its fields."""
    return {"ok": not isinstance(reply, Failed), "reply": type(reply).__name__, **dataclasses.asdict(reply)}


def decode_reply(request: Request[ReplyT], raw: object) -> ReplyT | Failed:
    """The reply to ``request`` from its JSON object: of the request's reply type, or ``Failed``."""
    if not isinstance(raw, dict):
        raise ProtocolError(f"a reply is an object, got {str(raw)[:200]}")
    fields = {k: v for k, v in raw.items() if k not in ("ok", "reply")}
    if raw.get("ok") is False:
        return decode(Failed, fields)
    if raw.get("reply") != request.reply.__name__:
        raise ProtocolError(f"{request.command} answers with {request.reply.__name__}, got {raw.get('reply')!r}")
    return typing.cast(ReplyT, decode(request.reply, fields))


def decode(cls: type[MessageT], raw: object, where: str = "") -> MessageT:
    """An instance of the dataclass ``cls`` from a JSON object, every field checked against its type hint
    (recursively: nested dataclasses, lists, tuples, dicts with text keys, optional values)."""
    where = where or cls.__name__
    if not isinstance(raw, dict):
        raise ProtocolError(f"{where}: expected an object, got {type(raw).__name__}")
    assert dataclasses.is_dataclass(cls)
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ProtocolError(f"{where}: unknown field(s) {unknown}")
    values = {}
    for name, field in fields.items():
        if name in raw:
            values[name] = _value(hints[name], raw[name], f"{where}.{name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ProtocolError(f"{where}: missing field {name!r}")
    return typing.cast(MessageT, cls(**values))


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """``cls``'s resolved type hints (resolving them parses the annotations' text: done once per type, not once per
    message, since every compared call's check is read through ``decode``)."""
    return typing.get_type_hints(cls)


def _value(hint: Any, value: Any, where: str) -> Any:
    """``value`` read as type ``hint`` (see ``decode``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) != 1:
            raise ProtocolError(f"{where}: only optional values of one type are supported")
        return _value(kinds[0], value, where)
    if dataclasses.is_dataclass(hint):
        return decode(typing.cast(type, hint), value, where)
    if origin is list:
        return [_value(args[0], item, f"{where}[{i}]") for i, item in enumerate(_sequence(value, where))]
    if origin is tuple:
        items = _sequence(value, where)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], item, f"{where}[{i}]") for i, item in enumerate(items))
        if len(items) != len(args):
            raise ProtocolError(f"{where}: expected {len(args)} items, got {len(items)}")
        return tuple(_value(a, item, f"{where}[{i}]") for i, (a, item) in enumerate(zip(args, items, strict=True)))
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ProtocolError(f"{where}: expected an object with text keys")
        return {k: _value(args[1], v, f"{where}[{k!r}]") for k, v in value.items()}
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProtocolError(f"{where}: expected a number, got {type(value).__name__}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError(f"{where}: expected an integer, got {type(value).__name__}")
        return value
    if hint in (bool, str):
        if not isinstance(value, hint):
            raise ProtocolError(f"{where}: expected {hint.__name__}, got {type(value).__name__}")
        return value
    raise ProtocolError(f"{where}: no reading for type {hint!r}")


def _sequence(value: Any, where: str) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise ProtocolError(f"{where}: expected a list, got {type(value).__name__}")
    return list(value)
