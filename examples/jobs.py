"""Example jobs: `make run` starts a node with these on the embedded SQLite database."""

from easyjob import TaskContext, scheduled


@scheduled("*/5 * * * * *")  # every 5 seconds (6 fields: seconds first)
def heartbeat_report(ctx: TaskContext) -> None:
    ctx.logger.info(
        "tick %s on %s (attempt %d)", ctx.fire_time.isoformat(), ctx.node_id, ctx.attempt
    )


@scheduled("0/10 * * * * ?", retries=2, retry_delay=1)
def refresh_cache(ctx: TaskContext) -> None:
    ctx.logger.info("refreshing the cache for the fire at %s", ctx.fire_time.isoformat())


@scheduled(parent="refresh_cache")
def rebuild_index(ctx: TaskContext) -> None:
    ctx.logger.info("rebuilding the index after refresh_cache (run %d)", ctx.run_id)
