"""The names the static checks know: what counts as tensor creation, metadata, compute, timing, loading.

Python names are dotted paths as resolved through the file's imports (``F.relu`` is
``torch.nn.functional.relu``); tensor methods are bare method names; C++ names are identifiers or the
last part of a ``at::``/``torch::`` qualified name. The lists are data, not code: the policy's allow and
deny lists adjust them without editing this file.
"""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# -- Python: torch calls the forward path may make ---------------------------------------------------

TORCH_CREATION = _words(
    """
    torch.empty torch.empty_like torch.empty_strided torch.zeros torch.zeros_like torch.ones torch.ones_like
    torch.full torch.full_like torch.tensor torch.as_tensor torch.arange torch.Size torch.device torch.dtype
    torch.finfo torch.iinfo torch.get_default_dtype torch.is_tensor torch.is_floating_point torch.numel
    torch.broadcast_shapes torch.no_grad torch.inference_mode torch.enable_grad torch.is_grad_enabled
    torch.set_grad_enabled
    torch.is_inference_mode_enabled torch.cuda.is_available torch.cuda.current_device torch.cuda.device_count
    torch.cuda.get_device_properties torch.cuda.get_device_capability torch.cuda.get_device_name
    torch.cuda.device torch.cuda.synchronize torch.cuda.current_stream torch.cuda.default_stream
    torch.jit.is_scripting torch.jit.is_tracing torch.compiler.is_compiling
    """
)
"""Allocation, dtype/device/shape helpers and grad-mode contexts: never compute on tensor data."""

DTYPE_NAMES = _words("half float double int long bool short bfloat16 cfloat cdouble chalf char byte")
"""``torch.<name>`` dtypes that share a name with a cast method (``torch.half`` is a dtype, ``.half()`` a cast)."""

TORCH_VIEWS = _words(
    """
    torch.reshape torch.flatten torch.unflatten torch.squeeze torch.unsqueeze torch.transpose torch.permute
    torch.narrow torch.select torch.t torch.chunk torch.split torch.tensor_split torch.unbind torch.movedim
    torch.moveaxis torch.swapaxes torch.swapdims torch.view_as_real torch.view_as_complex torch.as_strided
    torch.atleast_1d torch.atleast_2d torch.atleast_3d
    """
)
"""Functional spellings of views (shape metadata; a reshape may copy, as in eager PyTorch)."""

TENSOR_METADATA_METHODS = _words(
    """
    size dim ndimension numel nelement stride storage_offset is_contiguous data_ptr element_size get_device
    is_floating_point is_complex is_signed item is_set_to is_pinned is_shared dim_order
    """
)
"""Tensor methods that read metadata (their result is not a tensor)."""

TENSOR_VIEW_METHODS = _words(
    """
    view view_as reshape reshape_as flatten unflatten squeeze unsqueeze permute transpose t expand expand_as
    narrow select unbind chunk split tensor_split contiguous as_strided movedim moveaxis swapaxes swapdims
    unfold diagonal detach requires_grad_ resize_ resize_as_ new_empty new_empty_strided new_zeros new_ones
    new_full new_tensor
    """
)
"""Tensor methods that make views or allocate (CUDA Agent allows tensor creation and shape changes)."""

TENSOR_METADATA_ATTRS = _words(
    "shape dtype device ndim is_cuda is_cpu is_meta layout requires_grad is_leaf itemsize nbytes names is_sparse"
)
"""Tensor attributes that are metadata; every other attribute of a tensor (``.T``, ``.data``) is a tensor."""

TENSOR_COMPUTE_METHODS = _words(
    """
    abs absolute acos arccos acosh arccosh add addbmm addcdiv addcmul addmm addmv addr all allclose amax amin
    aminmax angle any apply_ argmax argmin argsort argwhere asin arcsin asinh arcsinh atan arctan atan2 arctan2
    atanh arctanh baddbmm bernoulli bfloat16 bincount bitwise_and bitwise_left_shift bitwise_not bitwise_or
    bitwise_right_shift bitwise_xor bmm bool byte cauchy_ cdouble ceil cfloat char cholesky clamp clamp_max
    clamp_min clip clone conj_physical copysign corrcoef cos cosh count_nonzero cov cpu cross cuda cummax
    cummin cumprod cumsum deg2rad dequantize det diag diag_embed diff digamma dist div divide dot double eq
    equal erf erfc erfinv exp exp2 expm1 exponential_ fix flip fliplr flipud float float_power floor
    floor_divide fmax fmin fmod frac frexp gather gcd ge geometric_ ger greater greater_equal gt half
    hardshrink heaviside histc hypot i0 igamma igammac index_add index_copy index_fill index_put index_reduce
    index_select inner int inverse isclose isfinite isinf isnan isneginf isposinf isreal kron kthvalue lcm
    ldexp le lerp less less_equal lgamma log log10 log1p log2 log_normal_ log_softmax logaddexp logaddexp2
    logcumsumexp logdet logical_and logical_not logical_or logical_xor logit logsumexp long lt lu
    masked_fill masked_scatter masked_select matmul matrix_exp matrix_power max maximum mean median min
    minimum mm mode msort mul multinomial multiply mv mvlgamma nan_to_num nanmean nanmedian nanquantile
    nansum narrow_copy ne neg negative nextafter nonzero norm normal_ not_equal numpy outer pin_memory pinverse
    polygamma positive pow prod put put_ qr quantile rad2deg random_ ravel reciprocal relu remainder renorm
    repeat repeat_interleave roll rot90 round rsqrt scatter scatter_add scatter_reduce sgn short sigmoid sign
    signbit sin sinc sinh slogdet softmax sort sqrt square std stft sub subtract sum sum_to_size svd take
    take_along_dim tan tanh tile to to_dense to_sparse tolist topk trace tril triu true_divide trunc type
    type_as uniform_ unique unique_consecutive var vdot where xlogy
    """
)
"""Tensor methods that compute on data (casts and device copies included). In Python, any other method
whose name ends in ``_`` (an in-place op: ``fill_``, ``copy_``, ``add_``) counts as compute too."""

