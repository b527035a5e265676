import importlib.util
from pathlib import Path


def _load():
    path = Path(__file__).resolve().parents[2] / "bench" / "pyspy_top.py"
    spec = importlib.util.spec_from_file_location("pyspy_top", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_samples_are_summed_per_process_and_thread(tmp_path):
    raw = tmp_path / "spy.txt"
    raw.write_text(
        'process 1:"python";thread (1): MainThread;main (a.py:1);spawn (b.py:2) 30\n'
        'process 1:"python";thread (1): MainThread;main (a.py:1) 10\n'
        'process 1:"python";thread (7): gpu-loop;run (c.py:3);wait (c.py:4) 5\n')
    text = _load().summarise(str(raw))
    main, gpu = text.split("=== ")[1:]
    assert main.startswith('process 1:"python" | thread (1): MainThread: 40 samples')
    assert "     40 100.0% main (a.py:1)" in main and "     30  75.0% spawn (b.py:2)" in main
    assert main.split("-- leaves:")[1].splitlines()[1].strip() == "30  75.0% spawn (b.py:2)"
    assert gpu.startswith('process 1:"python" | thread (7): gpu-loop: 5 samples')


def test_gil_shares_are_each_threads_samples_against_the_wall(tmp_path):
    raw = tmp_path / "gil.txt"
    raw.write_text(
        "thread (1): MainThread;main (a.py:1);assemble (b.py:2) 30\n"
        "thread (7): gpu-loop;run (c.py:3) 50\n"
        "thread (1): MainThread;main (a.py:1) 10\n")
    shares = _load().held_shares(str(raw), rate=100, seconds=2.0)  # 200 samples had one thread held it all along
    assert shares == {"thread (7): gpu-loop": 0.25, "thread (1): MainThread": 0.2}
    assert list(shares) == ["thread (7): gpu-loop", "thread (1): MainThread"]
