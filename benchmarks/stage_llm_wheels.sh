#!/usr/bin/env bash
# Stages the wheels the LLM PPO recipe (baselines/llm_ppo, benchmarks/llm_ppo_curve.py) needs on the device machine
# and that its image lacks or has too old: transformers, TRL, PEFT, Accelerate, huggingface_hub and what they import
# on the recipe's paths. TRL's chat templates import trl.data_utils, hence datasets and pyarrow.
#
# Downloads them with pip (cp312 by default, LLM_PY=3.11 for cp311), trims pyarrow and transformers and strips the
# native libraries of pyarrow, tokenizers and kernels (each below), rewrites those wheels' RECORD and repacks them.
#
#   benchmarks/stage_llm_wheels.sh [OUT_DIR]    (default: .device/llm)
#
# Install them on the device after `source .device/setup.sh` (benchmarks/README.md).
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/wheel_tools.sh"  # unpack, strip_libs, repack

PY="${LLM_PY:-3.12}"  # the Python the wheels are for (the device's python3 is 3.12)
OUT="${1:-.device/llm}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# Not staged, being on the device's image at versions these accept: torch, numpy, pandas, packaging, filelock, fsspec,
# jinja2, pyyaml, regex, tqdm, psutil, xxhash, click, typer, rich, anyio, idna, h11, safetensors and hf_xet
# (huggingface_hub's downloads only; nothing here downloads from a hub). typing_extensions and pydantic come from
# .device/wheels.
PACKAGES=(
    transformers==5.25.0 trl==1.16.0 peft==0.21.2 accelerate==1.16.0 huggingface_hub==2.4.0
    # the image's tokenizers (0.23.2) requires huggingface_hub<2
    tokenizers==0.23.3
    # transformers imports kernels at import time; kernels needs tomlkit
    kernels==0.19.1 tomlkit==0.15.3
    # huggingface_hub's HTTP client
    httpx2==2.17.0 httpcore2==2.17.0 truststore==0.10.5
    # trl.data_utils imports datasets
    datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 pyarrow==26.0.1
)

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
for package in "${PACKAGES[@]}"; do rm -f "$OUT/${package%%==*}"-*.whl; done  # an earlier run's
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    -d "$WORK/dl" "${PACKAGES[@]}"

# pyarrow: datasets loads pyarrow's core, compute, parquet, dataset and acero libraries, and libarrow_python links
# substrait too. Removed: Arrow Flight (RPC) and the S3 filesystem with their libraries (the largest after libarrow;
# pyarrow.fs skips a filesystem that fails to import), the two extra copies of each libarrow_python* library (the
# loader asks for the .so.NNNN name), the C++ headers and sources, the Cython sources, the tests and pyarrow's own C++
# test module; the shared libraries lose their symbol tables.
WHEEL="$(ls "$WORK"/dl/pyarrow-*.whl)"
unpack "$WHEEL" "$WORK/pyarrow"
(
    cd "$WORK/pyarrow/pyarrow"
    rm -rf include src tests includes libarrow_flight.so* libarrow_python_flight.so* _flight.*.so flight.py \
        libarrow_s3.so* _s3fs.*.so _pyarrow_cpp_tests.*.so conftest.py
    rm -f libarrow_python.so libarrow_python*.so.*.*.* libarrow_python_parquet_encryption.so
    find . -name '*.pxd' -o -name '*.pxi' -o -name '*.pyx' | xargs rm -f
    find . -type d -name __pycache__ -prune -exec rm -rf {} +
)
strip_libs "$WORK/pyarrow"
rm "$WHEEL"
# its libraries compress much better with LZMA than with deflate: a zip method that pip (Python's zipfile) installs
# as well; LLM_PYARROW_ZIP=deflate for the usual one
repack "$WORK/pyarrow" "$WHEEL" "${LLM_PYARROW_ZIP:-lzma}"

# tokenizers and kernels: their Rust extensions lose their symbol tables too
for name in tokenizers kernels; do
    WHEEL="$(ls "$WORK"/dl/"$name"-*.whl)"
    unpack "$WHEEL" "$WORK/$name"
    strip_libs "$WORK/$name"
    rm "$WHEEL"
    repack "$WORK/$name" "$WHEEL"
done

# transformers: its model folders are most of it, and the recipe builds a Qwen3. Removed: every modular_*.py (the
# source its modeling files are generated from: never imported), and the modeling files of the model folders outside
# a keep set: LLM_KEEP_MODELS, the folders that code outside transformers/models (transformers' own, TRL's, PEFT's,
# Accelerate's) imports from by module or class name, and the folders those import from. Every folder keeps its configuration, tokenizer, processors and __init__, so the Auto
# classes still know every model type; building a model of a trimmed type fails at the import of its class.
KEEP="${LLM_KEEP_MODELS:-auto qwen2 qwen2_moe qwen3 qwen3_moe llama mistral gemma gemma2 phi3 gpt2}"
for name in transformers trl peft accelerate; do unpack "$(ls "$WORK"/dl/"$name"-*.whl)" "$WORK/$name"; done
"$PYTHON" - "$WORK" $KEEP <<'PY'
import ast, pathlib, re, sys

work, keep = pathlib.Path(sys.argv[1]), set(sys.argv[2:])
models = work / "transformers/transformers/models"
folders = {d.name: d for d in models.iterdir() if d.is_dir()}
owner = {}  # class name -> the model folders whose modeling files define it
for name, folder in folders.items():
    for f in folder.glob("modeling_*.py"):
        for node in ast.parse(f.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                owner.setdefault(node.name, set()).add(name)
for f in (f for name in ("transformers", "trl", "peft", "accelerate") for f in (work / name).rglob("*.py")):
    if models in f.parents:
        continue
    for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            module = ("transformers." if node.level and "/transformers/transformers/" in f.as_posix() else "") + (
                node.module or "")
            if module.startswith("transformers"):
                keep.update(re.findall(r"models\.(\w+)", module))
                for alias in node.names:
                    keep |= owner.get(alias.name, set())
        elif isinstance(node, ast.Import):
            for alias in node.names:
                keep.update(re.findall(r"^transformers\.models\.(\w+)", alias.name))
todo = [k for k in keep if k in folders]
while todo:  # the folders the kept ones import from
    for f in folders[todo.pop()].glob("*.py"):
        if f.name.startswith("modular_"):
            continue
        text = f.read_text(encoding="utf-8")
        for other in re.findall(r"^\s*from \.\.(\w+)", text, re.M) + re.findall(r"transformers\.models\.(\w+)", text):
            if other in folders and other not in keep:
                keep.add(other)
                todo.append(other)
for name, folder in folders.items():
    for f in folder.glob("*.py"):
        if f.name.startswith("modular_") or (name not in keep and f.name.startswith("modeling_")):
            f.unlink()
print("transformers keeps the models of:", " ".join(sorted(keep & set(folders))))
PY
WHEEL="$(ls "$WORK"/dl/transformers-*.whl)"
rm "$WHEEL"
repack "$WORK/transformers" "$WHEEL"

cp "$WORK"/dl/*.whl "$OUT"/
ls -l "$OUT"/*.whl | awk '{printf "%8.1f MiB  %s\n", $5 / 1048576, $NF}'
echo "total: $(du -cb "$OUT"/*.whl | tail -1 | awk '{printf "%.1f MiB", $1 / 1048576}') in $OUT"
