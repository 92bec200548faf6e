"""The search caches are released when the solver pool falls idle: the bounded memo caches
of the cost model empty, the static ones stay, and the hook runs once the last admitted
computation ends (not while one still runs)."""

import asyncio
import threading

from api_schemas.parallel import PipelineSchedule
from models.catalog.presets import model_preset
from models.core.step_time import compiled_schedule
from service import search_caches
from service.pool import SolverPool


def test_release_empties_the_bounded_caches_and_keeps_the_static_ones() -> None:
    compiled_schedule(PipelineSchedule.ONE_F_ONE_B, 2, 4, 1)
    model_preset("llama-3.1-8b")
    assert compiled_schedule.cache_info().currsize >= 1
    static_before = model_preset.cache_info().currsize  # type: ignore[attr-defined]
    caches = search_caches.bounded_caches()
    assert compiled_schedule in caches
    assert search_caches.release() >= 1
    assert compiled_schedule.cache_info().currsize == 0
    assert model_preset.cache_info().currsize == static_before  # type: ignore[attr-defined]


def test_the_idle_hook_runs_after_the_last_computation_only() -> None:
    released: list[int] = []
    second_done = threading.Event()

    async def scenario() -> None:
        pool = SolverPool(threads=2, queue=0, retry_after_s=1,
                          on_idle=lambda: released.append(pool.admitted))
        gate = threading.Event()

        def first() -> int:
            return 1

        def second() -> int:
            gate.wait(10)
            second_done.set()
            return 2

        slow = asyncio.ensure_future(pool.run(second, key="b", timeout_s=30))
        assert await pool.run(first, key="a", timeout_s=30) == 1
        await asyncio.sleep(0.2)
        assert released == []  # one computation still admitted: no release yet
        gate.set()
        assert await slow == 2
        for _ in range(100):
            if released:
                break
            await asyncio.sleep(0.05)
        pool.shutdown()

    asyncio.run(scenario())
    assert second_done.is_set() and released == [0]
