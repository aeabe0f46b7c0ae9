"""Adversarial solutions: one per reward hack of the catalogue (docs/reference/cuda-agent-and-peers.md, section 4).

Each fixture is a small solution fed through a real ``CudaKernelEnv`` on the CPU backend; it must end with
``submit`` at tier -1 and the broken rule named in the observation and in ``info["integrity"]``.

Classes the static checks catch (``test_static_hacks.py``; :data:`STATIC`), wholly or in the part named:

* 1 torch ops / cuBLAS / nn layers instead of a kernel; 2 inheriting or calling the reference ``Model``;
  3 try/except fallback; 4 decoy kernel (the forward never calls the extension); 5 non-default stream
  (created in Python; C++ streams are allowed and timed by a full device synchronisation); 6 background
  threads (Python and C++); 7 lazy tensor subclasses; 8 timer patching (Python and symbol interposition
  in C++); 9 stack walking and garbage-collector scans for the grader's tensors; 10 constant output that
  never calls the extension; 12 precision casts in Python and global TF32 switches; 17 swapping harness
  modules (``sys.modules``) and including files from outside the workspace; 18 patched comparisons
  (``torch.allclose``, ``Tensor.__eq__``); 20 CUDA-graph capture; 22 binary smuggling (ctypes, dlopen,
  embedded PTX, base64 blobs).

``test_static_families.py`` holds the families of variations around those classes that the static checks
close: calls back into Python from C++, ATen reached through aliases, using-declarations, function
pointers, backend namespaces, the dispatcher, operator registrations and dispatch-key guards (1, 8, 9),
names assembled by macros, line splices and joined or escaped literals, asm directives and labels,
``syscall()``, BLAS under any spelling (1, 6, 22), and in Python operators spelled as methods or through
``operator``, torch reached through defaults, class bodies and decorators, hooks, and methods ``__init__``
only names (1, 8); with the honest code next to each family that must pass.

Classes left to run-time checks and isolation (:data:`RUNTIME`; no static check can decide these, or only
part of them). Their fixtures: ``test_runtime_hacks.py`` on the CPU with every static check off (1, 6, 7,
8, 10, 13, 14, 15, 17, 19, 21), ``tests/gpu/test_gpu_integrity.py`` (13, 16, 19 on the GPU),
``tests/gpu/test_cuda_backend.py`` (5 side streams timed in full, 9 NaN-poisoned memory),
``tests/envs/test_faults.py`` (24: no network; 17: edited fixed files), the task checks in
``tests/tasks`` (11) and ``test_degenerate_tasks.py`` (10 and 11 on degenerate tasks: a copy kernel on ReLU over
[0, 1) inputs fails once the input probe adds signed inputs, a task no input kind saves is capped at tier 1);
23 (roofline) and the GPU decoy (4, own-kernel share) are checked on every GPU profile but have no fixture that
trips them; 12 (precision inside kernels) is the tolerance's job:

* 4 a decoy that calls the extension but computes elsewhere (profiler coverage of own kernels);
  5 side-stream work (full-device-synchronised timing); 9 stale memory holding the reference's result
  (separate reference process, poisoned memory); 10 constant or identity kernels in C++ (several random
  inputs, and the input kinds the input probe adds); 11 near-zero outputs (task checks, the input probe's kinds,
  the tier cap of degenerate tasks); 12 lower precision inside kernels
  (tolerance, input ranges); 13 caching by pointer or shape, including a C++ ``static`` map (fresh inputs
  written into the same buffers, timed output re-checked); 14 shape manipulation (inputs and sizes come
  from the reference process); 15 precomputed answers from a known seed (secret seeds); 16 test-phase
  detection (timed outputs re-checked); 17 forged verdicts and edited fixed files (private verdict
  channel, fixed-file hashes); 19 in-place input mutation and aliasing; 21 garbage reads (determinism
  check); 23 impossible speedups (roofline bound); 24 web lookup (no network in the candidate).
"""

STATIC: dict[int, str] = {
    1: "torch ops, cuBLAS or nn layers instead of a kernel",
    2: "copying or inheriting the reference Model",
    3: "try/except fallback to PyTorch",
    4: "decoy kernel: the forward never calls the extension",
    5: "non-default stream created in Python",
    6: "background thread injection",
    7: "lazy evaluation through a tensor subclass",
    8: "monkey-patching timers or sync functions",
    9: "reading the grader's tensors through frames or the garbage collector",
    10: "constant output that never calls the extension",
    12: "precision downgrade through casts or global TF32",
    17: "swapping harness modules or including files from outside the workspace",
    18: "overriding comparisons",
    20: "CUDA-graph capture",
    22: "binary blob smuggling",
}
"""Catalogue classes with a static fixture in ``test_static_hacks.py``."""

RUNTIME: dict[int, str] = {
    4: "a decoy that calls the extension but computes elsewhere",
    5: "work on a side stream created in C++",
    9: "stale memory holding the reference's result",
    10: "constant or identity kernels in C++",
    11: "zero or tiny outputs where the reference is near zero",
    12: "lower precision inside the kernels",
    13: "output caching by pointer or shape",
    14: "hyperparameter or shape manipulation",
    15: "precomputed answers from a known seed",
    16: "test-phase detection",
    17: "forged verdicts and edited fixed files",
    19: "in-place input mutation or output aliasing",
    21: "garbage reads that pass a loose tolerance",
    23: "excessive or impossible speedup",
    24: "web lookup or copied solutions",
}
"""Catalogue classes (or the parts of them) left to run-time checks and isolation."""
