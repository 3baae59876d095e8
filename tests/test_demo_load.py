"""The demo's load holds the stream back at ``hold_at`` until its schedule releases it: however
fast the appends run, part of the stream is sent after the kill (a fast run once finished every
append before the kill landed, and the demo found no acknowledgement after it)."""

import asyncio
from types import SimpleNamespace

from dledger.demo.load import run_load


class InstantClient:
    """Answers every batch at once, as a very fast cluster would; notes when each was sent."""

    def __init__(self) -> None:
        self.next_index = 0
        self.sent: list[tuple[int, bool]] = []      # (first seq, sent after the release?)
        self.result = None

    async def batch_append(self, bodies):
        first = int.from_bytes(bodies[0][:8], "big")
        self.sent.append((first, self.released()))
        self.next_index += len(bodies)
        await asyncio.sleep(0)
        return SimpleNamespace(index=self.next_index - 1, positions=[], local_id="n0", leader_id="n0")

    def released(self) -> bool:
        return self.result is not None and self.result.released.is_set()


def test_batches_from_hold_at_on_are_sent_only_after_the_release():
    client = InstantClient()
    kills = []

    def schedule(done, result):
        client.result = result
        if not kills and done >= 400:
            kills.append(done)
            result.release()

    async def main():
        return await run_load(client, 1000, batch=10, in_flight=4, schedule=schedule, progress=False,
                              hold_at=500)

    result = asyncio.run(main())
    assert result.acknowledged == 1000 and kills
    assert all(after for first, after in client.sent if first >= 500)
    assert any(first >= 500 for first, _ in client.sent)


def test_without_hold_at_the_load_never_waits():
    client = InstantClient()

    async def main():
        return await run_load(client, 300, batch=10, in_flight=4, progress=False)

    assert asyncio.run(main()).acknowledged == 300
