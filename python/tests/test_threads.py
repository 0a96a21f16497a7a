"""Two models from two Python threads at once: results equal to sequential runs, and the GIL
released while a model runs."""

import math
import sys
import threading
import time

import numpy as np
import pytest

import kinema
from conftest import embedding_of
from test_motionbricks import inputs_for

FRAMES, STEPS = 24, 6


@pytest.fixture(scope="module")
def models(kimodo_path, mb_path):
    # Two engines (nothing is global), and two models of which one shares an engine.
    a = kinema.Engine(backend="cpu", threads=1)
    b = kinema.Engine(backend="cpu", threads=1)
    return (
        kinema.Kimodo(a, kimodo_path),
        kinema.Kimodo(b, kimodo_path),
        kinema.MotionBricks(a, mb_path),
    )


def test_two_threads_equal_sequential_runs(models):
    k1, k2, mb = models
    emb = embedding_of(k1.embedding_dim)
    jobs = {
        "kimodo-a": lambda progress: k1.generate(emb, FRAMES, steps=STEPS, seed=1, progress=progress),
        "kimodo-b": lambda progress: k2.generate(emb, FRAMES, steps=STEPS, seed=2, progress=progress),
        "mb": lambda progress: mb.plan(**inputs_for(mb), sampling="gumbel", seed=9, progress=progress),
    }
    sequential = {name: job(None) for name, job in jobs.items()}

    events = []
    results = {}
    errors = []

    def work(name):
        try:
            results[name] = jobs[name](lambda s, i, n: events.append((name, s, i)))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for name, want in sequential.items():
        got = results[name]
        assert sorted(got) == sorted(want)
        for k in want:
            assert got[k].tobytes() == want[k].tobytes(), (name, k)
    # Every thread reported all its steps.
    assert sum(1 for e in events if e[0] == "kimodo-a") == STEPS + 1
    assert sum(1 for e in events if e[0] == "mb") == 2


def test_the_gil_is_released_while_a_model_runs(models):
    """With a switch interval of 100 s a thread holding the GIL keeps it until it blocks or
    releases it. The worker announces itself and calls generate (no callback, so no Python
    runs in it during the call): if generate kept the GIL, the main thread could only run
    again after the worker had finished (`done` set); since generate releases it, the main
    thread runs while the worker is still inside the call."""
    k1, _, _ = models
    emb = embedding_of(k1.embedding_dim)
    started = threading.Event()
    done = []

    # A call long enough (about half a second, debug or release build) that the main thread,
    # woken when the worker drops the GIL, takes it before the call returns.
    t0 = time.perf_counter()
    k1.generate(emb, 120, steps=4, seed=1)
    per_step = (time.perf_counter() - t0) / 4
    steps = min(k1.num_base_steps, max(4, math.ceil(0.5 / per_step)))

    def worker():
        started.set()
        k1.generate(emb, 120, steps=steps, seed=1)
        done.append(True)

    old = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        t = threading.Thread(target=worker)
        t.start()
        started.wait()
        ran_during_the_call = not done
    finally:
        sys.setswitchinterval(old)
    t.join()
    assert done == [True]
    assert ran_during_the_call
