"""One call's machinery, shared by every capability: its lifecycle, admission, what a field may hold, and
tokenizing off the event loop."""
