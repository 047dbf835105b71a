"""Team memory on PostgreSQL: several daemons, the pooler, moving in, row-level security."""
