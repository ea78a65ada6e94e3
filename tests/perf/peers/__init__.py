"""Peer benchmark: APScheduler 3 and 4 on the same database, each in its own virtualenv."""
