"""Everything ecron keeps: tables, the store interface, its SQL implementation, migrations."""

from ecron.store.base import Store
from ecron.store.records import Page, Planner, SyncResult, TaskState

__all__ = ["Page", "Planner", "Store", "SyncResult", "TaskState"]
