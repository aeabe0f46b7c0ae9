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

COMPILERS = ("torch.compile", "torch.jit.script", "torch.jit.trace", "torch._dynamo", "torch._inductor", "torch.fx",
             "torch.export")  # fmt: skip
"""torch's own compilers: the code they generate is torch's, not the agent's (flagged anywhere in the file)."""

# -- C++ / CUDA ----------------------------------------------------------------------------------------

ATEN_NAMESPACES = _words("at torch")
ATEN_ALLOWED_CALLS = _words(
    """
    empty empty_like empty_strided zeros zeros_like ones ones_like full full_like from_blob scalar_tensor
    getCurrentCUDAStream getDefaultCUDAStream getCurrentDeviceProperties getDeviceProperties current_device
    device_count device_of elementSize toString isFloatingType isComplexType isIntegralType get_num_threads
    get_thread_num parallel_for parallel_reduce typeMetaToScalarType
    """
)
"""``at::``/``torch::`` functions a binding may call: allocation, stream and device queries, ATen's own
thread-pool loop (the CPU counterpart of a kernel launch)."""

ATEN_FORBIDDEN_NAMESPACES = _words("native nn jit autograd functional _ops linalg special fft blas cudnn")
"""Namespaces under ``at::``/``torch::`` that hold compute, whatever the function's name."""

CPP_TENSOR_COMPUTE_METHODS = (TENSOR_COMPUTE_METHODS - _words("all any type int float double long short char")) | (
    _words("index index_put_ fill_ zero_ copy_ add_ sub_ mul_ div_ clamp_ relu_ exp_ masked_fill_ normal_ uniform_")
)
"""Tensor methods a binding may not call (``.sum()``, ``.mm()``, ``.fill_()``; cooperative groups'
``.any()``/``.all()`` and C++ casts are not tensor methods and stay allowed)."""

ATEN_BARE_COMPUTE = _words(
    """
    matmul mm bmm addmm baddbmm linear conv1d conv2d conv3d conv_transpose2d softmax log_softmax layer_norm
    group_norm batch_norm rms_norm relu gelu silu einsum scaled_dot_product_attention cumsum logsumexp argmax
    argmin topk sort
    """
)
"""Compute functions recognised without a namespace after ``using namespace at``/``torch``."""

CPP_CONCURRENCY = _words(
    """
    pthread_create pthread_detach fork vfork clone system popen execl execle execlp execv execve execvp execvpe
    posix_spawn posix_spawnp daemon CreateThread _beginthread _beginthreadex omp_set_num_threads
    omp_set_dynamic omp_set_max_active_levels sched_setaffinity pthread_setaffinity_np setpriority nice
    """
)
CPP_STD_CONCURRENCY = _words("thread jthread async system")
"""``std::`` members that start threads or processes."""

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
    __cudaRegisterFatBinaryEnd __fatbinwrap fatbinData incbin
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
    ("dnnl", "oneDNN", ""),
)
"""Library identifiers: cuBLAS (GEMM only) and cuDNN (convolution only) when the policy allows them, the
others never unless the allow list names them."""

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
