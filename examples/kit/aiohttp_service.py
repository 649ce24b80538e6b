import os

import aiohttp
from aiohttp import web
from ecron_service import Run, Service

service = Service(secret=os.environ.get("ECRON_SECRET"), max_running=4)


@service.job("crawl")  # POST /jobs/crawl, GET/DELETE /jobs/crawl/{eid}, GET /jobs/crawl?ids=
async def crawl(run: Run) -> dict[str, int]:
    async with aiohttp.ClientSession() as session:
        for done, url in enumerate(run.body["urls"], 1):
            async with session.get(url) as page:
                run.log(f"{url}: HTTP {page.status}, {len(await page.read())} bytes")
            await run.progress(100 * done / len(run.body["urls"]), url)  # cancel ends it here
    return {"pages": len(run.body["urls"])}


web.run_app(service.aiohttp_app(), host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