AMBIGUOUS_METHODS = _words("add sort type")
"""Compute-method names that other Python objects share (``set.add``, ``list.sort``, ``device.type``):
flagged only when the receiver is known to hold a tensor."""

BUILTINS_ON_TENSORS = _words("abs sum max min pow round divmod sorted reversed any all map filter")
"""Python builtins that run torch kernels when given a tensor."""

COMPUTE_MODULES = _words(
    """
    numpy scipy cupy jax jaxlib numba triton tensorflow torchvision torchaudio xformers flash_attn apex
    transformers einops opt_einsum sklearn pandas tilelang thunderkittens cutlass cuda.bindings pycuda
    """
)
"""Third-party libraries whose calls compute (CUDA Agent allows no third-party library in the forward)."""

# -- Python: names that belong to another rule than compute ----------------------------------------

TIMING_NAMES = _words(
    """
    torch.cuda.Event torch.Event torch.cuda.Event.record torch.cuda.Event.elapsed_time torch.cuda.Event.synchronize
    torch.utils.benchmark torch.profiler torch.autograd.profiler torch.cuda.profiler torch.cuda.nvtx
    time.perf_counter time.perf_counter_ns time.time time.time_ns time.monotonic time.monotonic_ns
    time.process_time time.process_time_ns time.thread_time time.clock_gettime timeit
    """
)
"""Timers and profilers: the harness times the candidate, the candidate never touches a timer."""

COMPARISON_NAMES = _words(
    "torch.allclose torch.isclose torch.equal torch.testing torch.testing.assert_close torch.eq torch.Tensor.__eq__"
)
"""Comparison functions the harness relies on; taking one as a value (to wrap or replace it) is patching."""

GLOBAL_SETTING_PREFIXES = (
    "torch.set_",
    "torch.use_deterministic_algorithms",
    "torch.library.",
    "torch._C._set",
    "torch._dynamo.config",
    "torch._inductor.config",
    "torch.cuda.set_",
    "torch.cuda.memory.",
    "torch.cuda.empty_cache",
    "torch.cuda.caching_allocator",
    "os.environ.update",
    "os.environ.setdefault",
    "os.environ.pop",
    "os.environ.clear",
    "os.putenv",
    "os.unsetenv",
    "os.sched_setaffinity",
    "os.nice",
)
"""Calls that change process-wide torch, allocator or environment settings (threads, TF32, env vars)."""

BUILD_ENVIRONMENT = _words("TORCH_CUDA_ARCH_LIST MAX_JOBS")
"""Environment variables a single-file solution may set before ``load_inline`` (they steer its build only)."""

STREAM_NAMES = _words(
    """
    torch.cuda.Stream torch.cuda.ExternalStream torch.cuda.stream torch.cuda.StreamContext torch.cuda.set_stream
    torch.Stream torch.cuda.streams torch.cuda.Stream.wait_stream
    """
)
STREAM_METHODS = _words("wait_stream record_stream wait_event")
GRAPH_NAMES = _words("torch.cuda.graph torch.cuda.CUDAGraph torch.cuda.graphs torch.cuda.make_graphed_callables")

CONCURRENCY_MODULES = _words(
    "threading _thread multiprocessing concurrent asyncio subprocess pty signal sched torch.multiprocessing"
)
CONCURRENCY_NAMES = _words(
    """
    os.fork os.forkpty os.system os.popen os.spawnl os.spawnle os.spawnlp os.spawnlpe os.spawnv os.spawnve
    os.spawnvp os.spawnvpe os.execl os.execle os.execlp os.execlpe os.execv os.execve os.execvp os.execvpe
    os.posix_spawn os.posix_spawnp os.kill os.killpg os.setsid os.register_at_fork torch.jit.fork torch.jit.wait
    torch.jit._fork torch.jit._wait torch.futures
    """
)

