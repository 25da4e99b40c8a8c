"""Reading a server's SSE stream in a test: the JSON objects of its `data:` lines, in order."""
import json


async def sse_objects(resp):
    """Each `data: {...}` event of an aiohttp response as a dict; `[DONE]` and other lines skipped."""
    async for raw in resp.content:
        line = raw.decode().strip()
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])
