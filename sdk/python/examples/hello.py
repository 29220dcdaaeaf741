from carillon_executor import JobContext, job


@job(cron="*/5 * * * * ?", description="says hello every 5 seconds")
def greet(ctx: JobContext) -> str:
    ctx.logger.info("hello from run %d", ctx.run_id)
    return "hello"
