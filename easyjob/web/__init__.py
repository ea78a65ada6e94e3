"""``easyjob dashboard``: a read-only web view of a cluster's database (see docs/monitoring.md)."""
