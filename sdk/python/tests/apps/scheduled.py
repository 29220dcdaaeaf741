"""An app whose handler declares its schedule in code."""

from suite import record

from carillon_executor import JobContext, job


@job(cron="* * * * * ?", tz="Europe/Paris", description="fires every second")
def every_second(ctx: JobContext) -> None:
    record(ctx, "fired")


@job
def unscheduled(ctx: JobContext) -> None:
    record(ctx, "fired")