LOADER_MODULES = _words(
    """
    ctypes _ctypes cffi importlib imp zipimport pkgutil runpy marshal pickle _pickle dill cloudpickle shelve
    base64 binascii zlib lzma bz2 gzip zipfile tarfile codecs mmap
    """
)
LOADER_NAMES = _words(
    """
    torch.ops.load_library torch.classes.load_library torch.load torch.jit.load torch.package torch.export.load
    torch.frombuffer torch.from_file torch._C._dlopen bytes.fromhex
    bytearray.fromhex sys.path sys.meta_path sys.path_hooks numpy.frombuffer numpy.fromfile numpy.load
    """
)
"""Ways to bring in code or data that was not built from the workspace's sources."""

INTROSPECTION_MODULES = _words("inspect gc traceback builtins __builtin__ __main__")
INTROSPECTION_NAMES = _words(
    """
    sys._getframe sys._current_frames sys.modules sys.settrace sys.setprofile sys.addaudithook sys.excepthook
    sys.exc_info sys.exception sys.last_traceback
    """
)
INTROSPECTION_BUILTINS = _words("eval exec compile __import__ breakpoint globals vars")
FRAME_ATTRS = _words(
    """
    f_back f_globals f_locals f_code f_builtins gi_frame cr_frame ag_frame tb_frame tb_next __globals__
    __code__ __closure__ __subclasses__ __builtins__ __dict__ __self__ __func__ __wrapped__
    """
)

TENSOR_SUBCLASS_BASES = _words(
    """
    torch.Tensor torch._C.TensorBase torch._C._TensorBase torch.nn.Parameter torch.nn.parameter.Parameter
    torch.nn.Buffer torch.nn.parameter.Buffer torch.nn.parameter.UninitializedParameter
    torch.overrides.TorchFunctionMode torch.utils._python_dispatch.TorchDispatchMode
    """
)
TENSOR_SUBCLASS_NAMES = _words(
    """
    torch.Tensor._make_subclass torch.Tensor._make_wrapper_subclass torch.Tensor.__new__ torch._C._TensorBase.__new__
    torch.overrides torch.utils._python_dispatch torch._subclasses torch._C._DisableTorchDispatch
    torch._C.DisableTorchFunction torch._C.DisableTorchFunctionSubclass
    """
)
TENSOR_SUBCLASS_METHODS = _words("as_subclass _make_subclass _make_wrapper_subclass")
TENSOR_HOOK_NAMES = _words("__torch_function__ __torch_dispatch__")

NN_PARAMETER_HOLDERS = _words(
    """
    torch.nn.Parameter torch.nn.parameter.Parameter torch.nn.ParameterList torch.nn.ParameterDict torch.nn.Buffer
    torch.nn.Identity
    """
)
"""``torch.nn`` classes that hold tensors or pass them through; calling any other ``nn`` module computes."""

PARAMETER_ATTR_HINTS = ("weight", "bias", "running_", "in_proj", "out_proj")
"""Attributes of an ``nn`` module that are tensors (``self.linear.weight``); others (``eps``) are scalars."""

DUNDER_OPERATORS = frozenset(
    f"__{name}__"
    for name in """
    add radd iadd sub rsub isub mul rmul imul matmul rmatmul imatmul truediv rtruediv itruediv floordiv rfloordiv
    ifloordiv mod rmod imod pow rpow ipow lshift rlshift ilshift rshift rrshift irshift and rand iand or ror ior xor
    rxor ixor neg pos abs invert lt le gt ge eq ne getitem setitem delitem round trunc floor ceil divmod rdivmod
    array dlpack
    """.split()
)
"""An operator's method spelled out (``x.__add__(y)``, ``type(x).__mul__``): the operator, which torch computes."""

OPERATOR_MODULES = _words("operator _operator")
OPERATOR_COMPUTE = (
    _words(
        """
    add sub mul matmul truediv floordiv mod pow neg pos abs invert inv lshift rshift and_ or_ xor iadd isub imul
    imatmul itruediv ifloordiv imod ipow ilshift irshift iand ior ixor lt le gt ge eq ne getitem setitem delitem
    concat iconcat
    """
    )
    | DUNDER_OPERATORS
)
"""``operator`` functions that apply an operator (``operator.add(x, y)``, ``functools.reduce(operator.mul, ...)``):
on tensors, torch computes them (on shapes and numbers they are fine)."""
OPERATOR_BY_NAME = _words("attrgetter methodcaller")
"""``operator`` helpers that reach attributes or methods by a name given as data (like ``getattr``)."""

