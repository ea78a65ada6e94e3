"""The dashboard (see docs/monitoring.md): read-only pages of a cluster's database, and the
operators' actions behind a login when credentials are configured. A WSGI application,
served by ``easyjob dashboard`` or mounted in an application's own server
(docs/embedding.md)."""

from easyjob.observe.wsgi import mount
from easyjob.web.app import Dashboard, dashboard_app
from easyjob.web.auth import Access, hash_password, verify_password

__all__ = ["Access", "Dashboard", "dashboard_app", "hash_password", "mount", "verify_password"]
