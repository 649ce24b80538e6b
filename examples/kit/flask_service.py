import os
import time

from ecron_service import Run, Service
from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware

service = Service(secret=os.environ.get("ECRON_SECRET"), max_running=4)
app = Flask(__name__)
app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/ecron": service.wsgi()})  # /ecron/jobs/...


@service.job("sync-accounts")
def sync_accounts(run: Run) -> dict[str, int]:  # a def job runs in a thread of its own
    for page in range(pages := run.body.get("pages", 10)):
        if run.cancelled:  # ecron cancelled the run: stop here
            return {"pages": page}
        run.progress(100 * page / pages, f"page {page + 1} of {pages}")
        time.sleep(run.body.get("seconds_a_page", 1))  # a page's work
    return {"pages": pages}
