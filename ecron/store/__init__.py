"""Everything ecron keeps: tables, the store interface, its SQL implementation, migrations."""

from ecron.store.base import Page, Planner, Store, SyncResult, TaskState

__all__ = ["Page", "Planner", "Store", "SyncResult", "TaskState"]