MODULE_VALUES = _words(
    """
    torch torch.nn torch.nn.modules torch._C torch._C._VariableFunctions torch._refs torch._prims torch._decomp
    torch._ops torch.sparse torch.nested torch.masked torch.distributions torch.Tensor torch._tensor
    """
)
"""Modules (and the tensor class) whose attributes compute: passed around as a value (``def forward(self, x,
t=torch)``), any of their functions could be called. ``torch.Tensor`` is fine in ``isinstance`` and
annotations."""

MODULE_HOOKS = _words(
    """
    register_forward_hook register_forward_pre_hook register_full_backward_hook register_full_backward_pre_hook
    register_backward_hook register_hook register_post_accumulate_grad_hook register_module_forward_hook
    register_module_forward_pre_hook register_module_full_backward_hook register_module_full_backward_pre_hook
    register_module_backward_hook register_module_buffer_registration_hook register_module_module_registration_hook
    register_module_parameter_registration_hook register_multi_grad_hook register_state_dict_pre_hook
    register_load_state_dict_pre_hook register_load_state_dict_post_hook _register_state_dict_hook
    _register_load_state_dict_pre_hook saved_tensors_hooks save_on_cpu disable_saved_tensors_hooks _forward_hooks
    _forward_pre_hooks _backward_hooks _backward_pre_hooks _global_forward_hooks _global_forward_pre_hooks
    _global_backward_hooks _state_dict_hooks _load_state_dict_pre_hooks
    """
)
"""Module, tensor and autograd hooks (and the dictionaries that hold them): code that runs around the
forward, outside what the checks judge as its path."""

INIT_APPLIERS = _words("apply")
"""Methods that call the function they are given right away (``self.apply(init_weights)`` in ``__init__``)."""

COMPILERS = ("torch.compile", "torch.jit.script", "torch.jit.trace", "torch._dynamo", "torch._inductor", "torch.fx",
             "torch.export")  # fmt: skip
"""torch's own compilers: the code they generate is torch's, not the agent's (flagged anywhere in the file)."""

# -- C++ / CUDA ----------------------------------------------------------------------------------------

ATEN_NAMESPACES = _words("at torch c10")
"""The heads of ATen's, torch's and c10's qualified names (after namespace aliases are resolved)."""

ATEN_ALLOWED_CALLS = _words(
    """
    empty empty_like empty_strided zeros zeros_like ones ones_like full full_like from_blob scalar_tensor
    getCurrentCUDAStream getDefaultCUDAStream getCurrentDeviceProperties getDeviceProperties current_device
    device_count device_of elementSize toString isFloatingType isComplexType isIntegralType get_num_threads
    get_thread_num parallel_for parallel_reduce typeMetaToScalarType dtype device layout memory_format
    requires_grad ceil_div divup irange str multiply_integers fromIntArrayRefSlow make_optional value_or
    """
)
"""``at::``/``torch::``/``c10::`` functions a binding may call: allocation, tensor options, stream and device
queries, integer helpers, ATen's own thread-pool loop (the CPU counterpart of a kernel launch)."""

ATEN_ALLOWED_VALUES = _words(
    """
    nullopt nullopt_t optional complex string_view numeric_limits opmath_type acc_type in_place irange
    scalar_value_type
    """
)
"""Lowercase ``at::``/``c10::`` names that are types or constants, not functions (``c10::optional<T>``)."""

AT_CUDA_ALLOWED = _words(
    """
    getCurrentCUDAStream getDefaultCUDAStream getStreamFromPool getStreamFromExternal getCurrentDeviceProperties
    getDeviceProperties current_device device_count getNumGPUs warp_size set_device device_synchronize
    stream_synchronize getCurrentCUDABlasHandle getCurrentCUDABlasLtHandle getCurrentCUDASolverDnHandle
    getCurrentCUDASparseHandle memcpy_and_sync
    """
)
"""What a binding may use of ``at::cuda::``/``c10::cuda::`` besides its types (``CUDAGuard``): streams and
device queries. The rest of ``at::cuda::`` (``at::cuda::relu``, the direct CUDA kernels) computes."""

ATEN_FORBIDDEN_NAMESPACES = _words(
    """
    native nn jit autograd functional _ops linalg special fft blas cudnn cpu meta redispatch compositeexplicitautograd
    compositeimplicitautograd compositeexplicitautogradnonfunctional compositeimplicitautogradnestedtensor
    functionalization sparse sparse_csr nested mkldnn mps xpu quantized cub optim data lazy inductor aot_inductor
    dynamo ops _refs Dispatcher OperatorHandle TypedOperatorHandle OperatorName
    """
)
"""Namespaces and classes under ``at::``/``torch::``/``c10::`` that compute, whatever the function's name:
ATen's kernels for one backend (``at::cpu::``, ``at::native::``), operator entry points (``at::_ops::``), the
dispatcher (``c10::Dispatcher::singleton().findSchemaOrThrow(...)``), TorchScript, autograd and ``nn``."""

