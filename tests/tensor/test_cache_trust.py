"""The on-disk kernel cache is a trust boundary.

Kernels are Python modules and numba's compiled code is pickled; both are run
or unpickled when a later process loads them. So a cache directory is used
only when nobody else can write to it, every module is checked against the
hash in its name before it is compiled, and a damaged cache is rebuilt rather
than crashing the run. Each test runs a fresh interpreter, as a user would.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ("import json; import minitorch_exp.tensor as T; a = T.arange(10.); "
          "b = (a * 2 + 1).numpy(); print(json.dumps(b.tolist()))")
EXPECTED = [2.0 * i + 1 for i in range(10)]
OTHER_UID = 12345
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def run(cache, **env) -> subprocess.CompletedProcess:
    """SCRIPT in a fresh interpreter with ``MINITORCH_CACHE_DIR=cache``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CACHE")}
    environment.update(MINITORCH_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT),
                       MINITORCH_CPU_BACKEND="numba", **env)
    return subprocess.run([sys.executable, "-c", SCRIPT], env=environment, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def check(proc, warnings: int, *mentions: str) -> None:
    """The run succeeded with the right numbers and ``warnings`` RuntimeWarnings."""
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == EXPECTED
    assert proc.stderr.count("RuntimeWarning") == warnings, proc.stderr
    for text in mentions:
        assert text in proc.stderr, proc.stderr


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    path.chmod(0o700)
    return path


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A cache filled by one clean run: SCRIPT's kernel modules and numba's files."""
    cache = private_dir(tmp_path_factory.mktemp("template") / "kernels")
    check(run(cache), 0)
    assert list(cache.glob("minitorch_kernel_*.py"))
    assert list(cache.glob("__pycache__/*.nbi")) and list(cache.glob("__pycache__/*.nbc"))
    return cache


def plant(directory: Path, template: Path, marker: Path) -> list[str]:
    """Files named as SCRIPT's kernels whose code, if run, creates ``marker``."""
    names = sorted(p.name for p in template.glob("minitorch_kernel_*.py"))
    for name in names:
        (directory / name).write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return names


def digest_matches(path: Path) -> bool:
    digest = path.stem.removeprefix("minitorch_kernel_")
    return hashlib.sha256(path.read_bytes()).hexdigest()[:32] == digest


# ---- untrusted directories: warn once, compile in memory, run nothing planted ----

def test_a_world_writable_cache_dir_is_not_used(tmp_path, template):
    cache = tmp_path / "cache"
    cache.mkdir()
    marker = tmp_path / "marker"
    names = plant(cache, template, marker)
    cache.chmod(0o777)
    elsewhere = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "NUMBA_CACHE_DIR": str(tmp_path / "nb")}
    check(run(cache, **elsewhere), 1, str(cache), "writable by other users")
    assert not marker.exists()
    assert sorted(p.name for p in cache.iterdir()) == names  # nothing written there
    assert not list(tmp_path.rglob("*.nb[ic]"))  # nor numba's files anywhere: in memory


