"""Every configured value that must never show in a log line, gathered from a loaded
config (the log scrubber hides them)."""

from __future__ import annotations

from urllib.parse import unquote

from ecron.config.model import Config
from ecron.config.secrets import database_password, url_secrets


def config_secrets(config: Config) -> list[str | None]:
    """Every configured value that must never show in a log line: the API token, the
    secrets, the database password, every header value (of tasks, steps and webhooks), and
    the passwords and secret query values (``?api_key=``) of the tasks' URLs."""
    daemon = config.daemon
    password = database_password(daemon.database)
    values: list[str | None] = [daemon.api_token, daemon.secret, password]
    values += [caller.token for caller in daemon.api_tokens]
    if password is not None:
        values.append(unquote(password))
    if daemon.queue is not None:  # a Redis URL may carry a password too
        queue_password = database_password(daemon.queue.url)
        values += [queue_password, queue_password and unquote(queue_password)]
    hooks = list(daemon.notify.webhooks)
    for spec in config.tasks.values():
        numbers: list[int | None] = list(range(1, len(spec.steps) + 1)) if spec.steps else [None]
        for number in numbers:
            call = spec.call(number)
            values += [call.secret, *call.headers.values()]
            for url in (call.url, call.poll_url, call.cancel_url, call.batch_poll_url):
                values += url_secrets(url)  # a password, or ?api_key=...
        if spec.notify is not None:
            hooks += spec.notify.webhooks
    for hook in hooks:
        values += [hook.url, hook.secret, *hook.headers.values()]  # a URL may be the secret
    return values
