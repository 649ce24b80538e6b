import asyncio
import os

from ecron_service import Run, Service
from fastapi import FastAPI

service = Service(secret=os.environ.get("ECRON_SECRET"), max_running=4)
app = FastAPI(lifespan=service.lifespan)  # on shutdown, running jobs report interrupted
app.mount("/ecron", service.asgi())  # POST /ecron/jobs/{name}, GET/DELETE .../{name}/{eid}


@service.job("nightly-report")
async def nightly_report(run: Run) -> dict[str, int]:
    days = run.body.get("days", 30)
    for day in range(days):
        await run.progress(100 * day / days, f"day {day + 1} of {days}")
        await asyncio.sleep(run.body.get("seconds_a_day", 1))  # a day's work; cancel ends it
    return {"days": days, "rows": 1234 * days}  # the result; an exception is FAILED
