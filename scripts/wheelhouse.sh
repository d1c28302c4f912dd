#!/usr/bin/env bash
# Build an offline wheelhouse: a folder of wheels from which the harness installs on a machine that has torch
# already (e.g. a CUDA build on a GPU node) and no package index. Run it where the registry is reachable:
#   bash scripts/wheelhouse.sh wheels --python 3.12 [--have target-freeze.txt [--missing-only]] [--skinny] [--with-test]
# then carry the folder over and run `bash wheels/install.sh` there (wheels/README.txt says the same).
#
# What goes in: the harness's own wheel and every package of its runtime closure at the version constraints.txt
# locks (found by walking the Requires-Dist of the wheels themselves, with the target's Python version in the
# markers), except torch and the CUDA / triton packages, which the target brings. torch's own requirements
# (filelock, sympy, ...) are shipped too unless --have says the target has them at the locked version.
# Wheels are downloaded for CPython X.Y on manylinux x86_64; a locked package with no such wheel (seqeval
# publishes none) is built from its sdist here, which must give a pure-Python wheel (py3-none-any).
#
# --missing-only (with --have) leaves out every package the target has at any version, and what only those packages
# need: the target's own versions are used, not the lock's, which trades the tested versions for size (a node whose
# transformers, numpy, pyarrow, ... are at other versions). The rest ships at the locked versions, with the harness's
# wheel, and installs with `pip install --no-index --no-deps`: no resolution, so neither the harness's torch==2.13.0
# nor any other requirement is checked against what the target has; the script lists the ones the target's versions
# do not meet. A few packages ship at the locked version whatever the target has (KEEP_LOCKED below).
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bash scripts/wheelhouse.sh OUT_DIR [--python X.Y] [--have FREEZE_FILE [--missing-only]] [--skinny] [--with-test]
  OUT_DIR             folder to write the wheels, constraints.txt, install.sh and README.txt into
                      (absent, empty, or a wheelhouse this script wrote before: its files are replaced)
  --python X.Y        the target's Python version (default: the running python3's)
  --have FREEZE_FILE  `pip freeze` of the target: packages it has at the locked version are left out
  --missing-only      with --have: leave out every package the target has at any version (its version is used,
                      not the lock's: smaller, but not the tested versions) and install with --no-deps
  --skinny            mlflow-skinny + mlflow-tracing (+ SQLAlchemy, alembic) instead of mlflow: enough for
                      `harness run` and `harness leaderboard`, not for `harness ui` (the MLflow UI server)
  --with-test         also the test extra (pytest, ruff, ray)
EOF
}

bad() {
  echo "wheelhouse.sh: $1" >&2
  usage >&2
  exit 2
}

out="" pyver="" have="" skinny=0 with_test=0 missing_only=0
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --python)
      (($# >= 2)) || bad "--python needs a version, e.g. 3.12"
      [[ "$2" =~ ^3\.[0-9]+$ ]] || bad "--python takes MAJOR.MINOR, e.g. 3.12 (got '$2')"
      pyver=$2; shift 2 ;;
    --have)
      (($# >= 2)) || bad "--have needs a file (the target's pip freeze)"
      [[ -f "$2" ]] || bad "--have: no such file: $2"
      have=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
    --skinny) skinny=1; shift ;;
    --missing-only) missing_only=1; shift ;;
    --with-test) with_test=1; shift ;;
    -*) bad "unknown option: $1" ;;
    *)
      [[ -z "$out" ]] || bad "one OUT_DIR only (got '$out' and '$1')"
      out=$1; shift ;;
  esac
done
[[ -n "$out" ]] || bad "OUT_DIR is missing"
((!missing_only)) || [[ -n "$have" ]] || bad "--missing-only needs --have FREEZE_FILE (the target's pip freeze)"

repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
"$python" -m pip --version >/dev/null 2>&1 || { echo "wheelhouse.sh: $python has no pip" >&2; exit 1; }
if [[ -z "$pyver" ]]; then
  pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
fi
if [[ -e "$out" && -n "$(ls -A "$out")" && ! -f "$out/install.sh" ]]; then
  bad "$out exists, is not empty and is not a wheelhouse written by this script"
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

"$python" - "$repo" "$out" "$stage" "$pyver" "$have" "$skinny" "$with_test" "$missing_only" <<'PY'
import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import HeaderParser
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.tags import compatible_tags, cpython_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import Version
except ImportError:  # pip always carries a copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.tags import compatible_tags, cpython_tags
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename
    from pip._vendor.packaging.version import Version

