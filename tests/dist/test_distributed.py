"""Data parallel over MPI: collectives, DistributedDataParallel, DistributedSampler and the
MNIST example, in jobs really started with ``mpiexec -n 2`` (tests/dist/mpi_worker.py).

The MPI tests are skipped, with the reason, where ``mpi4py`` or an ``mpiexec`` that
runs two processes is missing (``pip install -e '.[dist]'`` installs both; the ``dev``
extra includes them). The CUDA ones need CuPy with NCCL and a GPU per process.
"""

from __future__ import annotations

import functools
import gzip
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn.idx import MNIST_FILES

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "mpi_worker.py"
EXAMPLE = ROOT / "examples" / "mnist_mlp.py"
#: No launcher variables leak in from an outer job; one thread per process.
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "PMIX_"))},
       "MPLBACKEND": "Agg", "TQDM_DISABLE": "1", "PYTHONUNBUFFERED": "1",
       "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "NUMBA_NUM_THREADS": "1"}
TIMEOUT = 300


def find_mpiexec() -> str | None:
    """The mpiexec next to this Python (the mpich wheel's), else one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


@functools.cache
def mpi_reason() -> str | None:
    """Why MPI jobs cannot run here, or None when ``mpiexec -n 2`` works."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install -e '.[dist]')"
    mpiexec = find_mpiexec()
    if mpiexec is None:
        return "no mpiexec found (pip install mpich)"
    code = "from mpi4py import MPI; print(f'<rank {MPI.COMM_WORLD.Get_rank()}>')"
    try:
        proc = subprocess.run([mpiexec, "-n", "2", sys.executable, "-c", code], env=ENV,
                              capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"{mpiexec} -n 2 did not finish in 120 s"
    if proc.returncode != 0 or sorted(re.findall(r"<rank (\d)>", proc.stdout)) != ["0", "1"]:
        return f"{mpiexec} -n 2 failed: {(proc.stderr or proc.stdout)[-300:]}"
    return None


@pytest.fixture
def mpi():
    reason = mpi_reason()
    if reason:
        pytest.skip(reason)
    return find_mpiexec()


def launch(mpiexec, n: int, *args: str, timeout: float = TIMEOUT, env=None):
    """``mpiexec -n n python *args``, its output captured; fails on a hang."""
    start = time.monotonic()
    try:
        proc = subprocess.run([mpiexec, "-n", str(n), sys.executable, *args], cwd=ROOT,
                              env=env or ENV, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"mpiexec -n {n} {' '.join(args)} hung for {timeout} s:\n"
                    f"{err.stdout}\n{err.stderr}")
    proc.seconds = time.monotonic() - start
    return proc


def run_case(mpiexec, name: str, n: int = 2, *extra: str, env=None):
    proc = launch(mpiexec, n, str(WORKER), name, *extra, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    # the ranks' lines may interleave: look for each one's mark
    passed = sorted(re.findall(r"PASS (\w+) rank (\d+)", proc.stdout))
    assert passed == [(name, str(r)) for r in range(n)], proc.stdout
    return proc


# ---- without MPI: imports, errors, the sampler -------------------------------------------------

def python(code: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT, env=env or ENV)


def test_importing_the_package_does_not_import_mpi4py():
    proc = python("import sys, minitorch_exp as mt\n"
                  "from minitorch_exp import nn\n"
                  "import minitorch_exp.distributed, minitorch_exp.nn.parallel\n"
                  "nn.parallel.DistributedDataParallel, nn.DistributedSampler\n"
                  "print(sorted(m for m in sys.modules if m.startswith('mpi4py')))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_init_without_mpi4py_says_what_to_install():
    proc = python("import sys; sys.modules['mpi4py'] = None\n"
                  "import minitorch_exp.distributed as dist\n"
                  "try:\n    dist.init()\n"
                  "except dist.DistributedError as err:\n    print(err)\n")
    assert proc.returncode == 0, proc.stderr
    assert "mpi4py is not installed" in proc.stdout
    assert "pip install 'minitorch_exp[dist]'" in proc.stdout and "mpich" in proc.stdout


def test_init_without_an_mpi_library_says_so():
    pytest.importorskip("mpi4py")
    env = {**ENV, "MPI4PY_LIBMPI": "/nonexistent/libmpi.so.12"}
    proc = python("import minitorch_exp.distributed as dist\n"
                  "try:\n    dist.init()\n    print('initialized')\n"
                  "except dist.DistributedError as err:\n    print(err)\n", env)
    assert proc.returncode == 0, proc.stderr
    if proc.stdout.strip() == "initialized":  # a source build, linked to its library
        pytest.skip("this mpi4py build ignores MPI4PY_LIBMPI (PyPI's wheels load the "
                    "library it names)")
    assert "cannot load an MPI library" in proc.stdout, proc.stdout
    assert "/nonexistent/libmpi.so.12" in proc.stdout and "pip install mpich" in proc.stdout


def test_collectives_before_init_are_an_error():
    proc = python("import minitorch_exp as mt, minitorch_exp.distributed as dist\n"
                  "assert not dist.is_initialized() and dist.is_main_process()\n"
                  "for f in (lambda: dist.all_reduce(mt.ones(2)), dist.barrier, dist.get_rank):\n"
                  "    try:\n        f()\n"
                  "    except dist.DistributedError as err:\n        print(err)\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("call minitorch_exp.distributed.init() first") == 3


def test_launched_reads_the_launcher_environment(monkeypatch):
    import minitorch_exp.distributed as dist
    for name in dist.LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert not dist.launched()
    monkeypatch.setenv("PMI_RANK", "0")
    assert dist.launched()
    monkeypatch.delenv("PMI_RANK")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert dist.launched()


def test_shared_memory_room_is_checked(tmp_path):
    import minitorch_exp.distributed as dist
    assert dist._shm_problem(1 << 20, str(tmp_path)) is None
    problem = dist._shm_problem(1 << 60, str(tmp_path))
    assert "do not fit in" in problem and "--shm-size" in problem
    assert dist._shm_problem(1 << 60, str(tmp_path / "missing")) is None


@pytest.mark.parametrize("n, replicas, drop_last", [(100, 2, False), (101, 2, False),
                                                    (101, 2, True), (10, 3, False),
                                                    (10, 3, True), (2, 4, False), (1, 1, False)])
def test_sampler_shards_are_equal_disjoint_and_complete(n, replicas, drop_last):
    ds = nn.TensorDataset(np.arange(n))
    for epoch in range(3):
        shards = []
        for rank in range(replicas):
            s = nn.DistributedSampler(ds, replicas, rank, seed=4, drop_last=drop_last)
            s.set_epoch(epoch)
            shards.append(list(s))
            assert len(shards[-1]) == len(s)
        assert len({len(s) for s in shards}) == 1  # equal
        flat = [i for s in shards for i in s]
        if drop_last:
            assert len(set(flat)) == len(flat) == (n // replicas) * replicas
        else:
            assert set(flat) == set(range(n))  # complete
            assert len(flat) == -(-n // replicas) * replicas  # padded by the fewest repeats
            if n % replicas == 0:
                assert len(set(flat)) == n  # disjoint


def test_sampler_is_seeded_and_reshuffles_each_epoch():
    ds = nn.TensorDataset(np.arange(50))
    a, b = nn.DistributedSampler(ds, 2, 1, seed=7), nn.DistributedSampler(ds, 2, 1, seed=7)
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first
    b.set_epoch(1)
    assert list(a) == list(b)
    assert list(nn.DistributedSampler(ds, 2, 1, seed=8)) != first
    plain = nn.DistributedSampler(ds, 2, 1, shuffle=False)
    assert list(plain) == list(range(1, 50, 2))


def test_sampler_shards_of_a_global_batch_are_a_single_process_batch():
    """The ranks' batch k together is batch k of one process with the global batch, every
    epoch: the order is the DataLoader's own shuffle."""
    ds = nn.TensorDataset(np.arange(200))
    single = nn.DataLoader(ds, batch_size=32, shuffle=True, seed=9)
    ranks = [nn.DataLoader(ds, batch_size=8, sampler=nn.DistributedSampler(ds, 4, r, seed=9),
                           seed=9) for r in range(4)]
    for _ in range(2):
        for whole, *parts in zip(single, *ranks):
            together = np.concatenate([p[0].numpy() for p in parts])
            assert sorted(together.tolist()) == sorted(whole[0].numpy().tolist())
    assert [r.epoch for r in ranks] == [2] * 4


def test_dataloader_sampler_option():
    ds = nn.TensorDataset(np.arange(10))
    loader = nn.DataLoader(ds, batch_size=4, sampler=[9, 8, 7, 6, 5])
    assert len(loader) == 2
    assert [b[0].numpy().tolist() for b in loader] == [[9, 8, 7, 6], [5]]
    with pytest.raises(ValueError, match="mutually exclusive"):
        nn.DataLoader(ds, sampler=[0, 1], shuffle=True)
    sampler = nn.DistributedSampler(ds, 2, 0, seed=1)
    loader = nn.DataLoader(ds, batch_size=2, sampler=sampler, drop_last=True)
    loader.epoch = 5  # a resumed run: the sampler is told the epoch
    first = [b[0].numpy().tolist() for b in loader]
    assert sampler.epoch == 5 and sum(first, []) == sampler.indices(5)[:4].tolist()


def test_sampler_checks_its_rank():
    ds = nn.TensorDataset(np.arange(4))
    with pytest.raises(ValueError, match="invalid rank"):
        nn.DistributedSampler(ds, 2, 2)
    s = nn.DistributedSampler(ds)  # not initialized: a job of one
    assert (s.num_replicas, s.rank, len(s)) == (1, 0, 4)


# ---- mpiexec -n 2 ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["collectives", "captured_collective", "sampler"])
def test_collectives_against_numpy(mpi, name):
    run_case(mpi, name)


@pytest.mark.parametrize("name", ["ddp_matches_single_process",
                                  "ddp_equals_mean_of_local_gradients",
                                  "ddp_no_sync_and_errors"])
def test_ddp_step_equals_a_single_process_step_on_the_whole_batch(mpi, name):
    run_case(mpi, name)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("name", ["mismatched_collectives", "ddp_mismatched_models"])
def test_tensors_that_differ_across_ranks_are_a_clear_error_on_every_rank(mpi, name, n):
    """Shapes or dtypes that differ (even with equal byte counts), or different calls: a
    DistributedError naming the tensor, the ranks and both signatures, on every rank."""
    run_case(mpi, name, n)


def test_the_check_waits_no_longer_than_the_timeout_allows(mpi):
    run_case(mpi, "mismatched_collectives", 2, "--timeout", "60")


def test_bool_all_reduce_is_a_logical_or_and(mpi):
    run_case(mpi, "bool_all_reduce")


@pytest.mark.parametrize("name", ["ddp_broadcast_buffers", "ddp_one_step_and_identical_ranks"])
def test_ddp_buffers_and_what_is_promised(mpi, name):
    run_case(mpi, name)


def readme_data_parallel_blocks() -> list[str]:
    """The python blocks of the README's "Data parallel over MPI" section."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_docs import python_blocks
    text = (ROOT / "README.md").read_text()
    section = text.split("## Data parallel over MPI", 1)[1].split("\n## ", 1)[0]
    return [(code, skipped) for _, code, skipped in python_blocks(section)]


@pytest.mark.parametrize("n", [1, 2])
def test_readme_data_parallel_block_runs_alone_under_mpiexec(mpi, tmp_path, n):
    """Pasted alone into a file and started with mpiexec, each block of the section runs
    (test_docs.py runs it too, as a job of one)."""
    blocks = readme_data_parallel_blocks()
    assert blocks and not any(skipped for _, skipped in blocks), blocks
    for i, (code, _) in enumerate(blocks):
        script = tmp_path / f"block{i}.py"
        script.write_text(code)
        proc = launch(mpi, n, str(script))
        assert proc.returncode == 0, code + proc.stdout[-2000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("name", ["shared_average", "ddp_shared_matches_allreduce"])
def test_shared_memory_average_equals_allreduce(mpi, name, n):
    """Bitwise with 2 processes; with 3 (more processes than cores here) within float32
    summation order."""
    run_case(mpi, name, n)


def test_ddp_with_three_processes(mpi):
    run_case(mpi, "ddp_matches_single_process", 3)


@pytest.mark.parametrize("name", ["ddp_matches_single_process",
                                  "ddp_equals_mean_of_local_gradients"])
def test_ddp_with_shared_memory_turned_off(mpi, name):
    """MINITORCH_DIST_SHARED=0: every average is an Allreduce (the cases check which)."""
    run_case(mpi, name, env={**ENV, "MINITORCH_DIST_SHARED": "0"})


def test_ranks_on_several_machines_average_by_allreduce(mpi):
    run_case(mpi, "shared_fallback_across_machines")


def test_a_world_of_one(mpi):
    run_case(mpi, "world", 1)
    run_case(mpi, "world", 2)


def test_an_error_on_one_rank_ends_the_job_with_its_message(mpi):
    proc = launch(mpi, 2, str(WORKER), "fail", timeout=120)
    assert proc.returncode != 0
    assert "ValueError: rank 1 failed on purpose" in proc.stderr, proc.stderr[-3000:]
    assert "rank 1 of 2 stopped with an uncaught ValueError" in proc.stderr
    assert "MPI_Abort" in proc.stderr
    assert "PASS" not in proc.stdout


def test_a_rank_that_leaves_quietly_ends_the_job_after_the_timeout(mpi):
    proc = launch(mpi, 2, str(WORKER), "quiet_exit", "--timeout", "3", timeout=120)
    assert proc.returncode != 0
    assert "rank 0 of 2 waited more than 3 s in all_reduce" in proc.stderr, proc.stderr
    assert "MPI_Abort" in proc.stderr


# ---- the MNIST example -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def noise_mnist(tmp_path_factory) -> Path:
    """2048 training and 64 test images of noise, in the MNIST layout."""
    root = tmp_path_factory.mktemp("noise_mnist")
    rng = np.random.default_rng(0)
    sizes = {"train": 2048, "test": 64}
    for key, stem in MNIST_FILES.items():
        split, kind = key.split("_")
        shape = (sizes[split], 28, 28) if kind == "images" else (sizes[split],)
        arr = rng.integers(0, 256 if kind == "images" else 10, shape, dtype=np.uint8)
        header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(d.to_bytes(4, "big")
                                                          for d in arr.shape)
        (root / (stem + ".gz")).write_bytes(gzip.compress(header + arr.tobytes()))
    return root


def example_args(data: Path, out: Path, epochs: int, *more: str) -> list[str]:
    return [str(EXAMPLE), "--data-dir", str(data), "--out", str(out), "--epochs", str(epochs),
            "--batch-size", "32", "--hidden", "16", *more]


def weights(out: Path) -> dict:
    state = mt.load(out / "checkpoint.npz")
    return {k: v.numpy() for k, v in state["model"].items()}, state


def accuracy_line(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith("test accuracy")]
    assert len(lines) == 1, stdout  # rank 0 alone prints
    return lines[0]


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_mnist_two_processes_match_one(mpi, noise_mnist, tmp_path, optimizer):
    """Same global batch and seed: N=1 (no launcher) and N=2 give the same weights after
    an epoch up to float32 summation order, and the same accuracy."""
    lr = "0.1" if optimizer == "sgd" else "0.003"
    more = ("--optimizer", optimizer, "--lr", lr)
    one = subprocess.run([sys.executable, *example_args(noise_mnist, tmp_path / "n1", 1, *more)],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    assert one.returncode == 0, one.stderr[-3000:]
    two = launch(mpi, 2, *example_args(noise_mnist, tmp_path / "n2", 1, *more))
    assert two.returncode == 0, two.stderr[-3000:]
    assert "2 processes" in two.stdout and two.stdout.count("model: ") == 1
    (w1, s1), (w2, s2) = weights(tmp_path / "n1"), weights(tmp_path / "n2")
    for name in w1:
        np.testing.assert_allclose(w2[name], w1[name], rtol=1e-4, atol=1e-5, err_msg=name)
    assert accuracy_line(one.stdout) == accuracy_line(two.stdout)
    np.testing.assert_allclose(s2["history"]["train_loss"], s1["history"]["train_loss"],
                               rtol=1e-5)
    assert s2["history"]["train_acc"] == s1["history"]["train_acc"]  # summed over the ranks
    for name in ("curves.png", "predictions.png"):
        assert (tmp_path / "n2" / name).stat().st_size > 0


def test_mnist_distributed_resume_restores_every_rank(mpi, noise_mnist, tmp_path):
    """An epoch, then a resumed second one, with 1 and with 2 processes: the same weights
    (rank 1 reads rank 0's checkpoint too: without its weights and momentum the
    averaged steps would differ), and the ranks end in sync."""
    for n in (1, 2):
        out = tmp_path / f"n{n}"
        for epochs, more in ((1, ()), (2, ("--resume", str(out / "checkpoint.npz")))):
            args = example_args(noise_mnist, out, epochs, *more)
            if n == 1:
                proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=ENV,
                                      capture_output=True, text=True, timeout=TIMEOUT)
            else:
                proc = launch(mpi, 2, *args)
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert "out of sync" not in proc.stderr
        assert proc.stdout.count("resumed from") == 1
    (a, _), (b, sb) = weights(tmp_path / "n1"), weights(tmp_path / "n2")
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=1e-4, atol=1e-5, err_msg=name)
    assert sb["epoch"] == 2 and len(sb["history"]["train_loss"]) == 2


@pytest.mark.skipif(os.name != "posix", reason="sends SIGINT")
def test_mnist_distributed_ctrl_c_saves_and_resume_is_exact(mpi, noise_mnist, tmp_path):
    """Ctrl-C to mpiexec reaches every rank; they stop at the same batch, rank 0 saves the
    summed progress, and the suggested mpiexec command finishes the run exactly."""
    out = tmp_path / "run"
    proc = subprocess.Popen([mpi, "-n", "2", sys.executable,
                             *example_args(noise_mnist, out, 3)], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + TIMEOUT
    for line in proc.stdout:
        if line.startswith("epoch 1:"):
            proc.send_signal(signal.SIGINT)
            break
        assert time.monotonic() < deadline
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if "continue with: " in line]
    assert len(lines) == 1, stderr
    command = lines[0].split("continue with: ", 1)[1].split()
    assert command[:4] == ["mpiexec", "-n", "2", "python"], command
    resumed = launch(mpi, 2, *command[4:])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    straight = launch(mpi, 2, *example_args(noise_mnist, tmp_path / "straight", 3))
    assert straight.returncode == 0, straight.stderr[-3000:]
    (a, sa), (b, sb) = weights(tmp_path / "straight"), weights(out)
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name
    np.testing.assert_allclose(sb["history"]["train_loss"], sa["history"]["train_loss"],
                               rtol=1e-12)


def test_mnist_global_batch_must_split_evenly(mpi, noise_mnist, tmp_path):
    proc = launch(mpi, 2, *example_args(noise_mnist, tmp_path, 1)[:-4], "--batch-size", "33",
                  timeout=120)
    assert proc.returncode != 0
    assert "must be a multiple of the 2 processes" in proc.stderr


# ---- CUDA: NCCL through CuPy ------------------------------------------------------------------

def gpu_count() -> int:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["collectives", "captured_collective",
                                  "ddp_matches_single_process", "ddp_no_sync_and_errors"])
def test_cuda_collectives_over_nccl(mpi, name):
    """One GPU per process: two when there are two, else a job of one (NCCL refuses two
    ranks on one device), which still runs every call."""
    gpus = gpu_count()
    if gpus == 0:
        pytest.skip("needs CuPy and a CUDA device")
    run_case(mpi, name, min(gpus, 2), "--device", "cuda")
