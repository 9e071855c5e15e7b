"""Client library for the evaluation farm.

    from evalfarm.client import FarmClient
    with FarmClient(["gpu-a:50051", "gpu-b:50051"], token=TOKEN) as farm:
        for i, src in enumerate(candidates):
            farm.submit("L1/1", src, sample_id=f"s{i}", options={"num_correctness_inputs": 100})
        for res in farm.results(timeout=600):
            print(res.sample_id, res.verdict, res.speedup, res.host)

AsyncFarmClient is the asyncio core (submit / score / results() async iterator).
"""

from evalfarm.client.channel import TlsConfig
from evalfarm.client.core import AsyncFarmClient, SampleResult
from evalfarm.client.sync import FarmClient

__all__ = ["AsyncFarmClient", "FarmClient", "SampleResult", "TlsConfig"]