repo, out, stage = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
pyver, have_file, skinny, with_test = sys.argv[4], sys.argv[5], sys.argv[6] == "1", sys.argv[7] == "1"
missing_only = sys.argv[8] == "1"
major, minor = (int(x) for x in pyver.split("."))
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
# torch 2.13.0's requirements without setuptools (it comes with every pip-installed torch and is not in the lock)
# and the CUDA packages; tests/test_wheelhouse.py checks this list against the installed torch.
TORCH_DEPS = ["filelock", "typing-extensions", "sympy", "networkx", "jinja2", "fsspec"]
# what --skinny puts in mlflow's place: the two halves of mlflow that `harness run` imports, and the SQL store's
# own requirements, which mlflow declares but mlflow-skinny does not
SKINNY = ["mlflow-skinny", "mlflow-tracing", "sqlalchemy", "alembic"]
# --missing-only ships these at the locked version even where the target has another, each for a reason found on a
# real node: importlib_metadata 10.x imports a `lazy_importer` module and `import mlflow` fails with it
KEEP_LOCKED = {"importlib-metadata": "10.x breaks `import mlflow`"}
pip = [sys.executable, "-m", "pip"]
if sys.version_info[:2] == (major, minor):
    full_version = "%d.%d.%d" % sys.version_info[:3]
else:
    full_version = f"{pyver}.0"
ENV = {"python_version": pyver, "python_full_version": full_version, "implementation_name": "cpython",
       "implementation_version": full_version, "platform_python_implementation": "CPython",
       "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix", "platform_machine": "x86_64"}