ATEN_PATCHING_NAMES = _words(
    """
    impl tracer profiler DispatchKey DispatchKeySet LocalDispatchKeySet ExcludeDispatchKeyGuard
    IncludeDispatchKeyGuard ForceDispatchKeyGuard AutoDispatchBelowAutograd AutoDispatchBelowADInplaceOrView
    AutoDispatchSkipFunctionalize AutoNonVariableTypeMode RecordFunction RecordFunctionGuard
    DisableRecordFunctionGuard RecordFunctionCallback addThreadLocalCallback addGlobalCallback removeCallback
    clearCallbacks clearGlobalCallbacks clearThreadLocalCallbacks enableRecordFunction ThreadLocalState
    ThreadLocalStateGuard ThreadLocalDebugInfo DebugInfoGuard CUDACachingAllocator CachingAllocator SetAllocator
    SetCPUAllocator setAllocator globalContext Library RegisterOperators CppFunction KernelFunction BoxedKernel
    OperatorKernel PythonTorchFunctionTLS TorchDispatchModeTLS PythonDispatcherTLS SafePyObject PyInterpreter
    DispatchKeyExtractor
    """
)
"""Dispatch keys and their guards, the profiler's record functions, allocators, operator registration and
torch's global context: what changes which kernels run or what the run-time checks observe."""

ATEN_CONCURRENCY_NAMES = _words("set_num_threads set_num_interop_threads launch intraop_launch intraop_launch_future")
"""``at::`` functions that change ATen's thread pools or run work on them."""

ATEN_LOADER_NAMES = _words("load pickle_load pickle_save save serialize")
"""``torch::`` functions that read (or write) serialized tensors and modules."""

ATEN_PYTHON_NAMES = _words("python utils THPVariable_Wrap THPVariable_Unpack")
"""``torch::`` parts that reach the Python interpreter."""

PYBIND_ALLOWED = _words(
    "module_ module arg arg_v kw_only pos_only call_guard gil_scoped_release return_value_policy overload_cast const_ "
    "none doc name literals"
)
"""What a binding needs of pybind11: the module it defines functions on (``m.def``), argument names and
defaults (``py::arg("eps") = 1e-5``, ``py::none()``), overload selection and releasing the GIL. Tensors,
scalars and ``std::tuple``/``std::vector`` of them are converted by pybind11's casters without naming any
pybind11 type. Everything else (``py::object``, ``py::module_::import``, ``py::eval``, ``py::exec``,
``py::globals``, ``py::cast``, ``py::print``, ...) reaches Python objects and code."""

PYBIND_BARE = _words(
    """
    object handle function cpp_function module_ module eval exec eval_file globals cast reinterpret_borrow
    reinterpret_steal getattr setattr hasattr delattr isinstance print dict list tuple str bytes bool_ int_ float_
    capsule iterator iter len repr type make_tuple array array_t buffer buffer_info gil_scoped_acquire
    error_already_set detail
    """
)
"""pybind11 names refused when ``using namespace pybind11`` lets them appear unqualified."""

PYBIND_MEMBERS = _words("attr import reload add_object")
"""Member functions of pybind11 objects that reach Python attributes or import modules (``m.attr("x")``)."""

PYBIND_MACRO_PREFIXES = ("PYBIND11_OVERRIDE", "PYBIND11_OVERLOAD", "PYBIND11_EMBEDDED_MODULE")
"""pybind11 macros that call Python overrides or embed an interpreter."""

PYTHON_API_RE = (
    r"^_?Py(_\w+|[A-Z][A-Za-z0-9]*_\w+|[A-Z][A-Za-z0-9]*(Object|State|Def|Type|Frame|Config|Status)\w*)$|^THP[A-Z]\w*$"
)
"""The Python C API (``PyObject_Call``, ``PyImport_ImportModule``, ``PyRun_SimpleString``, ``PyEval_GetGlobals``,
``Py_Initialize``, ``PyObject``) and torch's Python wrappers (``THPVariable_Wrap``)."""

DISPATCH_MEMBERS = _words("typed callBoxed redispatch redispatchBoxed findSchema findSchemaOrThrow findOp")
"""Member functions of dispatcher handles (``op.typed<...>().call(x)`` runs an ATen operator)."""

CPP_REGISTRATION_PREFIXES = ("TORCH_LIBRARY", "REGISTER_DISPATCH", "REGISTER_ARCH_DISPATCH", "REGISTER_AVX",
                             "REGISTER_NO_CPU_DISPATCH", "ALSO_REGISTER_AVX", "C10_REGISTER", "REGISTER_ALLOCATOR",
                             "TORCH_REGISTER")  # fmt: skip
"""Macros that register operator kernels, dispatch stubs or allocators with torch (``TORCH_LIBRARY_IMPL(aten,
CPU, m) { m.impl("allclose", ...); }`` would replace the comparison itself)."""

