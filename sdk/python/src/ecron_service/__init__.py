"""ecron-service: write a user service for ecron (https://github.com/ecron) in a few lines.
A job is a function; the kit answers ecron's HTTP task protocol (trigger, poll, cancel,
batch poll, callbacks, signatures, back-pressure, interrupted runs) for it::

    from ecron_service import Run, Service

    service = Service(secret=os.environ.get("ECRON_SECRET"), max_running=4)

    @service.job("nightly-report")       # POST /jobs/nightly-report, GET/DELETE .../{eid}
    async def nightly_report(run: Run) -> dict[str, int]:
        for day in range(30):
            await run.progress(day / 30 * 100, f"day {day + 1} of 30")
        return {"rows": 1234}             # SUCCESS's result; raising is FAILED

    app = service.asgi()                  # or service.wsgi(), service.aiohttp_app()

The standard library only; ``service.aiohttp_app()`` needs aiohttp (the ``aiohttp`` extra).
"""

from ecron_service.protocol import Answer, Call
from ecron_service.run import Interrupted, Run
from ecron_service.service import Service

#: Released with ecron: the same version.
__version__ = "0.1.0"

__all__ = ["Answer", "Call", "Interrupted", "Run", "Service", "__version__"]