# what a glibc 2.28 x86_64 CPython X.Y installs (the check of every wheel that goes in)
TAG_PLATFORMS = [f"manylinux_2_{i}_x86_64" for i in range(28, 4, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
TARGET_TAGS = set(cpython_tags((major, minor), platforms=TAG_PLATFORMS)) | set(
    compatible_tags((major, minor), f"cp{major}{minor}", platforms=TAG_PLATFORMS))


def die(msg: str) -> None:
    print(f"wheelhouse.sh: {msg}", file=sys.stderr)
    sys.exit(1)


def excluded(name: str) -> bool:
    return name in {"torch", "triton"} or name.startswith(("nvidia-", "cuda-"))


# the installer's own packages: the lock leaves them out (scripts/lock.sh) and every environment that has torch has
# them (torch itself requires setuptools), so a requirement on them is left to the target
INSTALLER = {"pip", "setuptools", "wheel"}


def lock_pins(path: Path) -> dict[str, tuple[str, str]]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = (name.strip(), version.strip())
    return pins


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)


def requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        headers = HeaderParser().parsestr(zf.read(meta).decode("utf-8"))
    return [Requirement(r) for r in headers.get_all("Requires-Dist") or []]


def needed(req: Requirement, extras: set[str]) -> bool:
    return req.marker is None or any(req.marker.evaluate({**ENV, "extra": e}) for e in extras)


def wheels_in(folder: Path) -> dict[str, Path]:
    return {canonicalize_name(parse_wheel_filename(p.name)[0]): p for p in folder.glob("*.whl")}


lock = lock_pins(repo / "constraints.txt")

# what the target has (--have): name -> its version (None where the freeze gives none)
present: dict[str, Version | None] = {}
if have_file:
    for line in Path(have_file).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        if "==" in line:
            name, _, version = line.partition("==")
            try:
                present[canonicalize_name(name)] = Version(Version(version.strip()).public)
            except ValueError:
                present[canonicalize_name(name)] = None
        else:  # "name @ url": a version we cannot compare
            present[canonicalize_name(re.split(r"[\s@=<>!~;\[]", line, maxsplit=1)[0])] = None


def the_targets(name: str) -> bool:
    """--missing-only: the target's own version of this package is used, and nothing is shipped for it."""
    return missing_only and name in present and name not in KEEP_LOCKED


def label(wheel: Path) -> str:
    name, version = parse_wheel_filename(wheel.name)[:2]
    return f"{name} {version}"

# 1. the harness's own wheel, built from a copy of the project (the checkout is left as it is)
src = stage / "src"
src.mkdir()
for item in ["pyproject.toml", "README.md", "harness", "methods", "tasks", "leaderboard"]:
    if (repo / item).is_dir():
        shutil.copytree(repo / item, src / item, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        shutil.copy2(repo / item, src / item)
built = stage / "built"
r = run(pip + ["wheel", "--no-deps", "--quiet", "-w", str(built), str(src)])
if r.returncode:
    die(f"building the harness's wheel failed:\n{r.stdout}{r.stderr}")
(harness_wheel,) = built.glob("vocab_init_harness-*.whl")

# 2. the runtime closure, level by level: download each level's wheels for the target and read their requirements.
# With --missing-only a package the target has is neither downloaded nor followed (what it needs, the target has);
# only the extras asked of it are (datasets asks for fsspec[http]), read from the locked version's wheel.
roots: list[tuple[Requirement, str]] = []  # (requirement, who requires it)
for req in requires(harness_wheel):
    if not needed(req, {"", "test"} if with_test else {""}):
        continue
    if skinny and canonicalize_name(req.name) == "mlflow":
        roots += [(Requirement(n), label(harness_wheel)) for n in SKINNY]
    else:
        roots.append((req, label(harness_wheel)))
if not (missing_only and "torch" in present):  # a torch that the target has brings what it needs
    roots += [(Requirement(n), "torch") for n in TORCH_DEPS]

seen: dict[str, set[str]] = {}  # name -> extras whose requirements were followed
from_target: set[str] = set()  # --missing-only: the closure's packages that the target brings
demands: list[tuple[str, Requirement]] = []  # --missing-only: (requirer, requirement) on what the target brings
frontier = roots
from_sdist: list[str] = []
dl = stage / "dl"
dl.mkdir()
while frontier:
    todo: dict[str, set[str]] = {}
    for req, requirer in frontier:
        name = canonicalize_name(req.name)
        if the_targets(name):
            demands.append((requirer, req))
        if excluded(name) or name in INSTALLER:
            continue
        if name not in lock:
            die(f"{req.name} is needed ({req}) but constraints.txt does not pin it; regenerate the lock")
        if the_targets(name):
            from_target.add(name)
            want = set(req.extras)
        else:
            want = {""} | set(req.extras)
        if not want <= seen.get(name, set()):
            todo.setdefault(name, set()).update(want - seen.get(name, set()))
    missing = [n for n in todo if n not in wheels_in(dl)]
    while missing:
        r = run(pip + ["download", "--no-deps", "--only-binary=:all:", "--python-version", pyver,
                       "--implementation", "cp", *[a for p in PLATFORMS for a in ("--platform", p)],
                       "-d", str(dl), *[f"{lock[n][0]}=={lock[n][1]}" for n in missing]])
        if r.returncode == 0:
            break
        m = re.search(r"No matching distribution found for (\S+?)==", r.stdout + r.stderr)
        if not m or canonicalize_name(m.group(1)) not in missing:
            die(f"pip download failed:\n{r.stdout}{r.stderr}")
        name = canonicalize_name(m.group(1))
        missing.remove(name)
        # no wheel for the target: build one from the sdist with this Python; only a pure-Python one will do
        r = run(pip + ["wheel", "--no-deps", "--quiet", "--no-binary", lock[name][0], "-w", str(stage / "sdist"),
                       f"{lock[name][0]}=={lock[name][1]}"])
        if r.returncode:
            die(f"{lock[name][0]}=={lock[name][1]} has no wheel for CPython {pyver} and building one from its "
                f"sdist failed:\n{r.stdout}{r.stderr}")
        wheel = wheels_in(stage / "sdist")[name]
        if not set(parse_wheel_filename(wheel.name)[3]) & TARGET_TAGS:
            die(f"{lock[name][0]}=={lock[name][1]} has no wheel for CPython {pyver}, and its sdist builds "
                f"{wheel.name} here, which that Python cannot install; build it on a Python {pyver} machine")
        shutil.move(str(wheel), dl / wheel.name)
        from_sdist.append(wheel.name)
    have_wheels = wheels_in(dl)
    frontier = []
    for name, extras in todo.items():
        wheel = have_wheels[name]
        if name in from_target:  # only the requirements that the asked-for extras add
            frontier += [(req, label(wheel)) for req in requires(wheel)
                         if needed(req, extras) and not needed(req, {""})]
        else:
            if not set(parse_wheel_filename(wheel.name)[3]) & TARGET_TAGS:
                die(f"{wheel.name} does not install on CPython {pyver} / manylinux x86_64")
            frontier += [(req, label(wheel)) for req in requires(wheel) if needed(req, extras)]
        seen.setdefault(name, set()).update(extras)

# 3. what the target has at the locked version (--have), or at any version (--missing-only), stays out
for old in list(out.glob("*.whl")) + [out / f for f in ("constraints.txt", "requirements.txt", "install.sh",
                                                        "README.txt")]:
    old.unlink(missing_ok=True)
shipped, left_out = [harness_wheel.name], []
shutil.copy2(harness_wheel, out / harness_wheel.name)
for name, wheel in sorted(wheels_in(dl).items()):
    if name not in seen or name in from_target:
        continue
    if name in present and present[name] == Version(lock[name][1]):
        left_out.append(f"{lock[name][0]}=={lock[name][1]}")
        continue
    shutil.copy2(wheel, out / wheel.name)
    shipped.append(wheel.name)

# --missing-only: what the target brings instead of the lock, what ships over the target's own version, and the
# requirements of the shipped packages that the target's versions do not meet (pip check will name them too)
def version_of(name: str) -> str:
    return str(present[name]) if present.get(name) is not None else "(version not in the freeze)"


theirs = [f"{lock[n][0]} {version_of(n)} (lock {lock[n][1]})" for n in sorted(from_target)]
kept = [f"{lock[n][0]} {lock[n][1]} over the target's {version_of(n)}: {why}" for n, why in KEEP_LOCKED.items()
        if missing_only and n in seen and n in present and present[n] != Version(lock[n][1])]
unmet = sorted({f"{requirer} requires {req.name}{req.specifier}, the target has {present[name]}"
                for requirer, req in demands for name in [canonicalize_name(req.name)]
                if present[name] is not None and not req.specifier.contains(present[name], prereleases=True)})
if missing_only and "torch" not in present:
    unmet.insert(0, "the freeze lists no torch: the target must bring it")

# 4. the lock without torch (the target's own build of it stays), the install command, a README
pins = [f"{n}=={v}" for key, (n, v) in lock.items() if not excluded(key)]
(out / "constraints.txt").write_text(
    "# the lock of vocab-init-harness (its constraints.txt) without torch; the wheels here are at these versions\n"
    + "\n".join(pins) + "\n")
if missing_only:
    # no resolution: the target's versions stay as they are, torch==2.13.0 and the rest of the harness's
    # requirements included; the wheels of this folder are exactly what is installed
    install = ('into=()\n'
               'if (($#)); then\n'
               '  [[ $1 == --target && $# == 2 ]] || { echo "usage: bash install.sh [--target DIR]" >&2; exit 2; }\n'
               '  into=(--target "$2")\n'
               'fi\n'
               '"$PYTHON" -m pip install --no-index --no-deps --find-links "$here" ${into[@]+"${into[@]}"} '
               '"$here"/*.whl\n'
               'if (($#)); then\n'
               '  echo "installed into $2: put it first on the path,"\n'
               '  echo "  export PYTHONPATH=$2\\${PYTHONPATH:+:\\$PYTHONPATH}"\n'
               '  echo "and run the harness as: python -m harness.cli ..."\n'
               'fi\n')
    command = f"pip install --no-index --no-deps --find-links {out.name} {out.name}/*.whl"
    command_target = f"pip install --no-index --no-deps --find-links {out.name} --target /tmp/site {out.name}/*.whl"
elif skinny:
    reqs = []
    for r in requires(harness_wheel):
        if needed(r, {"", "test"} if with_test else {""}) and canonicalize_name(r.name) != "mlflow":
            r.marker = None  # evaluated above, for the target
            reqs.append(str(r))
    reqs += SKINNY
    (out / "requirements.txt").write_text(
        "# the harness's requirements with mlflow-skinny, mlflow-tracing, SQLAlchemy and alembic for mlflow (torch\n"
        "# stays: the resolver checks the installed one and its requirements)\n"
        + "\n".join(reqs) + "\n")
    install = ('"$PYTHON" -m pip install --no-index --find-links "$here" -c "$here/constraints.txt" '
               '-r "$here/requirements.txt"\n'
               '"$PYTHON" -m pip install --no-index --no-deps "$here"/vocab_init_harness-*.whl\n')
    command = (f"pip install --no-index --find-links {out.name} -c {out.name}/constraints.txt "
               f"-r {out.name}/requirements.txt && pip install --no-index --no-deps "
               f"{out.name}/vocab_init_harness-*.whl")
else:
    target = "'vocab-init-harness[test]'" if with_test else "vocab-init-harness"
    install = f'"$PYTHON" -m pip install --no-index --find-links "$here" -c "$here/constraints.txt" {target}\n'
    command = f"pip install --no-index --find-links {out.name} -c {out.name}/constraints.txt {target}"
if missing_only:
    header = ("# Install vocab-init-harness and the packages the target lacked from this folder, offline and\n"
              "# without resolving dependencies (--no-deps), into the environment of $PYTHON (default: python3),\n"
              "# or with --target DIR into DIR alone. The target's own versions of every other package are used,\n"
              "# torch's too.\n")
else:
    header = ("# Install vocab-init-harness from this folder, offline, into the environment of $PYTHON (default:\n"
              "# python3), which must have torch 2.13.0 (any build of it).\n")
(out / "install.sh").write_text(
    "#!/usr/bin/env bash\n" + header +
    "set -euo pipefail\n"
    'here=$(cd "$(dirname "$0")" && pwd)\n'
    "PYTHON=${PYTHON:-python3}\n" + install)
(out / "install.sh").chmod(0o755)
skinny_note = ("mlflow-skinny stands in for mlflow: `harness ui` (the MLflow server) needs the full package, and\n"
               "`pip check` says that vocab-init-harness requires mlflow, which is expected.\n")
trade = ("NOT THE LOCKED VERSIONS: every package the target already has is left out, at whatever version it has\n"
         "there, and that version is the one the harness runs with. The harness is tested with the versions of\n"
         "constraints.txt; this wheelhouse trades them for size.")


def listing(title: str, items: list[str], note: str = "") -> str:
    return f"{title} ({len(items)}){note}:\n" + "".join(f"  {i}\n" for i in items) if items else ""


if missing_only:
    unmet_listing = listing("Requirements that the target's versions do not meet", unmet,
                            "; to ship the locked version of\nsuch a package instead, delete its line from the freeze "
                            "file and build again (torch is never shipped)")
    body = f"""\
{trade}

It holds the harness's wheel and the packages that the target lacks (by {Path(have_file).name}), at the versions of
constraints.txt, with what they need that the target lacks too; never torch or the CUDA packages. Some packages
ship at the locked version whatever the target has: {', '.join(f'{n} ({why})' for n, why in KEEP_LOCKED.items())}.
Nothing is resolved at install (--no-deps): the target's torch need not be the 2.13.0 the harness pins.
From the folder that holds {out.name}/, with the target's environment active, either into that environment:

  bash {out.name}/install.sh                       # runs: {command}

or into a folder of its own, which leaves the environment as it is:

  bash {out.name}/install.sh --target /tmp/site    # runs: {command_target}
  export PYTHONPATH=/tmp/site${{PYTHONPATH:+:$PYTHONPATH}}

Then: python -m harness.cli run --world synthetic --methods all --tasks sr-b,sr-t,ner,pos,mlm --device cuda

{listing("Left out, the target's version is used", theirs)}{listing("Shipped over the target's version", kept)}\
{unmet_listing}\
{skinny_note if skinny else ''}"""
else:
    left = ", and what the target has at the locked version (--have)" if have_file else ""
    body = f"""\
It holds the harness's wheel and every package that it and torch need, at the versions of constraints.txt, except
torch itself and the CUDA packages{left}. The target must have torch 2.13.0 (a CUDA build of it is fine) and the
setuptools>=77 that torch requires. From the folder that holds {out.name}/, with the target's environment active:

  bash {out.name}/install.sh

which runs

  {command}

Then: harness run --world synthetic --methods all --tasks sr-b,sr-t,ner,pos,mlm --device cuda
{skinny_note if skinny else ''}"""
flavour = ", ".join(f for f, on in (("mlflow-skinny", skinny), ("missing-only", missing_only)) if on)
(out / "README.txt").write_text(f"Offline wheelhouse of vocab-init-harness for CPython {pyver} on Linux x86_64"
                                f"{f' ({flavour})' if flavour else ''}.\n\n{body}")

print(f"{len(shipped)} wheels in {out} ({len(from_sdist)} built from sdists: {', '.join(from_sdist) or '-'})")
if left_out:
    print(f"left out, the target has them at the locked version ({len(left_out)}): {' '.join(left_out)}")
if missing_only:
    print(trade.replace("\n", " "))
    print(listing("left out, the target's version is used", theirs)
          + listing("shipped over the target's version", kept)
          + listing("requirements that the target's versions do not meet", unmet), end="")
PY

echo "size: $(du -sh "$out" | cut -f1) ($(du -sb "$out" | cut -f1) bytes) in $out"
echo "install there with: bash $(basename "$out")/install.sh"