AOTI_PREFIX = "aoti_torch_"
"""torch's C shim (``aoti_torch_cpu_relu``): ATen compute reached through ``extern "C"``."""

C_MATH_NAMES = _words(
    """
    abs acos asin atan atan2 ceil cos cosh erf erfc exp exp2 expm1 floor fmax fmin fmod frexp hypot ldexp lgamma
    log log10 log1p log2 max min pow round sin sinh sqrt tan tanh trunc copysign nextafter remainder sign
    """
)
"""Math functions C, C++ and CUDA define for scalars: unqualified, they are not taken for ATen's."""

CPP_TENSOR_COMPUTE_METHODS = (TENSOR_COMPUTE_METHODS - _words("all any type int float double long short char")) | (
    _words(
        "index index_put_ fill_ zero_ copy_ add_ sub_ mul_ div_ clamp_ relu_ exp_ masked_fill_ normal_ uniform_ "
        "backward toType toBackend"
    )
)
"""Tensor methods a binding may not call (``.sum()``, ``.mm()``, ``.fill_()``; cooperative groups'
``.any()``/``.all()`` and C++ casts are not tensor methods and stay allowed). Any other method whose name
ends in ``_`` (an in-place op) counts too, except the view and metadata ones. The solution's own objects
(``acc.max(a, b)`` on its own ``struct Acc``, ``Vectorized`` values) are not tensors, and ``zero_``/``fill_``
are allowed on a tensor the binding allocated itself."""

CPP_NON_COMPUTE_IN_PLACE = _words("resize_ resize_as_ requires_grad_ set_requires_grad unsafe_set_")
"""In-place tensor methods (``_`` at the end) that change metadata only."""

ATEN_BARE_COMPUTE = _words(
    """
    matmul mm bmm addmm baddbmm linear conv1d conv2d conv3d conv_transpose2d softmax log_softmax layer_norm
    group_norm batch_norm rms_norm relu gelu silu einsum scaled_dot_product_attention cumsum logsumexp argmax
    argmin topk sort
    """
)
"""Compute functions recognised without a namespace after ``using namespace at``/``torch`` (with the
tensor compute methods that C and CUDA math do not also define)."""

CPP_CONCURRENCY = _words(
    """
    pthread_create pthread_detach fork vfork clone system popen execl execle execlp execv execve execvp execvpe
    posix_spawn posix_spawnp daemon CreateThread _beginthread _beginthreadex omp_set_num_threads
    omp_set_dynamic omp_set_max_active_levels sched_setaffinity pthread_setaffinity_np setpriority nice
    """
)
CPP_STD_CONCURRENCY = _words("thread jthread async system")
"""``std::`` members that start threads or processes."""

CPP_SIGNALS = _words(
    "signal sigaction alarm setitimer timer_create kill tgkill tkill pthread_kill clone3 unshare setns"
)
"""Signals, timers that send them, and new processes or namespaces."""

CPP_SYSCALLS = _words("syscall __syscall _syscall syscall_cp")
CPP_SYSCALL_PREFIXES = ("SYS_", "__NR_")
"""``syscall()`` and the numbers it takes: the kernel reached directly, past every named function."""

CPP_INTROSPECTION = _words("ptrace process_vm_readv process_vm_writev")
"""Reading or writing another process's memory (the reference process holds the expected outputs)."""

CPP_STREAM_CREATION = _words(
    """
    cudaStreamCreate cudaStreamCreateWithFlags cudaStreamCreateWithPriority cuStreamCreate
    cuStreamCreateWithPriority getStreamFromPool getStreamFromExternal cudaStreamPerThread
    """
)
CPP_GRAPH_PREFIXES = ("cudaGraph", "cuGraph", "cudaStreamBeginCapture", "cudaStreamEndCapture", "cuStreamBeginCapture",
                      "cuStreamEndCapture", "CUDAGraph", "cudaStreamIsCapturing")  # fmt: skip

CPP_LOADERS = _words(
    """
    dlopen dlmopen dlsym dlvsym LoadLibrary LoadLibraryA LoadLibraryW GetProcAddress __cudaRegisterFatBinary
    __cudaRegisterFatBinaryEnd __fatbinwrap fatbinData incbin cuGetProcAddress cuGetProcAddress_v2
    cudaGetDriverEntryPoint cudaGetDriverEntryPointByVersion __libc_dlsym __libc_dlopen_mode _dl_sym dladdr
    dladdr1 dlinfo dl_iterate_phdr memfd_create mprotect pkey_mprotect PROT_EXEC _GLOBAL_OFFSET_TABLE_ _DYNAMIC
    link_map _r_debug r_debug fexecve execveat
    """
)
CPP_LOADER_PREFIXES = ("cuModuleLoad", "cuLibraryLoad", "cudaLibraryLoad", "cuLinkAdd", "cuLinkCreate",
                       "cuLinkComplete", "nvrtc", "nvJitLink", "cuModuleGetFunction", "cudaGetFuncBySymbol",
                       "cuLibraryGetKernel")  # fmt: skip
