"""An app that exports its spans over OTLP/HTTP (to OTEL_EXPORTER_OTLP_ENDPOINT), as a
traced service would: the SDK's attempt span joins the run's trace, the handler's own span is
its child."""

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from carillon_executor import JobContext, job

provider = TracerProvider(resource=Resource.create({"service.name": "python-executor"}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)


@job
def load(ctx: JobContext) -> str:
    with trace.get_tracer("app").start_as_current_span("load rows"):
        return "loaded"
