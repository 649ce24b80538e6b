"""ecron: a cron-style scheduler daemon for long-running remote jobs."""

__version__ = "0.1.0"