"""Loading device or host code at run time instead of building it from the workspace's sources."""

CPP_TAMPERING = _words(
    """
    cudaDeviceReset cudaProfilerStart cudaProfilerStop cudaLimitPersistingL2CacheSize accessPolicyWindow
    cudaAccessPolicyWindow cudaStreamAttributeAccessPolicyWindow cudaLaunchAttributeAccessPolicyWindow
    cudaCtxResetPersistingL2Cache cuCtxResetPersistingL2Cache CU_LIMIT_PERSISTING_L2_CACHE_SIZE setenv putenv
    unsetenv globalContext LD_PRELOAD
    """
)
"""Resetting the device, persisting L2 lines across the harness's cache flush, changing the environment or
torch's global context."""
CPP_TAMPERING_PREFIXES = ("cupti", "Cupti", "nvtxDomain")

CPP_INTERPOSED = _words(
    """
    clock_gettime gettimeofday time clock timespec_get dlsym dlopen malloc free calloc realloc
    """
)
"""Functions a kernel file must not define: defining one (or a ``cuda*``/``cu*`` driver function) replaces
the real one for everything linked after it."""

VENDOR_LIBRARIES: tuple[tuple[str, str, str], ...] = (
    # (identifier prefix, library, policy field that allows it)
    ("cublasLt", "cuBLASLt", "allow_cublas"),
    ("cublas", "cuBLAS", "allow_cublas"),
    ("CUBLAS_", "cuBLAS", "allow_cublas"),
    ("cblas_", "CBLAS", "allow_cublas"),
    ("getCurrentCUDABlasHandle", "cuBLAS", "allow_cublas"),
    ("getCurrentCUDABlasLtHandle", "cuBLASLt", "allow_cublas"),
    ("cudnn", "cuDNN", "allow_cudnn"),
    ("CUDNN_", "cuDNN", "allow_cudnn"),
    ("getCudnnHandle", "cuDNN", "allow_cudnn"),
    ("cufft", "cuFFT", ""),
    ("cusparse", "cuSPARSE", ""),
    ("cusolver", "cuSOLVER", ""),
    ("curand", "cuRAND", ""),
    ("cutensor", "cuTENSOR", ""),
    ("nccl", "NCCL", ""),
    ("mkl_", "MKL", ""),
    ("MKL_", "MKL", ""),
    ("dnnl", "oneDNN", ""),
    ("mkldnn", "oneDNN", ""),
    ("ideep", "oneDNN", ""),
    ("openblas_", "OpenBLAS", ""),
    ("goto_set_num_threads", "OpenBLAS", ""),
    ("bli_", "BLIS", ""),
    ("LAPACKE_", "LAPACK", ""),
    ("lapack_", "LAPACK", ""),
    ("libxsmm_", "LIBXSMM", ""),
    ("armpl_", "Arm PL", ""),
    ("xnn_", "XNNPACK", ""),
    ("pytorch_qnnp_", "QNNPACK", ""),
    ("qnnp_", "QNNPACK", ""),
    ("nnp_", "NNPACK", ""),
    ("magma", "MAGMA", ""),
    ("fbgemm", "FBGEMM", ""),
    ("Eigen", "Eigen", ""),
)
"""Library identifiers: cuBLAS (GEMM only) and cuDNN (convolution only) when the policy allows them, the
others never unless the allow list names them."""

BLAS_RE = (
    r"^(?:cblas_|f77_|blas_|mkl_|mkl_cblas_)?"
    r"(?:(?:[sdcz]|sc|dz|cs|zd|sds|ds|i[sdcz])(?:rotg|rotmg|rotm|rot|swap|scal|copy|axpy|axpby|dot|dotu|dotc|nrm2"
    r"|asum|amax|amin)"
    r"|[sdcz](?:gemv|gbmv|hemv|hbmv|hpmv|symv|sbmv|spmv|trmv|tbmv|tpmv|trsv|tbsv|tpsv|geru|gerc|ger|her2|her|hpr2|hpr"
    r"|syr2|syr|spr2|spr)"
    r"|(?:[sdcz]|sb|sh|h|bf16|hs|hh)(?:gemm3m|gemmt|gemm|symm|hemm|syr2k|syrk|her2k|herk|trmm|trsm|omatcopy|imatcopy"
    r"|omatadd)"
    r"|gemm_(?:s8u8s32|s16s16s32|bf16bf16f32|f16f16f32|e5m2e5m2f32)"
    r"|[sdcz](?:gesv|getrf|getrs|getri|potrf|potrs|potri|geqrf|orgqr|ungqr|gesvd|gesdd|syevd|syev|heevd|heev|geev"
    r"|gelsd|gels|trtrs|trtri|sytrf|hetrf))"
    r"(?:_batch(?:_strided)?|_pack(?:_get_size)?|_compute|_alloc|_free|_64|64)?_*$"
)
"""BLAS and LAPACK routines under every spelling: Fortran (``sgemm_``, ``SGEMM``), CBLAS (``cblas_sgemm``), MKL
and OpenBLAS extensions (``cblas_sgemm_batch``, ``sbgemm_``, ``cblas_gemm_s8u8s32``), ILP64 (``sgemm_64_``).
Matched without regard to case; names the solution defines itself are its own."""

