"""Work episodes: capture, hooks, the spool, work_search."""