def test_kernels_compiled_in_memory_run_in_parallel_too(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    check(run(cache, MINITORCH_PARALLEL_MIN="1"), 1, str(cache))
    assert not list(cache.iterdir())


@needs_root
@pytest.mark.parametrize("mode", [0o777, 0o755], ids=oct)
def test_a_cache_dir_owned_by_another_user_is_not_used(tmp_path, template, mode):
    cache = tmp_path / "cache"
    cache.mkdir()
    marker = tmp_path / "marker"
    names = plant(cache, template, marker)
    for path in [cache, *cache.iterdir()]:
        os.chown(path, OTHER_UID, OTHER_UID)
    cache.chmod(mode)
    check(run(cache), 1, str(cache), f"owned by uid {OTHER_UID}")
    assert not marker.exists()
    assert sorted(p.name for p in cache.iterdir()) == names


def test_a_symlinked_cache_dir_is_not_used(tmp_path, template):
    real = private_dir(tmp_path / "real")
    marker = tmp_path / "marker"
    plant(real, template, marker)
    link = tmp_path / "link"
    link.symlink_to(real)
    check(run(link), 1, str(link), "symbolic link")
    assert not marker.exists()


def test_a_cache_dir_inside_a_world_writable_dir_is_not_used(tmp_path, template):
    """Whoever can rename the cache directory can swap in their own."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    cache = private_dir(shared / "kernels")
    marker = tmp_path / "marker"
    plant(cache, template, marker)
    check(run(cache), 1, str(shared), "writable by other users")
    assert not marker.exists()


@needs_root
def test_the_temporary_fallback_dir_is_checked_too(tmp_path, template):
    """A configured directory that cannot be created sends kernels to
    ``<tmp>/minitorch_exp-<uid>/kernels``, which anyone could have made first."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    squatted = tmp / f"minitorch_exp-{os.getuid()}"
    kernels = squatted / "kernels"
    kernels.mkdir(parents=True)
    marker = tmp_path / "marker"
    plant(kernels, template, marker)
    for path in [squatted, kernels, *kernels.iterdir()]:
        os.chown(path, OTHER_UID, OTHER_UID)
        path.chmod(0o777)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    check(run(blocker / "kernels", TMPDIR=str(tmp)), 1, str(squatted))
    assert not marker.exists()


def test_the_temporary_fallback_dir_is_made_private(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    check(run(blocker / "kernels", TMPDIR=str(tmp)), 0)
    kernels = tmp / f"minitorch_exp-{os.getuid()}" / "kernels"
    assert list(kernels.glob("minitorch_kernel_*.py"))
    for path in [kernels.parent, kernels, kernels / "__pycache__"]:
        assert path.stat().st_mode & 0o777 == 0o700, path


# ---- modules checked against their names ------------------------------------

def test_a_planted_module_with_the_right_name_is_detected(tmp_path, template):
    """Valid kernel code with altered maths, under the name of the real one."""
    cache = private_dir(tmp_path / "kernels")
    for path in template.glob("minitorch_kernel_*.py"):
        text = path.read_text()
        assert "out[p] = " in text
        (cache / path.name).write_text(text.replace("out[p] = ", "out[p] = 7 + "))
    check(run(cache), 1, "does not match")
    assert all(digest_matches(p) for p in cache.glob("minitorch_kernel_*.py"))
    check(run(cache), 0)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garble(path: Path) -> None:
    path.write_bytes(b"\x80\x04\x95garbage\xff\x00" * 7)


def _drop_serial(path: Path) -> None:
    path.write_text(path.read_text().replace("def serial(", "def serial_gone("))


CORRUPTIONS = {
    "truncated module": ("minitorch_kernel_*.py", _truncate),          # SyntaxError
    "garbled module": ("minitorch_kernel_*.py", _garble),              # not even text
    "module without serial": ("minitorch_kernel_*.py", _drop_serial),  # AttributeError
    "garbled numba index": ("__pycache__/*.nbi", _garble),             # UnpicklingError
    "truncated numba index": ("__pycache__/*.nbi", _truncate),
    "empty numba data": ("__pycache__/*.nbc", lambda p: p.write_bytes(b"")),  # EOFError
    "garbled numba data": ("__pycache__/*.nbc", _garble),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_corrupted_cache_is_regenerated(tmp_path, template, corruption):
    cache = tmp_path / "kernels"
    shutil.copytree(template, cache)
    pattern, damage = CORRUPTIONS[corruption]
    damaged = list(cache.glob(pattern))
    assert damaged
    for path in damaged:
        damage(path)
    check(run(cache), len(damaged))
    check(run(cache), 0)  # and repaired: the next run is quiet


# ---- where things are written ------------------------------------------------

def test_directories_we_create_are_private(tmp_path):
    cache = tmp_path / "a" / "b" / "kernels"
    check(run(cache), 0)
    for path in [tmp_path / "a", tmp_path / "a" / "b", cache, cache / "__pycache__"]:
        assert path.stat().st_mode & 0o777 == 0o700, path


def test_an_existing_dir_of_ours_only_we_can_write_is_used(tmp_path):
    cache = tmp_path / "kernels"
    cache.mkdir()
    cache.chmod(0o755)
    check(run(cache), 0)
    assert list(cache.glob("minitorch_kernel_*.py"))


def test_numba_files_stay_in_the_checked_dir(tmp_path):
    """numba's settings do not move our kernels' pickles out of the checked dir."""
    cache = tmp_path / "kernels"
    elsewhere = tmp_path / "numba"
    check(run(cache, NUMBA_CACHE_DIR=str(elsewhere),
              NUMBA_CACHE_LOCATOR_CLASSES="UserProvidedCacheLocator"), 0)
    assert list(cache.glob("__pycache__/*.nbi"))
    assert not list(elsewhere.rglob("*.nb[ic]"))


# ---- the module itself -------------------------------------------------------

def test_kernel_files_are_named_as_before():
    """Files already in users' caches keep their names: sha256 of the source, 32 digits."""
    from minitorch_exp.tensor import cpu_numba, kernel_cache
    source = "x = 1\n"
    digest = hashlib.sha256(source.encode()).hexdigest()[:32]
    assert kernel_cache.module_name(source) == f"minitorch_kernel_{digest}"
    assert cpu_numba.cache_dir is kernel_cache.cache_dir


def test_kernel_cache_imports_only_the_standard_library_and_numba():
    tree = ast.parse((ROOT / "minitorch_exp" / "tensor" / "kernel_cache.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports: nothing from the engine"
            imported.add(node.module.split(".")[0])
    allowed = set(sys.stdlib_module_names) | {"numba", "numpy"}
    assert imported <= allowed, imported - allowed