VML_RE = (
    r"^v[ms]?[sdcz](?:Add|Sub|Mul|Div|Sqr|Sqrt|InvSqrt|Exp|Expm1|Exp2|Ln|Log10|Log1p|Log2|Pow|Powx|Tanh|Sinh|Cosh|Sin"
    r"|Cos|Tan|Erf|Erfc|ErfInv|Abs|Inv|Cbrt|Hypot|Atan2|Fmax|Fmin|MaxMag|MinMag|Floor|Ceil|Round|Trunc|CdfNorm"
    r"|SinCos|LGamma|TGamma|LinearFrac)$"
)
"""MKL's vector math functions (``vsExp``, ``vdTanh``, ``vmsAdd``)."""

ASM_FILE_DIRECTIVES = _words("incbin include")
ASM_DATA_DIRECTIVES = _words(
    """
    byte 2byte 4byte 8byte word hword short int long quad octa ascii asciz string string8 string16 string32
    string64 float single double dc ds fill zero skip space sleb128 uleb128 base64 reloc inst insn
    """
)
ASM_SYMBOL_DIRECTIVES = _words(
    """
    section pushsection popsection previous subsection text data bss globl global weak weakref symver set equ equiv
    eqv comm lcomm protected hidden internal macro irp irpc rept altmacro purgem org
    """
)
"""Assembler directives that pull files in (``.incbin``), emit raw code or data (``.byte``), or define symbols
and sections (``.globl clock_gettime``); inline PTX needs none of them (its ``.reg``/``.shared`` are fine)."""

ASM_SYSCALL_RE = r"\b(?:syscall|sysenter|int\s+\$?0x80|svc\s+#?0)\b"
"""Instructions that enter the kernel."""

SYMBOL_ATTRIBUTES = _words("alias weakref ifunc symver")
"""Attributes that bind a declaration to another symbol (``__attribute__((weakref("dlsym")))``)."""

CUBLAS_SUPPORT = _words(
    """
    cublasCreate cublasCreate_v2 cublasDestroy cublasDestroy_v2 cublasSetStream cublasSetStream_v2 cublasGetStream
    cublasGetStream_v2 cublasSetMathMode cublasGetMathMode cublasSetWorkspace cublasSetWorkspace_v2
    cublasGetStatusString cublasGetStatusName cublasSetPointerMode cublasSetPointerMode_v2 cublasGetVersion
    getCurrentCUDABlasHandle getCurrentCUDABlasLtHandle
    """
)
CUDNN_SUPPORT_WORDS = ("Convolution", "Descriptor", "Create", "Destroy", "SetStream", "GetStream", "GetErrorString",
                       "GetVersion", "AddTensor", "Backend", "Filter", "Handle")  # fmt: skip
"""cuDNN identifiers that belong to convolution (descriptors, handles, convolution calls, the bias add)."""

LIBRARY_LINK_FLAGS: dict[str, str] = {
    "cublas": "allow_cublas",
    "cublasLt": "allow_cublas",
    "cudnn": "allow_cudnn",
    "cuda": "",
    "cudart": "",
    "c10": "",
    "c10_cuda": "",
    "torch": "",
    "torch_cpu": "",
    "torch_cuda": "",
    "torch_python": "",
    "gomp": "",
    "m": "",
}
"""``-l`` flags a ``load_inline``/``load`` call may pass, and the policy field each needs ("" = always)."""

ALLOWED_ATEN_OPS = _words(
    """
    aten::empty aten::empty_like aten::empty_strided aten::zeros aten::zeros_like aten::ones aten::ones_like
    aten::full aten::full_like aten::view aten::reshape aten::_reshape_alias aten::_unsafe_view aten::as_strided
    aten::contiguous aten::permute aten::transpose aten::t aten::expand aten::squeeze aten::unsqueeze
    aten::select aten::slice aten::narrow aten::unbind aten::split aten::chunk aten::flatten aten::unflatten
    aten::detach aten::alias aten::lift_fresh aten::resize_ aten::set_ aten::item aten::_local_scalar_dense
    aten::size aten::stride aten::numel aten::dim aten::is_contiguous
    """
)
"""ATen ops the forward may execute under CUDA Agent's rules (for run-time recording: allocation, views
and metadata). ``contiguous`` may copy, as it does in every eager solution."""
