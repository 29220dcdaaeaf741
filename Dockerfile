# The Carillon node's image. `docker build -t carillon .` compiles the binary in a Rust image
# and copies it into a Debian one that holds nothing else: no shell tools are needed at run
# time, the process runs as uid 10001, and the root file system can be mounted read-only (the
# node writes only to /var/lib/carillon, a volume).
#
#   docker run --read-only -p 9001:9001 -v carillon:/var/lib/carillon \
#       -e CARILLON_DATABASE_URL=postgres://… carillon server
#
# The base images are arguments, for registries of your own (and for CI, which has none):
# BUILDER must have cargo (Rust 1.94 or newer); RUNTIME is Debian bookworm or alike. The target
# `prebuilt` takes a binary already built (a file `carillon` in the build context) instead;
# `demo` is the demo executor of compose.yaml (`prebuilt-demo`: a built `carillon-demo`). It
# needs BuildKit, Docker's builder since 23.0: the legacy builder builds every stage before
# the one asked for, the prebuilt ones too.
ARG BUILDER=rust:1.94-bookworm
ARG RUNTIME=debian:bookworm-slim

# What every Carillon image runs on: CA certificates, the user and the state directory.
FROM ${RUNTIME} AS runtime
RUN set -eu; \
    if [ ! -s /etc/ssl/certs/ca-certificates.crt ]; then \
        apt-get update; \
        apt-get install -y --no-install-recommends ca-certificates; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    echo 'carillon:x:10001:10001:Carillon scheduler:/var/lib/carillon:/usr/sbin/nologin' >> /etc/passwd; \
    echo 'carillon:x:10001:' >> /etc/group; \
    install -d -o 10001 -g 10001 -m 0750 /var/lib/carillon
ENV CARILLON_DATA_DIR=/var/lib/carillon \
    CARILLON_LISTEN=0.0.0.0:9001 \
    CARILLON_LOG_FORMAT=json
VOLUME /var/lib/carillon
WORKDIR /var/lib/carillon
EXPOSE 9001
USER 10001:10001
# Ready: a cluster member whose database answers (GET /readyz, asked by the binary itself).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/bin/carillon", "ready"]
ENTRYPOINT ["/usr/bin/carillon"]
CMD ["server"]

# A binary built elsewhere: docker build --target prebuilt (the context holds `carillon`).
FROM runtime AS prebuilt
COPY carillon /usr/bin/carillon

# The demo executor (compose.yaml): the SDK's example handlers, no node of its own.
FROM runtime AS demo-runtime
EXPOSE 9100
HEALTHCHECK NONE
ENTRYPOINT ["/usr/bin/carillon-demo"]
CMD []

FROM demo-runtime AS prebuilt-demo
COPY carillon-demo /usr/bin/carillon-demo

FROM ${BUILDER} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin carillon \
    && install -m 0755 target/release/carillon /usr/local/bin/carillon

FROM build AS build-demo
RUN cargo build --release --locked --bin carillon-demo \
    && install -m 0755 target/release/carillon-demo /usr/local/bin/carillon-demo

FROM demo-runtime AS demo
COPY --from=build-demo /usr/local/bin/carillon-demo /usr/bin/carillon-demo

FROM runtime AS image
COPY --from=build /usr/local/bin/carillon /usr/bin/carillon
