# Helpers the wheel-trimming scripts source (benchmarks/trim_ray_wheel.sh, benchmarks/stage_llm_wheels.sh): unpack a
# wheel with its files' modes, strip its shared libraries, and repack a trimmed tree as a valid wheel. They run
# "$PYTHON" (python3 unless the caller set it).
PYTHON="${PYTHON:-python3}"

# unpack WHEEL into DIR with the files' modes
unpack() {
    "$PYTHON" - "$1" "$2" <<'PY'
import os, sys, zipfile

with zipfile.ZipFile(sys.argv[1]) as zf:
    for info in zf.infolist():
        path = zf.extract(info, sys.argv[2])
        mode = info.external_attr >> 16
        if mode and not info.is_dir():
            os.chmod(path, mode & 0o777)
PY
}

# drop the symbol tables of the shared libraries under DIR (strip --strip-unneeded keeps the dynamic symbols that
# loading and linking use)
strip_libs() {
    if command -v strip >/dev/null; then
        find "$1" -name '*.so*' -type f -exec strip --strip-unneeded {} +
    else
        echo "no strip here: the libraries under $1 keep their symbol tables" >&2
    fi
}

# rewrite the RECORD of the tree DIR for the files that stay and zip it as WHEEL (deflate, or lzma as a third argument)
repack() {
    "$PYTHON" - "$1" "$2" "${3:-deflate}" <<'PY'
import base64, csv, hashlib, io, pathlib, sys, zipfile

root, target = pathlib.Path(sys.argv[1]), sys.argv[2]
method = {"deflate": zipfile.ZIP_DEFLATED, "lzma": zipfile.ZIP_LZMA}[sys.argv[3]]
record = next(root.glob("*.dist-info/RECORD"))
files = sorted(p for p in root.rglob("*") if p.is_file() and p != record)
rows = []
for path in files:
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rows.append((path.relative_to(root).as_posix(), f"sha256={digest}", str(len(data))))
rows.append((record.relative_to(root).as_posix(), "", ""))
out = io.StringIO()
csv.writer(out, lineterminator="\n").writerows(rows)
record.write_text(out.getvalue())
# dist-info last, as the wheel spec recommends
files = [p for p in files if ".dist-info/" not in p.relative_to(root).as_posix()]
files += sorted(p for p in root.glob("*.dist-info/**/*") if p.is_file())
with zipfile.ZipFile(target, "w", compression=method, compresslevel=9) as zf:
    for path in files:
        zf.write(path, path.relative_to(root).as_posix())
PY
}
