"""Everything ecron keeps: tables, the store interface, its SQL implementation, migrations."""

from ecron.store.base import FirePlan, Page, Planner, Store, SyncResult, TaskState

__all__ = ["FirePlan", "Page", "Planner", "Store", "SyncResult", "TaskState"]
