"""attnserve at run time: the serving core, its engine and runner, the front doors, and operations.
Never torch, never model/."""
